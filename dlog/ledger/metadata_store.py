"""Ledger metadata in ZooKeeper, laid out as BookKeeper's hierarchical manager.

The counterpart of BookKeeper's ``AbstractZkLedgerManager`` with
``HierarchicalLedgerManager`` and ``LongZkLedgerIdGenerator``: same znodes,
same bytes, same compare-and-set on the znode version, so a BookKeeper
client or shell pointed at the same ledgers root sees the same ledgers.

:mod:`dlog.zk` retries transient ZooKeeper errors. Writes that may have
landed before the connection dropped are checked for rather than failed: a
create recognises its own creator token (cToken), a conditional write
retried as a whole (:meth:`ZooKeeper.retry <dlog.zk.ZooKeeper.retry>`)
recognises its own bytes, a delete takes "already gone" as done.
"""

from __future__ import annotations

import asyncio
import inspect
import logging
import random
from collections.abc import Callable, Iterable
from typing import Any

from dlog.errors import (
    IncorrectParameterError,
    LedgerExistsError,
    LedgerIdOverflowError,
    MetadataVersionError,
    NoSuchLedgerError,
)
from dlog.ledger import layout
from dlog.ledger.metadata import METADATA_VERSIONS, LedgerMetadata, deserialize, serialize
from dlog.zk import (
    BadVersionError,
    EventType,
    NodeExistsError,
    NoNodeError,
    NotEmptyError,
    WatchedEvent,
    ZooKeeper,
    ZooKeeperClosedError,
    ZooKeeperError,
)

log = logging.getLogger(__name__)

__all__ = ["LedgerMetadataStore", "MetadataCallback", "MetadataWatch"]

#: Called with ``(metadata, znode version)`` on every observed change, and
#: with ``None`` once the ledger is gone. May be a coroutine function.
MetadataCallback = Callable[[tuple[LedgerMetadata, int] | None], Any]

_HOB_PREFIX = "HOB-"
_MAX_HOB_DIRS = 3  # LongZkLedgerIdGenerator keeps the newest three
_LIST_CONCURRENCY = 32


