"""Streams end to end: namespace, writer, reader, rolls, truncation,
ownership. Real ZooKeeper and real (in-process) bookies."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
from kazoo.client import KazooClient

from dlog.dlsn import DLSN
from dlog.errors import (
    BKTransmitError,
    EndOfStreamError,
    InvalidStreamNameError,
    LockingError,
    LogEmptyError,
    LogNotFoundError,
    OwnershipAcquireFailedError,
    TransactionIdOutOfOrderError,
    WriteFencedError,
)
from dlog.namespace import Namespace
from dlog.record import LogRecord

#: Representative of the suite: runs with entry log per ledger off and on.
pytestmark = pytest.mark.both_entry_log_modes


@pytest.fixture
def namespace(open_namespace):  # type: ignore[no-untyped-def]
    """Namespaces whose writers give up on a held lock after 1 s."""

    async def open_ns(**overrides: object) -> Namespace:
        return await open_namespace(**{"lockTimeoutSeconds": 1, **overrides})

    return open_ns


def payload(i: int) -> bytes:
    return b"record-%06d-" % i + b"x" * 80


async def test_ordered_exactly_once_across_many_rolls(namespace) -> None:
    ns = await namespace(maxLogSegmentBytes=4096, writerOutputBufferSize=1024)
    lm = await ns.open_log("rolls")
    writer = await lm.open_writer()
    dlsns = []
    for i in range(2000):
        dlsns.append(writer.write_nowait(LogRecord(i, payload(i))))
    dlsns = await asyncio.gather(*dlsns)
    assert dlsns == sorted(dlsns) and len(set(dlsns)) == 2000
    await writer.close()
    segments = await lm.store.get_segments("rolls")
    assert len(segments) >= 6, "expected at least 5 rolls"
    assert all(not s.in_progress for s, _ in segments)
    reader = await lm.open_reader()
    got = []
    while len(got) < 2000:
        got.extend(await reader.read_bulk(500, timeout=10))
    assert [r.txid for r in got] == list(range(2000))
    assert [r.payload for r in got] == [payload(i) for i in range(2000)]
    assert [r.dlsn for r in got] == dlsns
    seq_ids = [r.sequence_id for r in got]
    assert seq_ids == list(range(seq_ids[0], seq_ids[0] + 2000))
    assert await reader.read_next(timeout=0.3) is None
    await reader.close()
    assert await lm.get_first_dlsn() == DLSN(1, 0, 0)
    assert await lm.get_last_dlsn() == dlsns[-1]
    assert await lm.get_last_txid() == 1999
    assert await lm.get_record_count() == 2000


async def test_tailing_reader_sees_records_as_they_are_written(namespace) -> None:
    ns = await namespace()
    lm = await ns.open_log("tail")
    writer = await lm.open_writer()
    await writer.write(LogRecord(0, b"first"))
    reader = await lm.open_reader()
    assert (await reader.read_next(timeout=10)).payload == b"first"
    for i in range(1, 50):
        await writer.write(LogRecord(i, b"r%d" % i))
        record = await reader.read_next(timeout=10)
        assert record is not None and record.payload == b"r%d" % i and record.txid == i
    await writer.close()
    await reader.close()


async def test_a_reader_catching_up_asks_every_bookie_for_the_lac_once_per_segment(
    namespace, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A reader that has read all it knows of a segment asks every bookie
    for the LAC once; afterwards it long-polls, which answers at once when
    the LAC moved and brings the next entry. Asking every bookie again each
    time it ran dry cost a reader catching up 5-12 ms a time."""
    from dlog.ledger.read_handle import ReadHandle

    ns = await namespace(writerOutputBufferSize=0, readAheadMaxRecords=8, readAheadBatchSize=4)
    lm = await ns.open_log("catch-up")
    writer = await lm.open_writer()
    await writer.write(LogRecord(0, payload(0)))
    asked: list[int] = []
    real = ReadHandle.read_last_add_confirmed

    async def counting(self: ReadHandle) -> int:
        asked.append(self.ledger_id)
        return await real(self)

    monkeypatch.setattr(ReadHandle, "read_last_add_confirmed", counting)
    reader = await lm.open_reader()
    writes = [writer.write_nowait(LogRecord(i, payload(i))) for i in range(1, 300)]
    for i in range(300):
        record = await reader.read_next(timeout=10)
        assert record is not None and record.txid == i
        await asyncio.sleep(0.001)  # slower than the writer: behind all the way
    await asyncio.gather(*writes)
    assert len(asked) == len(set(asked)) == 1, asked
    await reader.close()
    await writer.close()


