"""A blocking client for the control server, for ``dlog admin`` and tests."""

from __future__ import annotations

from types import TracebackType
from typing import Any, TypeVar, cast

import grpc
from google.protobuf.message import Message
from grpc_health.v1 import health_pb2, health_pb2_grpc

from dlog.control.rpc import METHODS
from dlog.protocol import admin_pb2 as pb

M = TypeVar("M", bound=Message)


class AdminClient:
    """``dlog.admin.v1.Admin`` and ``grpc.health.v1.Health`` at ``target``
    (HOST:PORT). Failures raise ``grpc.RpcError`` (``.code()``, ``.details()``)."""

    def __init__(self, target: str, *, timeout: float = 10.0) -> None:
        self.target = target
        self.timeout = timeout
        self._channel = grpc.insecure_channel(target)
        self._health = health_pb2_grpc.HealthStub(self._channel)

    def __enter__(self) -> AdminClient:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()

    def close(self) -> None:
        self._channel.close()

    def call(self, name: str, request: Message, response: type[M]) -> M:
        method = METHODS[name]
        assert method.response is response, f"{name} answers {method.response.__name__}"
        stub: Any = self._channel.unary_unary(
            method.path,
            request_serializer=method.request.SerializeToString,
            response_deserializer=method.response.FromString,
        )
        return cast(M, stub(request, timeout=self.timeout))

    def health(self, service: str = "") -> str:
        """SERVING, NOT_SERVING or SERVICE_UNKNOWN; an unknown service raises NOT_FOUND."""
        reply = self._health.Check(
            health_pb2.HealthCheckRequest(service=service), timeout=self.timeout
        )
        return str(health_pb2.HealthCheckResponse.ServingStatus.Name(reply.status))

    def bookie_info(self) -> pb.BookieInfo:
        return self.call("GetBookieInfo", pb.GetBookieInfoRequest(), pb.BookieInfo)

    def list_bookies(self) -> pb.ListBookiesResponse:
        return self.call("ListBookies", pb.ListBookiesRequest(), pb.ListBookiesResponse)

    def ledger_metadata(self, ledger_id: int) -> pb.LedgerMetadata:
        request = pb.GetLedgerMetadataRequest(ledger_id=ledger_id)
        return self.call("GetLedgerMetadata", request, pb.LedgerMetadata)

    def trigger_gc(
        self, *, force_major: bool = True, force_minor: bool = True, wait: bool = False
    ) -> pb.TriggerGcResponse:
        request = pb.TriggerGcRequest(force_major=force_major, force_minor=force_minor, wait=wait)
        return self.call("TriggerGc", request, pb.TriggerGcResponse)

    def auditor_status(self) -> pb.AuditorStatus:
        return self.call("GetAuditorStatus", pb.GetAuditorStatusRequest(), pb.AuditorStatus)

    def underreplicated(self) -> pb.ListUnderreplicatedResponse:
        request = pb.ListUnderreplicatedRequest()
        return self.call("ListUnderreplicated", request, pb.ListUnderreplicatedResponse)

    def owned_streams(self) -> pb.ListOwnedStreamsResponse:
        request = pb.ListOwnedStreamsRequest()
        return self.call("ListOwnedStreams", request, pb.ListOwnedStreamsResponse)
