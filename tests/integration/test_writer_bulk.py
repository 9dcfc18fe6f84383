"""Bulk writes (one future per bulk, DLSNs computed from the entries), the
reader's entry-at-a-time handoff, and enableImmediateFlush. Real ZooKeeper
and real (in-process) bookies."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from dlog.dlsn import DLSN
from dlog.errors import BKTransmitError, TransactionIdOutOfOrderError
from dlog.reader import LogReader
from dlog.record import LogRecord, LogRecordWithDLSN
from dlog.writer import WrittenDLSNs


def payload(i: int) -> bytes:
    return b"bulk-%06d-" % i + b"y" * 60


async def read_all(reader: LogReader, n: int) -> list[LogRecordWithDLSN]:
    got: list[LogRecordWithDLSN] = []
    while len(got) < n:
        batch = await reader.read_bulk(n - len(got), timeout=10)
        assert batch, f"stalled after {len(got)} records"
        got.extend(batch)
    return got


async def test_bulk_dlsns_are_those_readers_read_across_entries_and_rolls(
    open_namespace: Any,
) -> None:
    ns = await open_namespace(maxLogSegmentBytes=4096, writerOutputBufferSize=1024)
    lm = await ns.open_log("bulk")
    writer = await lm.open_writer()
    # The first bulk waits for the first segment; the rest fill entries as
    # they go, roll segments midway, and mix with single writes.
    first = writer.write_bulk_nowait(LogRecord(i, payload(i)) for i in range(150))
    single = writer.write_nowait(LogRecord(150, payload(150)))
    second = writer.write_bulk_nowait([LogRecord(i, payload(i)) for i in range(151, 400)])
    third = await writer.write_bulk([LogRecord(i, payload(i)) for i in range(400, 410)])
    a, b = await first, await second
    # Written into a live segment, rolling it midway: the rest waits for the next.
    fourth = await asyncio.wait_for(
        writer.write_bulk_nowait([LogRecord(i, payload(i)) for i in range(410, 600)]), 60
    )
    assert len({d.log_segment_sequence_no for d in fourth}) > 1
    assert isinstance(a, WrittenDLSNs) and len(a) == 150 and len(b) == 249
    assert a.entries > 1 and b.entries > 1
    expected = [*a, await single, *b, *third, *fourth]
    assert len({d.log_segment_sequence_no for d in expected}) > 1  # rolled
    assert a == list(a) and a[-1] == list(a)[-1] and a[3:6] == list(a)[3:6]
    assert writer.last_dlsn == expected[-1]
    assert writer.entries_written == len({d[:2] for d in expected})
    seg = writer._segment
    assert seg is not None and not seg.appender._lac_eager  # the default
    await writer.close()
    reader = await lm.open_reader()
    got = await read_all(reader, 600)
    assert [r.txid for r in got] == list(range(600))
    assert [r.payload for r in got] == [payload(i) for i in range(600)]
    assert [r.dlsn for r in got] == expected
    await reader.close()


async def test_bulk_txids_are_checked_before_any_record_is_written(open_namespace: Any) -> None:
    ns = await open_namespace()
    lm = await ns.open_log("order")
    writer = await lm.open_writer()
    await writer.write_bulk([LogRecord(1, b"a"), LogRecord(2, b"b")])
    with pytest.raises(TransactionIdOutOfOrderError):
        writer.write_bulk_nowait([LogRecord(3, b"c"), LogRecord(4, b"d"), LogRecord(0, b"e")])
    assert writer.last_txid == 2
    assert len(await writer.write_bulk_nowait([])) == 0
    await writer.write_bulk([LogRecord(3, b"f")])
    await writer.close()
    reader = await lm.open_reader()
    assert [r.payload for r in await read_all(reader, 3)] == [b"a", b"b", b"f"]
    assert await reader.read_bulk(10, timeout=0.2) == []
    await reader.close()


async def test_control_records_in_a_bulk_take_their_slots_and_readers_skip_them(
    open_namespace: Any,
) -> None:
    ns = await open_namespace()
    lm = await ns.open_log("control")
    writer = await lm.open_writer()
    records = [
        LogRecord(1, b"one"),
        LogRecord.control_record(1),
        LogRecord(2, b"two"),
        LogRecord(3, b"three"),
    ]
    dlsns = await writer.write_bulk_nowait(records)
    assert [d.slot_id for d in dlsns] == [0, 1, 2, 3]
    assert len({d.entry_id for d in dlsns}) == 1  # one entry, a control record inside it
    plain = await writer.write_bulk_nowait([LogRecord(i, b"p%d" % i) for i in range(4, 8)])
    assert plain.entries == 1
    await writer.close()
    reader = await lm.open_reader()
    got = await read_all(reader, 3)
    assert [(r.txid, r.payload) for r in got] == [(1, b"one"), (2, b"two"), (3, b"three")]
    assert [r.dlsn for r in got] == [dlsns[0], dlsns[2], dlsns[3]]
    await reader.close()
    # Started inside that entry: the records before the start are skipped.
    reader = await lm.open_reader(from_dlsn=dlsns[2])
    assert [r.txid for r in await read_all(reader, 2)] == [2, 3]
    await reader.close()
    reader = await lm.open_reader(from_dlsn=plain[2])
    assert [r.txid for r in await read_all(reader, 2)] == [6, 7]
    await reader.close()


async def test_a_failed_write_fails_the_bulk_future(open_namespace: Any) -> None:
    ns = await open_namespace()
    writer = await (await ns.open_log("failing")).open_writer()
    await writer.write_bulk([LogRecord(1, b"fine")])
    for b in open_namespace.bookies[:2]:
        await b.stop()
    future = writer.write_bulk_nowait([LogRecord(i, b"lost") for i in range(2, 50)])
    with pytest.raises(BKTransmitError):
        await asyncio.wait_for(future, 60)
    await writer.close()


async def test_an_idle_pipe_sends_at_once_and_a_busy_one_batches_until_it_drains(
    open_namespace: Any,
) -> None:
    """The flush timer only batches while entries are in flight: a record
    written to an idle writer goes at the end of the loop pass, and records
    buffered behind an entry in flight go, together, as soon as it completes.
    The timer here is a minute, so waiting for it fails the test."""
    ns = await open_namespace(
        writerOutputBufferSize=512 * 1024, periodicFlushFrequencyMilliSeconds=60_000
    )
    lm = await ns.open_log("idle-pipe")
    writer = await lm.open_writer()
    first = await asyncio.wait_for(writer.write(LogRecord(1, b"alone")), 20)
    txid, behind_in_flight = 2, 0
    for _ in range(20):
        head = writer.write_nowait(LogRecord(txid, b"head"))
        await asyncio.sleep(0)  # the head's entry is sent at the end of that pass
        seg = writer._segment
        assert seg is not None
        if seg.handle.pending == 0:  # completed already: try again
            await asyncio.wait_for(head, 20)
            txid += 1
            continue
        # No loop pass between the check and these writes: the head is in
        # flight, so they wait behind it rather than go at once.
        rest = [writer.write_nowait(LogRecord(txid + i, b"rest")) for i in range(1, 4)]
        assert seg.buffer.num_records == 3
        dlsns = await asyncio.wait_for(asyncio.gather(head, *rest), 20)
        assert dlsns[1].entry_id == dlsns[2].entry_id == dlsns[3].entry_id == dlsns[0].entry_id + 1
        behind_in_flight += 1
        txid += 4
        if behind_in_flight == 3:
            break
    assert behind_in_flight == 3, "the head entry never stayed in flight for a loop pass"
    assert first.entry_id == 0
    await writer.close()


async def test_immediate_flush_batches_records_and_readers_see_each_entry(
    open_namespace: Any,
) -> None:
    """enableImmediateFlush publishes the LAC; it does not send records one
    by one: records written together still share an entry."""
    ns = await open_namespace(enableImmediateFlush=True, periodicFlushFrequencyMilliSeconds=50)
    lm = await ns.open_log("immediate")
    writer = await lm.open_writer()
    reader = await lm.open_reader()
    futures = [writer.write_nowait(LogRecord(i, payload(i))) for i in range(20)]
    dlsns = await asyncio.gather(*futures)
    assert len({d.entry_id for d in dlsns}) == 1
    # Its appender publishes each entry's LAC as soon as the entry completes.
    seg = writer._segment
    assert seg is not None and seg.appender._lac_eager
    # The tailing reader sees that (last) entry without another one after it.
    got = await read_all(reader, 20)
    assert [r.dlsn for r in got] == dlsns
    await reader.close()
    await writer.close()


async def test_a_tailing_reader_long_polls_without_asking_for_the_lac_each_time(
    open_namespace: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    from dlog.ledger.read_handle import ReadHandle

    asked: list[int] = []
    original = ReadHandle.read_last_add_confirmed

    async def counted(self: ReadHandle) -> int:
        asked.append(self.ledger_id)
        return await original(self)

    monkeypatch.setattr(ReadHandle, "read_last_add_confirmed", counted)
    ns = await open_namespace()
    lm = await ns.open_log("tail")
    writer = await lm.open_writer()
    await writer.write(LogRecord(0, b"first"))
    reader = await lm.open_reader()
    assert [r.txid for r in await read_all(reader, 1)] == [0]
    for i in range(1, 11):  # one entry at a time, each read before the next
        await writer.write(LogRecord(i, b"next"))
        assert [r.txid for r in await read_all(reader, 1)] == [i]
    assert len(asked) <= 2  # when the segment was opened, not once per entry
    await reader.close()
    await writer.close()


async def test_a_bulk_waiting_for_its_segment_keeps_the_records_it_was_given(
    open_namespace: Any,
) -> None:
    ns = await open_namespace()
    lm = await ns.open_log("kept")
    writer = await lm.open_writer()
    records = [LogRecord(i, b"original-%d" % i) for i in range(5)]
    future = writer.write_bulk_nowait(records)  # no segment yet: it waits
    records[0] = LogRecord(0, b"changed")
    del records[1:]
    assert len(await asyncio.wait_for(future, 60)) == 5
    await writer.close()
    reader = await lm.open_reader()
    got = await read_all(reader, 5)
    assert [r.payload for r in got] == [b"original-%d" % i for i in range(5)]
    await reader.close()


async def test_a_bulk_outcome_is_every_dlsn_or_the_error_and_never_raises(
    open_namespace: Any,
) -> None:
    """``write_bulk_outcome_nowait`` (the write proxy's): the DLSNs a plain
    bulk gets when all are written; when the writer fails, a result naming
    the error instead of a failed future. A bulk with control records goes
    one by one and keeps the same contract."""
    ns = await open_namespace()
    lm = await ns.open_log("outcome")
    writer = await lm.open_writer()
    outcome = await writer.write_bulk_outcome_nowait([LogRecord(i, payload(i)) for i in range(5)])
    assert outcome.error is None
    plain = await writer.write_bulk([LogRecord(5, payload(5))])
    assert list(outcome.written) == [DLSN(1, 0, i) for i in range(5)]
    assert plain[0] > outcome.written[-1]
    mixed = await writer.write_bulk_outcome_nowait(
        [LogRecord(6, payload(6)), LogRecord.control_record(6), LogRecord(7, payload(7))]
    )
    assert mixed.error is None and len(mixed.written) == 3
    assert list(mixed.written) == sorted(mixed.written) and mixed.written[0] > plain[0]
    for b in open_namespace.bookies[:2]:
        await b.stop()
    failed = await asyncio.wait_for(
        writer.write_bulk_outcome_nowait([LogRecord(i, b"lost") for i in range(8, 50)]), 60
    )
    assert isinstance(failed.error, BKTransmitError)
    assert len(failed.written) == 0  # no entry of it was acknowledged
    with pytest.raises(BKTransmitError):  # the writer has failed: nothing is taken
        writer.write_bulk_outcome_nowait([LogRecord(50, b"refused")])
    await writer.close()
