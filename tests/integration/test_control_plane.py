"""The gRPC control plane of a real bookie: standard health checks (as a
Kubernetes probe or load balancer speaks them) and dlog's admin API, with
the settings that place it."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Awaitable

import grpc
import pytest
from grpc_health.v1 import health_pb2, health_pb2_grpc

from dlog.bookie.registration import BookieRegistration
from dlog.bookie.service import BookieService
from dlog.control.rpc import METHODS
from dlog.ledger.client import BookKeeper
from dlog.protocol import admin_pb2 as pb
from dlog.protocol import bookie_service_info as bsi
from dlog.sandbox.ports import free_port
from dlog.zk import ZooKeeper
from tests.waiting import eventually

SERVING = "SERVING"
NOT_SERVING = "NOT_SERVING"
GRPC = {"grpcServerEnabled": True, "grpcServerAddress": "127.0.0.1", "grpcServerPort": 0}


def name(status: int) -> str:
    return str(health_pb2.HealthCheckResponse.ServingStatus.Name(status))


async def check(target: str, service: str = "") -> str:
    async with grpc.aio.insecure_channel(target) as channel:
        stub = health_pb2_grpc.HealthStub(channel)
        reply = await stub.Check(health_pb2.HealthCheckRequest(service=service), timeout=5)
        return name(reply.status)


async def admin(target: str, method: str, request: object) -> object:
    m = METHODS[method]
    async with grpc.aio.insecure_channel(target) as channel:
        call = channel.unary_unary(
            m.path,
            request_serializer=m.request.SerializeToString,
            response_deserializer=m.response.FromString,
        )
        return await call(request, timeout=10)


def target(bookie: BookieService) -> str:
    assert bookie.control is not None
    return f"127.0.0.1:{bookie.control.port}"


@pytest.fixture
async def channel_pool() -> AsyncIterator[list[grpc.aio.Channel]]:
    channels: list[grpc.aio.Channel] = []
    yield channels
    for c in channels:
        await c.close()


async def test_health_follows_read_only_and_shutdown(
    make_bookie, channel_pool, monkeypatch: pytest.MonkeyPatch
) -> None:  # type: ignore[no-untyped-def]
    """The standard health client: Check and Watch see a bookie go read-only,
    writable again, and NOT_SERVING from the start of its stop (before it
    leaves ZooKeeper), until the stream ends with the server."""
    bookie = await make_bookie("b0", **GRPC)
    t = target(bookie)
    assert await check(t) == SERVING
    assert await check(t, "dlog.bookie") == SERVING

    channel = grpc.aio.insecure_channel(t)
    channel_pool.append(channel)
    watch = health_pb2_grpc.HealthStub(channel).Watch(health_pb2.HealthCheckRequest(service=""))
    seen: list[str] = []

    async def follow() -> None:
        async for reply in watch:
            seen.append(name(reply.status))

    follower = asyncio.ensure_future(follow())
    await eventually(lambda: seen == [SERVING])

    bookie.core.set_read_only("test: disks full", True)
    await eventually(lambda: _is(check(t), NOT_SERVING))
    assert await check(t, "dlog.bookie") == NOT_SERVING
    await eventually(lambda: seen == [SERVING, NOT_SERVING])
    bookie.core.set_read_only("test: disks full", False)
    await eventually(lambda: _is(check(t), SERVING))
    await eventually(lambda: seen == [SERVING, NOT_SERVING, SERVING])

    at_unregister: list[str] = []
    unregister = BookieRegistration.unregister

    async def spy_unregister(self: BookieRegistration) -> None:
        at_unregister.append(await check(t))
        await unregister(self)

    monkeypatch.setattr(BookieRegistration, "unregister", spy_unregister)
    await bookie.stop()
    assert at_unregister == [NOT_SERVING]
    with pytest.raises(grpc.aio.AioRpcError):
        await asyncio.wait_for(follower, 10)
    assert seen == [SERVING, NOT_SERVING, SERVING, NOT_SERVING]


async def _is(status: Awaitable[str], expected: str) -> bool:
    return await status == expected


async def test_admin_rpcs_against_real_bookies(make_bookie, ledgers_uri: str) -> None:  # type: ignore[no-untyped-def]
    # No checkpoint during the test: the write cache keeps what was written.
    b0 = await make_bookie("b0", flushInterval=600_000, **GRPC)
    b1 = await make_bookie("b1", **GRPC)
    t = target(b0)

    async with BookKeeper(ledgers_uri) as bk:
        handle = await bk.create_ledger(2, 2, 2, password=b"pw", custom_metadata={"app": b"x"})
        for i in range(5):
            await handle.append(b"e%d" % i)
        info = await admin(t, "GetBookieInfo", pb.GetBookieInfoRequest())
        await handle.close()
    assert isinstance(info, pb.BookieInfo)
    assert info.bookie_id == b0.bookie_id and info.port == b0.server.port
    assert not info.read_only and not info.read_only_reasons
    assert [d.path for d in info.ledger_directories] == [str(d) for d in b0.core.ledger_dirs]
    assert [d.path for d in info.journal_directories] == [str(d) for d in b0.core.journal_dirs]
    assert all(0 < d.free_bytes <= d.total_bytes for d in info.ledger_directories)
    assert info.journal_queue_size == b0.conf.journal_queue_size
    assert info.write_cache_max_bytes == b0.conf.write_cache_bytes
    assert info.write_cache_entries == 5 and info.write_cache_bytes > 0

    md = await admin(
        t, "GetLedgerMetadata", pb.GetLedgerMetadataRequest(ledger_id=handle.ledger_id)
    )
    assert isinstance(md, pb.LedgerMetadata)
    assert (md.ensemble_size, md.write_quorum_size, md.ack_quorum_size) == (2, 2, 2)
    assert md.state == "CLOSED" and md.last_entry_id == 4 and md.length > 0
    assert [e.first_entry_id for e in md.ensembles] == [0]
    assert sorted(md.ensembles[0].bookies) == sorted([b0.bookie_id, b1.bookie_id])
    assert md.custom_metadata["app"] == b"x"
    with pytest.raises(grpc.aio.AioRpcError) as missing:
        await admin(t, "GetLedgerMetadata", pb.GetLedgerMetadataRequest(ledger_id=999_999))
    assert missing.value.code() == grpc.StatusCode.NOT_FOUND

    b1.core.set_read_only("test: disks full", True)
    info1 = await admin(target(b1), "GetBookieInfo", pb.GetBookieInfoRequest())
    assert isinstance(info1, pb.BookieInfo)
    assert info1.read_only and list(info1.read_only_reasons) == ["test: disks full"]

    async def listed() -> bool:
        reply = await admin(t, "ListBookies", pb.ListBookiesRequest())
        assert isinstance(reply, pb.ListBookiesResponse)
        return list(reply.writable) == [b0.bookie_id] and list(reply.read_only) == [b1.bookie_id]

    await eventually(listed)

    gc = await admin(t, "TriggerGc", pb.TriggerGcRequest(force_major=True, wait=True))
    assert isinstance(gc, pb.TriggerGcResponse)
    assert gc.completed and gc.cycles >= 1 and b0.bookie_id in gc.message

    for method, request, hint in (
        ("GetAuditorStatus", pb.GetAuditorStatusRequest(), "autoRecoveryDaemonEnabled"),
        ("ListUnderreplicated", pb.ListUnderreplicatedRequest(), "dlog autorecovery"),
        ("ListOwnedStreams", pb.ListOwnedStreamsRequest(), "dlog proxy"),
    ):
        with pytest.raises(grpc.aio.AioRpcError) as refused:
            await admin(t, method, request)
        assert refused.value.code() == grpc.StatusCode.UNIMPLEMENTED
        assert hint in (refused.value.details() or "")


async def refuses(host: str, port: int) -> bool:
    try:
        _, writer = await asyncio.open_connection(host, port)
    except OSError:
        return True
    writer.close()
    return False


async def test_settings_place_the_control_server(make_bookie, zk: ZooKeeper, zk_root: str) -> None:  # type: ignore[no-untyped-def]
    """grpcServerEnabled (off by default: nothing listens), grpcServerPort,
    grpcServerAddress, and the port published in the registration."""
    off_port = free_port()
    off = await make_bookie("off", grpcServerPort=off_port)
    assert off.control is None
    assert await refuses("127.0.0.1", off_port)

    port = free_port()
    on = await make_bookie(
        "on", grpcServerEnabled=True, grpcServerPort=port, grpcServerAddress="127.0.0.2"
    )
    assert on.control is not None and on.control.port == port
    assert await check(f"127.0.0.2:{port}") == SERVING
    assert await refuses("127.0.0.1", port)  # bound to grpcServerAddress only

    data, _ = await zk.get(f"{zk_root}/ledgers/available/{on.bookie_id}")
    endpoints = {e.id: e for e in bsi.decode(data).endpoints}
    assert endpoints[bsi.CONTROL_ENDPOINT_ID].port == port
    assert endpoints[bsi.CONTROL_ENDPOINT_ID].protocol == bsi.GRPC_PROTOCOL
    assert endpoints[bsi.BOOKIE_ENDPOINT_ID].port == on.server.port

    # A busy port is an error at start, not a silently shared port.
    with pytest.raises(OSError, match="cannot bind"):
        await make_bookie("clash", grpcServerEnabled=True, grpcServerPort=port)
