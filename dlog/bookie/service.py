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
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Coroutine
from typing import Any

from dlog.bookie.bookie import Bookie
from dlog.bookie.http_admin import AdminHttpServer
from dlog.bookie.metrics import BookieMetrics
from dlog.bookie.registration import BookieRegistration
from dlog.bookie.server import BookieServer
from dlog.conf.bookie import BookieConfig
from dlog.protocol import bookie_service_info as bsi

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
        return bsi.BookieServiceInfo((endpoint,), {bsi.WRITE_CLOSE_PROPERTY: "true"})

    async def stop(self) -> None:
        """Graceful shutdown: unregister, stop serving, checkpoint, close."""
        if self.registration is not None:
            with contextlib.suppress(Exception):
                await self.registration.unregister()
        if self.server is not None:
            await self.server.stop()
        if self.admin is not None:
            await self.admin.stop()
        await self.core.stop()

    def _read_only_changed(self, read_only: bool) -> Coroutine[Any, Any, None] | None:
        """Move the registration under ``available/readonly`` and back; not
        before the bookie is first registered (it registers as it is then)."""
        registration = self.registration
        if registration is None or not registration.registered:
            return None
        return registration.set_read_only(read_only)
