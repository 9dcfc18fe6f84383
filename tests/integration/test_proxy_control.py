"""A write proxy's control plane, run as a user runs it (``dlog proxy
--grpc-port 0``): standard health checks follow whether it accepts new
streams, ``dlog admin streams`` lists what it owns, and a SIGTERM turns it
NOT_SERVING before it goes."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Iterator

import grpc
import pytest
from grpc_health.v1 import health_pb2, health_pb2_grpc

from dlog.proxy import Client
from dlog.proxy import protocol as wire
from dlog.sandbox.cluster import Sandbox
from tests.cli import dlog, ok
from tests.proxy_process import ProxyProcess

pytestmark = [pytest.mark.integration, pytest.mark.timeout(180)]

SERVING = health_pb2.HealthCheckResponse.SERVING
NOT_SERVING = health_pb2.HealthCheckResponse.NOT_SERVING


@pytest.fixture
def proxy(sandbox: Sandbox) -> Iterator[ProxyProcess]:
    p = ProxyProcess(sandbox.namespace_uri, grpc=True)
    try:
        yield p
    finally:
        p.stop()


def status(port: int, service: str) -> int:
    with grpc.insecure_channel(f"127.0.0.1:{port}") as channel:
        stub = health_pb2_grpc.HealthStub(channel)
        return int(stub.Check(health_pb2.HealthCheckRequest(service=service), timeout=5).status)


def wait_status(port: int, service: str, expected: int, timeout: float = 10) -> None:
    deadline = time.monotonic() + timeout
    while (got := status(port, service)) != expected:
        assert time.monotonic() < deadline, f"{service!r} is {got}, expected {expected}"
        time.sleep(0.05)


async def set_accept(endpoint: str, enabled: bool) -> None:
    host, _, port = endpoint.rpartition(":")
    reader, writer = await asyncio.open_connection(host, int(port))
    writer.write(
        wire.encode_call(
            "setAcceptNewStream", 1, wire.service.setAcceptNewStream_args(enabled=enabled)
        )
    )
    size = wire.FRAME_HEADER.unpack(await reader.readexactly(4))[0]
    assert wire.decode_reply(await reader.readexactly(size)).seqid == 1
    writer.close()


def test_health_follows_accepting_new_streams(proxy: ProxyProcess) -> None:
    assert proxy.grpc_port
    assert status(proxy.grpc_port, "") == SERVING
    assert status(proxy.grpc_port, "dlog.proxy") == SERVING

    asyncio.run(set_accept(proxy.endpoint, False))
    wait_status(proxy.grpc_port, "dlog.proxy", NOT_SERVING)
    assert status(proxy.grpc_port, "") == SERVING  # the process still serves its streams
    asyncio.run(set_accept(proxy.endpoint, True))
    wait_status(proxy.grpc_port, "dlog.proxy", SERVING)

    async def write() -> None:
        async with Client([proxy.endpoint]) as client:
            await client.write_bulk("owned-a", [b"1", b"2"])
            await client.write("owned-b", b"3")

    asyncio.run(write())
    out = ok(dlog("admin", "--target", f"127.0.0.1:{proxy.grpc_port}", "streams"))
    assert "2 stream(s) owned by" in out and proxy.address in out
    assert "owned-a" in out and "owned-b" in out

    # Stopping: NOT_SERVING from the signal on, then gone.
    with grpc.insecure_channel(f"127.0.0.1:{proxy.grpc_port}") as channel:
        stub = health_pb2_grpc.HealthStub(channel)
        watch = stub.Watch(health_pb2.HealthCheckRequest(service=""), timeout=30)
        assert next(watch).status == SERVING
        proxy.proc.send_signal(15)
        seen = []
        try:
            for reply in watch:
                seen.append(reply.status)
        except grpc.RpcError:
            pass
    assert seen and seen[0] == NOT_SERVING, seen
    assert proxy.stop() == 0


def test_the_proxy_control_plane_settings(sandbox: Sandbox) -> None:
    """grpcServerEnabled, grpcServerAddress and grpcServerPort from the
    proxy's configuration (not --grpc-port)."""
    p = ProxyProcess(
        sandbox.namespace_uri,
        "grpcServerEnabled=true",
        "grpcServerAddress=127.0.0.2",
        "grpcServerPort=0",
    )
    try:
        assert p.grpc_port
        with grpc.insecure_channel(f"127.0.0.2:{p.grpc_port}") as channel:
            stub = health_pb2_grpc.HealthStub(channel)
            reply = stub.Check(health_pb2.HealthCheckRequest(service="dlog.proxy"), timeout=5)
            assert reply.status == SERVING
        with pytest.raises(grpc.RpcError):
            status(p.grpc_port, "")  # 127.0.0.1: nothing listens there
    finally:
        assert p.stop() == 0
    off = ProxyProcess(sandbox.namespace_uri)
    try:
        assert off.grpc_port is None  # grpcServerEnabled defaults to false
    finally:
        off.stop()
