"""Segment rolls: the next segment's ledger is made while the old segment
completes, and no ledger is left without a segment, whatever the roll met.
Real ZooKeeper and real (in-process) bookies."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from dlog.errors import LogMetadataVersionError
from dlog.ledger.metadata import CloseReason
from dlog.log import LogManager
from dlog.namespace import Namespace
from dlog.record import LogRecord

ROLLING = {"maxLogSegmentBytes": 2048, "writerOutputBufferSize": 1024}


def payload(i: int) -> bytes:
    return b"%06d" % i + b"x" * 94


async def segment_ledgers(lm: LogManager) -> set[int]:
    return {s.ledger_id for s, _ in await lm.context.metadata.get_segments(lm.context.name)}


class Created:
    """Counts the ledgers ``ns.bk.create_ledger`` creates from now on."""

    def __init__(self, ns: Namespace) -> None:
        self.count = 0
        real_create = ns.bk.create_ledger

        async def create_ledger(*args: Any, **kwargs: Any) -> Any:
            handle = await real_create(*args, **kwargs)
            self.count += 1
            return handle

        ns.bk.create_ledger = create_ledger  # type: ignore[method-assign]


async def test_the_next_ledger_is_made_while_the_old_segment_completes(
    open_namespace: Any,
) -> None:
    """Each roll's completion waits (up to 5 s) for the next segment's
    ledger to exist. Made only after the completion, as it once was, it
    never would: every roll would time out."""
    ns: Namespace = await open_namespace(**ROLLING)
    lm = await ns.open_log("overlap")
    writer = await lm.open_writer()
    created = Created(ns)
    store = writer._store
    real_complete = store.complete_segment
    completions: list[bool] = []  # per roll: did the next ledger exist before it completed?
    closing = False

    async def complete_segment(*args: Any, **kwargs: Any) -> int:
        if not closing:
            # Segments 1..k exist when the k-th completes; the next is k + 1.
            want = len(completions) + 2
            for _ in range(500):
                if created.count >= want:
                    break
                await asyncio.sleep(0.01)
            completions.append(created.count >= want)
        return await real_complete(*args, **kwargs)

    store.complete_segment = complete_segment  # type: ignore[method-assign]
    dlsns = await writer.write_bulk([LogRecord(i, payload(i)) for i in range(120)])
    closing = True
    await writer.close()
    assert len(completions) >= 3, completions
    assert all(completions), completions
    assert dlsns == sorted(dlsns) and len({d.log_segment_sequence_no for d in dlsns}) >= 4
    # Nothing was written twice, nothing lost, and every ledger has a segment.
    assert await segment_ledgers(lm) == set(await ns.bk.list_ledgers())


async def test_a_roll_with_nothing_written_after_it_leaves_no_spare_ledger(
    open_namespace: Any,
) -> None:
    """One awaited write at a time: each roll finds nothing queued, so the
    ledger made for the next segment is deleted (its delete due now, for
    BP-44's audit), and the next write makes its own."""
    ns: Namespace = await open_namespace(**ROLLING)
    lm = await ns.open_log("idle-rolls")
    writer = await lm.open_writer()
    for i in range(60):
        await writer.write(LogRecord(i, payload(i)))
        if writer._completing is not None:
            await writer._completing  # the roll this write started, discarding included
        assert set(await ns.bk.list_ledgers()) == await segment_ledgers(lm), i
    await writer.close()
    assert writer.segments_written >= 3
    assert set(await ns.bk.list_ledgers()) == await segment_ledgers(lm)
    reader = await lm.open_reader()
    got = [r.txid for r in await reader.read_bulk(100, timeout=10)]
    while len(got) < 60:
        got += [r.txid for r in await reader.read_bulk(100, timeout=10)]
    assert got == list(range(60))
    await reader.close()


@pytest.mark.parametrize("close_at_once", [False, True])
async def test_a_roll_that_fails_deletes_the_next_ledger(
    open_namespace: Any, close_at_once: bool
) -> None:
    """The old segment cannot be completed (its znode changed): the writer
    fails, and the ledger made for the segment that will never come is
    closed with its delete due and deleted, by the roll itself; a close
    called meanwhile returns only after that."""
    ns: Namespace = await open_namespace(**ROLLING)
    lm = await ns.open_log(f"failed-roll-{close_at_once}")
    writer = await lm.open_writer()
    store = writer._store
    closed: list[Any] = []
    created = Created(ns)
    real_delete = ns.bk.delete_ledger

    async def complete_segment(*args: Any, **kwargs: Any) -> int:
        raise LogMetadataVersionError("segment znode changed under the writer")

    async def delete_ledger(ledger_id: int) -> None:
        closed.append((await ns.bk.ledger_metadata(ledger_id)).close_context)
        await real_delete(ledger_id)

    store.complete_segment = complete_segment  # type: ignore[method-assign]
    ns.bk.delete_ledger = delete_ledger  # type: ignore[method-assign]
    futures = [writer.write_nowait(LogRecord(i, payload(i))) for i in range(60)]
    results = await asyncio.gather(*futures, return_exceptions=True)
    assert any(isinstance(r, LogMetadataVersionError) for r in results), results
    assert writer.error is not None
    if close_at_once:
        await writer.close()
        assert len(closed) == 1, "close returned before the spare ledger was deleted"
    elif writer._completing is not None:
        await writer._completing  # the failed roll, its cleanup included
    assert created.count == 2 and len(closed) == 1, (created.count, closed)
    # The one segment (left in progress, for the next writer to recover)
    # holds the only ledger: the next one is gone, closed or not.
    assert set(await ns.bk.list_ledgers()) == await segment_ledgers(lm)
    ctx = closed[0]
    assert ctx is not None and ctx.reason is CloseReason.ABNORMAL
    assert ctx.abnormal_message == "the writer failed while rolling its segment"
    assert ctx.expect_delete_after_ms is not None
    await writer.close()
    assert set(await ns.bk.list_ledgers()) == await segment_ledgers(lm)


async def test_records_written_during_rolls_land_in_order_on_the_ledgers_made_meanwhile(
    open_namespace: Any,
) -> None:
    """Records keep coming during rolls: they wait and go to the next
    segment, on the ledger made meanwhile. Every record is there once, in
    order, and every ledger belongs to a segment."""
    ns: Namespace = await open_namespace(**ROLLING)
    lm = await ns.open_log("during")
    writer = await lm.open_writer()
    futures = []
    for i in range(200):
        futures.append(writer.write_nowait(LogRecord(i, payload(i))))
        if i % 20 == 0:
            await asyncio.sleep(0.002)
    dlsns = await asyncio.gather(*futures)
    await writer.close()
    assert writer.segments_written >= 5
    assert dlsns == sorted(dlsns) and len(set(dlsns)) == len(dlsns)
    assert set(await ns.bk.list_ledgers()) == await segment_ledgers(lm)
    reader = await lm.open_reader()
    got: list[int] = []
    while len(got) < 200:
        got += [r.txid for r in await reader.read_bulk(200, timeout=10)]
    assert got == list(range(200))
    await reader.close()


async def test_a_tailing_reader_lists_only_the_segments_ahead_of_it(open_namespace: Any) -> None:
    """At every segment it moves to, a tailing reader lists the stream. It
    reads the znodes of the segments from its own on (and the one before),
    not of every segment the stream keeps: reading all of them cost a
    reader 35-70 ms per roll on a stream of 120 segments, and it fell
    hundreds of milliseconds behind a writer rolling every 150 ms."""
    ns: Namespace = await open_namespace(**ROLLING)
    lm = await ns.open_log("long")
    writer = await lm.open_writer()
    await writer.write_bulk([LogRecord(i, payload(i)) for i in range(300)])  # ~15 segments
    kept = len(await lm.context.metadata.get_segments("long"))
    assert kept >= 12
    reader = await lm.open_reader()
    for _ in range(300):
        assert await reader.read_next(timeout=10) is not None  # caught up, at the tail
    store = lm.context.metadata
    reads: list[str] = []
    real_read = store._read_segment

    async def read_segment(p: Any, znode: str, sem: Any) -> Any:
        reads.append(znode)
        return await real_read(p, znode, sem)

    store._read_segment = read_segment  # type: ignore[method-assign]
    await writer.write_bulk([LogRecord(i, payload(i)) for i in range(300, 400)])  # ~5 rolls
    for i in range(300, 400):
        record = await reader.read_next(timeout=10)
        assert record is not None and record.txid == i
    store._read_segment = real_read  # type: ignore[method-assign]
    rolls = len(await lm.context.metadata.get_segments("long")) - kept
    assert rolls >= 3
    # Each roll: a listing or two of the 2-3 segments around the reader.
    assert len(reads) <= 8 * rolls < kept * rolls, (rolls, len(reads), reads)
    await reader.close()
    await writer.close()


async def test_a_rolling_writer_publishes_the_last_entries_before_closing_the_ledger(
    open_namespace: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The old segment's last entries are acknowledged while it rolls, and
    no later entry of its ledger carries their LAC: the writer sends it
    before closing the ledger, so tailing readers get them without waiting
    for the close (here held back on purpose) and the completion."""
    from dlog.ledger.appender import LedgerAppender

    ns: Namespace = await open_namespace(**ROLLING)
    lm = await ns.open_log("roll-lac")
    writer = await lm.open_writer()
    release = asyncio.Event()
    real_close = LedgerAppender.close

    async def close(self: LedgerAppender, context: Any) -> None:
        await release.wait()
        await real_close(self, context)

    monkeypatch.setattr(LedgerAppender, "close", close)
    reader = await lm.open_reader()
    futures = [writer.write_nowait(LogRecord(i, payload(i))) for i in range(40)]
    done, _ = await asyncio.wait(futures, timeout=3)  # the first segment's: acknowledged
    first = sorted(f.result() for f in done)
    assert first and {d.log_segment_sequence_no for d in first} == {1} and len(first) < 40
    try:
        for dlsn in first:
            record = await reader.read_next(timeout=3)
            assert record is not None and record.dlsn == dlsn
    finally:
        release.set()
    for i in range(len(first), 40):
        record = await reader.read_next(timeout=10)
        assert record is not None and record.txid == i
    await reader.close()
    await writer.close()
