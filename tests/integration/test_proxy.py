"""The write proxy in process: real ZooKeeper, real bookies, proxies each
with their own namespace (ZooKeeper session), driven through raw thrift
frames and through dlog.proxy.Client."""

from __future__ import annotations

import asyncio
import struct
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

import pytest

from dlog.dlsn import DLSN
from dlog.errors import (
    ChecksumFailedError,
    LogEmptyError,
    LogExistsError,
    OverCapacityError,
    RecordTooLargeError,
    WriteOutcomeUnknownError,
)
from dlog.lock import DistributedLock
from dlog.namespace import Namespace
from dlog.proxy import Client
from dlog.proxy import protocol as wire
from dlog.proxy.server import ProxyServer
from dlog.record import MAX_PAYLOAD_SIZE

T = wire.thrift
S = wire.service
CODES = T.StatusCode

pytestmark = pytest.mark.timeout(120)

MakeProxy = Callable[..., Awaitable[ProxyServer]]


@pytest.fixture
async def make_proxy(open_namespace) -> AsyncIterator[MakeProxy]:  # type: ignore[no-untyped-def]
    """``await make_proxy(**settings)``: a started proxy on its own namespace."""
    started: list[ProxyServer] = []

    async def factory(**settings: object) -> ProxyServer:
        ns: Namespace = await open_namespace(**settings)
        proxy = ProxyServer(ns, host="127.0.0.1", port=0)
        await proxy.start()
        started.append(proxy)
        return proxy

    yield factory
    for p in started:
        await p.stop()


class Raw:
    """A bare framed-thrift connection: send one call, read one answer."""

    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.reader, self.writer = reader, writer
        self.seq = 0

    @classmethod
    async def open(cls, proxy: ProxyServer) -> Raw:
        return cls(*await asyncio.open_connection("127.0.0.1", proxy.port))

    async def call(self, method: str, **args: Any) -> Any:
        self.seq += 1
        self.writer.write(wire.encode_call(method, self.seq, getattr(S, f"{method}_args")(**args)))
        (size,) = struct.unpack(">i", await self.reader.readexactly(4))
        reply = wire.decode_reply(await self.reader.readexactly(size))
        assert reply.seqid == self.seq
        return (
            reply.result
            if isinstance(reply.result, Exception)
            else getattr(reply.result, "success", None)
        )

    async def closed(self, timeout: float = 5.0) -> bool:
        """True once the proxy closed this connection."""
        try:
            data = await asyncio.wait_for(self.reader.read(1), timeout)
        except (ConnectionError, TimeoutError):
            return isinstance(self.reader.exception(), ConnectionError)
        return data == b""

    def close(self) -> None:
        self.writer.close()


async def read_all(ns: Namespace, stream: str) -> list[tuple[DLSN, bytes]]:
    lm = await ns.open_log(stream)
    last = await lm.get_last_dlsn()
    out: list[tuple[DLSN, bytes]] = []
    reader = await lm.open_reader()
    try:
        while not out or out[-1][0] < last:
            r = await asyncio.wait_for(reader.read_next(), 10)
            out.append((r.dlsn, r.payload))
    finally:
        await reader.close()
    return out


async def test_writes_come_back_at_their_dlsns(make_proxy: MakeProxy) -> None:
    proxy = await make_proxy()
    raw = await Raw.open(proxy)
    ctx = T.WriteContext(crc32=wire.write_crc32("events", b"one"))
    r1 = await raw.call("writeWithContext", stream="events", data=b"one", ctx=ctx)
    assert r1.header.code == CODES.SUCCESS, r1
    r2 = await raw.call("write", stream="events", data=b"two")
    bulk = await raw.call(
        "writeBulkWithContext", stream="events", data=[b"b%d" % i for i in range(50)], ctx=None
    )
    assert bulk.header.code == CODES.SUCCESS
    assert [w.header.code for w in bulk.writeResponses] == [CODES.SUCCESS] * 50
    expected = [(DLSN.deserialize(r1.dlsn), b"one"), (DLSN.deserialize(r2.dlsn), b"two")] + [
        (DLSN.deserialize(w.dlsn), b"b%d" % i) for i, w in enumerate(bulk.writeResponses)
    ]
    assert await read_all(proxy.namespace, "events") == expected
    raw.close()


