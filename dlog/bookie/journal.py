"""The bookie journal: every add is durable here before it is acknowledged.

Group commit happens on the event loop: records accumulate in a group that
is handed to the journal's writer when the oldest record has waited
``journalMaxGroupWaitMSec``, when the group holds
``journalBufferedWritesThreshold`` bytes or ``journalBufferedEntriesThreshold``
records, or (with ``journalFlushWhenQueueEmpty``) as soon as no more
requests are being processed. The writer is a process of its own
(:mod:`dlog.bookie.journal_writer`): it writes every group that is waiting
and then issues one fdatasync for all of them (the force-write step), and
answers. Callbacks run on the loop once that answer says their record is
synced (``journalSyncData=false`` skips the fsync: the callback runs once
the bytes are in the page cache).

Invariants:

* a callback gets ``EOK`` only after the writer synced its record, and
  those callbacks complete in the order the records were logged;
* once the writer fails (or dies), no record is acknowledged until
  :meth:`Journal.resume` (ENOSPC only): records already handed over get
  ``EIO`` even if the disk recovers meanwhile;
* :meth:`Journal.close` returns after everything logged was answered.
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import dataclasses
import errno
import fcntl
import logging
import os
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path

from dlog import failpoints
from dlog.bookie import journal_format as jf
from dlog.bookie import journal_pipe as jp
from dlog.bookie.journal_file import FileSettings
from dlog.conf.bookie import BookieConfig
from dlog.errors import EIO, EOK
from dlog.errors import JournalError as JournalError  # its home before dlog.errors

log = logging.getLogger(__name__)

Callback = Callable[[int], None]


@dataclasses.dataclass(frozen=True, slots=True)
class SyncTimes:
    """When (``time.monotonic``) the journal writer took a batch of groups,
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
    groups: int = 0  # groups handed to the journal writer
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


#: fcntl's F_SETPIPE_SZ (Linux), and the size asked for the request pipe.
F_SETPIPE_SZ = getattr(fcntl, "F_SETPIPE_SZ", 1031)
PIPE_SIZE = 1024 * 1024
#: How long the writer process may take to start and open its file.
START_TIMEOUT = 60.0


class _RequestProtocol(asyncio.BaseProtocol):
    """The request pipe's end: a writer that dies shows on the answer pipe."""