async def test_start_by_txid_and_dlsn(namespace) -> None:
    ns = await namespace(maxLogSegmentBytes=2048, writerOutputBufferSize=1024)
    lm = await ns.open_log("starts")
    writer = await lm.open_writer()
    dlsns = await writer.write_bulk([LogRecord(i * 10, payload(i)) for i in range(200)])
    await writer.close()
    reader = await lm.open_reader(from_txid=555)
    first = await reader.read_next(timeout=10)
    assert first.txid == 560
    await reader.close()
    reader = await lm.open_reader(from_dlsn=dlsns[123])
    first = await reader.read_next(timeout=10)
    assert first.txid == 1230 and first.dlsn == dlsns[123]
    await reader.close()


async def test_two_writers_exactly_one_wins(namespace) -> None:
    ns1 = await namespace()
    ns2 = await namespace()
    w1 = await (await ns1.open_log("owned")).open_writer()
    with pytest.raises(OwnershipAcquireFailedError, match="owned by"):
        await (await ns2.open_log("owned")).open_writer()
    await w1.write(LogRecord(1, b"still mine"))
    await w1.close()
    w2 = await (await ns2.open_log("owned")).open_writer()  # released: now it can
    await w2.write(LogRecord(2, b"mine now"))
    await w2.close()


async def test_a_new_writer_fences_the_old_one(namespace, zk_server) -> None:
    ns1 = await namespace()
    ns2 = await namespace(lockTimeoutSeconds=30)
    lm1 = await ns1.open_log("fence")
    old = await lm1.open_writer()
    acked = await old.write_bulk([LogRecord(i, b"old-%d" % i) for i in range(100)])
    # The old writer's ZooKeeper session expires (e.g. a long GC pause).
    sid, passwd = ns1.zk.client.client_id
    intruder = KazooClient(hosts=zk_server.connect_string, client_id=(sid, passwd))
    intruder.start()
    intruder.stop()
    intruder.close()
    new = await (await ns2.open_log("fence")).open_writer()
    # Whichever it notices first: its session is gone, or its ledger is fenced.
    with pytest.raises((LockingError, WriteFencedError)):
        await old.write(LogRecord(100, b"zombie"))
    with pytest.raises((LockingError, WriteFencedError)):
        await old.write(LogRecord(101, b"zombie again"))
    await new.write_bulk([LogRecord(i, b"new-%d" % i) for i in range(100, 150)])
    await new.close()
    reader = await (await ns2.open_log("fence")).open_reader()
    got = []
    while len(got) < 150:
        batch = await reader.read_bulk(200, timeout=10)
        assert batch, f"stalled after {len(got)} records"
        got.extend(batch)
    assert [r.txid for r in got] == list(range(150))
    assert [r.dlsn for r in got[:100]] == acked
    await reader.close()


async def test_a_writer_that_lost_its_lock_says_so_whatever_failed_first(
    open_namespace,
) -> None:
    """Writes fail for a lesser reason (two of three bookies are gone), then
    the session expires: from then on the writer reports the lost lock,
    which is why it can never write again, not the old bookie failure."""
    from tests.crash import expire_session

    ns = await open_namespace()
    writer = await (await ns.open_log("lesser")).open_writer()
    await writer.write(LogRecord(1, b"fine"))
    for b in open_namespace.bookies[:2]:
        await b.stop()
    with pytest.raises(BKTransmitError, match="not enough bookies"):
        await writer.write(LogRecord(2, b"every write set has a stopped bookie"))
    await expire_session(ns.zk)
    with pytest.raises(LockingError):
        await writer.write(LogRecord(3, b"after the session expired"))
    await writer.close()


async def test_truncated_positions_start_at_the_first_live_record(namespace) -> None:
    ns = await namespace(maxLogSegmentBytes=2048, writerOutputBufferSize=1024)
    lm = await ns.open_log("trunc")
    writer = await lm.open_writer()
    dlsns = await writer.write_bulk([LogRecord(i, payload(i)) for i in range(300)])
    await writer.close()
    cut = dlsns[150]
    assert await lm.truncate(cut)
    assert await lm.get_first_dlsn() == cut
    reader = await lm.open_reader(from_dlsn=DLSN.INITIAL)  # inside truncated data
    first = await reader.read_next(timeout=10)
    assert first.dlsn == cut and first.txid == 150
    await reader.close()
    assert await lm.get_record_count() == 150
    # Retention deletes truncated segments (keeping the newest completed one).
    purged = await lm.purge_expired()
    assert purged and all(seq < cut.log_segment_sequence_no for seq in purged)
    reader = await lm.open_reader()
    assert (await reader.read_next(timeout=10)).dlsn == cut
    await reader.close()