async def test_found_names_the_owner_and_the_client_follows(make_proxy: MakeProxy) -> None:
    a = await make_proxy()
    b = await make_proxy()
    raw_a, raw_b = await Raw.open(a), await Raw.open(b)
    assert (await raw_a.call("write", stream="s1", data=b"x")).header.code == CODES.SUCCESS
    found = await raw_b.call("write", stream="s1", data=b"y")
    assert found.header.code == CODES.FOUND
    assert found.header.location == a.address
    assert wire.parse_owner(a.address)[1:] == ("127.0.0.1", a.port)
    owner = await raw_b.call("getOwner", stream="s1", ctx=None)
    assert (owner.header.code, owner.header.location) == (CODES.FOUND, a.address)
    # The handshake lists what a proxy owns.
    info = await raw_a.call("handshakeWithClientInfo", clientInfo=T.ClientInfo(getOwnerships=True))
    assert (
        info.ownerships == {"s1": a.address}
        and info.serverStatus == T.ServerStatus.WRITE_AND_ACCEPT
    )
    only = await raw_a.call("handshakeWithClientInfo", clientInfo=T.ClientInfo(streamNameRegex="s"))
    assert only.ownerships == {}
    assert (await raw_b.call("handshake")).ownerships == {}
    # A client that knows only b is redirected to a, and remembers it.
    async with Client([b.endpoint]) as client:
        dlsn = await client.write("s1", b"z")
        assert client.owners["s1"] == a.endpoint
    assert (await read_all(b.namespace, "s1"))[-1] == (dlsn, b"z")
    assert not b.streams.owns("s1")  # type: ignore[union-attr]
    raw_a.close()
    raw_b.close()


async def test_release_hands_ownership_to_the_next_proxy_asked(make_proxy: MakeProxy) -> None:
    a = await make_proxy()
    b = await make_proxy()
    async with Client([a.endpoint, b.endpoint]) as client:
        raw_a = await Raw.open(a)
        assert (await raw_a.call("write", stream="r", data=b"1")).header.code == CODES.SUCCESS
        await client.release("r")
        assert not a.streams.owns("r")  # type: ignore[union-attr]
        raw_b = await Raw.open(b)
        assert (await raw_b.call("write", stream="r", data=b"2")).header.code == CODES.SUCCESS
        assert b.streams.owns("r")  # type: ignore[union-attr]
        assert [p for _, p in await read_all(a.namespace, "r")] == [b"1", b"2"]
        raw_a.close()
        raw_b.close()


async def _fail_the_writer(raw: Raw, stream: str, bookie: Any) -> list[bytes]:
    """Write to ``stream``, stop ``bookie`` (one of its ensemble, with none
    to replace it) and write until a write fails; the acknowledged payloads."""
    r = await raw.call("write", stream=stream, data=b"before")
    assert r.header.code == CODES.SUCCESS, r
    acked = [b"before"]
    await bookie.stop()
    codes = []
    for i in range(20):
        r = await raw.call("write", stream=stream, data=b"x%d" % i)
        codes.append(r.header.code)
        if r.header.code != CODES.SUCCESS:
            return acked
        acked.append(b"x%d" % i)
    raise AssertionError(f"no write failed: {codes}")


async def _assert_acked_present(ns: Namespace, stream: str, acked: list[bytes]) -> None:
    # A write answered with an error may still be there (recovery of the
    # failed writer's segment keeps what reached the bookies); every
    # acknowledged one must be, in order.
    read = [p for _, p in await read_all(ns, stream)]
    assert [p for p in read if p in acked] == acked, read


async def test_a_failed_writer_is_dropped_and_the_next_write_acquires_again(
    make_proxy: MakeProxy, open_namespace: Any, make_bookie: Any
) -> None:
    """A writer failed by something other than losing its stream (here: a
    bookie of its ensemble gone, none to replace it) is not kept as the
    stream's owner: the proxy closes it, and once bookies are back the next
    write goes through on a new writer. Nothing acknowledged is lost."""
    proxy = await make_proxy()
    raw = await Raw.open(proxy)
    acked = await _fail_the_writer(raw, "failing", open_namespace.bookies[2])
    # Closed at once, with no request needed: the lock is free for anyone.
    assert not proxy.streams.owns("failing")  # type: ignore[union-attr]
    lock = (await proxy.namespace.open_log("failing")).context.paths.lock
    for _ in range(100):
        if await DistributedLock.holder(proxy.namespace.zk, lock) is None:
            break
        await asyncio.sleep(0.1)
    else:
        raise AssertionError("the failed writer still holds the stream's lock")
    await make_bookie("b3")
    r = await raw.call("write", stream="failing", data=b"after")
    assert r.header.code == CODES.SUCCESS, r
    acked.append(b"after")
    assert proxy.streams.owns("failing")  # type: ignore[union-attr]
    await _assert_acked_present(proxy.namespace, "failing", acked)
    raw.close()


