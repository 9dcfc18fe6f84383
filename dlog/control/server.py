"""The control server: grpc.health.v1.Health and dlog.admin.v1.Admin on one port.

A host (a bookie, AutoRecovery, a write proxy) owns one :class:`ControlServer`
and passes down what it can answer as :class:`AdminProviders`: plain async
callables, so this package needs nothing from the layers above it. An RPC
with no provider answers UNIMPLEMENTED naming the process that serves it.

Health statuses are per service name; ``""`` is the process as a whole. A
host sets them with :meth:`ControlServer.set_serving` as its state changes
and calls :meth:`ControlServer.shutting_down` first thing when it stops, so
probes and watchers see NOT_SERVING while it drains.
"""

from __future__ import annotations

import errno
import logging
from collections.abc import Awaitable, Callable, Iterable
from dataclasses import dataclass
from typing import Any

import grpc
from google.protobuf.message import Message
from grpc_health.v1 import health, health_pb2, health_pb2_grpc

from dlog.control.rpc import METHODS, SERVICE, Method
from dlog.errors import (
    DLogError,
    IncorrectParameterError,
    NoSuchLedgerError,
    OperationTimeoutError,
)
from dlog.protocol import admin_pb2 as pb

log = logging.getLogger(__name__)

#: Health service names. ``OVERALL`` is the whole process.
OVERALL = ""
BOOKIE = "dlog.bookie"
AUTORECOVERY = "dlog.autorecovery"
PROXY = "dlog.proxy"
ADMIN = SERVICE

_SERVING = health_pb2.HealthCheckResponse.SERVING
_NOT_SERVING = health_pb2.HealthCheckResponse.NOT_SERVING


@dataclass
class AdminProviders:
    """What a host can answer; None is "not served here". Each returns the
    response message; raising NoSuchLedgerError answers NOT_FOUND,
    IncorrectParameterError INVALID_ARGUMENT, other dlog errors UNAVAILABLE."""

    bookie_info: Callable[[], Awaitable[pb.BookieInfo]] | None = None
    list_bookies: Callable[[], Awaitable[pb.ListBookiesResponse]] | None = None
    ledger_metadata: Callable[[int], Awaitable[pb.LedgerMetadata]] | None = None
    trigger_gc: Callable[[pb.TriggerGcRequest], Awaitable[pb.TriggerGcResponse]] | None = None
    auditor_status: Callable[[], Awaitable[pb.AuditorStatus]] | None = None
    underreplicated: Callable[[], Awaitable[pb.ListUnderreplicatedResponse]] | None = None
    owned_streams: Callable[[], Awaitable[pb.ListOwnedStreamsResponse]] | None = None

    def handler(self, method: str) -> Callable[[Any], Awaitable[Message]] | None:
        """The provider for ``method``, taking its request message."""
        ledger_metadata = self.ledger_metadata
        table: dict[str, Callable[[Any], Awaitable[Message]] | None] = {
            "GetBookieInfo": _ignoring_request(self.bookie_info),
            "ListBookies": _ignoring_request(self.list_bookies),
            "GetLedgerMetadata": None
            if ledger_metadata is None
            else lambda request: ledger_metadata(request.ledger_id),
            "TriggerGc": self.trigger_gc,
            "GetAuditorStatus": _ignoring_request(self.auditor_status),
            "ListUnderreplicated": _ignoring_request(self.underreplicated),
            "ListOwnedStreams": _ignoring_request(self.owned_streams),
        }
        return table[method]


def _ignoring_request(
    provider: Callable[[], Awaitable[Message]] | None,
) -> Callable[[Any], Awaitable[Message]] | None:
    if provider is None:
        return None

    async def call(_request: Any) -> Message:
        return await provider()

    return call


def _status_for(error: BaseException) -> grpc.StatusCode:
    if isinstance(error, NoSuchLedgerError):
        return grpc.StatusCode.NOT_FOUND
    if isinstance(error, IncorrectParameterError | ValueError):
        return grpc.StatusCode.INVALID_ARGUMENT
    if isinstance(error, OperationTimeoutError | TimeoutError):
        return grpc.StatusCode.DEADLINE_EXCEEDED
    if isinstance(error, DLogError):
        return grpc.StatusCode.UNAVAILABLE
    return grpc.StatusCode.INTERNAL


