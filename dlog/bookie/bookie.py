"""The bookie: ledger operations over the journal and ledger storage.

Operations here speak in ledger ids, entry ids and bytes, never in wire
messages (that is :mod:`dlog.bookie.request_processor`), and the bookie
never starts a server or registers itself: :mod:`dlog.bookie.service`
builds those around a started bookie. Everything runs on
the event loop except disk reads (a thread pool), the journal's writes and
fsyncs (the journal writer process) and storage flushes (the storage thread).

Ordering that durability rests on:

* an add goes to the write cache, then to the journal, and is acknowledged
  after the fsync that covers its journal record;
* a fence is recorded in the ledger index and journaled, and the fence
  read is answered only after that record is durable;
* a checkpoint takes the journal's synced mark *before* flushing storage,
  so everything before the mark is in the entry logs when the mark is
  persisted, and replay starts from it after a crash.
"""

from __future__ import annotations

import asyncio
import errno
import functools
import logging
import struct
from collections import OrderedDict
from collections.abc import Callable, Coroutine
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

from dlog.bookie import journal_format as jf
from dlog.bookie.checkpoint import Checkpointer, read_marks
from dlog.bookie.cookie import Cookie, verify_or_create
from dlog.bookie.disk import DiskMonitor
from dlog.bookie.garbage_collector import GarbageCollector
from dlog.bookie.journal import Journal, SyncTimes
from dlog.bookie.ledger_storage import DbLedgerStorage, SingleDirectoryDbLedgerStorage
from dlog.bookie.metrics import BookieMetrics
from dlog.bookie.registration import init_cluster
from dlog.conf.bookie import BookieConfig
from dlog.errors import (
    EBADREQ,
    EFENCED,
    EIO,
    ENOENTRY,
    ENOLEDGER,
    EOK,
    EREADONLY,
    ETOOMANYREQUESTS,
    EUA,
    BookieIOError,
    CorruptedFileError,
    NoSuchEntryError,
)
from dlog.tasks import BackgroundTasks
from dlog.uri import parse_metadata_service_uri
from dlog.zk import ZooKeeper

log = logging.getLogger(__name__)

Respond = Callable[[int], None]
#: Told of every read-only change; a coroutine it returns runs as one of the
#: bookie's tasks (cancelled when the bookie stops).
ReadOnlyListener = Callable[[bool], Coroutine[Any, Any, None] | None]
_IDS = struct.Struct(">qq")
_LAC = struct.Struct(">q")
MAX_LONG_POLL_SECONDS = 60.0
#: Ledger states kept in memory; older ones are reloaded from the index.
LEDGER_STATES = 16384


def _indexes_reason(directory: Path) -> str:
    return f"indexes read-only in {directory}"


def _storage_reason(directory: Path) -> str:
    return f"ledger storage failing in {directory}"


def _journal_reason(directory: Path) -> str:
    return f"journal disk full: {directory}"


class LedgerState:
    """What the bookie keeps in memory about a ledger it has seen."""

    __slots__ = ("ledger_id", "master_key", "fenced", "fencing", "lac", "lac_loaded", "waiters")

    def __init__(self, ledger_id: int, master_key: bytes, fenced: bool) -> None:
        self.ledger_id = ledger_id
        self.master_key = master_key
        self.fenced = fenced
        self.fencing: asyncio.Future[int] | None = None
        self.lac = -1
        self.lac_loaded = False
        self.waiters: list[asyncio.Future[None]] = []

    def advance_lac(self, lac: int) -> None:
        if lac > self.lac:
            self.lac = lac
            if self.waiters:
                waiters, self.waiters = self.waiters, []
                for w in waiters:
                    if not w.done():
                        w.set_result(None)


