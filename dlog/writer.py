"""The log writer: the single, fenced owner of a stream.

Opening a writer takes the stream's lock, recovers (fences and completes)
any segment a previous writer left in progress, and purges segments past
retention. Records are batched into entries (record sets): an entry is
sent when it reaches ``writerOutputBufferSize`` (0: every record at once),
at the end of the loop pass when none of the writer's entries is in flight
(so batching never adds latency to an idle pipe), else after
``periodicFlushFrequencyMilliSeconds`` or when the entries in flight have
all completed, whichever comes first. A record's future resolves
with its DLSN once its entry is durable on an ack quorum; a bulk write
(:meth:`LogWriter.write_bulk_nowait`) has one future for all its records,
resolved from the entries that hold them, whose DLSNs are computed on
demand (:class:`WrittenDLSNs`); :meth:`LogWriter.write_bulk_outcome_nowait`
resolves, even on failure, to the acknowledged prefix and the error.
Tailing readers see an entry once its LAC is published: on the next entry,
or explicitly once the writer is idle; with ``enableImmediateFlush`` as soon
as each entry completes.

Segments roll at ``maxLogSegmentBytes`` or ``logSegmentRollingMinutes``:
the old segment's remaining entries are flushed, its ledger is closed and
its metadata completed while the next segment's ledger is created; records
written meanwhile wait for both, then for the next segment's znode, and go
into it in order. A ledger made for a segment that does not follow (the
writer failed, or nothing was written during the roll) is deleted at once,
so every ledger the writer keeps belongs to a segment.

A writer that loses its lock (ZooKeeper session expiry) or whose ledger is
fenced by a newer writer fails its pending and later writes with
LockingError / WriteFencedError: there is never a second active writer.
Once it knows either, it reports that rather than any other failure (such
as bookies that timed out while the process stalled): it is why the writer
can never write again.
"""

from __future__ import annotations

import asyncio
import dataclasses
import itertools
import logging
import time
from bisect import bisect_right
from collections import deque
from collections.abc import Iterable, Iterator, Sequence
from typing import Any, NamedTuple, overload

from dlog.dlsn import DLSN, serialize_slots
from dlog.errors import (
    AlreadyClosedError,
    BKTransmitError,
    DLogError,
    EndOfStreamError,
    LockingError,
    NoSuchLedgerError,
    TransactionIdOutOfOrderError,
    WriteFencedError,
)
from dlog.ledger.appender import (
    LedgerAppender,
    RollPolicy,
    close_context,
    fail_futures,
)
from dlog.ledger.metadata import LedgerCloseContext, LedgerCreateContext, LedgerOwner
from dlog.ledger.write_handle import WriteHandle
from dlog.lock import DistributedLock
from dlog.periodic import PeriodicTask
from dlog.record import MAX_TXID, LogRecord, RecordSetWriter
from dlog.retention import purge_expired
from dlog.retention import truncate as truncate_stream
from dlog.segment import LogSegmentMetadata, start_sequence_id_after
from dlog.segment_reader import recover_end
from dlog.stream import StreamContext
from dlog.tasks import BackgroundTasks

log = logging.getLogger(__name__)

_tuple_new = tuple.__new__

#: Where records of a bulk write went: (segment sequence number, entry id,
#: first slot, records), one per entry holding some of them.
_Part = tuple[int, int, int, int]