class LedgerMetadataStore:
    """Create, read, compare-and-set, delete, list and watch ledger metadata."""

    def __init__(self, zk: ZooKeeper, ledgers_root: str, format_version: int = -1) -> None:
        layout.ledger_path(ledgers_root, 0)  # validates the root
        self.zk = zk
        if format_version not in METADATA_VERSIONS:
            raise IncorrectParameterError(
                f"ledgerMetadataVersion {format_version} is not one of {METADATA_VERSIONS}"
            )
        #: ``ledgerMetadataVersion``. Every create and write is put in this
        #: format here, so no path (close, recovery, ensemble change) writes 4 under 3.
        self.format_version = format_version
        self.ledgers_root = ledgers_root.rstrip("/") or "/"
        self._root = "" if self.ledgers_root == "/" else self.ledgers_root
        self._long_idgen_present: bool | None = None
        self._hob_dirs: list[int] | None = None

    def __repr__(self) -> str:
        return f"LedgerMetadataStore({self.zk.hosts!r}, {self.ledgers_root!r})"

    def ledger_path(self, ledger_id: int) -> str:
        return layout.ledger_path(self.ledgers_root, ledger_id)

    # -- ledger ids --------------------------------------------------------------
    async def generate_ledger_id(self) -> int:
        """A new, never used ledger id (BookKeeper's ``LongZkLedgerIdGenerator``).

        Ids come from the sequence number of an ephemeral sequential znode
        under ``<root>/idgen``; once those pass 31 bits, from
        ``<root>/idgen-long/HOB-<high 32 bits>/ID-`` with the high bits in the
        directory name."""
        if self._long_idgen_present is None:
            stat = await self.zk.exists(f"{self._root}/{layout.IDGEN_LONG_ZNODE}")
            self._long_idgen_present = stat is not None
        if not self._long_idgen_present:
            seq = await self._next_sequence(f"{self._root}/{layout.IDGEN_ZNODE}")
            if 0 <= seq < layout.INT_MAX:
                return seq
            log.info("31-bit ledger ids are used up under %s; switching to 63-bit ids", self._root)
            await self.zk.ensure_path(f"{self._root}/{layout.IDGEN_LONG_ZNODE}")
            self._long_idgen_present = True
        return await self._generate_long_id()

    async def _next_sequence(self, parent: str, *, makepath: bool = True) -> int:
        """Sequence number of a fresh ``<parent>/ID-`` node, which is then removed.

        The parent's child counter is the sequence: recreating a parent that
        was removed would restart it, hence ``makepath=False`` for HOB dirs."""
        prefix = f"{parent}/{layout.LEDGER_ID_GEN_PREFIX}"
        # A retried create may leave its first attempt's node: ephemeral, and
        # an id skipped is no harm.
        created = await self.zk.create(
            prefix, b"", ephemeral=True, sequence=True, makepath=makepath
        )
        try:
            seq = int(created[len(prefix) :])
        except ValueError:
            raise ZooKeeperError(f"cannot read a sequence number from {created!r}") from None
        try:
            await self.zk.delete(created)
        except ZooKeeperError as e:  # ephemeral: it goes with the session anyway
            log.warning("could not delete id node %s: %r", created, e)
        return seq

    async def _generate_long_id(self) -> int:
        hob_root = f"{self._root}/{layout.IDGEN_LONG_ZNODE}"
        while True:
            if self._hob_dirs is None:
                children = await self.zk.get_children(hob_root)
                self._hob_dirs = sorted(_parse_hob(c) for c in children if _parse_hob(c) >= 0)
            if not self._hob_dirs:
                await self._create_hob(hob_root, 1)
                continue
            high = self._hob_dirs[-1]
            await self._collect_hob_dirs(hob_root)
            try:
                low = await self._next_sequence(f"{hob_root}/{_hob_name(high)}", makepath=False)
            except NoNodeError:
                self._hob_dirs = None  # collected or never there: look again
                continue
            if 0 <= low < layout.INT_MAX:
                return (high << 32) | low
            await self._create_hob(hob_root, high + 1)

    async def _create_hob(self, hob_root: str, high: int) -> None:
        if high > layout.INT_MAX:
            raise LedgerIdOverflowError("63-bit ledger ids are used up")
        path = f"{hob_root}/{_hob_name(high)}"
        log.debug("creating high-order id dir %s", path)
        try:
            await self.zk.create(path, b"", makepath=True)
        except NodeExistsError:
            pass  # lost the race to another generator: fine
        self._hob_dirs = None

    async def _collect_hob_dirs(self, hob_root: str) -> None:
        """Drop all but the newest few HOB dirs, best effort, as BookKeeper does."""
        dirs = self._hob_dirs or []
        if len(dirs) <= _MAX_HOB_DIRS:
            return
        self._hob_dirs = dirs[-_MAX_HOB_DIRS:]
        for high in dirs[:-_MAX_HOB_DIRS]:
            path = f"{hob_root}/{_hob_name(high)}"
            try:
                await self.zk.delete(path)
            except ZooKeeperError as e:  # NoNode, NotEmpty, or ZooKeeper unavailable
                log.debug("could not delete old high-order id dir %s: %r", path, e)

    # -- CRUD ----------------------------------------------------------------------
    async def create(self, md: LedgerMetadata) -> tuple[LedgerMetadata, int]:
        """Store the metadata of a new ledger; returns it as stored (in
        :attr:`format_version`, with a fresh creator token, as BookKeeper
        stamps one on every create) and its znode version.

        Raises :class:`LedgerExistsError` if the ledger exists and is not the
        one this very call created before a connection loss."""
        md = md.in_format(self.format_version).replace(ctoken=random.randrange(2**63 - 1))
        path = self.ledger_path(md.ledger_id)
        data = serialize(md)
        try:
            await self.zk.retry(self.zk.create, path, data, makepath=True)
        except NodeExistsError:
            try:
                existing, version = await self.read(md.ledger_id)
            except NoSuchLedgerError:
                # Existed, then vanished: maybe ours, maybe not. Recreating is unsafe.
                raise LedgerExistsError(
                    f"ledger {md.ledger_id} existed at {path} and was then removed"
                ) from None
            if existing.ctoken == md.ctoken:
                log.info("ledger %d: create landed before a connection loss", md.ledger_id)
                return existing, version
            raise LedgerExistsError(f"ledger {md.ledger_id} already exists at {path}") from None
        log.debug("created ledger %d metadata at %s", md.ledger_id, path)
        return md, 0

    async def read(
        self, ledger_id: int, watch: Callable[[WatchedEvent], Any] | None = None
    ) -> tuple[LedgerMetadata, int]:
        """The ledger's metadata and znode version; ``watch`` is a one-shot
        ZooKeeper data watch (see :meth:`watch` for a lasting one)."""
        path = self.ledger_path(ledger_id)
        try:
            data, stat = await self.zk.get(path, watch=watch)
        except NoNodeError:
            raise NoSuchLedgerError(f"no such ledger {ledger_id} (no znode {path})") from None
        return deserialize(data, ledger_id), stat.version

    async def write(self, md: LedgerMetadata, expected_version: int) -> int:
        """Replace the metadata if the znode is still at ``expected_version``;
        returns the new version. Another writer got there first:
        :class:`MetadataVersionError` (re-read, re-apply, retry). What is
        stored is ``md.in_format(self.format_version)``."""
        path = self.ledger_path(md.ledger_id)
        data = serialize(md.in_format(self.format_version))
        try:
            stat = await self.zk.retry(self.zk.set, path, data, version=expected_version)
        except NoNodeError:
            raise NoSuchLedgerError(f"no such ledger {md.ledger_id} (no znode {path})") from None
        except BadVersionError as e:
            if e.attempts > 1:
                # An earlier attempt may have landed before the connection dropped.
                current, cstat = await self.zk.get(path)
                if current == data and cstat.version > expected_version:
                    return int(cstat.version)
            raise MetadataVersionError(
                f"ledger {md.ledger_id}: metadata is no longer at version {expected_version}"
            ) from None
        return int(stat.version)

    async def delete(self, ledger_id: int, version: int = -1) -> None:
        """Remove the ledger's metadata (``version`` -1: whatever the version),
        then its bucket znodes that became empty. A ledger already gone is
        not an error, as in BookKeeper."""
        path = self.ledger_path(ledger_id)
        try:
            await self.zk.delete(path, version=version)
        except NoNodeError:
            log.debug("ledger %d: metadata already gone", ledger_id)
            return
        except BadVersionError:
            raise MetadataVersionError(
                f"ledger {ledger_id}: metadata is no longer at version {version}"
            ) from None
        await self._prune_parents(path)

    async def _prune_parents(self, path: str) -> None:
        """Delete empty bucket znodes bottom-up. A concurrent create makes the
        delete fail (not empty) or is retried by kazoo's makepath loop."""
        parent = path.rsplit("/", 1)[0]
        while parent != self._root and parent.startswith(self._root + "/"):
            try:
                await self.zk.delete(parent)
            except (NotEmptyError, NoNodeError):
                return
            except ZooKeeperError as e:
                log.debug("leaving bucket %s in place: %r", parent, e)
                return
            parent = parent.rsplit("/", 1)[0]

    async def exists(self, ledger_id: int) -> bool:
        path = self.ledger_path(ledger_id)
        return await self.zk.exists(path) is not None

    async def read_existing(self, ledger_ids: Iterable[int]) -> list[LedgerMetadata]:
        """The metadata of each of ``ledger_ids`` that still exists, in their
        order, at most :data:`_LIST_CONCURRENCY` reads at a time: what every
        full scan (the auditor's checks, the shell) reads after
        :meth:`list_ledgers`, where a ledger deleted since is not an error."""
        sem = asyncio.Semaphore(_LIST_CONCURRENCY)

        async def one(ledger_id: int) -> LedgerMetadata | None:
            async with sem:
                try:
                    md, _ = await self.read(ledger_id)
                except NoSuchLedgerError:
                    return None
                return md

        found = await asyncio.gather(*(one(i) for i in ledger_ids))
        return [md for md in found if md is not None]

    # -- listing -------------------------------------------------------------------
    async def list_ledgers(self) -> list[int]:
        """Every ledger id under the root, sorted (legacy and long layouts)."""
        sem = asyncio.Semaphore(_LIST_CONCURRENCY)

        async def children(path: str) -> list[str]:
            async with sem:
                try:
                    return await self.zk.get_children(path)
                except NoNodeError:
                    return []  # raced with a delete

        async def walk(path: str, rel: str, depth: int) -> list[int]:
            names = await children(path)
            if depth == 0:
                ids = []
                for name in names:
                    try:
                        ids.append(layout.parse_ledger_path("/", f"/{rel}/{name}"))
                    except ValueError:
                        log.debug("skipping unexpected znode %s/%s", path, name)
                return ids
            subs = [n for n in names if len(n) == 4 and n.isascii() and n.isdigit()]
            parts = await asyncio.gather(
                *(walk(f"{path}/{n}", f"{rel}/{n}", depth - 1) for n in subs)
            )
            return [i for part in parts for i in part]

        top = await children(self.ledgers_root)
        jobs = []
        for name in top:
            if layout.is_reserved_child(name) or not (name.isascii() and name.isdigit()):
                continue
            if len(name) == 2:  # legacy 2-4-4
                jobs.append(walk(f"{self._root}/{name}", name, 1))
            elif len(name) == 3:  # long 3-4-4-4-4
                jobs.append(walk(f"{self._root}/{name}", name, 3))
        parts = await asyncio.gather(*jobs)
        return sorted(i for part in parts for i in part)

    # -- watching ------------------------------------------------------------------
    def watch(self, ledger_id: int, callback: MetadataCallback) -> MetadataWatch:
        """Follow a ledger's metadata until it is deleted or the watch is cancelled.

        ``callback`` first gets the current ``(metadata, version)``, then the
        new value after every change (changes that happen in quick succession
        may be seen as one), and finally ``None`` when the ledger is deleted.
        Must be called from the event loop."""
        return MetadataWatch(self, ledger_id, callback)