class Bookie:
    """A bookie's storage core: journals, ledger storage, disk checks and
    the operations on them. No network: its owner serves and registers it.

    ``shutdown`` is what the bookie runs when it must stop itself (it must
    turn read-only but readOnlyModeEnabled=false): its owner's stop, so the
    server and registration go first. By default the bookie stops alone.
    """

    def __init__(
        self,
        conf: BookieConfig,
        *,
        metrics: BookieMetrics | None = None,
        shutdown: Callable[[], Coroutine[Any, Any, None]] | None = None,
    ) -> None:
        self.conf = conf
        self.bookie_id = conf.resolved_bookie_id()
        self.metrics = metrics or BookieMetrics()
        self.journal_dirs = [Path(d) / "current" for d in conf.journal_directories]
        self.ledger_dirs = [Path(d) / "current" for d in conf.ledger_directories]
        self.uri = parse_metadata_service_uri(conf.metadata_service_uri)
        self.read_only = False
        self._read_only_reasons: set[str] = set()
        # The ledgers used lately (a bounded LRU: anyone can make a bookie
        # remember a ledger; the ledger index in RocksDB is the record).
        self._ledgers: OrderedDict[int, LedgerState] = OrderedDict()
        self.zk: ZooKeeper | None = None
        self.storage: DbLedgerStorage | None = None
        self.journals: list[Journal] = []
        self.checkpointer: Checkpointer | None = None
        self.gc: GarbageCollector | None = None
        self._all_ledger_dirs_full = False
        self._was_full: set[Path] = set()
        self.disk: DiskMonitor | None = None
        self.read_pool: ThreadPoolExecutor | None = None
        self._shutdown = shutdown or self.stop
        self._pressure_listeners: list[Callable[[bool], None]] = []
        self._read_only_listeners: list[ReadOnlyListener] = []
        self._under_pressure = False
        self._tasks = BackgroundTasks()
        self._stopped = asyncio.Event()
        self.replayed_records = 0
        self.instance_id: str | None = None

    # ------------------------------------------------------------------
    # lifecycle
    # ------------------------------------------------------------------
    async def start(self) -> None:
        """Open the storage, replay the journals and start the background
        work; on return the bookie can serve requests."""
        for d in self.journal_dirs + self.ledger_dirs:
            d.mkdir(parents=True, exist_ok=True)
        self.zk = ZooKeeper(self.uri.hosts, timeout=self.conf.zk_timeout / 1000.0)
        await self.zk.start()
        self.instance_id = await init_cluster(self.zk, self.uri.ledgers_root)
        cookie = Cookie.for_bookie(
            self.bookie_id,
            self.conf.journal_directories,
            self.conf.ledger_directories,
            self.instance_id,
        )
        await verify_or_create(
            self.zk, self.uri.ledgers_root, cookie, self.journal_dirs + self.ledger_dirs
        )

        loop = asyncio.get_running_loop()
        self.storage = await loop.run_in_executor(
            None,
            functools.partial(
                DbLedgerStorage, self.conf, self.ledger_dirs, full_dirs=self._full_dirs
            ),
        )
        for sd in self.storage.dirs:
            sd.on_io_error = self._storage_io_error
            sd.on_io_recovered = self._storage_recovered
            sd.on_flush = functools.partial(self._storage_flushed, sd)
            if sd.read_only_indexes:
                self.set_read_only(_indexes_reason(sd.directory), True)
        self.journals = [
            Journal(d, self.conf, on_error=self._journal_failed, observe=self._journal_synced)
            for d in self.journal_dirs
        ]
        marks = read_marks(self.ledger_dirs, len(self.journals))
        for journal, mark in zip(self.journals, marks, strict=True):
            await self._replay(journal, mark)
        for journal in self.journals:
            await journal.start()

        self.read_pool = ThreadPoolExecutor(
            self.conf.num_read_worker_threads, thread_name_prefix="bookie-read"
        )
        self.checkpointer = Checkpointer(
            self.journals,
            self.storage,
            self.ledger_dirs,
            self.conf.flush_interval,
            on_checkpoint=self.metrics.checkpoint_latency.observe,
        )
        self.checkpointer.start()
        self.gc = self._garbage_collector()
        self.gc.start()
        self.disk = DiskMonitor(
            self.journal_dirs + self.ledger_dirs,
            threshold=self.conf.disk_usage_threshold,
            lwm_threshold=self.conf.disk_usage_lwm_threshold,
            warn_threshold=self.conf.disk_usage_warn_threshold,
            interval_ms=self.conf.disk_check_interval,
            on_change=self._disk_changed,
        )
        self.disk.check()
        self.disk.start()
        self._reopen_if_room()

    async def stop(self) -> None:
        """Graceful shutdown of the core: checkpoint, close. Its owner has
        unregistered it and stopped serving first."""
        if self.disk is not None:
            await self.disk.stop()
        if self.gc is not None:
            await self.gc.stop()
        if self.checkpointer is not None:
            await self.checkpointer.stop()
        for journal in self.journals:
            if journal.failed is None:
                await journal.wait_synced()
        if self.checkpointer is not None and self.storage is not None:
            for sd in self.storage.dirs:
                sd.pacing = False  # nothing to make room for any more: flush flat out
            try:
                await self.checkpointer.checkpoint()
            except Exception as e:
                log.error("final checkpoint failed: %s (the journal will be replayed)", e)
        for journal in self.journals:
            await journal.close()
        if self.storage is not None:
            await self.storage.close()
        if self.read_pool is not None:
            self.read_pool.shutdown(wait=True, cancel_futures=True)
        # A bookie that stops itself runs this in one of its own tasks, which
        # cancel_all spares: cancelling it would cut the stop short, and
        # ``stopped`` would never be set (the process would never exit).
        self._tasks.cancel_all(close=False)
        if self.zk is not None:
            await self.zk.stop()
        self._stopped.set()
        log.info("bookie %s stopped", self.bookie_id)

    async def wait_stopped(self) -> None:
        await self._stopped.wait()

    @property
    def stopped(self) -> bool:
        return self._stopped.is_set()

    async def _replay(self, journal: Journal, mark: jf.LogMark) -> None:
        storage = self.storage
        assert storage is not None
        count = 0
        for record in journal.replay_records(mark):
            lid, eid = jf.parse_ids(record)
            if eid == jf.METAENTRY_ID_LEDGER_KEY:
                storage.set_master_key(lid, jf.parse_meta_payload(record))
            elif eid == jf.METAENTRY_ID_FENCE_KEY:
                storage.set_fenced(lid)
            elif eid == jf.METAENTRY_ID_LEDGER_EXPLICITLAC:
                storage.set_explicit_lac(lid, jf.parse_meta_payload(record))
            elif eid >= 0:
                if storage.ledger_info(lid) is None:
                    log.warning(
                        "journal holds entry %d of ledger %d without its key; skipped", eid, lid
                    )
                    continue
                if not storage.try_add(lid, eid, record) and not await storage.add_wait(
                    lid, eid, record
                ):
                    # Never skip a journaled entry: the bookie must not start
                    # without it (its disk is full and the write cache cannot
                    # hold the rest of the journal).
                    raise BookieIOError(
                        f"journal replay: cannot store ledger {lid} entry {eid}: "
                        f"{storage.storage_for(lid).failed or 'the write cache is full'}; "
                        "free space on the ledger disk or raise dbStorage_writeCacheMaxSizeMb"
                    )
            count += 1
        self.replayed_records += count

    # ------------------------------------------------------------------
    # state
    # ------------------------------------------------------------------
    def journal_for(self, ledger_id: int) -> Journal:
        return self.journals[ledger_id % len(self.journals)]

    def _state(self, ledger_id: int) -> LedgerState | None:
        st = self._ledgers.get(ledger_id)
        if st is not None:
            self._ledgers.move_to_end(ledger_id)
            return st
        info = self.storage.ledger_info(ledger_id)  # type: ignore[union-attr]
        if info is None:
            return None
        return self._keep(LedgerState(ledger_id, info.master_key, info.fenced))

    def _keep(self, st: LedgerState) -> LedgerState:
        ledgers = self._ledgers
        ledgers[st.ledger_id] = st
        for _ in range(len(ledgers) - LEDGER_STATES):
            lid, old = ledgers.popitem(last=False)
            if old.waiters or old.fencing is not None:
                ledgers[lid] = old  # in use: keep it (at the young end)
        return st

    def _state_or_create(self, ledger_id: int, master_key: bytes) -> LedgerState:
        """The ledger's state, created with ``master_key`` if this bookie has
        never seen it (raises OSError if that cannot be recorded)."""
        st = self._state(ledger_id)
        if st is None:
            self.storage.set_master_key(ledger_id, master_key)  # type: ignore[union-attr]
            self.journal_for(ledger_id).log(jf.ledger_key_record(ledger_id, master_key))
            st = self._keep(LedgerState(ledger_id, master_key, False))
            st.lac_loaded = True
        return st

    async def _load_lac(self, st: LedgerState) -> None:
        """After a restart, learn the LAC from the last stored entry."""
        if st.lac_loaded:
            return
        storage = self.storage
        assert storage is not None  # opened by start(), before any request
        loop = asyncio.get_running_loop()
        try:
            last = await loop.run_in_executor(self.read_pool, storage.get_entry, st.ledger_id, -1)
            if len(last) >= 24:
                st.advance_lac(_LAC.unpack_from(last, 16)[0])
        except NoSuchEntryError:
            pass
        info = storage.ledger_info(st.ledger_id)
        if info is not None and info.explicit_lac is not None and len(info.explicit_lac) >= 16:
            st.advance_lac(_LAC.unpack_from(info.explicit_lac, 8)[0])
        st.lac_loaded = True

    # ------------------------------------------------------------------
    # operations
    # ------------------------------------------------------------------
    def add_entry(
        self,
        ledger_id: int,
        entry_id: int,
        master_key: bytes,
        body: bytes,
        recovery: bool,
        respond: Respond,
    ) -> None:
        """Store an entry; ``respond(status)`` once it is durable (or refused)."""
        if self.read_only:
            respond(EREADONLY)
            return
        if entry_id < 0 or len(body) < 24 or body[:16] != _IDS.pack(ledger_id, entry_id):
            respond(EBADREQ)
            return
        try:
            st = self._state_or_create(ledger_id, master_key)
        except OSError as e:
            log.error("ledger %d: cannot record its key: %s", ledger_id, e)
            respond(EIO)
            return
        if st.master_key != master_key:
            respond(EUA)
            return
        if st.fenced and not recovery:
            respond(EFENCED)
            return
        if self.storage.try_add(ledger_id, entry_id, body):  # type: ignore[union-attr]
            st.advance_lac(_LAC.unpack_from(body, 16)[0])
            self.journal_for(ledger_id).log(body, respond)
        else:
            self.metrics.throttled_adds.inc()
            self._tasks.spawn(self._add_throttled(st, ledger_id, entry_id, body, recovery, respond))

    async def _add_throttled(
        self,
        st: LedgerState,
        ledger_id: int,
        entry_id: int,
        body: bytes,
        recovery: bool,
        respond: Respond,
    ) -> None:
        if not await self.storage.add_wait(ledger_id, entry_id, body):  # type: ignore[union-attr]
            respond(ETOOMANYREQUESTS)
            return
        if st.fenced and not recovery:
            respond(EFENCED)
            return
        st.advance_lac(_LAC.unpack_from(body, 16)[0])
        self.journal_for(ledger_id).log(body, respond)

    async def fence(self, ledger_id: int, master_key: bytes) -> int:
        """Fence a ledger durably (creating it if this bookie never saw it,
        so a late add from the old writer is still refused)."""
        try:
            st = self._state_or_create(ledger_id, master_key)
        except OSError as e:
            log.error("ledger %d: cannot record its key: %s", ledger_id, e)
            return EIO
        if st.master_key != master_key:
            return EUA
        if st.fencing is not None:
            return await asyncio.shield(st.fencing)
        if st.fenced:
            return EOK
        loop = asyncio.get_running_loop()
        fut: asyncio.Future[int] = loop.create_future()
        st.fencing = fut
        st.fenced = True  # refuse adds from now on, even if recording it fails
        try:
            self.storage.set_fenced(ledger_id)  # type: ignore[union-attr]
        except OSError as e:
            log.error("ledger %d: cannot record the fence: %s", ledger_id, e)
            st.fencing = None
            fut.set_result(EIO)
            return EIO

        def done(status: int) -> None:
            if not fut.done():
                fut.set_result(status)

        self.journal_for(ledger_id).log(jf.fence_record(ledger_id), done)
        status = await fut
        st.fencing = None
        # BP-32: a fence means the writer is gone; the ledger is write-closed.
        self.storage.write_close(ledger_id)  # type: ignore[union-attr]
        return EOK if status == EOK else EIO

    def cached_read(
        self, ledger_id: int, entry_id: int
    ) -> tuple[int, bytes | None, int | None] | None:
        """A read answered from memory, or None when it needs the disk."""
        st = self._state(ledger_id)
        if st is None:
            return ENOLEDGER, None, None
        if entry_id < 0:
            return None
        body = self.storage.cached_entry(ledger_id, entry_id)  # type: ignore[union-attr]
        if body is None:
            return None
        return EOK, body, st.lac if st.lac_loaded else None

    async def read_entry(
        self, ledger_id: int, entry_id: int, *, fence: bool = False, master_key: bytes | None = None
    ) -> tuple[int, bytes | None, int | None]:
        """(status, entry, bookie's LAC) for a read; entry -1 is the last entry."""
        if fence:
            if master_key is None:
                return EBADREQ, None, None
            status = await self.fence(ledger_id, master_key)
            if status != EOK:
                return status, None, None
        st = self._state(ledger_id)
        if st is None:
            return ENOLEDGER, None, None
        storage = self.storage
        assert storage is not None  # opened by start(), before any request
        loop = asyncio.get_running_loop()
        body = storage.cached_entry(ledger_id, entry_id) if entry_id >= 0 else None
        if body is None:
            try:
                body = await loop.run_in_executor(
                    self.read_pool, storage.get_entry, ledger_id, entry_id
                )
            except NoSuchEntryError:
                return ENOENTRY, None, st.lac if st.lac_loaded else None
            except (CorruptedFileError, OSError) as e:
                log.error("read of ledger %d entry %d failed: %s", ledger_id, entry_id, e)
                return EIO, None, None
        return EOK, body, st.lac if st.lac_loaded else None

    async def wait_for_lac(
        self, ledger_id: int, previous_lac: int, timeout_ms: int
    ) -> tuple[int, int]:
        """Long poll: return (status, lac) once the LAC passes ``previous_lac``
        or the timeout expires (then the LAC is simply not past it)."""
        st = self._state(ledger_id)
        if st is None:
            return ENOLEDGER, -1
        await self._load_lac(st)
        if st.lac > previous_lac:
            return EOK, st.lac
        timeout = min(max(timeout_ms, 0) / 1000.0, MAX_LONG_POLL_SECONDS)
        fut: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        st.waiters.append(fut)
        try:
            async with asyncio.timeout(timeout):
                await fut
        except TimeoutError:
            pass
        finally:
            if fut in st.waiters:
                st.waiters.remove(fut)
        return EOK, st.lac

    def write_lac(
        self, ledger_id: int, lac: int, master_key: bytes, body: bytes, respond: Respond
    ) -> None:
        if self.read_only:
            respond(EREADONLY)
            return
        try:
            st = self._state_or_create(ledger_id, master_key)
            if st.master_key != master_key:
                respond(EUA)
                return
            self.storage.set_explicit_lac(ledger_id, body)  # type: ignore[union-attr]
        except OSError as e:
            log.error("ledger %d: cannot record its explicit LAC: %s", ledger_id, e)
            respond(EIO)
            return
        st.advance_lac(lac)
        self.journal_for(ledger_id).log(jf.explicit_lac_record(ledger_id, body), respond)

    async def read_lac(self, ledger_id: int) -> tuple[int, bytes | None, bytes | None]:
        """(status, explicit LAC body, last entry). A ledger with neither is
        ENOENTRY, an unknown one included: upstream's ReadLacProcessorV3
        answers ENOENTRY whenever both lookups come back empty."""
        st = self._state(ledger_id)
        if st is None:
            return ENOENTRY, None, None
        info = self.storage.ledger_info(ledger_id)  # type: ignore[union-attr]
        lac_body = info.explicit_lac if info is not None else None
        status, last, _ = await self.read_entry(ledger_id, -1)
        if status not in (EOK, ENOENTRY):
            return status, None, None
        if lac_body is None and last is None:
            return ENOENTRY, None, None
        return EOK, lac_body, last

    async def entries_of_ledger(self, ledger_id: int) -> tuple[int, list[int]]:
        """(status, ids of the ledger's entries on this bookie, ascending);
        ENOLEDGER for a ledger this bookie never saw."""
        if self._state(ledger_id) is None:
            return ENOLEDGER, []
        storage = self.storage
        assert storage is not None  # opened by start(), before any request
        cached = storage.cached_entry_ids(ledger_id)
        loop = asyncio.get_running_loop()
        try:
            indexed = await loop.run_in_executor(
                self.read_pool, storage.indexed_entry_ids, ledger_id
            )
        except OSError as e:
            log.error("listing the entries of ledger %d failed: %s", ledger_id, e)
            return EIO, []
        return EOK, sorted(cached.union(indexed))

    def force_ledger(self, ledger_id: int, respond: Respond) -> None:
        self.journal_for(ledger_id).log(jf.force_ledger_record(ledger_id), respond)

    def write_close(self, ledger_id: int, master_key: bytes) -> int:
        """BP-32 advisory write close. Unknown ledgers are fine: EOK."""
        st = self._state(ledger_id)
        if st is None:
            self.metrics.write_close.inc(labels=("false",))
            return EOK
        if st.master_key != master_key:
            return EUA
        self.storage.write_close(ledger_id)  # type: ignore[union-attr]
        self.metrics.write_close.inc(labels=("true",))
        return EOK

    def disk_capacity(self) -> tuple[int, int]:
        assert self.disk is not None
        return self.disk.capacity()

    # ------------------------------------------------------------------
    # health: read-only, pressure
    # ------------------------------------------------------------------
    @property
    def read_only_reasons(self) -> frozenset[str]:
        """Why the bookie is read-only (empty while writable)."""
        return frozenset(self._read_only_reasons)

    def set_read_only(self, reason: str, on: bool) -> None:
        if on:
            self._read_only_reasons.add(reason)
        else:
            self._read_only_reasons.discard(reason)
        new = bool(self._read_only_reasons)
        if new == self.read_only:
            return
        if new and not self.conf.read_only_mode_enabled:
            log.error(
                "bookie must turn read-only (%s) but readOnlyModeEnabled=false: shutting down",
                reason,
            )
            self._tasks.spawn(self._shutdown())
            return
        self.read_only = new
        self.metrics.read_only.set(1 if new else 0)
        log.warning(
            "bookie is now %s (%s)",
            "read-only" if new else "writable",
            ", ".join(sorted(self._read_only_reasons)) or reason,
        )
        for listener in list(self._read_only_listeners):
            announce = listener(new)
            if announce is not None:
                self._tasks.spawn(announce)

    def _garbage_collector(self) -> GarbageCollector:
        from dlog.ledger.metadata_store import LedgerMetadataStore
        from dlog.ledger.underreplication import get_underreplicated

        zk, root = self.zk, self.uri.ledgers_root
        assert zk is not None and self.storage is not None

        async def underreplicated(ledger_id: int) -> bool:
            return await get_underreplicated(zk, root, ledger_id) is not None

        return GarbageCollector(
            self.conf,
            self.storage,
            LedgerMetadataStore(zk, root),
            bookie_id=self.bookie_id,
            metrics=self.metrics,
            on_deleted=self._forget_ledger,
            disks_full=lambda: self._all_ledger_dirs_full,
            is_underreplicated=underreplicated,
        )

    def _forget_ledger(self, ledger_id: int) -> None:
        """The garbage collector dropped the ledger's data."""
        self._ledgers.pop(ledger_id, None)

    def _full_dirs(self) -> set[Path]:
        return set(self.disk.full) if self.disk is not None else set()

    def _disk_changed(self, full: set[Path]) -> None:
        """A ledger directory that fills up sends its storage's new entry
        logs to the other ledger disks; the bookie turns read-only only
        when every ledger directory is full, or a journal directory is."""
        self._all_ledger_dirs_full = all(d in full for d in self.ledger_dirs)
        if self._all_ledger_dirs_full and self.gc is not None:
            self.gc.no_space()
        if self.storage is not None:
            for sd in self.storage.dirs:
                if sd.directory in full and sd.directory not in self._was_full:
                    sd.manager.rotate_all()
        self._was_full = set(full)
        journal_full = any(d in full for d in self.journal_dirs)
        self.set_read_only("disk full", self._all_ledger_dirs_full or journal_full)
        if self.disk is None:
            return  # still starting: start() checks once the monitor exists
        for journal in self.journals:
            if journal.failed is not None and journal.directory not in full and journal.resume():
                self.set_read_only(_journal_reason(journal.directory), False)
        self._reopen_if_room()

    def _reopen_if_room(self) -> None:
        """Indexes opened read-only on a full disk are reopened for writing
        once the disk monitor finds room (below diskUsageLwmThreshold)."""
        if self.storage is None or self.disk is None:
            return
        for d in self.storage.dirs:
            if d.read_only_indexes and d.directory not in self.disk.full:
                self._tasks.spawn(self._reopen(d))

    async def _reopen(self, d: SingleDirectoryDbLedgerStorage) -> None:
        try:
            await d.reopen_writable()
        except OSError as e:
            log.warning("%s: still cannot open the indexes for writing: %s", d.directory, e)
            if self.disk is not None:
                self.disk.mark_full(d.directory)  # try again when the monitor finds room
            return
        self.set_read_only(_indexes_reason(d.directory), False)

    def _storage_io_error(self, directory: Path, error: OSError) -> None:
        """A flush failed: ENOSPC makes the directory full at once (read-only
        now, not at the next disk check); other errors hold the bookie
        read-only until a flush succeeds."""
        if error.errno == errno.ENOSPC and self.disk is not None:
            self.disk.mark_full(directory)
        elif error.errno != errno.EROFS:
            self.set_read_only(_storage_reason(directory), True)

    def _storage_recovered(self, directory: Path) -> None:
        self.set_read_only(_storage_reason(directory), False)

    def _journal_failed(self, error: OSError) -> None:
        if error.errno == errno.ENOSPC and self.disk is not None:
            # Resumed once the monitor finds room on its disk again.
            for journal in self.journals:
                if journal.failed is error:
                    self.set_read_only(_journal_reason(journal.directory), True)
                    self.disk.mark_full(journal.directory)
            return
        self.set_read_only(f"journal failed: {error.strerror or error}", True)

    def _journal_synced(
        self, groups: list[tuple[float, int]], times: SyncTimes, done: float
    ) -> None:
        # Waits are counted once per record (each record of a group as long
        # as its first one), so their percentiles are those of the adds: a
        # batch that a stall made big weighs as much as the adds it held.
        # The write and the fsync are operations, counted once per batch.
        m = self.metrics
        records = 0
        for first_enqueued, count in groups:
            m.journal_add_latency.observe(times.synced - first_enqueued, count)
            m.journal_queue_latency.observe(times.taken - first_enqueued, count)
            m.journal_group_size.observe(count)
            records += count
        m.journal_write_latency.observe(times.written - times.taken)
        if self.conf.journal_sync_data:
            m.journal_fsync_latency.observe(times.synced - times.written)
        m.journal_callback_latency.observe(done - times.synced, records)
        if self._under_pressure and self.journal_pending() <= self.conf.journal_queue_size // 2:
            self._set_pressure(False)

    def journal_pending(self) -> int:
        return sum(j.pending_records for j in self.journals)

    def check_pressure(self) -> bool:
        """True while the journal queue is over ``journalQueueSize``: the
        server stops reading requests until it drains."""
        if not self._under_pressure and self.journal_pending() > self.conf.journal_queue_size:
            self._set_pressure(True)
        return self._under_pressure

    def _set_pressure(self, on: bool) -> None:
        self._under_pressure = on
        for listener in list(self._pressure_listeners):
            listener(on)

    def add_pressure_listener(self, listener: Callable[[bool], None]) -> None:
        self._pressure_listeners.append(listener)

    def add_read_only_listener(self, listener: ReadOnlyListener) -> None:
        """``listener(read_only)`` after every change (registration follows it)."""
        self._read_only_listeners.append(listener)

    def _storage_flushed(self, sd: SingleDirectoryDbLedgerStorage, seconds: float) -> None:
        self.metrics.flush_latency.observe(seconds)
        for outcome, n in sd.pacer.turns.take_counts().items():
            if n:
                self.metrics.flush_turns.inc(n, (outcome,))

    def refresh_gauges(self) -> None:
        m = self.metrics
        m.journal_queue.set(self.journal_pending())
        if self.storage is not None:
            m.write_cache_size.set(self.storage.write_cache_size)
            m.read_cache_size.set(self.storage.read_cache_size)