class WrittenDLSNs(Sequence[DLSN]):
    """The DLSNs of a bulk write's records, in order. Records of one entry
    take consecutive slots, so each DLSN is computed when asked for from
    the entries that hold the records; none is built up front."""

    __slots__ = ("_ends", "_parts")

    def __init__(self, parts: Sequence[_Part]) -> None:
        self._parts = list(parts)
        self._ends = list(itertools.accumulate(p[3] for p in self._parts))

    def __len__(self) -> int:
        return self._ends[-1] if self._ends else 0

    @overload
    def __getitem__(self, i: int) -> DLSN: ...
    @overload
    def __getitem__(self, i: slice) -> list[DLSN]: ...
    def __getitem__(self, i: int | slice) -> DLSN | list[DLSN]:
        n = len(self)
        if isinstance(i, slice):
            return [self[j] for j in range(*i.indices(n))]
        if i < 0:
            i += n
        if not 0 <= i < n:
            raise IndexError("bulk write result index out of range")
        k = bisect_right(self._ends, i)
        seqno, entry_id, first, count = self._parts[k]
        return _tuple_new(DLSN, (seqno, entry_id, first + i - (self._ends[k] - count)))

    def __iter__(self) -> Iterator[DLSN]:
        new = _tuple_new
        for seqno, entry_id, first, count in self._parts:
            for slot in range(first, first + count):
                yield new(DLSN, (seqno, entry_id, slot))

    @property
    def entries(self) -> int:
        """How many entries hold the records."""
        return len(self._parts)

    def serialized(self) -> list[str]:
        """Each DLSN's :meth:`DLSN.serialize`, in order, built entry by entry."""
        out: list[str] = []
        for seqno, entry_id, first, count in self._parts:
            out += serialize_slots(seqno, entry_id, range(first, first + count))
        return out

    def __eq__(self, other: object) -> bool:
        if isinstance(other, WrittenDLSNs):
            return list(self) == list(other)
        if isinstance(other, list):
            return list(self) == other
        return NotImplemented

    __hash__ = None  # type: ignore[assignment]

    def __repr__(self) -> str:
        return f"WrittenDLSNs({list(self)!r})"


class BulkOutcome(NamedTuple):
    """What became of a bulk write (:meth:`LogWriter.write_bulk_outcome_nowait`).

    ``written`` are the DLSNs of the records acknowledged durable: a prefix
    of the bulk, since entries complete in order and the first failure
    fails the writer. ``error`` is why the rest were not acknowledged (as
    for any failed write, some may yet be durable); None when all were."""

    written: WrittenDLSNs
    error: DLogError | None


class _Bulk:
    """One bulk write waiting for its entries. Its future gets the
    WrittenDLSNs or the error, or, for an ``outcome`` bulk, a BulkOutcome
    either way."""

    __slots__ = ("future", "outcome", "parts", "remaining")

    def __init__(self, future: asyncio.Future[Any], records: int, outcome: bool) -> None:
        self.future = future
        self.outcome = outcome
        self.parts: list[_Part] = []
        self.remaining = records

    def written(self) -> WrittenDLSNs:
        self.parts.sort()  # entries complete in order; this only makes sure
        return WrittenDLSNs(self.parts)

    def complete(self) -> None:
        if not self.future.done():
            written = self.written()
            self.future.set_result(BulkOutcome(written, None) if self.outcome else written)

    def fail(self, error: DLogError) -> None:
        if self.future.done():
            return
        if self.outcome:
            self.future.set_result(BulkOutcome(self.written(), error.clone()))
        else:
            fail_futures((self.future,), error)


def _fail_bulks(bulks: Iterable[tuple[_Bulk, int, int]], error: DLogError) -> None:
    for bulk, _, _ in bulks:
        bulk.fail(error)


@dataclasses.dataclass(eq=False)
class _Segment:
    meta: LogSegmentMetadata
    version: int
    appender: LedgerAppender
    buffer: RecordSetWriter
    futures: list[tuple[asyncio.Future[DLSN], int]] = dataclasses.field(default_factory=list)
    bulks: list[tuple[_Bulk, int, int]] = dataclasses.field(default_factory=list)
    last_position: int = 0
    last_txid: int | None = None
    last_slot: int = -1
    timer: asyncio.Handle | None = None  # the pending flush (a timer, or this loop pass)
    rolling: bool = False

    @property
    def handle(self) -> WriteHandle:
        return self.appender.handle