class MetadataWatch:
    """A running metadata watch; ``cancel()`` stops it."""

    def __init__(
        self, store: LedgerMetadataStore, ledger_id: int, callback: MetadataCallback
    ) -> None:
        self.store = store
        self.ledger_id = ledger_id
        self._callback = callback
        self._last_version = -1
        self._task = asyncio.get_running_loop().create_task(
            self._run(), name=f"metadata-watch-{ledger_id}"
        )

    def cancel(self) -> None:
        self._task.cancel()

    @property
    def done(self) -> bool:
        return self._task.done()

    async def wait(self) -> None:
        """Until the watch ends (ledger deleted, client closed, or cancelled)."""
        try:
            await asyncio.shield(self._task)
        except asyncio.CancelledError:
            if not self._task.cancelled():
                raise

    async def _deliver(self, value: tuple[LedgerMetadata, int] | None) -> None:
        try:
            result = self._callback(value)
            if inspect.isawaitable(result):
                await result
        except Exception:
            log.exception("ledger %d: metadata watch callback failed", self.ledger_id)

    async def _run(self) -> None:
        zk = self.store.zk
        path = self.store.ledger_path(self.ledger_id)
        loop = asyncio.get_running_loop()
        backoff = 0.05
        while True:
            fired: asyncio.Future[WatchedEvent] = loop.create_future()

            def on_event(event: WatchedEvent, fired: asyncio.Future[WatchedEvent] = fired) -> None:
                if not fired.done():
                    fired.set_result(event)

            try:
                data, stat = await zk.get(path, watch=on_event)
            except NoNodeError:
                await self._deliver(None)
                return
            except ZooKeeperClosedError:
                log.debug("ledger %d: ZooKeeper client closed; watch ends", self.ledger_id)
                return
            except Exception as e:  # session expiry, exhausted retries: keep trying
                log.warning("ledger %d: metadata watch re-arm failed: %r", self.ledger_id, e)
                await asyncio.sleep(backoff)
                backoff = min(backoff * 2, 5.0)
                continue
            backoff = 0.05
            if stat.version != self._last_version:
                try:
                    md = deserialize(data, self.ledger_id)
                except Exception:
                    log.exception(
                        "ledger %d: unreadable metadata version %d", self.ledger_id, stat.version
                    )
                else:
                    self._last_version = stat.version
                    await self._deliver((md, stat.version))
            event = await fired
            if event.type == EventType.DELETED:
                await self._deliver(None)
                return
            if event.type == EventType.NONE:  # session event: watches were reset
                log.debug("ledger %d: watch reset by %s; re-arming", self.ledger_id, event.state)


def _hob_name(high: int) -> str:
    return f"{_HOB_PREFIX}{high:010d}"


def _parse_hob(name: str) -> int:
    """High-order bits named by a ``HOB-`` dir, or -1 for anything else."""
    digits = name[len(_HOB_PREFIX) :]
    if not name.startswith(_HOB_PREFIX) or not (digits.isascii() and digits.isdigit()):
        return -1
    return int(digits)