async def test_a_purge_reads_segments_from_the_oldest_up_to_the_first_it_keeps(
    namespace,
) -> None:
    """What retention deletes is a prefix of the stream, so a purge (which a
    writer runs after every roll) reads the oldest segments only, up to the
    first it keeps, not every segment the stream keeps."""
    ns = await namespace(maxLogSegmentBytes=2048, writerOutputBufferSize=1024)
    lm = await ns.open_log("purge-prefix")
    writer = await lm.open_writer()
    dlsns = await writer.write_bulk([LogRecord(i, payload(i)) for i in range(300)])
    await writer.close()
    segments = [s for s, _ in await lm.context.metadata.get_segments("purge-prefix")]
    assert len(segments) >= 10
    store = lm.context.metadata
    reads: list[str] = []
    real_get = store.get_segment

    async def get_segment(name: str, znode: str) -> Any:
        reads.append(znode)
        return await real_get(name, znode)

    store.get_segment = get_segment  # type: ignore[method-assign]
    assert await lm.purge_expired() == []  # nothing expired: one read
    assert reads == [segments[0].znode_name]
    cut = dlsns[150]
    assert await lm.truncate(cut)
    reads.clear()
    purged = await lm.purge_expired()
    assert purged == list(range(1, cut.log_segment_sequence_no))
    assert len(reads) == len(purged) + 1  # the purged ones and the first kept
    store.get_segment = real_get  # type: ignore[method-assign]


async def test_end_of_stream(namespace) -> None:
    ns = await namespace()
    lm = await ns.open_log("eos")
    writer = await lm.open_writer()
    await writer.write_bulk([LogRecord(i, b"%d" % i) for i in range(10)])
    await writer.mark_end_of_stream()
    with pytest.raises(EndOfStreamError):
        await writer.write(LogRecord(11, b"late"))
    await writer.close()
    reader = await lm.open_reader()
    got = [r.txid async for r in reader]
    assert got == list(range(10))
    with pytest.raises(EndOfStreamError):
        await reader.read_next(timeout=1)
    await reader.close()
    again = await lm.open_writer()
    with pytest.raises(EndOfStreamError):
        await again.write(LogRecord(12, b"later"))
    await again.close()


async def test_txids_must_not_decrease_and_names_are_validated(namespace) -> None:
    ns = await namespace()
    lm = await ns.open_log("txids")
    writer = await lm.open_writer()
    await writer.write(LogRecord(5, b"a"))
    await writer.write(LogRecord(5, b"b"))  # equal is fine
    with pytest.raises(TransactionIdOutOfOrderError):
        await writer.write(LogRecord(4, b"c"))
    await writer.close()
    with pytest.raises(InvalidStreamNameError):
        await ns.open_log("../escape")
    with pytest.raises(LogEmptyError):
        await (await ns.open_log("empty")).get_last_dlsn()
    assert await ns.get_logs() == ["empty", "txids"]
    await ns.delete_log("txids")
    assert not await ns.log_exists("txids")
    strict = await namespace(createStreamIfNotExists=False)
    with pytest.raises(LogNotFoundError):
        await strict.open_log("nope")


async def test_close_ends_a_read_waiting_without_a_timeout(namespace) -> None:
    """A read waiting (no timeout) for records that do not come ends with
    ReadCancelledError when the reader is closed, as a Kafka consumer's poll
    ends on wakeup; before, it waited for ever."""
    from dlog.errors import ReadCancelledError

    ns = await namespace()
    lm = await ns.open_log("close-wakes")
    writer = await lm.open_writer()
    await writer.write(LogRecord(1, b"one"))
    reader = await lm.open_reader(from_dlsn=DLSN.INITIAL)
    assert [r.payload for r in await reader.read_bulk(10, timeout=10)] == [b"one"]
    waiting = asyncio.create_task(reader.read_bulk(10))
    await asyncio.sleep(0.3)
    assert not waiting.done()
    await reader.close()
    with pytest.raises(ReadCancelledError):
        await asyncio.wait_for(waiting, 5)
    await writer.close()
    await ns.close()