class Journal:
    """One journal directory with its writer process."""

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

        # the writer process
        self._loop: asyncio.AbstractEventLoop | None = None
        self._proc: asyncio.subprocess.Process | None = None
        self._req: asyncio.WriteTransport | None = None
        self._ack_fd = -1
        self._acks = jp.AckReader()
        self._ready: asyncio.Future[jp.Ack] | None = None
        #: Done once the answer pipe closed: the writer exited.
        self._exited: asyncio.Future[None] | None = None
        self._closing = False
        self._inflight: collections.deque[_Group] = collections.deque()
        self._answered = 0  # groups the writer has answered
        self._file_id = 0
        self._failed: OSError | None = None
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
            damage = None
            for offset, record in jf.scan_journal(path, start):
                damage = jf.record_damage(record)
                if damage is not None:
                    break  # a damaged record ends this file's replay too
                end = offset
                count += 1
                yield record
            if damage is None:
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
    async def start(self) -> None:
        """Start the writer process, which opens a fresh journal file, and
        wait until it is ready."""
        loop = self._loop = asyncio.get_running_loop()
        req_r, req_w = os.pipe()
        ack_r, ack_w = os.pipe()
        try:
            try:
                # The most an unprivileged process may ask for (pipe-max-size):
                # groups wait here while the writer syncs.
                fcntl.fcntl(req_w, F_SETPIPE_SZ, PIPE_SIZE)
            except OSError:
                pass
            self._proc = await asyncio.create_subprocess_exec(
                sys.executable,
                "-m",
                "dlog.bookie.journal_writer",
                str(req_r),
                str(ack_w),
                str(self.directory),
                *FileSettings.from_conf(self.conf).to_args(),
                pass_fds=(req_r, ack_w),
                stdin=asyncio.subprocess.DEVNULL,
                # The failpoints armed in this process hold in the writer too.
                env={**os.environ, "DLOG_FAILPOINTS": failpoints.spec()},
            )
        except BaseException:
            for fd in (req_r, req_w, ack_r, ack_w):
                os.close(fd)
            raise
        os.close(req_r)
        os.close(ack_w)
        os.set_blocking(ack_r, False)
        self._ack_fd = ack_r
        self._ready = loop.create_future()
        self._exited = loop.create_future()
        loop.add_reader(ack_r, self._read_acks)
        self._req, _ = await loop.connect_write_pipe(
            _RequestProtocol, os.fdopen(req_w, "wb", buffering=0)
        )
        try:
            async with asyncio.timeout(START_TIMEOUT):
                ready = await asyncio.shield(self._ready)
        except BaseException:
            await self._kill()
            raise
        if ready.status != jp.OK:
            await self._kill()
            raise OSError(ready.status, ready.message or os.strerror(ready.status))
        self._file_id = ready.file_id
        self.last_synced_mark = max(self.last_synced_mark, jf.LogMark(ready.file_id, ready.offset))
        failpoints.add_listener(self._forward_failpoints)

    def _forward_failpoints(self, spec: str) -> None:
        """A test armed failpoints in this process: the writer's I/O is
        where the journal's are."""
        if self._req is not None and not self._req.is_closing():
            self._req.write(jp.failpoints_request(spec))

    async def close(self) -> None:
        """Write and sync whatever is pending, then stop the writer."""
        if self._proc is None:
            return
        self._flush_group()
        self._closing = True
        failpoints.remove_listener(self._forward_failpoints)
        if self._req is not None:
            self._req.close()  # the writer sees EOF once it has read everything
        assert self._exited is not None
        await self._exited
        proc, self._proc = self._proc, None
        await proc.wait()

    async def _kill(self) -> None:
        """Stop a writer that never became ready."""
        self._closing = True
        if self._req is not None:
            self._req.abort()
        if self._proc is not None:
            proc, self._proc = self._proc, None
            with contextlib.suppress(ProcessLookupError):
                proc.kill()
            await proc.wait()
        self._stop_reading()

    @property
    def current_journal_id(self) -> int:
        return self._file_id

    @property
    def failed(self) -> OSError | None:
        return self._failed

    def resume(self) -> bool:
        """After ENOSPC, once the disk has room: accept records again, in a
        new journal file (the failed one may end in a partial group, which
        replay stops at). Other errors (EIO, a writer that died) stay: a
        restart decides. Whether the journal takes records again."""
        failed = self._failed
        if failed is None:
            return True
        if failed.errno != errno.ENOSPC or self._req is None or self._req.is_closing():
            return False
        self._failed = None
        self._req.write(jp.resume_request())
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
        if self._exited is not None and self._exited.done():  # nobody will answer
            now = time.monotonic()
            self._synced([group], self.last_synced_mark, EIO, SyncTimes(now, now, now))
            return
        self._inflight.append(group)
        assert self._req is not None
        self._req.writelines([jp.group_header(group.count, group.nbytes), *group.parts])

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
    # answers from the writer
    # ------------------------------------------------------------------
    def _read_acks(self) -> None:
        try:
            data = os.read(self._ack_fd, 65536)
        except BlockingIOError:
            return
        except OSError:
            data = b""
        if not data:
            self._writer_gone()
            return
        for ack in self._acks.feed(data):
            self._on_ack(ack)

    def _on_ack(self, ack: jp.Ack) -> None:
        if self._ready is not None and not self._ready.done():
            self._ready.set_result(ack)
            return
        s = self.stats
        s.writes, s.fsyncs, s.bytes_written = ack.writes, ack.fsyncs, ack.bytes_written
        s.rolls, s.records_synced = ack.rolls, ack.records_synced
        self._file_id = ack.file_id
        n = ack.groups - self._answered
        self._answered = ack.groups
        groups = [self._inflight.popleft() for _ in range(n)]
        status = EOK
        if ack.status > 0:
            self._fail(OSError(ack.status, ack.message or os.strerror(ack.status)))
            status = EIO
        elif ack.status == jp.STILL_FAILED:
            status = EIO
        times = SyncTimes(ack.taken, ack.written, ack.synced)
        self._synced(groups, jf.LogMark(ack.file_id, ack.offset), status, times)

    def _fail(self, error: OSError) -> None:
        self._failed = error
        log.error("journal write failed in %s: %s; failing all further adds", self.directory, error)
        if self._on_error is not None:
            self._on_error(error)

    def _writer_gone(self) -> None:
        """The answer pipe closed: the writer exited."""
        failpoints.remove_listener(self._forward_failpoints)
        self._stop_reading()
        # First: a group handed over from a callback run below fails at once.
        if self._exited is not None and not self._exited.done():
            self._exited.set_result(None)
        if self._ready is not None and not self._ready.done():
            self._ready.set_exception(
                OSError(
                    errno.EIO, f"journal writer for {self.directory} exited before it was ready"
                )
            )
        elif not self._closing or self._inflight:
            code = self._proc.returncode if self._proc is not None else None
            if self._failed is None or self._failed.errno == errno.ENOSPC:
                self._fail(
                    OSError(
                        errno.EIO,
                        f"journal writer process for {self.directory} exited (code {code})",
                    )
                )
            groups = list(self._inflight)
            self._inflight.clear()
            now = time.monotonic()
            self._synced(groups, self.last_synced_mark, EIO, SyncTimes(now, now, now))

    def _stop_reading(self) -> None:
        if self._ack_fd >= 0:
            if self._loop is not None and not self._loop.is_closed():
                self._loop.remove_reader(self._ack_fd)
            os.close(self._ack_fd)
            self._ack_fd = -1

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
