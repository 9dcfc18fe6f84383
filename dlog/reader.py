"""The log reader: records in DLSN order, from any position, tailing.

A read-ahead task walks the stream's segments in sequence-number order.
Completed segments are read up to their last entry; the in-progress
segment is read up to its LAC and then tailed with long-poll LAC reads.
When that segment completes (a roll, or a new writer recovering it after a
failover) the reader learns it from the segment list in ZooKeeper, reads
what remains up to the recorded last entry, and moves on. Positions are
tracked by DLSN, so records come in order with no gaps and no duplicates.
Truncated segments are skipped; a start inside truncated data moves to the
first record that is not truncated.

A retriable ledger error (every replica failed, a bookie timed out) does not
fail the reader: read-ahead backs off ``readAheadWaitTime``, doubling up to
four times that, and reads again from where it stopped, as DistributedLog's
read-ahead does. What ends a reader whose bookies stay away is
``readerIdleErrorThresholdMillis``: a read that gets no record for that long
fails with :class:`IdleReaderError` (DistributedLog's IdleReaderException),
and so does every read after it. Its default, Integer.MAX_VALUE, like 0,
means never.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections import deque
from collections.abc import AsyncIterator
from operator import attrgetter
from typing import TYPE_CHECKING

from dlog.dlsn import DLSN
from dlog.errors import (
    BKError,
    DLogError,
    EndOfStreamError,
    IdleReaderError,
    LogNotFoundError,
    LogReadError,
    NoSuchLedgerError,
    ReadCancelledError,
)
from dlog.record import LogRecordWithDLSN
from dlog.segment import LogSegmentMetadata, assign_start_sequence_ids
from dlog.segment_reader import open_segment, records_of
from dlog.stream import StreamContext

if TYPE_CHECKING:
    from dlog.ledger.read_handle import ReadHandle

log = logging.getLogger(__name__)

_END = object()
_NEVER_IDLE = 2**31 - 1  # Integer.MAX_VALUE: DistributedLog's "no idle check"
_flags = attrgetter("flags")


class _ReadAhead:
    """What read-ahead has read and the application not yet taken: whole
    decoded entries (lists of records) handed over as they are, then the
    end (``_END``) or the error that stopped read-ahead.

    Bounded in records (``readAheadMaxRecords``): read-ahead waits while the
    cache holds that many, so it exceeds the bound by less than one entry.
    Handing over lists rather than records one by one keeps the cost per
    record down to taking a slice."""

    __slots__ = ("_head", "_items", "_loop", "_max", "_readable", "_room", "records")

    def __init__(self, max_records: int) -> None:
        self._items: deque[object] = deque()
        self._head = 0  # records of the first list already taken
        self._max = max(1, max_records)
        self._loop: asyncio.AbstractEventLoop | None = None
        self._readable: asyncio.Future[None] | None = None
        self._room: asyncio.Future[None] | None = None
        #: Records cached (the end or an error not counted).
        self.records = 0

    def empty(self) -> bool:
        return not self._items

    def _wake(self, waiter: asyncio.Future[None] | None) -> None:
        if waiter is not None and not waiter.done():
            waiter.set_result(None)

    def _waiter(self) -> asyncio.Future[None]:
        loop = self._loop
        if loop is None:
            loop = self._loop = asyncio.get_running_loop()
        return loop.create_future()

    async def put(self, records: list[LogRecordWithDLSN]) -> None:
        """Cache one entry's records (the list is the cache's from now on)."""
        while self.records >= self._max:
            self._room = self._waiter()
            await self._room
        self._items.append(records)
        self.records += len(records)
        self._wake(self._readable)

    def wake(self) -> None:
        """End every wait now, with or without something to take (close)."""
        self._wake(self._readable)

    async def put_last(self, item: object) -> None:
        """Cache the end or the error read-ahead stopped with."""
        self._items.append(item)
        self._wake(self._readable)

    async def wait(self, timeout: float | None) -> bool:
        """Wait up to ``timeout`` for something to take; False on timeout.
        Concurrent readers share one waiter, which a timeout never cancels."""
        if self._items:
            return True
        waiter = self._readable
        if waiter is None or waiter.done():
            waiter = self._readable = self._waiter()
        done, _ = await asyncio.wait((waiter,), timeout=timeout)
        return bool(done) or bool(self._items)

    def take(self, n: int) -> tuple[list[LogRecordWithDLSN], object]:
        """Up to ``n`` records from the front, and the end or error behind
        them if the records taken reach it (else None)."""
        items = self._items
        out: list[LogRecordWithDLSN] = []
        last: object = None
        while items and len(out) < n:
            head = items[0]
            if type(head) is not list:
                if not out:
                    last = head  # stays cached: every later read sees it too
                break
            start = self._head
            want = n - len(out)
            if start == 0 and len(head) <= want:
                items.popleft()
                if out:
                    out += head
                else:
                    out = head  # the whole entry, not a copy
            elif len(head) - start <= want:
                items.popleft()
                out += head[start:]
                self._head = 0
            else:
                out += head[start : start + want]
                self._head = start + want
        taken = len(out)
        if taken:
            self.records -= taken
            if self.records < self._max:
                self._wake(self._room)
        return out, last


class LogReader:
    """Read records from a stream. Use ``await stream.open_reader(...)`` on a LogManager."""

    def __init__(
        self,
        ctx: StreamContext,
        *,
        from_dlsn: DLSN | None = None,
        from_txid: int | None = None,
    ) -> None:
        self.ctx = ctx
        self.name = ctx.name
        conf = ctx.conf
        self._batch = conf.read_ahead_batch_size
        self._long_poll = conf.read_lac_long_poll_timeout / 1000.0
        self._idle_warn = conf.reader_idle_warn_threshold_millis / 1000.0
        idle_error = conf.reader_idle_error_threshold_millis
        self._idle_error = idle_error / 1000.0 if 0 < idle_error < _NEVER_IDLE else None
        self._wait_time = conf.read_ahead_wait_time / 1000.0
        self._backoff = self._wait_time
        self._cache = _ReadAhead(conf.read_ahead_max_records)
        self._position = (
            from_dlsn
            if from_dlsn is not None
            else (None if from_txid is not None else DLSN.INITIAL)
        )
        self._from_txid = from_txid
        self._task: asyncio.Task[None] | None = None
        self._error: BaseException | None = None
        self._ended = False
        self._closed = False
        self._segments_changed = asyncio.Event()
        self._resume_at: DLSN = DLSN.INITIAL  # where read-ahead restarts after an error
        self._last_delivered: DLSN | None = None
        self._last_progress = time.monotonic()
        self._last_arrival = self._last_progress  # read-ahead's last record
        self._idle_warned = False
        self.records_read = 0

    # ------------------------------------------------------------------
    # public API
    # ------------------------------------------------------------------
    @classmethod
    async def open(
        cls, ctx: StreamContext, *, from_dlsn: DLSN | None = None, from_txid: int | None = None
    ) -> LogReader:
        """A started reader (LogNotFoundError for a stream that does not exist)."""
        if from_dlsn is not None and from_txid is not None:
            raise ValueError("give from_dlsn or from_txid, not both")
        await ctx.metadata.get_segments(ctx.name)  # LogNotFoundError for a missing stream
        return cls(ctx, from_dlsn=from_dlsn, from_txid=from_txid)._start()

    def _start(self) -> LogReader:
        self._task = asyncio.get_running_loop().create_task(
            self._read_ahead(), name=f"dlog-reader-{self.name}"
        )
        return self

    @property
    def position(self) -> DLSN | None:
        """DLSN of the last record returned (None before the first)."""
        return self._last_delivered

    async def read_next(self, timeout: float | None = None) -> LogRecordWithDLSN | None:
        """The next record, or None if none arrives within ``timeout``
        seconds (None waits indefinitely). EndOfStreamError after the last
        record of an ended stream."""
        records = await self.read_bulk(1, timeout)
        return records[0] if records else None

    async def read_bulk(self, n: int, timeout: float | None = None) -> list[LogRecordWithDLSN]:
        """Up to ``n`` records: waits up to ``timeout`` for the first, then
        takes whatever else is already read ahead."""
        if self._closed:
            raise ReadCancelledError(f"reader of stream {self.name!r} is closed")
        cache = self._cache
        if cache.empty():
            self._raise_if_finished()
            wait = timeout
            if self._idle_error is not None:
                left = max(0.0, self._idle_since() + self._idle_error - time.monotonic())
                wait = left if timeout is None else min(timeout, left)
            got = await cache.wait(wait)
            if self._closed:  # closed while waiting
                raise ReadCancelledError(f"reader of stream {self.name!r} is closed")
            if not got:
                self._check_idle()
                self._check_idle_error()
                if timeout is None:
                    return await self.read_bulk(n, timeout)  # not idle yet: keep waiting
                return []
        out, last = cache.take(max(1, n))
        if out:
            self._last_delivered = out[-1].dlsn
            self._last_progress = time.monotonic()
            self._idle_warned = False
            self.records_read += len(out)
            return out
        if last is _END:
            self._ended = True
        elif isinstance(last, BaseException):
            self._error = last
        self._raise_if_finished()
        return out

    def _raise_if_finished(self) -> None:
        if self._error is not None:
            raise self._error
        if self._ended:
            raise EndOfStreamError(f"stream {self.name!r} ended after {self._last_delivered}")

    def _check_idle(self) -> None:
        idle = time.monotonic() - self._last_progress
        if idle >= self._idle_warn and not self._idle_warned:
            self._idle_warned = True
            log.warning(
                "reader of stream %s has been idle for %.0f s (readerIdleWarnThresholdMillis) at %s",
                self.name,
                idle,
                self._last_delivered,
            )

    def _idle_since(self) -> float:
        """When a record last came: taken by the application or read ahead."""
        return max(self._last_progress, self._last_arrival)

    def _check_idle_error(self) -> None:
        """Past ``readerIdleErrorThresholdMillis`` with nothing read ahead:
        the reader fails for good (the application opens a new one)."""
        if self._idle_error is None or not self._cache.empty():
            return
        idle = time.monotonic() - self._idle_since()
        if idle < self._idle_error:
            return
        error = IdleReaderError(
            f"reader of stream {self.name!r} got no record for {idle * 1000:.0f} ms "
            f"(readerIdleErrorThresholdMillis={self._idle_error * 1000:.0f}) "
            f"after {self._last_delivered}"
        )
        log.error("%s", error)
        self._error = error
        if self._task is not None:
            self._task.cancel()
        raise error

    def __aiter__(self) -> AsyncIterator[LogRecordWithDLSN]:
        return self._iterate()

    async def _iterate(self) -> AsyncIterator[LogRecordWithDLSN]:
        while True:
            try:
                record = await self.read_next(max(1.0, self._idle_warn))
            except EndOfStreamError:
                return
            if record is not None:
                yield record

    async def close(self) -> None:
        self._closed = True
        self._cache.wake()  # reads waiting for records end with ReadCancelledError
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await self._task

    async def __aenter__(self) -> LogReader:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    # ------------------------------------------------------------------
    # read-ahead
    # ------------------------------------------------------------------
    def _on_segments_changed(self, _event: object = None) -> None:
        self._segments_changed.set()

    async def _segments(self, from_seqno: int | None = None) -> list[LogSegmentMetadata]:
        """The stream's segments, from sequence number ``from_seqno`` on when
        given (those behind the reader's position are of no use to it)."""
        self._segments_changed.clear()
        try:
            pairs = await self.ctx.metadata.get_segments(
                self.name, watch=self._on_segments_changed, from_seqno=from_seqno
            )
        except LogNotFoundError:
            raise
        # Number a Java-written in-progress segment's records as Java readers do.
        return assign_start_sequence_ids(meta for meta, _ in pairs)

    async def _read_ahead(self) -> None:
        try:
            await self._run()
            await self._cache.put_last(_END)
        except asyncio.CancelledError:
            raise
        except DLogError as e:
            log.warning("reader of stream %s failed: %s", self.name, e)
            await self._cache.put_last(e)
        except Exception as e:
            log.exception("reader of stream %s failed", self.name)
            await self._cache.put_last(LogReadError(f"reading stream {self.name!r} failed: {e!r}"))

    async def _run(self) -> None:
        segments = await self._segments()
        position = self._position
        if position is None:
            position = self._position_for_txid(segments, self._from_txid or 0)
        while True:
            seg = next(
                (
                    s
                    for s in segments
                    if s.log_segment_sequence_no >= position.log_segment_sequence_no
                ),
                None,
            )
            if seg is None:
                # Caught up with every known segment: wait for a new one.
                await self._segments_changed.wait()
                segments = await self._segments(position.log_segment_sequence_no)
                continue
            if seg.log_segment_sequence_no > position.log_segment_sequence_no:
                position = DLSN(seg.log_segment_sequence_no, 0, 0)
            if seg.is_truncated:
                position = DLSN(seg.log_segment_sequence_no + 1, 0, 0)
                continue
            if seg.is_partially_truncated and position < seg.min_active_dlsn:
                position = seg.min_active_dlsn
            self._resume_at = position
            try:
                ended, position = await self._read_segment(seg, position)
            except BKError as e:
                if not e.retriable:
                    raise
                position = self._resume_at
                await self._back_off(e, position)
                segments = await self._segments(position.log_segment_sequence_no)
                continue
            if ended:
                return
            segments = await self._segments(position.log_segment_sequence_no)

    async def _back_off(self, error: BKError, position: DLSN) -> None:
        """``readAheadWaitTime`` after a retriable error, doubling on each
        failure in a row up to 4x (DistributedLog's maxReadBackoffTime)."""
        delay = self._backoff
        log.warning(
            "read-ahead of stream %s at %s failed: %s; retrying in %d ms (readAheadWaitTime)",
            self.name,
            position,
            error,
            round(delay * 1000),
        )
        self._backoff = min(delay * 2, 4 * self._wait_time)
        await asyncio.sleep(delay)

    def _position_for_txid(self, segments: list[LogSegmentMetadata], txid: int) -> DLSN:
        for seg in segments:
            if seg.in_progress or (seg.last_txid is not None and seg.last_txid >= txid):
                return DLSN(seg.log_segment_sequence_no, 0, 0)
        last = segments[-1].log_segment_sequence_no + 1 if segments else 1
        return DLSN(last, 0, 0)

    async def _read_segment(self, seg: LogSegmentMetadata, position: DLSN) -> tuple[bool, DLSN]:
        """Read ``seg`` from ``position``; returns (end of stream seen, next position)."""
        async with contextlib.AsyncExitStack() as stack:
            try:
                handle = await stack.enter_async_context(
                    open_segment(self.ctx.bk, seg.ledger_id, self.ctx.password)
                )
            except NoSuchLedgerError:
                # Deleted by retention or truncation meanwhile.
                return False, DLSN(seg.log_segment_sequence_no + 1, 0, 0)
            entry_id = position.entry_id
            asked = False
            while True:
                if not seg.in_progress:
                    last = seg.last_entry_id
                else:
                    last = handle.last_add_confirmed
                    if last < entry_id and not asked:
                        # Once per segment: afterwards the long poll asks the
                        # same question, returns at once if the answer moved,
                        # and brings the next entry with it (asking every
                        # bookie for its last entry, on each pass of a reader
                        # catching up, cost it 5-12 ms a time).
                        asked = True
                        last = await handle.read_last_add_confirmed()
                if entry_id <= last:
                    end = min(last, entry_id + self._batch - 1)
                    ended, position = await self._deliver(handle, seg, entry_id, end, position)
                    if ended:
                        return True, position
                    entry_id = end + 1
                    continue
                if not seg.in_progress:
                    return False, DLSN(seg.log_segment_sequence_no + 1, 0, 0)
                # Tail: wait for the LAC to move or the segment list to change.
                current = await self._wait_for_more(handle, seg, entry_id - 1)
                if current is None:
                    return False, DLSN(seg.log_segment_sequence_no + 1, 0, 0)
                seg = current
        raise AssertionError("unreachable")

    async def _wait_for_more(
        self, handle: ReadHandle, seg: LogSegmentMetadata, lac: int
    ) -> LogSegmentMetadata | None:
        """Wait for the LAC to move or the segment list to change; returns the
        segment's current metadata (None if it was deleted meanwhile)."""
        if handle.is_closed:
            # The ledger is sealed; its segment is about to be completed.
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(1.0):
                    await self._segments_changed.wait()
        else:
            poll = asyncio.ensure_future(handle.read_lac_long_poll(lac, self._long_poll))
            changed = asyncio.ensure_future(self._segments_changed.wait())
            try:
                await asyncio.wait({poll, changed}, return_when=asyncio.FIRST_COMPLETED)
            finally:
                for f in (poll, changed):
                    if not f.done():
                        f.cancel()
                with contextlib.suppress(asyncio.CancelledError, BKError):
                    await poll
            if not changed.done() and not handle.is_closed:
                self._check_idle()
                return seg
        for s in await self._segments(seg.log_segment_sequence_no):
            if s.log_segment_sequence_no == seg.log_segment_sequence_no:
                return s
        return None

    async def _deliver(
        self, handle: ReadHandle, seg: LogSegmentMetadata, first: int, last: int, position: DLSN
    ) -> tuple[bool, DLSN]:
        entries = await handle.read_unconfirmed(first, last)
        seqno = seg.log_segment_sequence_no
        cache = self._cache
        for entry in entries:
            records = records_of(seg, entry)
            if records:
                # An entry of user records only, wholly past ``position``,
                # goes to the cache as decoded; anything else record by record.
                if (
                    self._from_txid is not None
                    or records[0].dlsn < position
                    or any(map(_flags, records))
                ):
                    ended, position, records = self._user_records(records, position)
                    if ended:
                        if records:
                            await cache.put(records)
                            self._last_arrival = time.monotonic()
                        return True, position
                if records:
                    await cache.put(records)
                    self._last_arrival = time.monotonic()
            position = DLSN(seqno, entry.entry_id + 1, 0)
            self._resume_at = position
        if entries:
            self._backoff = self._wait_time  # reading again: the next error waits the least
        return False, position

    def _user_records(
        self, records: list[LogRecordWithDLSN], position: DLSN
    ) -> tuple[bool, DLSN, list[LogRecordWithDLSN]]:
        """The records of one entry the application gets: those at or past
        ``position`` and the start txid, without control records, up to the
        end of stream. Returns (end of stream seen, next position, records)."""
        out: list[LogRecordWithDLSN] = []
        for record in records:
            if record.dlsn < position:
                continue
            position = record.dlsn.next()
            if record.end_of_stream:
                return True, position, out
            if record.control:
                continue
            if self._from_txid is not None:
                if record.txid < self._from_txid:
                    continue
                self._from_txid = None
            out.append(record)
        return False, position, out
