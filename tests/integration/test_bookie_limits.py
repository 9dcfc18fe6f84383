"""No client can hold a bookie's memory or connections for free: frame and
idle timeouts, the cap on incomplete frames, the in-progress limits (with
back-pressure, not errors), and a bad frame that still lets the good
requests before it be answered. Real bookies, raw sockets."""

from __future__ import annotations

import asyncio
import re
import struct
import time
from collections.abc import Callable
from pathlib import Path

from dlog.bookie.service import BookieService
from dlog.errors import EOK
from dlog.ledger.bookie_client import BookieClient
from dlog.ledger.digest import CRC32C, DigestManager
from dlog.protocol import messages as m
from dlog.protocol.frame import FrameDecoder, encode_frame
from dlog.sandbox.bookies import BookieProcess
from dlog.sandbox.ports import free_port
from tests.metrics import metric, scrape

KEY = DigestManager(1, CRC32C, b"pw").master_key


def entry(ledger_id: int, entry_id: int, payload: bytes | None = None) -> bytes:
    payload = payload if payload is not None else f"entry-{ledger_id}-{entry_id}".encode()
    dm = DigestManager(ledger_id, CRC32C, b"pw")
    return dm.compute(entry_id, entry_id - 1, (entry_id + 1) * len(payload), payload)


def add_frame(txn: int, lid: int, eid: int, payload: bytes | None = None) -> bytes:
    return encode_frame(m.encode_add_request(txn, lid, eid, KEY, entry(lid, eid, payload), False))


def frame(req: m.Request) -> bytes:
    return encode_frame(req.SerializeToString())


Conn = tuple[asyncio.StreamReader, asyncio.StreamWriter]


async def open_raw(port: int) -> Conn:
    return await asyncio.open_connection("127.0.0.1", port)


async def read_until_closed(reader: asyncio.StreamReader, timeout: float) -> tuple[list, bool]:
    """Responses read until the bookie closes the connection; False if it
    did not within ``timeout``."""
    dec = FrameDecoder()
    out: list[m.Response] = []
    deadline = time.monotonic() + timeout
    try:
        while True:
            left = deadline - time.monotonic()
            if left <= 0:
                return out, False
            data = await asyncio.wait_for(reader.read(1 << 16), left)
            if not data:
                return out, True
            out += [m.Response.FromString(p) for p in dec.feed(data)]
    except (ConnectionResetError, BrokenPipeError):
        return out, True
    except TimeoutError:
        return out, False


async def closed_after(reader: asyncio.StreamReader, timeout: float) -> float | None:
    """Seconds until the bookie closed the connection, None if it did not."""
    t0 = time.monotonic()
    _, closed = await read_until_closed(reader, timeout)
    return time.monotonic() - t0 if closed else None


def closes(bookie: BookieService, reason: str) -> float:
    return bookie.metrics.closed_connections.get((reason,))


def hold_adds(bookie: BookieService, delay: float) -> None:
    """Answer every add ``delay`` seconds late, so adds pile up in progress."""
    original = bookie.core.add_entry
    loop = asyncio.get_running_loop()

    def slow_add(lid, eid, key, body, recovery, respond):  # type: ignore[no-untyped-def]
        def later(status: int) -> None:
            loop.call_later(delay, respond, status)

        original(lid, eid, key, body, recovery, later)

    bookie.core.add_entry = slow_add  # type: ignore[method-assign]


# ---------------------------------------------------------------------------
# slow-loris against a bookie process: timeouts and a bounded RSS
# ---------------------------------------------------------------------------


def vm_rss(pid: int) -> int:
    text = Path(f"/proc/{pid}/status").read_text()
    return int(re.search(r"VmRSS:\s+(\d+) kB", text).group(1)) * 1024  # type: ignore[union-attr]


