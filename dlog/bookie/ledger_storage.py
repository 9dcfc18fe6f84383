"""DbLedgerStorage: entries in entry logs, their locations in RocksDB.

Adds go into the active half of a double-buffered write cache. When it
fills, the halves swap and the full one is flushed on the storage thread:
sorted by (ledgerId, entryId), appended to entry logs, synced, then the
locations are written to the index. If the other half is still flushing,
the add waits up to ``dbStorage_maxThrottleTimeMs`` and then fails with
ETOOMANYREQUESTS: memory stays bounded by the two halves.

A flush is all or nothing for the index: entries go to the entry logs and
are synced first, and only then are their locations indexed and the half
released. If a write or sync to the entry logs fails, the logs are rolled
back (:meth:`EntryLogManager.rollback`) and the half stays cached; if the
index write fails, the entries are durable and the retry only writes the
index. Either way no location points at bytes that are not there, and the
checkpoint (which flushes everything added before its journal mark) fails,
so the mark does not move past entries that are not stored. Retries back
off: a failed flush is retried no sooner than ``_backoff`` later (doubling
up to 5 s), and repeated failures are logged once per 30 s. ENOSPC is
reported through ``on_io_error`` at once, so the bookie turns read-only
without waiting for the next disk check.

Reads look in the write cache, then the read-ahead cache, then the entry
log through the location index. As in BookKeeper, ledgers are spread over
the ledger directories by id, each directory with its own caches, indexes
and entry logs.
"""

from __future__ import annotations

import asyncio
import errno
import hashlib
import logging
import os
import sys
import threading
import time
from array import array
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import TypeVar

from dlog.bookie.entry_location_index import EntryLocationIndex
from dlog.bookie.entry_log import EntryLogger
from dlog.bookie.entry_log_manager import EntryLogManager, create_entry_log_manager
from dlog.bookie.ledger_index import LedgerIndex, LedgerInfo
from dlog.bookie.pacer import FlushPacer
from dlog.bookie.read_cache import ReadCache
from dlog.bookie.write_cache import WriteCache
from dlog.conf.bookie import BookieConfig
from dlog.errors import NoSuchEntryError
from dlog.failpoints import failpoint

log = logging.getLogger(__name__)


def lower_thread_priority(nice: int) -> None:
    """Run the calling thread ``nice`` steps below the process's CPU
    priority (dbStorage_flushThreadNice). Linux only: elsewhere
    ``setpriority`` with a thread id would name a process."""
    if nice <= 0 or not sys.platform.startswith("linux"):
        return
    tid = threading.get_native_id()
    try:
        os.setpriority(os.PRIO_PROCESS, tid, min(19, os.getpriority(os.PRIO_PROCESS, tid) + nice))
    except OSError as e:
        log.warning("could not lower the storage thread's CPU priority: %s", e)


T = TypeVar("T")

#: Retry a failed flush no sooner than this (doubling up to the max).
MIN_BACKOFF = 0.1
MAX_BACKOFF = 5.0
#: Repeated flush failures are logged at most once per this many seconds.
LOG_EVERY = 30.0
#: Entries a flush writes between two pauses (see dlog.bookie.pacer): well
#: under a turn of the loop's (0.5 ms), a write of 1 MiB of 1 KiB entries.
SLICE = 1024

#: One ledger's entry ids and their entry-log locations, from one slice of a
#: flush: what the flush hands the location index.
IndexRun = tuple[int, "array[int]", "array[int]"]


