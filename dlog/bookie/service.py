"""A bookie as a network service: the storage core, its server, its registration.

The layers point one way: :class:`~dlog.bookie.bookie.Bookie` knows nothing
of the network; this module builds the server around a started bookie and
registers it. The order is what clients rely on:

* start: the bookie (storage open, journals replayed), then its server, then
  its registration in ZooKeeper: a bookie a client finds there answers on
  its port, and the port answers only once the bookie can serve;
* stop: unregister (clients stop choosing it), stop serving, then stop the
  bookie (checkpoint, close, end the ZooKeeper session).

With ``httpServerEnabled`` the HTTP admin API
(:mod:`dlog.bookie.http_admin`) starts with the server and stops with it.
With ``grpcServerEnabled`` the gRPC control plane (:mod:`dlog.control`)
starts first and stops last: its health service says NOT_SERVING until the
bookie is registered, while it is read-only, and from the first step of a
stop on, so probes see the bookie go before its port does.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Coroutine
from typing import TYPE_CHECKING, Any

from dlog.bookie.bookie import Bookie
from dlog.bookie.http_admin import AdminHttpServer
from dlog.bookie.metrics import BookieMetrics
from dlog.bookie.registration import BookieRegistration
from dlog.bookie.server import BookieServer
from dlog.conf.bookie import BookieConfig
from dlog.protocol import bookie_service_info as bsi

if TYPE_CHECKING:
    from dlog.control import ControlServer

log = logging.getLogger(__name__)


class BookieService:
    """One bookie with its server and registration, started and stopped in order."""

    def __init__(self, conf: BookieConfig, *, metrics: BookieMetrics | None = None) -> None:
        self.conf = conf
        # A bookie that must stop itself stops the whole service.
        self.core = Bookie(conf, metrics=metrics, shutdown=self.stop)
        self.core.add_read_only_listener(self._read_only_changed)
        self.server: BookieServer | None = None
        self.registration: BookieRegistration | None = None
        self.admin: AdminHttpServer | None = None
        self.control: ControlServer | None = None

    @property
    def bookie_id(self) -> str:
        return self.core.bookie_id

    @property
    def metrics(self) -> BookieMetrics:
        return self.core.metrics

    @property
    def stopped(self) -> bool:
        return self.core.stopped

    async def wait_stopped(self) -> None:
        await self.core.wait_stopped()

    async def start(self) -> None:
        core = self.core
        await core.start()
        if self.conf.grpc_server_enabled:
            try:
                await self._start_control()
            except BaseException:
                await core.stop()
                raise
        self.server = BookieServer(core)
        await self.server.start()
        if self.conf.http_server_enabled:
            self.admin = AdminHttpServer(
                core.bookie_id, lambda: core.gc, port=self.conf.http_server_port
            )
            await self.admin.start()
        assert core.zk is not None
        self.registration = BookieRegistration(
            core.zk,
            core.uri.ledgers_root,
            core.bookie_id,
            session_timeout=self.conf.zk_timeout / 1000.0,
            data=bsi.encode(self.service_info()),
        )
        await self.registration.register(core.read_only)
        await self._report_health(core.read_only)
        log.info(
            "bookie %s serving on port %d (%s)",
            core.bookie_id,
            self.server.port,
            "read-only" if core.read_only else "writable",
        )

    def service_info(self) -> bsi.BookieServiceInfo:
        """What the registration publishes: upstream's ``bookie`` endpoint
        (``bookie-rpc`` on the port actually bound) and dlog's write-close
        property, which tells clients WRITE_CLOSE is safe to send here."""
        assert self.server is not None
        endpoint = bsi.Endpoint(
            bsi.BOOKIE_ENDPOINT_ID,
            self.server.port,
            self.conf.resolved_address(),
            bsi.BOOKIE_RPC_PROTOCOL,
        )
        endpoints = [endpoint]
        if self.control is not None:
            endpoints.append(
                bsi.Endpoint(
                    bsi.CONTROL_ENDPOINT_ID,
                    self.control.port,
                    self.conf.resolved_address(),
                    bsi.GRPC_PROTOCOL,
                )
            )
        return bsi.BookieServiceInfo(tuple(endpoints), {bsi.WRITE_CLOSE_PROPERTY: "true"})

    async def _start_control(self) -> None:
        from dlog.bookie.admin import BookieAdmin
        from dlog.control import BOOKIE, ControlServer

        admin = BookieAdmin(self.core, lambda: self.server.port if self.server else 0)
        control = ControlServer(
            self.conf.grpc_server_address,
            self.conf.grpc_server_port,
            providers=admin.providers(),
            services=[BOOKIE],
        )
        await control.start()
        self.control = control

    async def _report_health(self, read_only: bool) -> None:
        """SERVING while writable: a read-only bookie takes no new writes."""
        if self.control is None:
            return
        from dlog.control import BOOKIE, OVERALL

        for name in (OVERALL, BOOKIE):
            await self.control.set_serving(name, not read_only)

    async def stop(self) -> None:
        """Graceful shutdown: unregister, stop serving, checkpoint, close."""
        if self.control is not None:
            await self.control.shutting_down()
        if self.registration is not None:
            # ZooKeeper may be unreachable: its operations then wait for a
            # reconnection that may never come. Past zkTimeout the session,
            # and the registration's ephemeral znode with it, is gone anyway.
            try:
                async with asyncio.timeout(self.conf.zk_timeout / 1000.0):
                    await self.registration.unregister()
            except TimeoutError:
                log.warning(
                    "could not unregister from ZooKeeper within zkTimeout=%d ms; stopping "
                    "anyway (the registration goes with the session)",
                    self.conf.zk_timeout,
                )
            except Exception as e:
                log.warning("could not unregister from ZooKeeper: %s; stopping anyway", e)
        if self.server is not None:
            await self.server.stop()
        if self.admin is not None:
            await self.admin.stop()
        await self.core.stop()
        if self.control is not None:
            await self.control.stop(grace=0.5)

    def _read_only_changed(self, read_only: bool) -> Coroutine[Any, Any, None] | None:
        """Move the registration under ``available/readonly`` and back, and
        the health status with it; not before the bookie is first registered
        (it registers, and reports, as it is then)."""
        registration = self.registration
        if registration is None or not registration.registered:
            return None
        return self._announce_read_only(registration, read_only)

    async def _announce_read_only(self, registration: BookieRegistration, read_only: bool) -> None:
        await self._report_health(read_only)
        await registration.set_read_only(read_only)
