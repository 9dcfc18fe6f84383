"""The bookie's garbage collector (BookKeeper's GarbageCollectorThread).

Every ``gcWaitTime`` it:

1. **drops deleted ledgers**: it snapshots the ledgers this bookie stores
   *first*, then lists the ledgers whose metadata exists, and checks each
   stored ledger missing from the list with a direct read of its znode.
   Only a ledger whose znode is certainly gone (NoNode) is dropped: its
   state and entry locations leave RocksDB. Any ZooKeeper error keeps every
   ledger for this cycle. A ledger created after the snapshot cannot be a
   candidate, and one in the snapshot had its metadata before its first
   entry reached this bookie, so a new ledger is never mistaken for a
   deleted one.
2. **removes entry logs whose ledgers are all gone**, whole: no compaction,
   nothing rewritten (with ``entryLogPerLedgerEnabled`` this is how a
   deleted ledger's space comes back);
3. **compacts** (see :mod:`dlog.bookie.compactor`) the logs whose live
   fraction is below ``majorCompactionThreshold`` every
   ``majorCompactionInterval`` seconds, or below ``minorCompactionThreshold``
   every ``minorCompactionInterval`` seconds; a forced run
   (:meth:`GarbageCollector.trigger`, ``dlog shell triggergc``) does the same
   now.

Every ``gcOverreplicatedLedgerWaitTime`` it also drops closed ledgers whose
ensembles no longer include this bookie (re-replication moved them), unless
they are marked under-replicated.

While every ledger directory is full, compaction (which writes) is
suspended, unless ``isForceGCAllowWhenNoSpace``, which then runs it at once
to win space back. Steps 1 and 2 write next to nothing and always run.

Blocking work runs on the collector's own thread; index changes run on each
directory's storage thread, so they never interleave with a flush.
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
import time
from collections.abc import Awaitable, Callable
from concurrent.futures import ThreadPoolExecutor

from dlog.bookie.compactor import CompactionResult, Compactor, Throttle
from dlog.bookie.entry_log_metadata import EntryLogMetadata, compaction_candidates
from dlog.bookie.ledger_storage import DbLedgerStorage, SingleDirectoryDbLedgerStorage
from dlog.bookie.metrics import BookieMetrics
from dlog.conf.bookie import BookieConfig
from dlog.errors import DLogError, NoSuchLedgerError, ZooKeeperError
from dlog.ledger.metadata import LedgerState
from dlog.ledger.metadata_store import LedgerMetadataStore
from dlog.zk import NoNodeError

log = logging.getLogger(__name__)

MINOR = "minor"
MAJOR = "major"


@dataclasses.dataclass
class GcStats:
    """What collection has done since the bookie started (for tests, the
    shell and benchmarks; metrics carry the same)."""

    cycles: int = 0
    deleted_ledgers: int = 0
    overreplicated_ledgers: int = 0
    removed_logs: int = 0
    removed_bytes: int = 0
    compacted_logs: int = 0
    compacted_freed_bytes: int = 0
    rewritten_bytes: int = 0
    rewritten_entries: int = 0
    last_major: float = 0.0
    last_minor: float = 0.0


class GarbageCollector:
    def __init__(
        self,
        conf: BookieConfig,
        storage: DbLedgerStorage,
        metadata: LedgerMetadataStore,
        *,
        bookie_id: str,
        metrics: BookieMetrics | None = None,
        on_deleted: Callable[[int], None] | None = None,
        disks_full: Callable[[], bool] = lambda: False,
        is_underreplicated: Callable[[int], Awaitable[bool]] | None = None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.conf = conf
        self.storage = storage
        self.metadata = metadata
        self.bookie_id = bookie_id
        self.metrics = metrics
        self.on_deleted = on_deleted or (lambda lid: None)
        self.disks_full = disks_full
        self.is_underreplicated = is_underreplicated
        self.clock = clock
        self.stats = GcStats()
        self._executor = ThreadPoolExecutor(1, thread_name_prefix="bookie-gc")
        self._metas: dict[SingleDirectoryDbLedgerStorage, dict[int, EntryLogMetadata]] = {}
        self._compactors = {
            sd: Compactor(
                sd.entry_logger,
                sd.locations,
                sd.on_storage_thread,
                Throttle(
                    conf.compaction_rate_by_bytes
                    if conf.is_throttle_by_bytes
                    else conf.compaction_rate_by_entries,
                    by_bytes=conf.is_throttle_by_bytes,
                ),
            )
            for sd in storage.dirs
        }
        now = clock()
        self.stats.last_major = self.stats.last_minor = now
        self._last_overreplicated = now
        self._wake = asyncio.Event()
        self._forced: tuple[bool, bool] | None = None
        self._done: list[asyncio.Future[GcStats]] = []
        self._task: asyncio.Task[None] | None = None
        self._lock = asyncio.Lock()
        self._recovered = False

    # ------------------------------------------------------------------
    # running
    # ------------------------------------------------------------------
    def start(self) -> None:
        self._task = asyncio.get_running_loop().create_task(self._loop(), name="bookie-gc")

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            try:
                await self._task
            except asyncio.CancelledError:
                pass
            self._task = None
        async with self._lock:  # let a cycle in progress finish its step
            self._executor.shutdown(wait=True)

    def trigger(
        self, *, force_major: bool = False, force_minor: bool = False
    ) -> asyncio.Future[GcStats]:
        """Run a cycle now (``dlog shell triggergc``); with ``force_major``
        or ``force_minor`` compact by that threshold whatever the interval.
        The future resolves when the cycle has finished."""
        fut: asyncio.Future[GcStats] = asyncio.get_running_loop().create_future()
        major, minor = self._forced or (False, False)
        self._forced = (major or force_major, minor or force_minor)
        self._done.append(fut)
        self._wake.set()
        return fut

    def no_space(self) -> None:
        """Every ledger directory is full: with ``isForceGCAllowWhenNoSpace``
        collect and compact at once."""
        if self.conf.is_force_gc_allow_when_no_space:
            self.trigger(force_major=True, force_minor=True)

    async def _loop(self) -> None:
        wait = self.conf.gc_wait_time / 1000.0
        while True:
            try:
                async with asyncio.timeout(wait):
                    await self._wake.wait()
            except TimeoutError:
                pass
            self._wake.clear()
            forced, self._forced = self._forced, None
            done, self._done = self._done, []
            try:
                await self.run_cycle(
                    force_major=forced is not None and forced[0],
                    force_minor=forced is not None and forced[1],
                )
            except asyncio.CancelledError:
                raise
            except Exception as e:
                log.warning("garbage collection failed (retried in %.0f s): %s", wait, e)
                for fut in done:
                    if not fut.done():
                        fut.set_exception(e)
                continue
            for fut in done:
                if not fut.done():
                    fut.set_result(self.stats)

    async def run_cycle(self, *, force_major: bool = False, force_minor: bool = False) -> GcStats:
        """One collection: deleted ledgers, whole logs, then compaction if
        due (or forced)."""
        async with self._lock:
            loop = asyncio.get_running_loop()
            t0 = time.monotonic()
            if not self._recovered:
                for compactor in self._compactors.values():
                    await loop.run_in_executor(self._executor, compactor.recover)
                self._recovered = True
            await self._drop_deleted_ledgers()
            now = self.clock()
            if (
                now - self._last_overreplicated
                >= self.conf.gc_overreplicated_ledger_wait_time / 1000
            ):
                self._last_overreplicated = now
                await self._drop_overreplicated_ledgers()
            kind = self._compaction_due(now, force_major, force_minor)
            await loop.run_in_executor(self._executor, self._collect_logs, kind)
            self.stats.cycles += 1
            if self.metrics is not None:
                self.metrics.gc_cycle_latency.labels(kind or "gc").observe(time.monotonic() - t0)
            return self.stats

    def _compaction_due(self, now: float, force_major: bool, force_minor: bool) -> str | None:
        conf = self.conf
        if self.disks_full() and not conf.is_force_gc_allow_when_no_space:
            return None  # compaction writes: not while every disk is full
        major_on = conf.major_compaction_threshold > 0 and conf.major_compaction_interval > 0
        minor_on = conf.minor_compaction_threshold > 0 and conf.minor_compaction_interval > 0
        if force_major or (
            major_on and now - self.stats.last_major >= conf.major_compaction_interval
        ):
            self.stats.last_major = self.stats.last_minor = now
            return MAJOR
        if force_minor or (
            minor_on and now - self.stats.last_minor >= conf.minor_compaction_interval
        ):
            self.stats.last_minor = now
            return MINOR
        return None

    # ------------------------------------------------------------------
    # ledgers
    # ------------------------------------------------------------------
    async def _drop_deleted_ledgers(self) -> None:
        loop = asyncio.get_running_loop()
        local = {
            lid: sd
            for sd in self.storage.dirs
            for lid in await loop.run_in_executor(self._executor, sd.ledger_index.ledgers)
        }
        if not local:
            return
        try:
            listed = set(await self.metadata.list_ledgers())
        except (ZooKeeperError, DLogError) as e:
            log.info("garbage collection: cannot list ledgers (%s); keeping every ledger", e)
            return
        for lid in sorted(set(local) - listed):
            try:
                if await self.metadata.exists(lid):
                    continue
            except (ZooKeeperError, DLogError) as e:
                log.info("garbage collection: ledger %d: %s; keeping it", lid, e)
                continue
            await self._drop(local[lid], lid, "deleted")

    async def _drop(self, sd: SingleDirectoryDbLedgerStorage, lid: int, why: str) -> None:
        await asyncio.get_running_loop().run_in_executor(self._executor, sd.delete_ledger, lid)
        self.on_deleted(lid)
        if why == "deleted":
            self.stats.deleted_ledgers += 1
        else:
            self.stats.overreplicated_ledgers += 1
        if self.metrics is not None:
            self.metrics.gc_deleted_ledgers.labels(why).inc()
        log.info("garbage collection: dropped ledger %d (%s)", lid, why)

    async def _drop_overreplicated_ledgers(self) -> None:
        """Closed ledgers none of whose ensembles has this bookie any more."""
        loop = asyncio.get_running_loop()
        for sd in self.storage.dirs:
            for lid in await loop.run_in_executor(self._executor, sd.ledger_index.ledgers):
                try:
                    md, _ = await self.metadata.read(lid)
                except (NoSuchLedgerError, NoNodeError):
                    continue  # deleted: the next cycle's first step
                except (ZooKeeperError, DLogError) as e:
                    log.info("garbage collection: ledger %d: %s; keeping it", lid, e)
                    continue
                if md.state != LedgerState.CLOSED:
                    continue
                if any(self.bookie_id in ensemble for _, ensemble in md.ensembles):
                    continue
                if self.is_underreplicated is not None:
                    try:
                        if await self.is_underreplicated(lid):
                            continue
                    except (ZooKeeperError, DLogError):
                        continue
                await self._drop(sd, lid, "overreplicated")

    # ------------------------------------------------------------------
    # entry logs (the collector's thread)
    # ------------------------------------------------------------------
    def _collect_logs(self, kind: str | None) -> None:
        total = remaining = 0
        for sd in self.storage.dirs:
            settled = sd.settled_logs()
            if settled is None:
                continue  # a flush's index write is pending: next cycle
            # Read again, after ``settled``: a ledger created since the
            # cycle's first snapshot may already have entries in a settled log.
            live_ids = set(sd.ledger_index.ledgers())
            live = live_ids.__contains__
            metas = self._metas.setdefault(sd, {})
            for gone in set(metas) - set(settled):
                metas.pop(gone)
            for log_id in settled:
                if log_id not in metas:
                    metas[log_id] = self._read_metadata(sd, log_id)
            for meta in list(metas.values()):
                meta.drop_dead(live)
                if meta.empty:
                    freed = sd.entry_logger.remove_log(meta.log_id)
                    metas.pop(meta.log_id)
                    self.stats.removed_logs += 1
                    self.stats.removed_bytes += freed
                    if self.metrics is not None:
                        self.metrics.gc_reclaimed_bytes.labels("whole").inc(freed)
                        self.metrics.gc_reclaimed_logs.labels("whole").inc()
                    log.info(
                        "garbage collection: removed entry log %x (%d bytes)", meta.log_id, freed
                    )
            if kind is not None:
                threshold = (
                    self.conf.major_compaction_threshold
                    if kind == MAJOR
                    else self.conf.minor_compaction_threshold
                )
                for meta in compaction_candidates(metas.values(), threshold):
                    result = self._compactors[sd].compact(meta, live)
                    metas.pop(meta.log_id)
                    self._compacted(result)
            total += sum(m.total for m in metas.values())
            remaining += sum(m.remaining for m in metas.values())
        if self.metrics is not None:
            self.metrics.gc_live_ratio.set(remaining / total if total else 1.0)

    def _compacted(self, result: CompactionResult) -> None:
        self.stats.compacted_logs += 1
        self.stats.compacted_freed_bytes += result.freed_bytes
        self.stats.rewritten_bytes += result.rewritten_bytes
        self.stats.rewritten_entries += result.entries
        if self.metrics is not None:
            self.metrics.gc_reclaimed_bytes.labels("compacted").inc(
                max(0, result.freed_bytes - result.rewritten_bytes)
            )
            self.metrics.gc_reclaimed_logs.labels("compacted").inc()
            self.metrics.gc_rewritten_bytes.inc(result.rewritten_bytes)

    @staticmethod
    def _read_metadata(sd: SingleDirectoryDbLedgerStorage, log_id: int) -> EntryLogMetadata:
        ledgers = sd.entry_logger.read_ledgers_map(log_id)
        if ledgers is None:  # not sealed (a crash): scan it
            ledgers = {}
            for lid, _, _, size in sd.entry_logger.scan(log_id):
                ledgers[lid] = ledgers.get(lid, 0) + size + 4
        return EntryLogMetadata.from_ledgers(log_id, ledgers)
