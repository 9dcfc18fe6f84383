"""The bookie journal: every add is durable here before it is acknowledged.

Group commit happens on the event loop: records accumulate in a group that
is handed to the journal thread when the oldest record has waited
``journalMaxGroupWaitMSec``, when the group holds
``journalBufferedWritesThreshold`` bytes or ``journalBufferedEntriesThreshold``
records, or (with ``journalFlushWhenQueueEmpty``) as soon as no more
requests are being processed. The journal thread writes every group that is
waiting and then issues one fdatasync for all of them (the force-write
step), off the event loop. Callbacks run on the loop after the fsync that
covers their record (``journalSyncData=false`` skips the fsync: the callback
runs once the bytes are in the page cache).

The groups a batch holds go to the file in writes of at most
``journalWriteBufferSizeKB``, as BookKeeper's journal fills its write buffer
and writes it out when full: many small groups share one write, and one big
group is cut into buffer-sized writes.
"""

from __future__ import annotations

import asyncio
import dataclasses
import errno
import logging
import os
import queue
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import cast

from dlog.bookie import fileio
from dlog.bookie import journal_format as jf
from dlog.conf.bookie import BookieConfig
from dlog.errors import EIO, EOK
from dlog.errors import JournalError as JournalError  # its home before dlog.errors

log = logging.getLogger(__name__)

Callback = Callable[[int], None]
_STOP = object()


@dataclasses.dataclass(frozen=True, slots=True)
class SyncTimes:
    """When (``time.monotonic``) the journal thread took a batch of groups,
    had written it, and had synced it: the stages of an add's journal
    latency, so a tail can be traced to queueing, writing or the fsync."""

    taken: float
    written: float
    synced: float


#: Told, on the loop, after a batch's callbacks ran: each group's
#: (first_enqueued, record count), the batch's times, and when the
#: callbacks were done.
Observer = Callable[[list[tuple[float, int]], SyncTimes, float], None]


@dataclasses.dataclass
class JournalStats:
    """Counters the group-commit tests and metrics read."""

    records: int = 0  # records handed to the journal
    groups: int = 0  # groups handed to the journal thread
    writes: int = 0  # write() calls of group data
    fsyncs: int = 0  # fdatasync calls covering groups
    records_synced: int = 0
    bytes_written: int = 0
    rolls: int = 0


@dataclasses.dataclass
class _Group:
    parts: list[bytes]  # length prefixes and records, written with pwritev
    nbytes: int
    callbacks: list[Callback | None]
    count: int
    first_enqueued: float


IOV_MAX = fileio.IOV_MAX


