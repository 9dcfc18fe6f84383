"""DbLedgerStorage: entries in entry logs, their locations in RocksDB.

Adds go into the active half of a double-buffered write cache. When it
fills, the halves swap and the full one is flushed on the storage thread:
sorted by (ledgerId, entryId), appended to entry logs, synced, then the
locations are written to the index. If the other half is still flushing,
the add waits up to ``dbStorage_maxThrottleTimeMs`` and then fails with
ETOOMANYREQUESTS: memory stays bounded by the two halves.

Reads look in the write cache, then the read-ahead cache, then the entry
log through the location index. As in BookKeeper, ledgers are spread over
the ledger directories by id, each directory with its own caches, indexes
and entry logs.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from itertools import repeat
from pathlib import Path

from dlog.bookie.entry_location_index import EntryLocationIndex
from dlog.bookie.entry_log import EntryLogger
from dlog.bookie.entry_log_manager import EntryLogManager, create_entry_log_manager
from dlog.bookie.ledger_index import LedgerIndex, LedgerInfo
from dlog.bookie.read_cache import ReadCache
from dlog.bookie.write_cache import WriteCache
from dlog.conf.bookie import BookieConfig
from dlog.errors import NoSuchEntryError
from dlog.failpoints import failpoint

log = logging.getLogger(__name__)


class SingleDirectoryDbLedgerStorage:
    """The storage of the ledgers that live in one ledger directory."""

    def __init__(
        self,
        directory: Path,
        conf: BookieConfig,
        *,
        write_cache_bytes: int,
        read_cache_bytes: int,
    ) -> None:
        self.directory = directory
        self.ledger_index = LedgerIndex(directory / "ledgers")
        self.locations = EntryLocationIndex(directory / "locations")
        self.entry_logger = EntryLogger([directory], flush_every_bytes=conf.flush_entrylog_bytes)
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
            1, thread_name_prefix=f"db-storage-{directory.parent.name}"
        )
        self._in_progress = False
        self._current: asyncio.Task[None] | None = None
        self._space: asyncio.Event | None = None
        self.failed: BaseException | None = None
        self.flushes = 0
        self.throttled_adds = 0
        self.rejected_adds = 0
        self.last_flush_seconds = 0.0
        self.last_flush_bytes = 0
        self.on_flush: Callable[[float], None] | None = None

    # -- ledger state ----------------------------------------------------------
    def ledger_info(self, ledger_id: int) -> LedgerInfo | None:
        return self.ledger_index.get(ledger_id)

    # -- adds (event loop) -----------------------------------------------------
    def try_add(self, ledger_id: int, entry_id: int, data: bytes) -> bool:
        """Cache an entry without waiting; False means the caller must wait."""
        if self._active.put(ledger_id, entry_id, data):
            return True
        if not self._in_progress:
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
            space = self._space_event()
            space.clear()
            try:
                await asyncio.wait_for(space.wait(), remaining)
            except TimeoutError:
                pass

    def _space_event(self) -> asyncio.Event:
        if self._space is None:
            self._space = asyncio.Event()
        return self._space

    # -- flush ---------------------------------------------------------------
    def _start_flush(self) -> asyncio.Task[None]:
        if not self._flushing.count:
            self._active, self._flushing = self._flushing, self._active
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
        try:
            await loop.run_in_executor(self._executor, self._flush_frozen)
            self.failed = None
        except asyncio.CancelledError:
            raise
        except BaseException as e:
            self.failed = e
            log.error("ledger storage flush failed in %s: %s", self.directory, e)
            raise
        finally:
            self._in_progress = False
            self._space_event().set()
            if self.on_flush is not None:
                self.on_flush(time.monotonic() - t0)

    def _flush_frozen(self) -> None:
        """Storage thread: write the frozen half out, durably, in order.

        Work is batched per ledger so the per-entry Python cost is small,
        and the thread yields between ledgers and index chunks: it shares
        the GIL with the event loop serving adds."""
        t0 = time.monotonic()
        cache = self._flushing
        batch: list[tuple[int, int, int]] = []
        nbytes = 0
        half = cache.count // 2
        written = 0
        for lid in cache.ledger_ids():
            eids, datas = cache.sorted_ledger(lid)
            for start in range(0, len(eids), 4096):
                chunk = datas[start : start + 4096]
                locations = self.manager.add_entries(lid, chunk)
                batch.extend(
                    zip(
                        repeat(lid, len(locations)),
                        eids[start : start + 4096],
                        locations,
                        strict=True,
                    )
                )
                nbytes += sum(map(len, chunk))
                written += len(chunk)
                if half and written >= half:
                    failpoint("ledger_storage.flush.mid_entry_logs")
                    half = 0
                time.sleep(0)
        self.manager.flush()
        failpoint("ledger_storage.flush.before_index")
        if batch:
            self.locations.add_batch(batch)
        self.ledger_index.flush()
        # Everything is in the index now: the frozen half can go.
        cache.release()
        self.flushes += 1
        self.last_flush_seconds = time.monotonic() - t0
        self.last_flush_bytes = nbytes

    async def flush(self) -> None:
        """Flush everything cached so far (the checkpoint's first step)."""
        while self._in_progress and self._current is not None:
            try:
                await asyncio.shield(self._current)
            except Exception:
                pass
        await self._start_flush()

    async def checkpoint(self) -> None:
        await self.flush()
        await asyncio.get_running_loop().run_in_executor(self._executor, self.manager.checkpoint)

    # -- reads -------------------------------------------------------------------
    def cached_entry(self, ledger_id: int, entry_id: int) -> bytes | None:
        """An entry still in the write cache or the read-ahead cache (no I/O)."""
        data = self._active.get(ledger_id, entry_id)
        if data is None:
            data = self._flushing.get(ledger_id, entry_id)
        if data is None:
            data = self.read_cache.get(ledger_id, entry_id)
        return data

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
            self.manager.close()
            self.entry_logger.close()
            self.locations.close()
            self.ledger_index.flush()
            self.ledger_index.close()

        await loop.run_in_executor(self._executor, _close)
        self._executor.shutdown(wait=True)


class DbLedgerStorage:
    """Ledgers spread over ledger directories by id, one storage per dir."""

    def __init__(self, conf: BookieConfig, ledger_dirs: list[Path]) -> None:
        n = len(ledger_dirs)
        self.dirs = [
            SingleDirectoryDbLedgerStorage(
                d,
                conf,
                write_cache_bytes=conf.write_cache_bytes // n,
                read_cache_bytes=conf.read_cache_bytes // n,
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
