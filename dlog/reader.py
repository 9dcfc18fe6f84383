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
from collections.abc import AsyncIterator
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
        self._queue: asyncio.Queue[object] = asyncio.Queue(
            maxsize=max(1, conf.read_ahead_max_records)
        )
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
        out: list[LogRecordWithDLSN] = []
        if self._queue.empty():
            self._raise_if_finished()
            wait = timeout
            if self._idle_error is not None:
                left = max(0.0, self._idle_since() + self._idle_error - time.monotonic())
                wait = left if timeout is None else min(timeout, left)
            try:
                item = await asyncio.wait_for(self._queue.get(), wait)
            except TimeoutError:
                self._check_idle()
                self._check_idle_error()
                if timeout is None:
                    return await self.read_bulk(n, timeout)  # not idle yet: keep waiting
                return out
            if not self._accept(item, out):
                return out
        while len(out) < n and not self._queue.empty():
            if not self._accept(self._queue.get_nowait(), out):
                break
        return out

    def _accept(self, item: object, out: list[LogRecordWithDLSN]) -> bool:
        if item is _END:
            self._ended = True
            if out:
                return False
            self._raise_if_finished()
            return False
        if isinstance(item, BaseException):
            self._error = item
            if out:
                return False
            raise item
        record: LogRecordWithDLSN = item  # type: ignore[assignment]
        out.append(record)
        self._last_delivered = record.dlsn
        self._last_progress = time.monotonic()
        self._idle_warned = False
        self.records_read += 1
        return True

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
        if self._idle_error is None or not self._queue.empty():
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

    async def _segments(self) -> list[LogSegmentMetadata]:
        self._segments_changed.clear()
        try:
            pairs = await self.ctx.metadata.get_segments(self.name, watch=self._on_segments_changed)
        except LogNotFoundError:
            raise
        # Number a Java-written in-progress segment's records as Java readers do.
        return assign_start_sequence_ids(meta for meta, _ in pairs)

    async def _read_ahead(self) -> None:
        try:
            await self._run()
            await self._queue.put(_END)
        except asyncio.CancelledError:
            raise
        except DLogError as e:
            log.warning("reader of stream %s failed: %s", self.name, e)
            await self._queue.put(e)
        except Exception as e:
            log.exception("reader of stream %s failed", self.name)
            await self._queue.put(LogReadError(f"reading stream {self.name!r} failed: {e!r}"))

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
                segments = await self._segments()
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
                segments = await self._segments()
                continue
            if ended:
                return
            segments = await self._segments()

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
            while True:
                if not seg.in_progress:
                    last = seg.last_entry_id
                else:
                    last = handle.last_add_confirmed
                    if last < entry_id:
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
                await asyncio.wait_for(self._segments_changed.wait(), 1.0)
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
        for s in await self._segments():
            if s.log_segment_sequence_no == seg.log_segment_sequence_no:
                return s
        return None

    async def _deliver(
        self, handle: ReadHandle, seg: LogSegmentMetadata, first: int, last: int, position: DLSN
    ) -> tuple[bool, DLSN]:
        entries = await handle.read_unconfirmed(first, last)
        seqno = seg.log_segment_sequence_no
        for entry in entries:
            for record in records_of(seg, entry):
                if record.dlsn < position:
                    continue
                position = record.dlsn.next()
                if record.end_of_stream:
                    return True, position
                if record.control:
                    continue
                if self._from_txid is not None:
                    if record.txid < self._from_txid:
                        continue
                    self._from_txid = None
                await self._queue.put(record)
                self._last_arrival = time.monotonic()
            position = DLSN(seqno, entry.entry_id + 1, 0)
            self._resume_at = position
        if entries:
            self._backoff = self._wait_time  # reading again: the next error waits the least
        return False, position