class Journal:
    """One journal directory with its writer thread."""

    def __init__(
        self,
        directory: Path,
        conf: BookieConfig,
        *,
        on_error: Callable[[OSError], None] | None = None,
        observe: Observer | None = None,
    ) -> None:
        self.directory = directory
        self.conf = conf
        self._on_error = on_error
        self._observe = observe
        self._max_wait = conf.journal_max_group_wait_msec / 1000.0
        self._bytes_threshold = conf.journal_buffered_writes_threshold
        self._entries_threshold = conf.journal_buffered_entries_threshold
        self._flush_when_empty = conf.journal_flush_when_queue_empty
        self._sync = conf.journal_sync_data
        self._max_size = conf.journal_max_size_mb * 1024 * 1024
        self._prealloc = conf.journal_pre_alloc_size_mb * 1024 * 1024
        self._alignment = conf.journal_alignment_size
        self._write_buffer = conf.journal_write_buffer_size_kb * 1024

        self.stats = JournalStats()
        self.last_synced_mark = jf.LogMark()
        self.pending_records = 0

        # loop-side group
        self._parts: list[bytes] = []
        self._callbacks: list[Callback | None] = []
        self._group_bytes = 0
        self._group_started = 0.0
        self._timer: asyncio.TimerHandle | None = None
        self._soon: asyncio.Handle | None = None

        # thread-side file
        self._queue: queue.SimpleQueue[object] = queue.SimpleQueue()
        self._thread: threading.Thread | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._fd = -1
        self._file_id = 0
        self._offset = 0
        self._allocated = 0
        self._failed: OSError | None = None
        self._reopen = False  # open a new file before the next write
        self._drained: list[asyncio.Future[None]] = []

    # ------------------------------------------------------------------
    # replay (before start)
    # ------------------------------------------------------------------
    def replay_records(self, mark: jf.LogMark) -> Iterator[bytes]:
        """Every record after ``mark``, oldest first (before :meth:`start`)."""
        count = 0
        for jid in jf.list_journal_ids(self.directory):
            if jid < mark.journal_id:
                continue
            start = mark.offset if jid == mark.journal_id else 0
            path = self.directory / jf.journal_file_name(jid)
            end = start
            for offset, record in jf.scan_journal(path, start):
                end = offset
                count += 1
                yield record
            damage = jf.damage_at(path, end)
            if damage is not None:
                # BookKeeper refuses to start here; dlog replays what is
                # intact and goes on: the auditor's entries check finds what
                # this bookie lacks and has it copied back from the replicas.
                log.error(
                    "journal %s: replay stopped at offset %d (%s): the records after it "
                    "are not replayed; this bookie lacks them until AutoRecovery "
                    "re-replicates them",
                    path,
                    end,
                    damage,
                )
            self.last_synced_mark = max(self.last_synced_mark, jf.LogMark(jid, end))
        log.info("replayed %d journal records from %s after %s", count, self.directory, mark)

    # ------------------------------------------------------------------
    # lifecycle
    # ------------------------------------------------------------------
    def start(self) -> None:
        """Open a fresh journal file and start the journal thread."""
        self._loop = asyncio.get_running_loop()
        ids = jf.list_journal_ids(self.directory)
        self._open_file((ids[-1] + 1) if ids else 1)
        self.last_synced_mark = max(self.last_synced_mark, jf.LogMark(self._file_id, self._offset))
        self._thread = threading.Thread(
            target=self._run, name=f"journal-{self.directory}", daemon=True
        )
        self._thread.start()

    async def close(self) -> None:
        """Write and sync whatever is pending, then stop the thread."""
        if self._thread is None:
            return
        self._flush_group()
        self._queue.put(_STOP)
        await asyncio.get_running_loop().run_in_executor(None, self._thread.join)
        self._thread = None
        if self._fd >= 0:
            try:
                os.fsync(self._fd)
            except OSError:
                pass
            os.close(self._fd)
            self._fd = -1

    @property
    def current_journal_id(self) -> int:
        return self._file_id

    @property
    def failed(self) -> OSError | None:
        return self._failed

    def resume(self) -> bool:
        """After ENOSPC, once the disk has room: accept records again, in a
        new journal file (the failed one may end in a partial group, which
        replay stops at). Other errors (EIO) stay: a restart decides.
        Whether the journal takes records again."""
        failed = self._failed
        if failed is None:
            return True
        if failed.errno != errno.ENOSPC:
            return False
        self._reopen = True
        self._failed = None
        log.info("journal %s: resuming after %s", self.directory, failed)
        return True

    # ------------------------------------------------------------------
    # loop side: grouping
    # ------------------------------------------------------------------
    def log(self, record: bytes, callback: Callback | None = None) -> None:
        """Journal ``record``; ``callback(status)`` runs once it is durable."""
        if self._failed is not None:
            if callback is not None:
                callback(EIO)
            return
        if not self._parts:
            self._group_started = time.monotonic()
            if self._max_wait > 0:
                self._timer = self._loop.call_later(self._max_wait, self._flush_group)  # type: ignore[union-attr]
        n = len(record)
        self._parts.append(n.to_bytes(4, "big"))
        self._parts.append(record)
        self._callbacks.append(callback)
        self._group_bytes += n + 4
        self.pending_records += 1
        self.stats.records += 1
        if (
            self._max_wait <= 0
            or self._group_bytes >= self._bytes_threshold
            or (self._entries_threshold and len(self._callbacks) >= self._entries_threshold)
        ):
            self._flush_group()
        elif self._flush_when_empty and self._soon is None:
            # Runs after every request already read has been processed: the
            # queue has become empty.
            self._soon = self._loop.call_soon(self._flush_group)  # type: ignore[union-attr]

    def _flush_group(self) -> None:
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        if self._soon is not None:
            self._soon.cancel()
            self._soon = None
        if not self._parts:
            return
        group = _Group(
            self._parts,
            self._group_bytes,
            self._callbacks,
            len(self._callbacks),
            self._group_started,
        )
        self._parts = []
        self._callbacks = []
        self._group_bytes = 0
        self.stats.groups += 1
        self._queue.put(group)

    def _synced(
        self, groups: list[_Group], mark: jf.LogMark, status: int, times: SyncTimes
    ) -> None:
        if status == EOK:
            self.last_synced_mark = mark
        for g in groups:
            self.pending_records -= g.count
            for cb in g.callbacks:
                if cb is not None:
                    try:
                        cb(status)
                    except Exception:  # a bad callback must not stop the others
                        log.exception("journal callback failed")
        if self._observe is not None:
            self._observe([(g.first_enqueued, g.count) for g in groups], times, time.monotonic())
        if self._drained and self.pending_records == 0:
            drained, self._drained = self._drained, []
            for fut in drained:
                if not fut.done():
                    fut.set_result(None)

    async def wait_synced(self) -> None:
        """Flush the current group and wait until everything is durable."""
        self._flush_group()
        if self.pending_records == 0:
            return
        fut: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._drained.append(fut)
        await fut

    # ------------------------------------------------------------------
    # journal thread
    # ------------------------------------------------------------------
    def _run(self) -> None:
        stop = False
        while not stop:
            item = self._queue.get()
            if item is _STOP:
                break
            groups = [cast(_Group, item)]  # the queue holds groups and _STOP
            while True:
                try:
                    nxt = self._queue.get_nowait()
                except queue.Empty:
                    break
                if nxt is _STOP:
                    stop = True
                    break
                groups.append(cast(_Group, nxt))
            taken = time.monotonic()
            status, written = self._write_groups(groups)
            times = SyncTimes(taken, written, time.monotonic())
            mark = jf.LogMark(self._file_id, self._offset)
            try:
                self._loop.call_soon_threadsafe(self._synced, groups, mark, status, times)  # type: ignore[union-attr]
            except RuntimeError:
                return  # loop closed

    def _write_groups(self, groups: list[_Group]) -> tuple[int, float]:
        """Write and sync ``groups``; (status, when the writes were done)."""
        if self._failed is not None:
            return EIO, time.monotonic()
        try:
            if self._reopen:
                old = self._fd
                try:
                    self._open_file(self._file_id + 1)
                except OSError:
                    self._fd = old  # still the failed file: the next resume tries again
                    raise
                self._reopen = False
                if old >= 0:
                    os.close(old)
            buffered: list[bytes] = []  # bytes not yet written, ending at self._offset
            nbuffered = 0
            for g in groups:
                if self._offset + g.nbytes > self._max_size and self._offset > jf.HEADER_SIZE:
                    self._write_buffered(buffered, nbuffered, final=True)
                    buffered, nbuffered = [], 0
                    self._roll()
                pad = jf.padding_record(self._offset + g.nbytes, self._alignment)
                total = g.nbytes + len(pad)
                self._ensure_space(total)
                buffered += g.parts
                if pad:
                    buffered.append(pad)
                nbuffered += total
                self._offset += total
                self.stats.bytes_written += total
                if nbuffered >= self._write_buffer:
                    buffered, nbuffered = self._write_buffered(buffered, nbuffered, final=False)
            self._write_buffered(buffered, nbuffered, final=True)
            written = time.monotonic()
            if self._sync:
                # Measured and not kept: when the batch fits one write, that
                # write synced by itself (pwritev2 RWF_DSYNC), which spares
                # this thread one wait for the GIL (2.5 -> 1.3 ms per group
                # beside a GIL-busy thread), but five alternating pairs of
                # light-load runs showed no latency gain beyond noise. At half
                # load (bench/bookie_add.py, 27,000 adds/s, checkpoints in
                # the window), p99 with it against without: ledgers on
                # tmpfs 9.7, 8.4, 9.5 against 9.7, 10.4 ms; one disk 19.1,
                # 25.0, 131 against 10.2, 12.9 ms (worse in all three). Nor
                # kept: every batch in one write (a 4 MiB write buffer) and
                # synced by it, tmpfs 8.0, 10.1 against 18.2, 10.7, one disk
                # 14.0, 14.6 against 16.6, 12.6; a 1 MiB write buffer alone,
                # tmpfs 10.9, 13.7, 9.2 against 18.1, 11.1, 7.3, one disk
                # 18.3, 9.7, 13.7 against 13.1, 12.1, 13.2 ms.
                fileio.fdatasync(self._fd, "journal.fsync")
                self.stats.fsyncs += 1
            self.stats.records_synced += sum(g.count for g in groups)
            return EOK, written
        except OSError as e:
            self._failed = e
            log.error("journal write failed in %s: %s; failing all further adds", self.directory, e)
            if self._on_error is not None and self._loop is not None:
                try:
                    self._loop.call_soon_threadsafe(self._on_error, e)
                except RuntimeError:
                    pass
            return EIO, time.monotonic()

    def _write_buffered(
        self, parts: list[bytes], nbytes: int, *, final: bool
    ) -> tuple[list[bytes], int]:
        """Write the ``nbytes`` of ``parts`` (they end at ``self._offset``) in
        writes of ``journalWriteBufferSizeKB``: every full buffer, and the
        last partial one too when ``final``. Returns what is left unwritten."""
        size = self._write_buffer
        offset = self._offset - nbytes
        chunk: list[bytes] = []
        filled = 0
        for part in parts:
            if filled + len(part) < size:  # the common case: no copy, no slicing
                chunk.append(part)
                filled += len(part)
                continue
            view = memoryview(part)
            while len(view):
                take = min(len(view), size - filled)
                chunk.append(view[:take])  # type: ignore[arg-type]  # pwritev takes any buffer
                view = view[take:]
                filled += take
                if filled == size:
                    self._write_parts(chunk, offset)
                    offset += filled
                    chunk, filled = [], 0
        if final and filled:
            self._write_parts(chunk, offset)
            chunk, filled = [], 0
        return chunk, filled

    def _write_parts(self, parts: list[bytes], offset: int) -> None:
        """Write ``parts`` contiguously at ``offset`` with as few syscalls as
        the iovec limit allows; the kernel gathers them (no join in Python)."""
        fileio.pwritev(self._fd, parts, offset, "journal.write")
        self.stats.writes += (len(parts) + IOV_MAX - 1) // IOV_MAX

    def _ensure_space(self, n: int) -> None:
        need = self._offset + n
        if need <= self._allocated:
            return
        grow = max(self._prealloc, need - self._allocated)
        try:
            os.posix_fallocate(self._fd, self._allocated, grow)
        except OSError as e:
            if e.errno in (errno.EOPNOTSUPP, errno.EINVAL):
                return  # filesystem cannot preallocate; plain writes still work
            raise
        self._allocated += grow

    def _open_file(self, journal_id: int) -> None:
        path = self.directory / jf.journal_file_name(journal_id)
        fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_EXCL, 0o644)
        try:
            header = jf.header_bytes()
            self._fd, self._allocated = fd, 0
            self._offset = 0
            self._ensure_space(len(header))
            fileio.pwrite(fd, header, 0, "journal.write")
            fileio.fsync(fd, "journal.fsync")
            fileio.sync_dir(self.directory, "journal.fsync")
        except OSError:
            os.close(fd)
            path.unlink(missing_ok=True)  # the next attempt reuses the id
            self._fd = -1
            raise
        self._file_id = journal_id
        self._offset = len(header)
        log.info("opened journal %s", path)

    def _roll(self) -> None:
        if self._sync:
            fileio.fdatasync(self._fd, "journal.fsync")
        old = self._fd
        self._open_file(self._file_id + 1)
        os.close(old)
        self.stats.rolls += 1

    # ------------------------------------------------------------------
    # garbage collection (called after a checkpoint)
    # ------------------------------------------------------------------
    def gc(self, checkpoint: jf.LogMark) -> list[int]:
        """Delete journals wholly before ``checkpoint`` beyond journalMaxBackups."""
        old = [j for j in jf.list_journal_ids(self.directory) if j < checkpoint.journal_id]
        keep = self.conf.journal_max_backups
        victims = old[: max(0, len(old) - keep)]
        for jid in victims:
            try:
                os.unlink(self.directory / jf.journal_file_name(jid))
                log.info("deleted journal %x.txn (checkpoint at %s)", jid, checkpoint)
            except FileNotFoundError:
                pass
        return victims