class ControlServer:
    """Health and Admin over gRPC (grpc.aio, on the host's event loop)."""

    def __init__(
        self,
        host: str = "0.0.0.0",
        port: int = 0,
        *,
        providers: AdminProviders | None = None,
        services: Iterable[str] = (),
    ) -> None:
        self.host = host
        self._port = port
        #: Mutable: a host may add providers after start (e.g. embedded AutoRecovery).
        self.providers = providers or AdminProviders()
        self._services = {OVERALL, *services}
        self._health = health.aio.HealthServicer()
        self._server: Any = None
        self._bound = 0

    @property
    def port(self) -> int:
        """The port actually bound (0 before start; port 0 picks a free one)."""
        return self._bound

    @property
    def address(self) -> str:
        return f"{self.host}:{self._bound}"

    async def start(self) -> int:
        """Listen; every named service (and the whole process) starts
        NOT_SERVING until the host says otherwise. Returns the bound port."""
        for name in self._services:
            await self._health.set(name, _NOT_SERVING)
        await self._health.set(ADMIN, _SERVING)
        # Without so_reuseport=0, gRPC would share a port another process holds.
        server = grpc.aio.server(options=[("grpc.so_reuseport", 0)])
        health_pb2_grpc.add_HealthServicer_to_server(self._health, server)
        handlers = {m.name: self._handler(m) for m in METHODS.values()}
        server.add_generic_rpc_handlers((grpc.method_handlers_generic_handler(SERVICE, handlers),))
        try:
            bound = server.add_insecure_port(f"{self.host}:{self._port}")
        except RuntimeError as e:
            bound, error = 0, f": {e}"
        else:
            error = ""
        if not bound:
            await server.stop(None)  # else its finalizer runs on a closed loop
            raise OSError(
                errno.EADDRINUSE,
                f"gRPC control server cannot bind {self.host}:{self._port}{error}",
            )
        await server.start()
        self._server, self._bound = server, bound
        log.info("gRPC health and admin on %s:%d", self.host, bound)
        return bound

    async def set_serving(self, service: str, serving: bool) -> None:
        """Report ``service`` ("" = the process) SERVING or NOT_SERVING;
        ignored once :meth:`shutting_down` ran."""
        await self._health.set(service, _SERVING if serving else _NOT_SERVING)

    def status(self, service: str = OVERALL) -> str:
        """The status reported for ``service``: SERVING, NOT_SERVING or SERVICE_UNKNOWN."""
        code = self._health._server_status.get(
            service, health_pb2.HealthCheckResponse.SERVICE_UNKNOWN
        )
        return str(health_pb2.HealthCheckResponse.ServingStatus.Name(code))

    async def shutting_down(self) -> None:
        """Every service NOT_SERVING for good: the host is stopping."""
        await self._health.enter_graceful_shutdown()

    async def stop(self, grace: float | None = 1.0) -> None:
        """Stop listening; calls in flight (health watches too) get ``grace`` seconds."""
        await self.shutting_down()
        server, self._server = self._server, None
        if server is not None:
            await server.stop(grace)

    def _handler(self, method: Method) -> Any:
        async def call(request: Any, context: Any) -> Message:
            provider = self.providers.handler(method.name)
            if provider is None:
                await context.abort(
                    grpc.StatusCode.UNIMPLEMENTED,
                    f"{method.name} is not served by this process: ask {method.served_by}",
                )
            assert provider is not None
            try:
                return await provider(request)
            except Exception as e:
                code = _status_for(e)
                if code is grpc.StatusCode.INTERNAL:
                    log.exception("admin %s failed", method.name)
                await context.abort(code, str(e) or type(e).__name__)
                raise  # abort raises; this line is for the type checker

        return grpc.unary_unary_rpc_method_handler(
            call,
            request_deserializer=method.request.FromString,
            response_serializer=method.response.SerializeToString,
        )