async def test_a_write_during_a_failed_writers_close_waits_for_it(
    make_proxy: MakeProxy, open_namespace: Any, make_bookie: Any
) -> None:
    """Until the failed writer's close has released the lock, the proxy's
    own old lock node is first in line: a write arriving meanwhile waits
    for the close, and is written, rather than being sent to this very
    proxy as the stream's owner (FOUND)."""
    proxy = await make_proxy()
    streams = proxy.streams
    assert streams is not None
    raw = await Raw.open(proxy)
    await raw.call("write", stream="closing", data=b"first")
    writer = streams._streams["closing"].writer
    real_close = writer.close
    released = asyncio.Event()

    async def slow_close() -> None:
        await released.wait()
        await real_close()

    writer.close = slow_close  # type: ignore[method-assign]
    await _fail_the_writer(raw, "closing", open_namespace.bookies[2])
    await make_bookie("b3")  # so that a new writer finds an ensemble
    assert not released.is_set()
    asyncio.get_running_loop().call_later(1.0, released.set)
    r = await raw.call("write", stream="closing", data=b"after")
    assert released.is_set()
    assert r.header.code == CODES.SUCCESS, r
    raw.close()


async def test_over_capacity_refuses_the_whole_request(make_proxy: MakeProxy) -> None:
    proxy = await make_proxy(perWriterOutstandingWriteLimit=10, outstandingWriteLimitDarkmode=False)
    raw = await Raw.open(proxy)
    assert (await raw.call("write", stream="cap", data=b"first")).header.code == CODES.SUCCESS
    over = await raw.call("writeBulkWithContext", stream="cap", data=[b"x"] * 11, ctx=None)
    assert over.header.code == CODES.OVER_CAPACITY, over
    assert "perWriterOutstandingWriteLimit=10" in over.header.errMsg
    # Concurrent requests past the limit: some refused, none half-written.
    raws = [await Raw.open(proxy) for _ in range(4)]
    answers = await asyncio.gather(
        *(
            r.call("writeBulkWithContext", stream="cap", data=[b"c%d" % i] * 6, ctx=None)
            for i, r in enumerate(raws)
        )
    )
    codes = sorted(a.header.code for a in answers)
    assert CODES.OVER_CAPACITY in codes and CODES.SUCCESS in codes
    written = [p for _, p in await read_all(proxy.namespace, "cap")]
    ok = [i for i, a in enumerate(answers) if a.header.code == CODES.SUCCESS]
    assert sorted(written[1:]) == sorted(b"c%d" % i for i in ok for _ in range(6))
    for r in [raw, *raws]:
        r.close()


async def test_dark_mode_counts_but_writes(make_proxy: MakeProxy) -> None:
    proxy = await make_proxy(perWriterOutstandingWriteLimit=2)  # darkmode: the default
    async with Client([proxy.endpoint]) as client:
        assert len(await client.write_bulk("dark", [b"a", b"b", b"c"])) == 3
    sample = proxy.metrics.registry.get_sample_value("proxy_over_capacity_total", {"dark": "true"})
    assert sample == 1


async def test_global_limit(make_proxy: MakeProxy) -> None:
    proxy = await make_proxy(globalOutstandingWriteLimit=3, outstandingWriteLimitDarkmode=False)
    async with Client([proxy.endpoint]) as client:
        with pytest.raises(OverCapacityError, match="globalOutstandingWriteLimit=3"):
            await client.write_bulk("g", [b"a"] * 4)
        assert len(await client.write_bulk("g", [b"a"] * 3)) == 3


