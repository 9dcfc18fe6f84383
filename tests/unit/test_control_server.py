"""dlog.control on its own, as a host such as the write proxy uses it:
named health statuses, providers, and the status codes of failures."""

from __future__ import annotations

import asyncio

import grpc
import pytest
from grpc_health.v1 import health_pb2, health_pb2_grpc

from dlog.control import OVERALL, PROXY, AdminProviders, ControlServer
from dlog.control.client import AdminClient
from dlog.errors import NoSuchLedgerError
from dlog.protocol import admin_pb2 as pb


async def check(port: int, service: str) -> str:
    async with grpc.aio.insecure_channel(f"127.0.0.1:{port}") as channel:
        reply = await health_pb2_grpc.HealthStub(channel).Check(
            health_pb2.HealthCheckRequest(service=service), timeout=5
        )
        return str(health_pb2.HealthCheckResponse.ServingStatus.Name(reply.status))


async def test_named_services_start_not_serving_and_follow_the_host() -> None:
    server = ControlServer("127.0.0.1", 0, services=[PROXY])
    port = await server.start()
    try:
        assert port > 0 and server.port == port
        assert await check(port, OVERALL) == "NOT_SERVING"
        assert await check(port, PROXY) == "NOT_SERVING"
        assert await check(port, "dlog.admin.v1.Admin") == "SERVING"
        await server.set_serving(OVERALL, True)
        await server.set_serving(PROXY, True)
        assert await check(port, PROXY) == "SERVING"
        await server.set_serving(PROXY, False)  # stopped accepting streams
        assert await check(port, PROXY) == "NOT_SERVING"
        assert server.status(OVERALL) == "SERVING"
        with pytest.raises(grpc.aio.AioRpcError) as unknown:
            await check(port, "no.such.Service")
        assert unknown.value.code() == grpc.StatusCode.NOT_FOUND

        await server.shutting_down()
        await server.set_serving(OVERALL, True)  # ignored from now on
        assert await check(port, OVERALL) == "NOT_SERVING"
    finally:
        await server.stop(grace=0)


async def test_providers_answer_and_failures_map_to_status_codes() -> None:
    async def owned() -> pb.ListOwnedStreamsResponse:
        return pb.ListOwnedStreamsResponse(
            owner="127.0.0.1:8000", streams=[pb.OwnedStream(name="s1", outstanding_writes=3)]
        )

    async def ledger(ledger_id: int) -> pb.LedgerMetadata:
        if ledger_id == 7:
            return pb.LedgerMetadata(ledger_id=7, state="CLOSED")
        raise NoSuchLedgerError(f"no such ledger {ledger_id}")

    async def broken() -> pb.BookieInfo:
        raise RuntimeError("boom")

    server = ControlServer(
        "127.0.0.1",
        0,
        providers=AdminProviders(owned_streams=owned, ledger_metadata=ledger, bookie_info=broken),
    )
    port = await server.start()
    try:

        def calls() -> None:
            with AdminClient(f"127.0.0.1:{port}", timeout=5) as client:
                reply = client.owned_streams()
                assert [(s.name, s.outstanding_writes) for s in reply.streams] == [("s1", 3)]
                assert client.ledger_metadata(7).state == "CLOSED"
                for call, code, text in (
                    (lambda: client.ledger_metadata(8), grpc.StatusCode.NOT_FOUND, "ledger 8"),
                    (client.bookie_info, grpc.StatusCode.INTERNAL, "boom"),
                    (client.list_bookies, grpc.StatusCode.UNIMPLEMENTED, "a bookie"),
                    (client.auditor_status, grpc.StatusCode.UNIMPLEMENTED, "autorecovery"),
                ):
                    with pytest.raises(grpc.RpcError) as failed:
                        call()
                    assert failed.value.code() == code
                    assert text in failed.value.details()

        await asyncio.to_thread(calls)
        # Providers may be added after start (a bookie's embedded AutoRecovery).
        server.providers.list_bookies = _bookies
        with AdminClient(f"127.0.0.1:{port}", timeout=5) as client:
            reply = await asyncio.to_thread(client.list_bookies)
        assert list(reply.writable) == ["b1:3181"]
    finally:
        await server.stop(grace=0)


async def _bookies() -> pb.ListBookiesResponse:
    return pb.ListBookiesResponse(writable=["b1:3181"])


async def test_a_busy_port_is_an_error() -> None:
    first = ControlServer("127.0.0.1", 0)
    port = await first.start()
    try:
        with pytest.raises(OSError, match="cannot bind"):
            await ControlServer("127.0.0.1", port).start()
    finally:
        await first.stop(grace=0)