class LogWriter:
    """Write records to a stream. Use ``await stream.open_writer()`` on a LogManager."""

    def __init__(
        self, ctx: StreamContext, *, owner: str | None = None, lock_timeout: float | None = None
    ) -> None:
        self.ctx = ctx
        self.name = ctx.name
        conf = ctx.conf
        self.conf = conf
        self._store = ctx.metadata
        self._bk = ctx.bk
        self._lock = DistributedLock(ctx.zk, ctx.paths.lock, owner=owner)
        self._lock_timeout = (
            conf.lock_timeout_seconds if lock_timeout is None else max(0.0, lock_timeout)
        )
        self._buffer_size = conf.writer_output_buffer_size
        self._flush_s = conf.periodic_flush_frequency_milli_seconds / 1000.0
        self._lac_eager = conf.enable_immediate_flush
        self._max_segment_bytes = conf.max_log_segment_bytes
        self._max_segment_age = conf.log_segment_rolling_minutes * 60.0
        self._roll_policy = RollPolicy(
            max_bytes=self._max_segment_bytes, max_age=self._max_segment_age
        )
        self._compression = conf.compression_type
        self._segment: _Segment | None = None
        # A deque: records written before the first segment exists (or
        # during a roll) can number hundreds of thousands; list.pop(0) made
        # draining them quadratic.
        # A bulk write waits there as one item (its records not yet buffered).
        self._queued: deque[tuple[LogRecord, asyncio.Future[DLSN]] | tuple[list[LogRecord], _Bulk]]
        self._queued = deque()
        self._starting: asyncio.Task[None] | None = None
        self._completing: asyncio.Task[None] | None = None
        # The next segment's ledger, created during a roll (see _roll).
        self._next_ledger: asyncio.Task[tuple[LedgerAppender, list[_Segment]]] | None = None
        self._error: DLogError | None = None
        self._closed = False
        self._eos = False
        self._last_txid = -(1 << 63)
        self._last_dlsn = DLSN.INVALID
        self._prev_ledger: int | None = None
        self._next_seqno = conf.first_log_segment_sequence_number
        self._next_start_sequence_id = 0
        self._tasks = BackgroundTasks()
        self._purger = PeriodicTask(
            max(1.0, conf.retention_check_interval_minutes * 60.0),
            self._purge,
            f"retention purge of {self.name}",
            run_first=True,
        )
        # Set by _open. Cached: asyncio.get_running_loop() costs a getpid()
        # system call on Python 3.11, too much to pay once per record.
        self._loop: asyncio.AbstractEventLoop = None  # type: ignore[assignment]
        self.segments_written = 0
        #: Entries sent (each a batch of records), over every segment.
        self.entries_written = 0

    # ------------------------------------------------------------------
    # opening
    # ------------------------------------------------------------------
    async def _open(self) -> LogWriter:
        self._loop = asyncio.get_running_loop()
        await self._lock.acquire(self._lock_timeout)
        self._lock.on_lost(
            lambda: self._set_error(LockingError(f"lost ownership of stream {self.name!r}"))
        )
        try:
            segments = await self._store.get_segments(self.name)
            for meta, version in segments:
                if meta.in_progress:
                    await self._recover_segment(meta, version)
            segments = await self._store.get_segments(self.name)
            max_txid, _ = await self._store.get_max_txid(self.name)
            self._last_txid = max(self._last_txid, max_txid)
            if segments:
                last, _ = segments[-1]
                self._next_seqno = last.log_segment_sequence_no + 1
                self._next_start_sequence_id = start_sequence_id_after(last)
                self._prev_ledger = last.ledger_id
                if last.last_txid is not None and last.last_txid != MAX_TXID:
                    self._last_txid = max(self._last_txid, last.last_txid)
                if last.last_txid == MAX_TXID:
                    self._eos = True
            max_seqno, _ = await self._store.get_max_seqno(self.name)
            self._next_seqno = max(self._next_seqno, max_seqno + 1)
        except BaseException:
            await self._lock.release()
            raise
        self._purger.start()
        return self

    async def _recover_segment(self, meta: LogSegmentMetadata, version: int) -> None:
        """Fence the previous writer's segment and complete its metadata at
        the last entry that may have been acknowledged."""
        try:
            end = await recover_end(self._bk, meta, self.ctx.password)
        except NoSuchLedgerError:
            log.warning(
                "stream %s: segment %d has no ledger %d; completing it empty",
                self.name,
                meta.log_segment_sequence_no,
                meta.ledger_id,
            )
            completed = meta.complete(
                last_txid=meta.first_txid,
                last_entry_id=-1,
                last_slot_id=-1,
                record_count=0,
                completion_time=_now_ms(),
            )
            await self._store.complete_segment(self.name, meta, version, completed)
            return
        completed = meta.complete(
            last_txid=end.last_txid,
            last_entry_id=end.last_entry_id,
            last_slot_id=end.last_slot_id,
            record_count=end.record_count,
            completion_time=_now_ms(),
        )
        await self._store.complete_segment(self.name, meta, version, completed)
        log.info(
            "stream %s: recovered segment %d (ledger %d) at entry %d, %d records",
            self.name,
            meta.log_segment_sequence_no,
            meta.ledger_id,
            end.last_entry_id,
            end.record_count,
        )

    # ------------------------------------------------------------------
    # properties
    # ------------------------------------------------------------------
    @property
    def last_txid(self) -> int:
        return self._last_txid

    @property
    def last_dlsn(self) -> DLSN:
        """DLSN of the last record known durable."""
        return self._last_dlsn

    @property
    def is_closed(self) -> bool:
        return self._closed

    @property
    def error(self) -> DLogError | None:
        """Why this writer failed, or None. A failed writer takes no more
        writes: whoever holds it closes it and opens a new one."""
        return self._error

    # ------------------------------------------------------------------
    # writing
    # ------------------------------------------------------------------
    def _check(self) -> None:
        if self._error is not None:
            raise self._error.clone()
        if self._eos:
            raise EndOfStreamError(f"stream {self.name!r} has ended (end of stream was marked)")
        if self._closed:
            raise AlreadyClosedError(f"writer of stream {self.name!r} is closed")

    def write_nowait(self, record: LogRecord) -> asyncio.Future[DLSN]:
        """Queue ``record``; the future resolves to its DLSN once durable."""
        self._check()
        if record.txid < self._last_txid:
            raise TransactionIdOutOfOrderError(self._last_txid, record.txid)
        self._last_txid = record.txid
        fut: asyncio.Future[DLSN] = self._loop.create_future()
        seg = self._segment
        if seg is None or seg.rolling:
            self._queued.append((record, fut))
            self._ensure_segment()
        else:
            self._buffer(seg, record, fut)
        return fut

    async def write(self, record: LogRecord) -> DLSN:
        """Write one record; returns its DLSN once it is durable."""
        return await self.write_nowait(record)

    async def write_bulk(self, records: Iterable[LogRecord]) -> list[DLSN]:
        """Write records in order; returns their DLSNs once all are durable."""
        return list(await self.write_bulk_nowait(records))

    def write_bulk_nowait(self, records: Iterable[LogRecord]) -> asyncio.Future[WrittenDLSNs]:
        """Queue ``records`` in order; one future resolves to their DLSNs
        once every entry holding them is durable, or fails with the first
        error (the writer fails for good then: see :meth:`write_nowait`).

        Txids are checked for all the records before any is queued: one out
        of order raises TransactionIdOutOfOrderError and writes none. The
        records are batched as :meth:`write_nowait` would batch them, and
        fill entries as written; the cost per record is that of encoding it."""
        return self._write_bulk(records, outcome=False)

    def write_bulk_outcome_nowait(
        self, records: Iterable[LogRecord]
    ) -> asyncio.Future[BulkOutcome]:
        """:meth:`write_bulk_nowait` for a caller that must say what became
        of each record (the write proxy answers a bulk request record by
        record, as DistributedLog's does): the future never fails; it
        resolves to a :class:`BulkOutcome`, the DLSNs of the records that
        were made durable and the error that stopped the others. Errors
        before any record is taken (a failed writer, txids out of order)
        are raised as by :meth:`write_bulk_nowait`."""
        return self._write_bulk(records, outcome=True)

    def _write_bulk(self, records: Iterable[LogRecord], *, outcome: bool) -> asyncio.Future[Any]:
        self._check()
        batch = records if type(records) is list else list(records)
        last = self._last_txid
        plain = True
        for record in batch:
            txid = record.txid
            if txid < last:
                raise TransactionIdOutOfOrderError(last, txid)
            last = txid
            if record.flags:
                plain = False
        future: asyncio.Future[Any] = self._loop.create_future()
        bulk = _Bulk(future, len(batch), outcome)
        if not plain:
            # Control records, record sets (several slots each): one by one.
            self._gather(bulk, [self.write_nowait(r) for r in batch])
            return future
        self._last_txid = last
        if not batch:
            bulk.complete()
            return future
        seg = self._segment
        if seg is None or seg.rolling:
            # A copy: the caller's list may change before a segment takes it.
            self._queued.append((batch if batch is not records else list(batch), bulk))
            self._ensure_segment()
        else:
            done = self._buffer_bulk(seg, batch, 0, bulk)
            if done < len(batch):  # the segment started rolling
                self._queued.append((batch[done:], bulk))
                self._ensure_segment()
        return future

    def _gather(self, bulk: _Bulk, futures: list[asyncio.Future[DLSN]]) -> None:
        """Complete ``bulk`` from its records' own futures, which complete
        in order: its parts are the records written before the first error."""

        def done(f: asyncio.Future[list[DLSN | BaseException]]) -> None:
            for result in f.result():
                if isinstance(result, DLogError):
                    bulk.fail(result)
                    return
                if isinstance(result, BaseException):  # not the writer's: as gather would
                    if not bulk.future.done():
                        bulk.future.set_exception(result)
                    return
                bulk.parts.append((*result, 1))
            bulk.complete()

        asyncio.gather(*futures, return_exceptions=True).add_done_callback(done)

    def _buffer(self, seg: _Segment, record: LogRecord, fut: asyncio.Future[DLSN]) -> None:
        if seg.buffer.num_records and not seg.buffer.fits(record):
            self._transmit(seg)
        slot = seg.buffer.append(record)
        seg.futures.append((fut, slot))
        if seg.buffer.num_bytes >= self._buffer_size:
            self._transmit(seg)
        elif seg.timer is None:
            self._arm_flush(seg)

    def _buffer_bulk(self, seg: _Segment, batch: list[LogRecord], start: int, bulk: _Bulk) -> int:
        """Buffer ``batch[start:]`` (plain records) into ``seg``, sending
        entries as they fill; returns the index of the first record not
        buffered: ``len(batch)``, or less if the segment started rolling."""
        n = len(batch)
        i = start
        threshold = self._buffer_size
        while i < n:
            buffer = seg.buffer
            first = buffer.num_records
            j = buffer.append_many(batch, i, threshold)
            seg.bulks.append((bulk, first, j - i))
            i = j
            if i < n or buffer.num_bytes >= threshold:
                self._transmit(seg)
                if seg.rolling:
                    return i
            elif seg.timer is None:
                self._arm_flush(seg)
        return i

    def _arm_flush(self, seg: _Segment) -> None:
        """Schedule sending the partly filled entry. While none of the
        segment's entries is in flight, waiting would only add latency
        (batching pays while the pipe is busy): it goes at the end of this
        loop pass, with whatever else this pass writes. Otherwise after
        ``periodicFlushFrequencyMilliSeconds``, or sooner, when the last
        entry in flight completes (:meth:`_transmitted`)."""
        if seg.handle.pending == 0:
            seg.timer = self._loop.call_soon(self._transmit, seg)
        elif self._flush_s > 0:
            seg.timer = self._loop.call_later(self._flush_s, self._transmit, seg)

    def _transmit(self, seg: _Segment) -> None:
        if seg.timer is not None:
            seg.timer.cancel()
            seg.timer = None
        buffer = seg.buffer
        if not buffer.num_records:
            return
        data = buffer.build()
        futures, seg.futures = seg.futures, []
        bulks, seg.bulks = seg.bulks, []
        if buffer.max_txid is not None:
            seg.last_txid = (
                buffer.max_txid if seg.last_txid is None else max(seg.last_txid, buffer.max_txid)
            )
        seg.last_slot = buffer.num_records - 1
        seg.last_position = buffer.last_position
        seg.buffer = RecordSetWriter(compression=self._compression, last_position=seg.last_position)
        seqno = seg.meta.log_segment_sequence_no
        last_slot = seg.last_slot
        try:
            seg.appender.append(
                data, lambda f: self._transmitted(seg, seqno, last_slot, futures, bulks, f)
            )
        except DLogError as e:
            error = self._write_failed(e)
            fail_futures((fut for fut, _ in futures), error)
            _fail_bulks(bulks, error)
            return
        self.entries_written += 1
        if not seg.rolling:
            reason = seg.appender.roll_reason()
            if reason is not None:
                self._roll(seg, reason)

    def _transmitted(
        self,
        seg: _Segment,
        seqno: int,
        last_slot: int,
        futures: list[tuple[asyncio.Future[DLSN], int]],
        bulks: list[tuple[_Bulk, int, int]],
        entry_fut: asyncio.Future[int],
    ) -> None:
        exc = entry_fut.exception()
        if exc is not None:
            error = self._write_failed(seg.appender.map_error(exc))
            fail_futures((fut for fut, _ in futures), error)
            _fail_bulks(bulks, error)
            return
        entry_id = entry_fut.result()
        # Once per record: build the DLSN tuple directly, skipping the
        # constructor's range checks (all three are known-good ints).
        new = _tuple_new
        for fut, slot in futures:
            if not fut.done():
                fut.set_result(new(DLSN, (seqno, entry_id, slot)))
        for bulk, first, count in bulks:
            bulk.parts.append((seqno, entry_id, first, count))
            bulk.remaining -= count
            if bulk.remaining == 0:
                bulk.complete()
        last = new(DLSN, (seqno, entry_id, last_slot))
        if last > self._last_dlsn:
            self._last_dlsn = last
        if seg.buffer.num_records and seg.handle.pending == 0 and not seg.rolling:
            # The pipe is idle: what waited for the flush timer goes now, after
            # the writers just woken have added theirs (their wake-ups are
            # queued before this), and it carries the LAC of this entry, so
            # the appender sends no explicit one.
            if seg.timer is not None:
                seg.timer.cancel()
            seg.timer = self._loop.call_soon(self._transmit, seg)

    def _fenced(self) -> WriteFencedError:
        return WriteFencedError(f"stream {self.name!r}: this writer was fenced by a newer writer")

    def _write_failed(self, error: DLogError) -> DLogError:
        """Record that a write failed with ``error`` (as the appender maps
        it); returns the error to report for it. What the writer knows about
        its ownership comes first: once its lock is lost or its ledger
        fenced, that is why nothing more can be written, whatever else the
        bookies or ZooKeeper said."""
        self._set_error(error)
        known = self._error
        if known is not None and _is_ownership_error(known) and not _is_ownership_error(error):
            return known
        return error

    def _set_error(self, error: DLogError) -> None:
        """Fail the writer for good. The first error sticks, except that
        losing the lock or being fenced replaces any other: it is the cause
        later writes report."""
        if self._error is not None:
            if _is_ownership_error(self._error) or not _is_ownership_error(error):
                return
            log.error("stream %s: writer failed: %s (after: %s)", self.name, error, self._error)
            self._error = error
            return
        self._error = error
        log.error("stream %s: writer failed: %s", self.name, error)
        queued, self._queued = self._queued, deque()
        for _, waiter in queued:
            if isinstance(waiter, _Bulk):
                waiter.fail(error)
            else:
                fail_futures((waiter,), error)
        seg = self._segment
        if seg is not None:
            if seg.timer is not None:
                seg.timer.cancel()
                seg.timer = None
            pending, seg.futures = seg.futures, []
            fail_futures((fut for fut, _ in pending), error)
            bulks, seg.bulks = seg.bulks, []
            _fail_bulks(bulks, error)

    # ------------------------------------------------------------------
    # segments
    # ------------------------------------------------------------------
    def _ensure_segment(self) -> None:
        if self._segment is not None or self._starting is not None or self._completing is not None:
            return
        if self._error is not None or not self._queued:
            return
        self._starting = self._tasks.spawn(self._start_segment())

    async def _start_segment(self) -> None:
        try:
            item = self._queued[0][0]
            seg = await self._create_segment(item[0].txid if isinstance(item, list) else item.txid)
        except DLogError as e:
            self._set_error(e)
            return
        except Exception as e:
            self._set_error(
                BKTransmitError(f"stream {self.name!r}: could not start a segment: {e!r}")
            )
            return
        finally:
            self._starting = None
        if self._error is not None:
            return
        self._segment = seg
        self._drain_queue()

    def _drain_queue(self) -> None:
        """Move queued records into the current segment, in order, stopping
        (and keeping the rest queued) if the segment starts rolling."""
        while self._queued:
            seg = self._segment
            if seg is None or seg.rolling or self._error is not None:
                self._ensure_segment()
                return
            item, waiter = self._queued.popleft()
            if isinstance(waiter, _Bulk):
                assert isinstance(item, list)
                if not waiter.future.done():
                    done = self._buffer_bulk(seg, item, 0, waiter)
                    if done < len(item):  # the segment started rolling
                        self._queued.appendleft((item[done:], waiter))
            elif not waiter.done():
                assert isinstance(item, LogRecord)
                self._buffer(seg, item, waiter)

    async def _create_segment(self, first_txid: int) -> _Segment:
        seqno = self._next_seqno
        task, self._next_ledger = self._next_ledger, None
        appender, owner = await (task if task is not None else self._create_ledger())
        meta = LogSegmentMetadata(
            ledger_id=appender.ledger_id,
            first_txid=first_txid,
            log_segment_sequence_no=seqno,
            start_sequence_id=self._next_start_sequence_id,
        )
        try:
            version = await self._store.create_segment(self.name, meta)
        except BaseException:
            await appender.discard(self._bk, "segment metadata could not be created")
            raise
        self._next_seqno = seqno + 1
        self._prev_ledger = appender.ledger_id
        self.segments_written += 1
        log.info("stream %s: started segment %d on ledger %d", self.name, seqno, appender.ledger_id)
        seg = _Segment(
            meta=meta,
            version=version,
            appender=appender,
            buffer=RecordSetWriter(compression=self._compression),
        )
        owner.append(seg)
        return seg

    async def _create_ledger(self) -> tuple[LedgerAppender, list[_Segment]]:
        """A ledger for the next segment, and the (empty) list its segment
        joins once created."""
        ctx = LedgerCreateContext(
            created_by=LedgerOwner(system="dlog", service="log-writer", instance=self._lock.owner),
            part_of_data_set=self.ctx.data_set,
            expected_max_open_duration_ms=int(self._max_segment_age * 1000),
            expected_max_length=self._max_segment_bytes,
            follows_ledger=self._prev_ledger,
        )
        owner: list[_Segment] = []
        appender = await LedgerAppender.create(
            self._bk,
            self.ctx.ledger_spec(),
            ctx,
            name=f"stream {self.name!r}",
            tasks=self._tasks,
            fenced=self._fenced,
            passthrough=(WriteFencedError, LockingError),
            policy=self._roll_policy,
            lac_eager=self._lac_eager,
            # Idle: publish the LAC so tailing readers see the last entry,
            # unless the segment is rolling (closing it seals the LAC).
            lac_wanted=lambda: bool(owner) and not owner[0].rolling,
        )
        return appender, owner

    async def _discard_next_ledger(self, why: str) -> None:
        """Delete the ledger made for a next segment that will not come."""
        task, self._next_ledger = self._next_ledger, None
        if task is None:
            return
        try:
            appender, _ = await task
        except Exception:
            return  # never created: nothing to delete
        # Due for deletion now: if the delete fails, BP-44's orphan audit
        # finds the ledger once the grace has passed.
        await appender.discard(self._bk, why, expect_delete_after=_now_ms())

    def _roll(self, seg: _Segment, reason: str) -> None:
        seg.rolling = True
        self._segment = None
        # The next segment's ledger is created while this one completes, so
        # records written meanwhile wait for the slower of the two, not for
        # both in turn (a ledger takes two ZooKeeper writes, completing
        # three to four). Its segment znode needs the completed one first.
        if self._next_ledger is None:
            self._next_ledger = self._tasks.spawn(self._create_ledger())
        self._completing = self._tasks.spawn(self._roll_segment(seg, reason))

    async def _roll_segment(self, seg: _Segment, reason: str) -> None:
        try:
            try:
                close = close_context(reason, expect_delete_after=self._expect_delete_after())
                await self._complete(seg, close)
            except DLogError as e:
                self._set_error(e)
            except Exception as e:
                self._set_error(
                    BKTransmitError(f"stream {self.name!r}: rolling segment failed: {e!r}")
                )
            if not self._queued:
                # No segment follows now: nothing was written during the
                # roll, or the writer failed (and its queue with it). No
                # ledger waits for one: a crash would leave it in none.
                await self._discard_next_ledger(
                    "the writer failed while rolling its segment"
                    if self._error is not None
                    else "nothing was written after the roll"
                )
        finally:
            self._completing = None
        self._ensure_segment()
        self._tasks.spawn(self._purge())

    def _expect_delete_after(self) -> int:
        return _now_ms() + int(self.conf.log_segment_retention_hours * 3600 * 1000)

    async def _complete(self, seg: _Segment, close: LedgerCloseContext) -> None:
        """Flush, close the ledger and complete the segment's metadata."""
        self._transmit(seg)
        await seg.handle.wait_pending(timeout=self.conf.log_flush_timeout_seconds)
        if self._error is not None:
            raise self._error.clone()
        # Tailing readers get the last entries now, not once the segment is
        # completed (the close and the completion take several ZooKeeper
        # writes). Sent, not awaited: the close need not wait for it.
        seg.handle.send_lac()
        await seg.appender.close(close)
        completed = seg.meta.complete(
            last_txid=seg.last_txid if seg.last_txid is not None else seg.meta.first_txid,
            last_entry_id=seg.handle.last_add_confirmed,
            last_slot_id=seg.last_slot,
            record_count=seg.last_position,
            completion_time=_now_ms(),
        )
        await self._store.complete_segment(self.name, seg.meta, seg.version, completed)
        self._next_start_sequence_id = start_sequence_id_after(completed)
        log.info(
            "stream %s: completed segment %d (%d records, %d bytes)",
            self.name,
            completed.log_segment_sequence_no,
            completed.record_count,
            seg.appender.bytes,
        )

    # ------------------------------------------------------------------
    # flush, end of stream, close
    # ------------------------------------------------------------------
    async def flush(self) -> DLSN:
        """Send whatever is buffered and wait until everything written so far
        is durable and visible to tailing readers (its LAC is published);
        returns the last DLSN."""
        while self._starting is not None or self._completing is not None:
            await asyncio.gather(*(t for t in (self._starting, self._completing) if t is not None))
        seg = self._segment
        if seg is not None:
            self._transmit(seg)
            await seg.handle.wait_pending()
            if self._error is None:
                try:
                    await seg.handle.write_lac()
                except DLogError as e:
                    log.debug("stream %s: explicit LAC on flush failed: %s", self.name, e)
        if self._error is not None:
            raise self._error.clone()
        return self._last_dlsn

    async def mark_end_of_stream(self) -> DLSN:
        """Write the end-of-stream marker and complete the segment: readers
        stop after the last record, writers cannot write again."""
        fut = self.write_nowait(LogRecord.end_of_stream_marker())
        self._eos = True
        dlsn = await fut
        await self.flush()
        seg = self._segment
        if seg is not None:
            self._segment = None
            await self._complete(
                seg,
                LedgerCloseContext.no_more_data(expect_delete_after=self._expect_delete_after()),
            )
        return dlsn

    async def truncate(self, dlsn: DLSN) -> bool:
        """Mark everything before ``dlsn`` truncated (see LogManager.truncate)."""
        self._check()
        return await truncate_stream(self.ctx, dlsn)

    async def close(self) -> None:
        """Flush, complete the current segment and release the stream."""
        if self._closed:
            return
        self._closed = True
        try:
            if self._error is None:
                try:
                    await self.flush()
                except DLogError:
                    pass
            seg = self._segment
            if seg is not None and self._error is None:
                self._segment = None
                try:
                    await self._complete(
                        seg,
                        LedgerCloseContext.client_shutdown(
                            expect_delete_after=self._expect_delete_after()
                        ),
                    )
                except DLogError as e:
                    log.warning(
                        "stream %s: could not complete the segment on close: %s", self.name, e
                    )
        finally:
            # A failed writer skips the flush that waits for a roll or a
            # segment start still running: they end before the lock goes
            # (and with them the next ledger: used, or discarded by the roll).
            while self._starting is not None or self._completing is not None:
                running = [t for t in (self._starting, self._completing) if t is not None]
                await asyncio.gather(*running, return_exceptions=True)
            await self._purger.stop()
            await self._lock.release()

    async def __aenter__(self) -> LogWriter:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    # ------------------------------------------------------------------
    # retention
    # ------------------------------------------------------------------
    async def _purge(self) -> None:
        try:
            await purge_expired(self.ctx)
        except Exception as e:
            log.warning("stream %s: retention purge failed: %s", self.name, e)


def _is_ownership_error(error: DLogError | None) -> bool:
    """Lost lock or fenced: this writer no longer owns the stream."""
    return isinstance(error, (LockingError, WriteFencedError))


def _now_ms() -> int:
    return int(time.time() * 1000)