class SingleDirectoryDbLedgerStorage:
    """The storage of the ledgers that live in one ledger directory."""

    def __init__(
        self,
        directory: Path,
        conf: BookieConfig,
        *,
        write_cache_bytes: int,
        read_cache_bytes: int,
        overflow_dirs: list[Path] | None = None,
        full_dirs: Callable[[], set[Path]] | None = None,
    ) -> None:
        self.directory = directory
        #: The indexes are open read-only: the disk was full at start
        #: (a read-write open of RocksDB writes). Reads work; flushes wait
        #: for :meth:`reopen_writable`.
        self.read_only_indexes = False
        try:
            self.ledger_index, self.locations = self._open_indexes(read_only=False)
        except OSError as e:
            if e.errno != errno.ENOSPC:
                raise
            log.error(
                "%s: cannot open the indexes for writing (%s); serving reads only until "
                "the disk has room",
                directory,
                e,
            )
            self.ledger_index, self.locations = self._open_indexes(read_only=True)
            self.read_only_indexes = True
        # Entry logs go to this directory while it has room, else to this
        # storage's overflow directories on the other ledger disks (see
        # DbLedgerStorage); its indexes stay here.
        overflow = list(overflow_dirs or [])
        for d in overflow:
            d.mkdir(parents=True, exist_ok=True)
        full = full_dirs or set

        def writable() -> list[Path]:
            now = full()
            if directory not in now:
                return [directory]
            return [d for d in overflow if d.parent not in now]

        self.entry_logger = EntryLogger(
            [directory, *overflow],
            flush_every_bytes=conf.flush_entrylog_bytes,
            writable_dirs=writable,
        )
        self.manager: EntryLogManager = create_entry_log_manager(
            self.entry_logger,
            log_size_limit=conf.log_size_limit,
            per_ledger=conf.entry_log_per_ledger_enabled,
            max_active_logs=conf.maximum_number_of_active_entry_logs,
            expiry_seconds=conf.entrylog_map_access_expiry_time_in_seconds,
        )
        half = max(1, write_cache_bytes // 2)
        self._active = WriteCache(half)
        self._flushing = WriteCache(half)
        self.read_cache = ReadCache(read_cache_bytes)
        self.read_ahead = conf.db_storage_read_ahead_cache_batch_size
        self.max_throttle = conf.db_storage_max_throttle_time_ms / 1000.0
        self._executor = ThreadPoolExecutor(
            1,
            thread_name_prefix=f"db-storage-{directory.parent.name}",
            initializer=lower_thread_priority,
            initargs=(conf.db_storage_flush_thread_nice,),
        )
        self._in_progress = False
        self._current: asyncio.Task[None] | None = None
        self._space: asyncio.Event | None = None
        self.failed: BaseException | None = None
        # Halves are numbered as they become active; a flush makes its
        # half's number durable. A checkpoint waits for the active number.
        self._active_gen = 1
        self._flushing_gen = 0
        self._durable_gen = 0
        #: Ledgers the garbage collector deleted -> the active half's number
        #: then: their cached entries are not written out.
        self._deleted: dict[int, int] = {}
        # Locations of a flush whose entry logs are durable but whose index
        # write failed: the retry writes only these.
        self._unindexed: list[IndexRun] | None = None
        self._retry_at = 0.0
        self._backoff = MIN_BACKOFF
        self._failures = 0
        self._last_logged = 0.0
        #: Called (on the event loop) with the directory and the error when
        #: a flush fails with an OSError: ENOSPC turns the bookie read-only.
        self.on_io_error: Callable[[Path, OSError], None] | None = None
        #: Called when a flush succeeds after failing.
        self.on_io_recovered: Callable[[Path], None] | None = None
        self.flushes = 0
        self.throttled_adds = 0
        self.rejected_adds = 0
        self.last_flush_seconds = 0.0
        self.last_flush_bytes = 0
        self.on_flush: Callable[[float], None] | None = None
        #: False from shutdown on: the last flush runs flat out.
        self.pacing = True
        self.pacer = FlushPacer(
            conf.db_storage_flush_max_cpu_percent,
            urgent=self._flush_urgent,
            lend_turns=conf.db_storage_flush_lend_turns,
        )

    def _open_indexes(self, *, read_only: bool) -> tuple[LedgerIndex, EntryLocationIndex]:
        ledger_index = LedgerIndex(self.directory / "ledgers", read_only=read_only)
        try:
            return ledger_index, EntryLocationIndex(
                self.directory / "locations", read_only=read_only
            )
        except BaseException:
            ledger_index.close()
            raise

    async def reopen_writable(self) -> None:
        """Reopen read-only indexes for writing (the disk has room again)."""
        if not self.read_only_indexes:
            return

        def reopen() -> None:
            ledger_index, locations = self._open_indexes(read_only=False)
            old = self.ledger_index, self.locations
            self.ledger_index, self.locations = ledger_index, locations
            for db in old:
                db.close()

        await asyncio.get_running_loop().run_in_executor(self._executor, reopen)
        self.read_only_indexes = False
        log.info("%s: indexes reopened for writing", self.directory)

    # -- ledger state ----------------------------------------------------------
    def ledger_info(self, ledger_id: int) -> LedgerInfo | None:
        return self.ledger_index.get(ledger_id)

    # -- adds (event loop) -----------------------------------------------------
    def try_add(self, ledger_id: int, entry_id: int, data: bytes) -> bool:
        """Cache an entry without waiting; False means the caller must wait."""
        if self._active.put(ledger_id, entry_id, data):
            return True
        if not self._in_progress and time.monotonic() >= self._retry_at:
            self._start_flush()
            return self._active.put(ledger_id, entry_id, data)
        return False

    async def add_wait(self, ledger_id: int, entry_id: int, data: bytes) -> bool:
        """Cache an entry, waiting for the flushing half; False after
        ``dbStorage_maxThrottleTimeMs`` (the bookie answers ETOOMANYREQUESTS)."""
        self.throttled_adds += 1
        deadline = time.monotonic() + self.max_throttle
        while True:
            if self.try_add(ledger_id, entry_id, data):
                return True
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                self.rejected_adds += 1
                return False
            if not self._in_progress:
                # Backing off after a failed flush: wait until the retry.
                remaining = min(remaining, max(0.001, self._retry_at - time.monotonic()))
            space = self._space_event()
            space.clear()
            try:
                async with asyncio.timeout(remaining):
                    await space.wait()
            except TimeoutError:
                pass

    def _space_event(self) -> asyncio.Event:
        if self._space is None:
            self._space = asyncio.Event()
        return self._space

    # -- flush ---------------------------------------------------------------
    def _start_flush(self) -> asyncio.Task[None]:
        if not self._flushing.count and self._unindexed is None:
            self._active, self._flushing = self._flushing, self._active
            self._flushing_gen = self._active_gen
            self._active_gen += 1
        self._in_progress = True
        self._current = asyncio.get_running_loop().create_task(self._run_flush())
        # A flush started by an add has nobody awaiting it: keep its error
        # from being reported as never retrieved (it is logged and kept in
        # ``failed``, and the next checkpoint surfaces it).
        self._current.add_done_callback(lambda t: t.cancelled() or t.exception())
        return self._current

    async def _run_flush(self) -> None:
        loop = asyncio.get_running_loop()
        t0 = time.monotonic()
        # The loop lends the flush thread its turns (see dlog.bookie.pacer).
        lender = self.pacer.turns.lend(loop) if self.pacer.lend_turns else None
        try:
            try:
                await loop.run_in_executor(self._executor, self._flush_frozen)
            finally:
                if lender is not None:
                    lender.cancel()
            self._durable_gen = self._flushing_gen
            # Entries of ledgers deleted while half N was active are in
            # halves up to N: once N is flushed, none is cached any more.
            for lid in [d for d, gen in self._deleted.items() if gen <= self._durable_gen]:
                del self._deleted[lid]
            if self._failures:
                log.info(
                    "ledger storage flush in %s succeeded after %d failed attempts",
                    self.directory,
                    self._failures,
                )
                if self.on_io_recovered is not None:
                    self.on_io_recovered(self.directory)
            self.failed = None
            self._failures = 0
            self._backoff = MIN_BACKOFF
            self._retry_at = 0.0
        except asyncio.CancelledError:
            raise
        except BaseException as e:
            self._flush_failed(e)
            raise
        finally:
            self._in_progress = False
            self._space_event().set()
            if self.on_flush is not None:
                self.on_flush(time.monotonic() - t0)

    def _flush_urgent(self) -> bool:
        """Pacing would make adds wait: the active half is over half full
        (or adds already wait for space), or the bookie is shutting down."""
        active = self._active
        return (
            not self.pacing
            or active.size * 2 > active.max_bytes
            or (self._space is not None and not self._space.is_set())
        )

    def _flush_failed(self, e: BaseException) -> None:
        self.failed = e
        self._failures += 1
        now = time.monotonic()
        self._retry_at = now + self._backoff
        self._backoff = min(self._backoff * 2, MAX_BACKOFF)
        if self._failures == 1 or now - self._last_logged >= LOG_EVERY:
            self._last_logged = now
            log.error(
                "ledger storage flush failed in %s: %s (%d attempts so far; retrying with "
                "backoff, the entries stay cached and journaled)",
                self.directory,
                e,
                self._failures,
            )
        if isinstance(e, OSError) and self.on_io_error is not None:
            self.on_io_error(self.directory, e)

    def _flush_frozen(self) -> None:
        """Storage thread: write the frozen half out, durably, in order.

        Work is batched per ledger so the per-entry Python cost is small,
        and the thread pauses between slices and index chunks: it shares
        the GIL with the event loop serving adds, and runs each slice in a
        turn the loop lends it (dlog.bookie.pacer)."""
        if self.read_only_indexes:
            raise OSError(
                errno.EROFS, f"{self.directory}: indexes are read-only until the disk has room"
            )
        t0 = time.monotonic()
        self.pacer.start()
        try:
            self._flush_frozen_paced()
        finally:
            self.pacer.finish()
        self.last_flush_seconds = time.monotonic() - t0

    def _flush_frozen_paced(self) -> None:
        cache = self._flushing
        batch = self._unindexed
        nbytes = 0
        if batch is None:
            batch = []
            self.manager.begin_flush()
            try:
                nbytes = self._write_entry_logs(cache, batch)
                self.manager.flush()
            except BaseException as e:
                self.manager.rollback()
                if isinstance(e, OSError) and e.errno == errno.ENOSPC:
                    # The retry must not write to the same full disk.
                    self.manager.abandon_open_logs()
                raise
            # The entries are durable in the entry logs from here on: if the
            # index write fails, the retry writes only the index.
            self._unindexed = batch
            failpoint("ledger_storage.flush.before_index")
        if batch:
            self.locations.add_runs(batch, pause=self.pacer.pause)
        self.ledger_index.flush()
        self._unindexed = None
        # Everything is in the index now: the frozen half can go.
        cache.release(pause=self.pacer.pause)
        self.flushes += 1
        self.last_flush_bytes = nbytes

    def _write_entry_logs(self, cache: WriteCache, batch: list[IndexRun]) -> int:
        nbytes = 0
        half = cache.count // 2
        written = 0
        for lid in cache.ledger_ids():
            if lid in self._deleted:
                continue  # deleted by the garbage collector since it was added
            for eids, datas in cache.sorted_blocks(lid):
                for start in range(0, len(eids), SLICE):
                    chunk = datas[start : start + SLICE]
                    locations = self.manager.add_entries(lid, chunk)
                    batch.append(
                        (lid, array("q", eids[start : start + SLICE]), array("q", locations))
                    )
                    nbytes += sum(map(len, chunk))
                    written += len(chunk)
                    if half and written >= half:
                        failpoint("ledger_storage.flush.mid_entry_logs")
                        half = 0
                    self.pacer.pause()
        return nbytes

    async def flush(self) -> None:
        """Flush everything cached so far (the checkpoint's first step);
        raises if that cannot be done now, so the checkpoint stops."""
        target = self._active_gen if self._active.count else self._flushing_gen
        while self._durable_gen < target:
            while self._in_progress and self._current is not None:
                try:
                    await asyncio.shield(self._current)
                except Exception:
                    pass  # retried below, or surfaced by our own attempt
            if self._durable_gen >= target:
                return
            await self._start_flush()

    async def checkpoint(self) -> None:
        await self.flush()
        await asyncio.get_running_loop().run_in_executor(self._executor, self.manager.checkpoint)

    # -- garbage collection (called from the collector's thread) ---------------
    def on_storage_thread(self, fn: Callable[[], T]) -> T:
        """Run ``fn`` on the flush thread and wait for it: index changes made
        this way never interleave with a flush's."""
        return self._executor.submit(fn).result()

    def settled_logs(self) -> list[int] | None:
        """Ids of the sealed entry logs every entry of which is indexed (the
        ones the collector may judge by the index); None while a failed
        flush's index write is still to be retried."""

        def snapshot() -> list[int] | None:
            if self._unindexed is not None:
                return None
            busy = self.manager.open_log_ids()
            return [i for i in self.entry_logger.log_ids() if i not in busy]

        return self.on_storage_thread(snapshot)

    def delete_ledger(self, ledger_id: int) -> None:
        """Drop a deleted ledger's state and entry locations, durably. Its
        entries still in the write cache are not written out (see
        :meth:`_write_entry_logs`); its bytes in entry logs become garbage."""

        def drop() -> None:
            self._deleted[ledger_id] = self._active_gen
            self.ledger_index.delete(ledger_id)
            self.locations.delete_ledger(ledger_id)
            self.locations.sync()
            self.ledger_index.flush()

        self.on_storage_thread(drop)

    # -- reads -------------------------------------------------------------------
    def cached_entry(self, ledger_id: int, entry_id: int) -> bytes | None:
        """An entry still in the write cache or the read-ahead cache (no I/O)."""
        data = self._active.get(ledger_id, entry_id)
        if data is None:
            data = self._flushing.get(ledger_id, entry_id)
        if data is None:
            data = self.read_cache.get(ledger_id, entry_id)
        return data

    def cached_entry_ids(self, ledger_id: int) -> set[int]:
        """Ids of the ledger's entries in the write caches (no I/O)."""
        return set(self._active.entry_ids(ledger_id)) | set(self._flushing.entry_ids(ledger_id))

    def indexed_entry_ids(self, ledger_id: int) -> list[int]:
        """Ids of the ledger's entries in the location index: call it off
        the event loop, after :meth:`cached_entry_ids` (entries move from
        the caches to the index, so none is missed in between)."""
        return self.locations.entry_ids(ledger_id)

    def last_entry_id(self, ledger_id: int) -> int | None:
        """The highest entry id stored for a ledger (may touch the index)."""
        best = None
        for cache in (self._active, self._flushing):
            e = cache.last_entry_id(ledger_id)
            if e is not None and (best is None or e > best):
                best = e
        stored = self.locations.last_entry(ledger_id)
        if stored is not None and (best is None or stored[0] > best):
            best = stored[0]
        return best

    def get_entry(self, ledger_id: int, entry_id: int) -> bytes:
        """Read an entry; may do disk I/O, so call it off the event loop."""
        if entry_id < 0:
            last = self.last_entry_id(ledger_id)
            if last is None:
                raise NoSuchEntryError(f"ledger {ledger_id} has no entries on this bookie")
            entry_id = last
        data = self.cached_entry(ledger_id, entry_id)
        if data is not None:
            return data
        loc = self.locations.get(ledger_id, entry_id)
        if loc is None:
            # It may have moved from the write cache to the index meanwhile.
            data = self.cached_entry(ledger_id, entry_id)
            if data is not None:
                return data
            raise NoSuchEntryError(f"ledger {ledger_id} entry {entry_id} is not on this bookie")
        try:
            data = self.entry_logger.read_entry(loc, ledger_id, entry_id)
        except FileNotFoundError:
            # Compacted meanwhile: the index moved to the new copy before the
            # old log was removed.
            moved = self.locations.get(ledger_id, entry_id)
            if moved is None or moved == loc:
                raise NoSuchEntryError(
                    f"ledger {ledger_id} entry {entry_id} is not on this bookie"
                ) from None
            loc = moved
            data = self.entry_logger.read_entry(loc, ledger_id, entry_id)
        if self.read_ahead:
            for eid, _, more in self.entry_logger.read_following(loc, ledger_id, self.read_ahead):
                self.read_cache.put(ledger_id, eid, more)
        return data

    # -- sizes -----------------------------------------------------------------
    @property
    def write_cache_size(self) -> int:
        return self._active.size + self._flushing.size

    @property
    def write_cache_count(self) -> int:
        return self._active.count + self._flushing.count

    async def close(self) -> None:
        loop = asyncio.get_running_loop()

        def _close() -> None:
            # Each step on its own: on a full disk some fail, and what they
            # would have written is still in the journal.
            steps = (
                ("entry logs", self.manager.close),
                ("readers", self.entry_logger.close),
                ("location index", self.locations.close),
                ("ledger index sync", self.ledger_index.flush),
                ("ledger index", self.ledger_index.close),
            )
            for what, step in steps:
                if what == "ledger index sync" and self.read_only_indexes:
                    continue
                try:
                    step()
                except Exception as e:
                    log.error("%s: closing the %s failed: %s", self.directory, what, e)

        await loop.run_in_executor(self._executor, _close)
        self._executor.shutdown(wait=True)


def overflow_dir_name(directory: Path) -> str:
    """Where, on another ledger disk, the storage of ``directory`` puts
    entry logs while its own disk is full: named after it (stable as long
    as its path is), so each storage's log ids stay its own."""
    return "overflow-" + hashlib.sha1(str(directory).encode()).hexdigest()[:12]


class DbLedgerStorage:
    """Ledgers spread over ledger directories by id, one storage per dir."""

    def __init__(
        self,
        conf: BookieConfig,
        ledger_dirs: list[Path],
        *,
        full_dirs: Callable[[], set[Path]] | None = None,
    ) -> None:
        n = len(ledger_dirs)
        self.dirs = [
            SingleDirectoryDbLedgerStorage(
                d,
                conf,
                write_cache_bytes=conf.write_cache_bytes // n,
                read_cache_bytes=conf.read_cache_bytes // n,
                overflow_dirs=[o / overflow_dir_name(d) for o in ledger_dirs if o != d],
                full_dirs=full_dirs,
            )
            for d in ledger_dirs
        ]

    def storage_for(self, ledger_id: int) -> SingleDirectoryDbLedgerStorage:
        return self.dirs[ledger_id % len(self.dirs)]

    def ledger_info(self, ledger_id: int) -> LedgerInfo | None:
        return self.storage_for(ledger_id).ledger_index.get(ledger_id)

    def set_master_key(self, ledger_id: int, master_key: bytes) -> LedgerInfo:
        return self.storage_for(ledger_id).ledger_index.set_master_key(ledger_id, master_key)

    def set_fenced(self, ledger_id: int) -> bool:
        return self.storage_for(ledger_id).ledger_index.set_fenced(ledger_id)

    def set_explicit_lac(self, ledger_id: int, lac_body: bytes) -> None:
        self.storage_for(ledger_id).ledger_index.set_explicit_lac(ledger_id, lac_body)

    def try_add(self, ledger_id: int, entry_id: int, data: bytes) -> bool:
        return self.storage_for(ledger_id).try_add(ledger_id, entry_id, data)

    async def add_wait(self, ledger_id: int, entry_id: int, data: bytes) -> bool:
        return await self.storage_for(ledger_id).add_wait(ledger_id, entry_id, data)

    def cached_entry(self, ledger_id: int, entry_id: int) -> bytes | None:
        return self.storage_for(ledger_id).cached_entry(ledger_id, entry_id)

    def get_entry(self, ledger_id: int, entry_id: int) -> bytes:
        return self.storage_for(ledger_id).get_entry(ledger_id, entry_id)

    def last_entry_id(self, ledger_id: int) -> int | None:
        return self.storage_for(ledger_id).last_entry_id(ledger_id)

    def cached_entry_ids(self, ledger_id: int) -> set[int]:
        return self.storage_for(ledger_id).cached_entry_ids(ledger_id)

    def indexed_entry_ids(self, ledger_id: int) -> list[int]:
        return self.storage_for(ledger_id).indexed_entry_ids(ledger_id)

    def write_close(self, ledger_id: int) -> None:
        self.storage_for(ledger_id).manager.write_close(ledger_id)

    def ledgers(self) -> list[int]:
        return sorted(lid for d in self.dirs for lid in d.ledger_index.ledgers())

    async def flush(self) -> None:
        await asyncio.gather(*(d.flush() for d in self.dirs))

    async def checkpoint(self) -> None:
        await asyncio.gather(*(d.checkpoint() for d in self.dirs))

    @property
    def failed(self) -> BaseException | None:
        return next((d.failed for d in self.dirs if d.failed is not None), None)

    @property
    def write_cache_size(self) -> int:
        return sum(d.write_cache_size for d in self.dirs)

    @property
    def read_cache_size(self) -> int:
        return sum(d.read_cache.size for d in self.dirs)

    async def close(self) -> None:
        for d in self.dirs:
            await d.close()