async def test_too_large_record_and_bad_crc_write_nothing(make_proxy: MakeProxy) -> None:
    proxy = await make_proxy()
    raw = await Raw.open(proxy)
    assert (await raw.call("write", stream="big", data=b"ok")).header.code == CODES.SUCCESS
    big = b"x" * (MAX_PAYLOAD_SIZE + 1)
    r = await raw.call("write", stream="big", data=big)
    assert r.header.code == CODES.TOO_LARGE_RECORD, r
    r = await raw.call("writeBulkWithContext", stream="big", data=[b"small", big], ctx=None)
    assert r.header.code == CODES.TOO_LARGE_RECORD
    bad = T.WriteContext(crc32=wire.write_crc32("big", b"data") ^ 1)
    r = await raw.call("writeWithContext", stream="big", data=b"data", ctx=bad)
    assert r.header.code == CODES.CHECKSUM_FAILED, r
    r = await raw.call("release", stream="big", ctx=T.WriteContext(crc32=7))
    assert r.header.code == CODES.CHECKSUM_FAILED
    assert proxy.streams.owns("big")  # type: ignore[union-attr]
    assert [p for _, p in await read_all(proxy.namespace, "big")] == [b"ok"]
    async with Client([proxy.endpoint]) as client:
        with pytest.raises(RecordTooLargeError):
            await client.write("big", big)
    raw.close()
    assert ChecksumFailedError.code == CODES.CHECKSUM_FAILED


@pytest.mark.parametrize(
    "garbage",
    [
        pytest.param(b"GET / HTTP/1.1\r\n\r\n", id="http"),
        pytest.param(struct.pack(">i", 1 << 30), id="huge-length"),
        pytest.param(struct.pack(">i", -5), id="negative-length"),
        pytest.param(struct.pack(">i", 8) + b"\x80\x01\x00\x01\xff\xff\xff\xff", id="bad-name"),
        pytest.param(
            # A bulk write claiming 2**31-1 records in a 40-byte frame.
            (lambda p: struct.pack(">i", len(p)) + p)(
                b"\x80\x01\x00\x01\x00\x00\x00\x14writeBulkWithContext\x00\x00\x00\x01"
                b"\x0b\xff\xff\x00\x00\x00\x01s\x0f\xff\xfe\x0b\x7f\xff\xff\xff"
            ),
            id="huge-list",
        ),
        pytest.param(
            # A list of 2**31-1 elements of type 0, which take no bytes.
            (lambda p: struct.pack(">i", len(p)) + p)(
                b"\x80\x01\x00\x01\x00\x00\x00\x05write\x00\x00\x00\x01"
                b"\x0f\x00\x09\x00\x7f\xff\xff\xff\x00"
            ),
            id="empty-elements",
        ),
    ],
)
async def test_a_malformed_frame_closes_only_its_connection(
    make_proxy: MakeProxy, garbage: bytes
) -> None:
    proxy = await make_proxy()
    good = await Raw.open(proxy)
    assert (await good.call("write", stream="m", data=b"before")).header.code == CODES.SUCCESS
    bad = await Raw.open(proxy)
    bad.writer.write(garbage)
    assert await bad.closed()
    bad.close()
    # Still serving: the open connection and new ones.
    assert (await good.call("write", stream="m", data=b"after")).header.code == CODES.SUCCESS
    fresh = await Raw.open(proxy)
    assert (await fresh.call("write", stream="m", data=b"new")).header.code == CODES.SUCCESS
    assert [p for _, p in await read_all(proxy.namespace, "m")] == [b"before", b"after", b"new"]
    good.close()
    fresh.close()


async def test_unknown_method_answers_an_exception_and_keeps_the_connection(
    make_proxy: MakeProxy,
) -> None:
    proxy = await make_proxy()
    reader, writer = await asyncio.open_connection("127.0.0.1", proxy.port)
    name = b"noSuchMethod"
    payload = (
        b"\x80\x01\x00\x01" + struct.pack(">i", len(name)) + name + struct.pack(">i", 9) + b"\x00"
    )
    writer.write(struct.pack(">i", len(payload)) + payload)
    (size,) = struct.unpack(">i", await reader.readexactly(4))
    reply = wire.decode_reply(await reader.readexactly(size))
    assert reply.seqid == 9 and reply.result.type == 1  # UNKNOWN_METHOD
    raw = Raw(reader, writer)
    assert (await raw.call("write", stream="u", data=b"x")).header.code == CODES.SUCCESS
    raw.close()


async def test_too_many_streams(make_proxy: MakeProxy) -> None:
    a = await make_proxy(maxAcquiredPartitionsPerProxy=1)
    b = await make_proxy()
    raw = await Raw.open(a)
    assert (await raw.call("write", stream="t1", data=b"x")).header.code == CODES.SUCCESS
    r = await raw.call("write", stream="t2", data=b"x")
    assert r.header.code == CODES.TOO_MANY_STREAMS, r
    assert "maxAcquiredPartitionsPerProxy=1" in r.header.errMsg
    # A client moves on to a proxy with room.
    async with Client([a.endpoint, b.endpoint]) as client:
        for _ in range(5):
            await client.write("t2", b"y")
    assert b.streams.owns("t2") and not a.streams.owns("t2")  # type: ignore[union-attr]
    raw.close()