async def test_slow_loris_is_closed_and_memory_stays_capped(tmp_path, ledgers_uri) -> None:
    mib = 1024 * 1024
    cap = 8 * mib
    timeout_ms = 2500
    metrics_port = free_port()
    proc = BookieProcess(
        tmp_path / "bookie",
        ledgers_uri,
        nettyMaxFrameSizeBytes=mib,
        maxBufferedFrameBytes=cap,
        frameReadTimeoutMs=timeout_ms,
        connectionIdleTimeoutMs=timeout_ms,
        enableStatistics=True,
        prometheusStatsHttpPort=metrics_port,
        prometheusStatsHttpAddress="127.0.0.1",
    )
    loop = asyncio.get_running_loop()
    await loop.run_in_executor(None, proc.start)
    try:
        assert proc.pid is not None
        pid = proc.pid
        await asyncio.sleep(0.3)
        baseline = vm_rss(pid)
        peak = baseline
        stop_sampling = asyncio.Event()

        async def sample() -> None:
            nonlocal peak
            while not stop_sampling.is_set():
                peak = max(peak, vm_rss(pid))
                await asyncio.sleep(0.02)

        sampler = asyncio.create_task(sample())
        # 120 connections each send all but the last byte of a 1 MiB frame
        # (120 MiB if buffered), 40 more send nothing at all.
        partial = struct.pack(">i", mib) + b"x" * (mib - 1)
        loris = [await open_raw(proc.port) for _ in range(120)]
        silent = [await open_raw(proc.port) for _ in range(40)]
        t0 = time.monotonic()

        async def send(conn: Conn) -> None:
            try:
                conn[1].write(partial)
                await conn[1].drain()
            except (ConnectionResetError, BrokenPipeError):
                pass

        await asyncio.gather(*(send(c) for c in loris))
        # Every connection is closed within the frame timeout (from its first
        # byte) or the idle timeout (from connecting), plus scheduling slack.
        waits = await asyncio.gather(
            *(closed_after(r, timeout_ms / 1000 + 3.0) for r, _ in loris + silent)
        )
        elapsed = time.monotonic() - t0
        stop_sampling.set()
        await sampler
        growth = peak - baseline
        assert growth < cap + 24 * mib, (
            f"RSS grew {growth / mib:.0f} MiB with a {cap // mib} MiB cap"
        )
        assert all(w is not None for w in waits), f"{waits.count(None)} connections left open"
        assert elapsed < timeout_ms / 1000 + 3.0
        # Nothing was closed before its time except for the cap.
        text = await loop.run_in_executor(None, scrape, metrics_port)
        by_cap = metric(text, "bookie_connections_closed_total", reason="buffer_limit")
        by_timeout = metric(text, "bookie_connections_closed_total", reason="frame_timeout")
        by_idle = metric(text, "bookie_connections_closed_total", reason="idle")
        assert by_cap > 0 and by_idle == 40
        assert by_cap + by_timeout == 120
        assert metric(text, "bookie_buffered_frame_bytes") == 0
        for _, w in loris + silent:
            w.close()
        # The bookie still serves.
        client = BookieClient(f"127.0.0.1:{proc.port}")
        await client.connect()
        assert (await client.add_entry(1, 0, KEY, entry(1, 0))).status == EOK
        await client.close()
    finally:
        await loop.run_in_executor(None, proc.stop)


# ---------------------------------------------------------------------------
# frameReadTimeoutMs
# ---------------------------------------------------------------------------