async def test_set_accept_new_stream(make_proxy: MakeProxy) -> None:
    a = await make_proxy()
    statuses: list[int] = []
    a.on_status(statuses.append)
    raw = await Raw.open(a)
    assert (await raw.call("write", stream="kept", data=b"x")).header.code == CODES.SUCCESS
    assert await raw.call("setAcceptNewStream", enabled=False) is None
    assert (await raw.call("handshake")).serverStatus == T.ServerStatus.WRITE_ONLY
    r = await raw.call("write", stream="new", data=b"x")
    assert r.header.code == CODES.SERVICE_UNAVAILABLE, r
    assert (await raw.call("write", stream="kept", data=b"y")).header.code == CODES.SUCCESS
    await raw.call("setAcceptNewStream", enabled=True)
    assert (await raw.call("write", stream="new", data=b"x")).header.code == CODES.SUCCESS
    assert statuses == [T.ServerStatus.WRITE_ONLY, T.ServerStatus.WRITE_AND_ACCEPT]
    raw.close()


async def test_admin_operations_through_the_client(make_proxy: MakeProxy) -> None:
    a = await make_proxy()
    b = await make_proxy()
    async with Client([a.endpoint, b.endpoint]) as client:
        await client.create("adm")
        with pytest.raises(LogExistsError):
            await client.create("adm")
        dlsns = await client.write_bulk("adm", [b"r%d" % i for i in range(5)])
        assert await client.heartbeat("adm") is None
        hb = await client.heartbeat("adm", to_readers=True)
        assert hb is not None and hb > dlsns[-1]
        await client.truncate("adm", dlsns[2])
        assert await a.namespace.log_exists("adm")
        await client.delete("adm")
        assert not await a.namespace.log_exists("adm")
        # A bulk with one record too large is refused whole: nothing written.
        with pytest.raises(RecordTooLargeError):
            await client.write_bulk("adm2", [b"ok", b"x" * (MAX_PAYLOAD_SIZE + 1)])
        with pytest.raises(LogEmptyError):
            await (await a.namespace.open_log("adm2")).get_last_dlsn()


async def test_server_settings(open_namespace) -> None:  # type: ignore[no-untyped-def]
    """server_port, server_shard and server_max_frame_bytes are honoured."""
    from dlog.sandbox.ports import free_port

    port = free_port()
    ns = await open_namespace(server_port=port, server_shard=7, server_max_frame_bytes=2048)
    proxy = ProxyServer(ns, host="127.0.0.1")
    await proxy.start()
    try:
        assert proxy.port == port and proxy.address == f"1;7;127.0.0.1:{port}"
        raw = await Raw.open(proxy)
        assert (await raw.call("write", stream="f", data=b"x" * 1000)).header.code == CODES.SUCCESS
        assert (await raw.call("getOwner", stream="f", ctx=None)).header.location == proxy.address
        too_big = await Raw.open(proxy)
        too_big.writer.write(
            wire.encode_call("write", 1, S.write_args(stream="f", data=b"y" * 3000))
        )
        assert await too_big.closed()
        assert (await raw.call("write", stream="f", data=b"z")).header.code == CODES.SUCCESS
        raw.close()
        too_big.close()
    finally:
        await proxy.stop()


async def test_graceful_shutdown_answers_down_first(make_proxy: MakeProxy) -> None:
    proxy = await make_proxy(server_graceful_shutdown_period_ms=800)
    raw = await Raw.open(proxy)
    assert (await raw.call("write", stream="g", data=b"x")).header.code == CODES.SUCCESS
    loop = asyncio.get_running_loop()
    started = loop.time()
    stopping = asyncio.ensure_future(proxy.stop())
    await asyncio.sleep(0.2)
    # Still answering, as DOWN: clients move away before the streams go.
    assert (await raw.call("handshake")).serverStatus == T.ServerStatus.DOWN
    r = await raw.call("write", stream="new-one", data=b"x")
    assert r.header.code == CODES.SERVICE_UNAVAILABLE
    await stopping
    assert loop.time() - started >= 0.8
    assert not proxy.streams.owns("g")  # type: ignore[union-attr]
    raw.close()


async def test_a_proxy_told_the_owner_is_unreachable_waits_for_its_lock(
    make_proxy: MakeProxy,
) -> None:
    """A lock held by a proxy nobody can reach (its session not yet
    expired): asked plainly, the proxy answers FOUND at once; asked with
    the owner in triedHosts, it waits for the lock and takes the stream."""
    from dlog.lock import MEMBER_PREFIX

    proxy = await make_proxy(lockTimeoutSeconds=20)
    ns = proxy.namespace
    lm = await ns.open_log("orphaned")
    dead = wire.format_owner("127.0.0.1", 1)
    node = await ns.zk.create(
        f"{lm.context.paths.lock}/{MEMBER_PREFIX}",
        dead.encode(),
        ephemeral=True,
        sequence=True,
        makepath=True,
    )
    raw = await Raw.open(proxy)
    found = await raw.call("write", stream="orphaned", data=b"x")
    assert (found.header.code, found.header.location) == (CODES.FOUND, dead)

    # The dead owner's session expires 0.5 s later (its node goes).
    loop = asyncio.get_running_loop()
    loop.call_later(0.5, lambda: asyncio.ensure_future(ns.zk.delete(node)))
    started = loop.time()
    tried = T.WriteContext(triedHosts={"127.0.0.1:1"})
    r = await raw.call("writeWithContext", stream="orphaned", data=b"y", ctx=tried)
    assert r.header.code == CODES.SUCCESS, r
    assert loop.time() - started >= 0.4
    assert proxy.streams.owns("orphaned")  # type: ignore[union-attr]
    raw.close()


async def test_a_write_whose_answer_is_lost_is_not_sent_again(make_proxy: MakeProxy) -> None:
    """A proxy that takes a write and drops the connection before answering:
    the client raises WriteOutcomeUnknownError and sends the write nowhere
    else (it may have been written)."""
    proxy = await make_proxy()
    received: list[bytes] = []

    async def drop(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        (size,) = struct.unpack(">i", await reader.readexactly(4))
        received.append(await reader.readexactly(size))
        writer.close()

    black_hole = await asyncio.start_server(drop, "127.0.0.1", 0)
    hole = f"127.0.0.1:{black_hole.sockets[0].getsockname()[1]}"
    try:
        async with Client([hole, proxy.endpoint]) as client:
            client.owners["lost"] = hole  # as a handshake or FOUND would have said
            with pytest.raises(WriteOutcomeUnknownError):
                await client.write("lost", b"maybe")
            assert len([f for f in received if b"writeWithContext" in f]) == 1
            assert not await proxy.namespace.log_exists("lost")
            # Repeatable operations move on to the next proxy.
            client.owners["lost"] = hole
            await client.create("lost")
            assert await proxy.namespace.log_exists("lost")
    finally:
        black_hole.close()


async def test_writes_racing_an_acquisition_are_written_in_arrival_order(
    make_proxy: MakeProxy, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Writes that arrive while a stream is being acquired, and one that
    arrives just as the acquisition completes, are written in arrival
    order: a client pipelined them in that order, and its acknowledgments
    would otherwise come back out of it."""
    proxy = await make_proxy()
    streams = proxy.streams
    assert streams is not None
    real = streams._acquire
    later: list[asyncio.Task[Any]] = []

    def arrive(payload: bytes) -> None:
        later.append(asyncio.ensure_future(proxy.writeWithContext("ordered", payload, None)))

    async def acquire_while_others_arrive(stream: str, tried: Any) -> Any:
        if later:
            return await real(stream, tried)
        arrive(b"second")  # arrives while the stream is being acquired
        await asyncio.sleep(0.05)
        owned = await real(stream, tried)
        arrive(b"third")  # arrives as the acquisition completes
        return owned

    monkeypatch.setattr(streams, "_acquire", acquire_while_others_arrive)
    first = await proxy.writeWithContext("ordered", b"first", None)
    answers = [first, *[await t for t in later]]
    assert [a.header.code for a in answers] == [CODES.SUCCESS] * 3
    dlsns = [DLSN.deserialize(a.dlsn) for a in answers]
    assert dlsns == sorted(dlsns), dlsns
    payloads = [p for _, p in await read_all(proxy.namespace, "ordered")]
    assert payloads == [b"first", b"second", b"third"]