async def test_frame_read_timeout(make_bookie) -> None:
    bookie = await make_bookie(frameReadTimeoutMs=400)
    port = bookie.server.port
    req = add_frame(1, 1, 0)
    # Half a frame: closed ~0.4 s after its first byte.
    r_half, w_half = await open_raw(port)
    w_half.write(req[: len(req) // 2])
    # A frame trickled a byte every 50 ms: progress does not reset the clock.
    r_trickle, w_trickle = await open_raw(port)

    async def trickle() -> None:
        for b in req:
            if w_trickle.is_closing():
                return
            w_trickle.write(bytes([b]))
            await asyncio.sleep(0.05)

    trickler = asyncio.create_task(trickle())
    # Nothing at all is no frame in progress: that is for the idle timeout (off).
    r_silent, _w_silent = await open_raw(port)
    silent = asyncio.ensure_future(closed_after(r_silent, 2))
    # A well-behaved client is never closed: each frame arrives at once.
    good = BookieClient(f"127.0.0.1:{port}")
    await good.connect()
    half, trickled = await asyncio.gather(closed_after(r_half, 3), closed_after(r_trickle, 3))
    trickler.cancel()
    for waited in (half, trickled):
        assert waited is not None and 0.3 < waited < 1.2, waited
    for i in range(8):  # 0.8 s of requests 0.1 s apart, and a pause longer than the timeout
        assert (await good.add_entry(1, i, KEY, entry(1, i))).status == EOK
        await asyncio.sleep(0.1)
    await asyncio.sleep(0.6)
    assert good.connected
    assert (await good.add_entry(1, 8, KEY, entry(1, 8))).status == EOK
    assert await silent is None
    assert closes(bookie, "frame_timeout") == 2
    assert bookie.server.buffered_bytes == 0
    await good.close()


async def test_time_the_bookie_does_not_read_is_not_counted(make_bookie) -> None:
    """A frame stuck behind back-pressure (the bookie stopped reading) is
    not timed out: the client could not have sent it."""
    bookie = await make_bookie(frameReadTimeoutMs=300, maxAddsInProgressLimit=1)
    held: list[Callable[[], None]] = []
    original = bookie.core.add_entry

    def held_add(lid, eid, key, body, recovery, respond):  # type: ignore[no-untyped-def]
        held.append(lambda: original(lid, eid, key, body, recovery, respond))

    bookie.core.add_entry = held_add  # type: ignore[method-assign]
    reader, writer = await open_raw(bookie.server.port)
    third = add_frame(3, 2, 2)
    # Add 0 takes the only slot, add 1 waits in the backlog, add 2 is half sent.
    writer.write(add_frame(1, 2, 0) + add_frame(2, 2, 1) + third[:10])
    await asyncio.sleep(0.8)  # well past the frame timeout, while not reading
    assert len(held) == 1 and bookie.server.processor.adds_in_progress == 1
    bookie.core.add_entry = original  # type: ignore[method-assign]
    held.pop()()  # add 0 completes, add 1 gets the slot, reading resumes
    writer.write(third[10:])
    answers, closed = await read_until_closed(reader, 1.0)
    assert not closed
    assert sorted(r.header.txnId for r in answers) == [1, 2, 3]
    assert {r.status for r in answers} == {EOK}
    assert closes(bookie, "frame_timeout") == 0
    writer.close()


# ---------------------------------------------------------------------------
# connectionIdleTimeoutMs
# ---------------------------------------------------------------------------


async def test_idle_connections_are_closed_but_not_busy_ones(make_bookie) -> None:
    bookie = await make_bookie(connectionIdleTimeoutMs=400, frameReadTimeoutMs=0)
    port = bookie.server.port
    writer_client = BookieClient(f"127.0.0.1:{port}")
    await writer_client.connect()
    assert (await writer_client.add_entry(5, 0, KEY, entry(5, 0))).status == EOK
    assert (await writer_client.add_entry(5, 1, KEY, entry(5, 1))).status == EOK  # LAC 0
    # A connection that never sends anything (the frame timeout is off here).
    r_silent, w_silent = await open_raw(port)  # keep the writer: collecting it closes
    t_silent = asyncio.ensure_future(closed_after(r_silent, 3))
    # A tailing reader whose long poll outlasts the idle timeout.
    tailer = BookieClient(f"127.0.0.1:{port}")
    await tailer.connect()
    poll = asyncio.ensure_future(
        tailer.read_entry(5, 1, previous_lac=0, long_poll_timeout_ms=1200, piggyback=True)
    )
    # A client that keeps asking, 0.15 s apart, for longer than the timeout.
    busy = BookieClient(f"127.0.0.1:{port}")
    await busy.connect()
    for _ in range(6):
        assert (await busy.read_entry(5, 0)).status == EOK
        await asyncio.sleep(0.15)
    assert busy.connected and tailer.connected
    # Only the writer and the silent connection were found idle (a closing
    # connection would still answer the long poll before its FIN).
    assert closes(bookie, "idle") == 2
    silent = await t_silent
    assert silent is not None and 0.3 < silent < 1.2, silent
    # The writer sent nothing for > 0.4 s after its answers: closed.
    assert not writer_client.connected
    r = await asyncio.wait_for(poll, 3)  # times out at 1.2 s, answered, not closed
    assert r.status == EOK and r.readResponse.maxLAC == 0
    await asyncio.sleep(0.7)  # now idle
    assert not tailer.connected and not busy.connected
    assert closes(bookie, "idle") == 4
    await asyncio.gather(writer_client.close(), tailer.close(), busy.close())
    w_silent.close()


# ---------------------------------------------------------------------------
# maxBufferedFrameBytes
# ---------------------------------------------------------------------------


async def test_buffer_cap_closes_the_oldest_incomplete_frames(make_bookie) -> None:
    kib = 1024
    bookie = await make_bookie(nettyMaxFrameSizeBytes=256 * kib, maxBufferedFrameBytes=512 * kib)
    port = bookie.server.port
    big = add_frame(9, 3, 0, payload=b"b" * (200 * kib))
    old_r, old_w = await open_raw(port)
    old_w.write(big[: 180 * kib])
    await old_w.drain()
    await asyncio.sleep(0.1)
    mid_r, mid_w = await open_raw(port)
    mid_w.write(big[: 180 * kib])
    await mid_w.drain()
    await asyncio.sleep(0.1)
    assert closes(bookie, "buffer_limit") == 0
    # 3 x 180 KiB > 512 KiB: the oldest frame goes, the others stay.
    new_r, new_w = await open_raw(port)
    new_w.write(big[: 180 * kib])
    await new_w.drain()
    assert await closed_after(old_r, 2) is not None
    assert closes(bookie, "buffer_limit") == 1
    assert bookie.server.buffered_bytes == 2 * 180 * kib
    for r, w in ((mid_r, mid_w), (new_r, new_w)):
        w.write(big[180 * kib :])
        answers, closed = await read_until_closed(r, 0.5)
        assert not closed and [a.status for a in answers] == [EOK]
        w.close()
    assert bookie.server.buffered_bytes == 0 and not bookie.server.partial


# ---------------------------------------------------------------------------
# maxAddsInProgressLimit / maxReadsInProgressLimit
# ---------------------------------------------------------------------------


async def test_adds_in_progress_limit_is_back_pressure(make_bookie) -> None:
    limit = 5
    bookie = await make_bookie(maxAddsInProgressLimit=limit)
    hold_adds(bookie, 0.003)
    processor = bookie.server.processor
    clients = [BookieClient(f"127.0.0.1:{bookie.server.port}") for _ in range(4)]
    await asyncio.gather(*(c.connect() for c in clients))
    futures = [
        c.add_entry(10 + n, i, KEY, entry(10 + n, i))
        for n, c in enumerate(clients)
        for i in range(75)
    ]
    answers = await asyncio.wait_for(asyncio.gather(*futures), 20)
    assert {a.status for a in answers} == {EOK}  # all complete: waited, not refused
    assert processor.max_adds_in_progress == limit
    assert processor.adds_in_progress == 0
    assert bookie.metrics.in_progress_pauses.get(("add",)) >= 1
    # Every connection is reading again.
    assert not any(conn._paused_for for conn in bookie.server.connections)
    await asyncio.gather(*(c.close() for c in clients))


async def test_reads_in_progress_limit_is_back_pressure(make_bookie) -> None:
    limit = 3
    bookie = await make_bookie(maxReadsInProgressLimit=limit)
    processor = bookie.server.processor
    c = BookieClient(f"127.0.0.1:{bookie.server.port}")
    await c.connect()
    for i in range(5):
        assert (await c.add_entry(20, i, KEY, entry(20, i))).status == EOK
    # Long polls wait for the LAC without holding a read slot: more of them
    # than the limit do not stop other reads.
    polls = [
        asyncio.ensure_future(c.read_entry(20, 4, previous_lac=3, long_poll_timeout_ms=2000))
        for _ in range(limit + 2)
    ]
    await asyncio.sleep(0.05)
    # Entry -1 (the last entry) and READ_LAC always go to storage: in progress
    # until the read pool answers. 150 pipelined, at most `limit` at once.
    reads = [c.read_entry(20, m.LAST_ADD_CONFIRMED) for _ in range(100)]
    reads += [c.read_lac(20) for _ in range(50)]
    t0 = time.monotonic()
    answers = await asyncio.wait_for(asyncio.gather(*reads), 10)
    assert time.monotonic() - t0 < 1.5  # not stuck behind the long polls
    assert all(a.status == EOK for a in answers)
    assert processor.max_reads_in_progress == limit
    assert bookie.metrics.in_progress_pauses.get(("read",)) >= 1
    assert not any(p.done() for p in polls)
    assert (await c.add_entry(20, 5, KEY, entry(20, 5))).status == EOK  # LAC 4: polls answer
    assert {(await p).status for p in polls} == {EOK}
    assert processor.reads_in_progress == 0
    await c.close()


# ---------------------------------------------------------------------------
# a bad frame after good pipelined requests
# ---------------------------------------------------------------------------


async def _good_then_bad(bookie: BookieService, bad: bytes) -> None:
    port = bookie.server.port
    setup = BookieClient(f"127.0.0.1:{port}")
    await setup.connect()
    for i in range(3):
        assert (await setup.add_entry(30, i, KEY, entry(30, i))).status == EOK
    await setup.close()
    good = [add_frame(txn, 31, txn - 1) for txn in range(1, 21)]  # durable after a journal sync
    good += [frame(m.read_request(txn, 30, m.LAST_ADD_CONFIRMED)) for txn in range(21, 26)]
    good += [frame(m.read_lac_request(26, 30)), frame(m.read_request(27, 30, 1))]
    after = frame(m.read_request(99, 30, 0))  # sent after the bad frame: never answered
    reader, writer = await open_raw(port)
    writer.write(b"".join(good) + bad + after)
    answers, closed = await read_until_closed(reader, 5)
    assert closed
    assert sorted(a.header.txnId for a in answers) == list(range(1, 28))
    assert {a.status for a in answers} == {EOK}
    writer.close()


async def test_undecodable_frame_after_pipelined_requests(make_bookie) -> None:
    bookie = await make_bookie()
    await _good_then_bad(bookie, struct.pack(">i", 5) + b"\xff\xff\xff\xff\xff")
    assert closes(bookie, "undecodable") == 1


async def test_oversized_frame_after_pipelined_requests(make_bookie) -> None:
    bookie = await make_bookie(nettyMaxFrameSizeBytes=64 * 1024)
    await _good_then_bad(bookie, struct.pack(">i", 10 * 1024 * 1024) + b"x" * 100)
    assert closes(bookie, "frame_too_large") == 1
