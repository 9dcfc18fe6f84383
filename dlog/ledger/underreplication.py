"""Marking ledgers under-replicated in ZooKeeper, readable by upstream's
auditor and replication workers (and theirs by us).

The marker's path and data format are in :mod:`dlog.protocol.underreplication`.
Marking follows upstream's ZkLedgerUnderreplicationManager: the first mark
creates the znode with the missing replicas and the time (ms); a later mark
adds the replicas not yet listed and refreshes the time, or changes nothing
when every replica is already listed (so the time says when the set last
grew).

:class:`UnderreplicationManager` is the rest of upstream's manager: the
LAYOUT check, the ephemeral locks replication workers take (``acquire``
waits on ZooKeeper watches), the ``disable`` switch, and the settings kept
in ZooKeeper (lostBookieRecoveryDelay, checkallledgersctime, and dlog's
orphanedLedgerCheckInterval).
"""

from __future__ import annotations

import asyncio
import builtins
import functools
import logging
import random
import time
from collections.abc import Callable, Coroutine, Iterable
from dataclasses import dataclass
from typing import Any

from dlog.errors import (
    BadVersionError,
    MetadataSerializationError,
    NodeExistsError,
    NoNodeError,
    NotEmptyError,
    SessionExpiredError,
    ZooKeeperClosedError,
    ZooKeeperError,
)
from dlog.protocol import underreplication as fmt
from dlog.protocol.underreplication import UnderreplicatedLedger
from dlog.zk import WatchedEvent, ZnodeStat, ZooKeeper

log = logging.getLogger(__name__)

#: Seconds between tries while kazoo replaces an expired session.
_SESSION_RETRY_DELAY = 0.2


def _now_ms() -> int:
    return int(time.time() * 1000)


async def mark_underreplicated(
    zk: ZooKeeper,
    ledgers_root: str,
    ledger_id: int,
    missing_replicas: Iterable[str],
    *,
    clock: Callable[[], int] = _now_ms,
) -> None:
    """Record that ``ledger_id`` lacks ``missing_replicas`` (bookie ids)."""
    path = fmt.ledger_znode(ledgers_root, ledger_id)
    missing = tuple(dict.fromkeys(missing_replicas))
    while True:
        try:
            await zk.create(
                path, fmt.encode(fmt.UnderreplicatedLedger(missing, clock())), makepath=True
            )
            return
        except NodeExistsError:
            pass
        try:
            data, stat = await zk.get(path)
        except NoNodeError:
            continue  # marked replicated meanwhile: create it again
        current = fmt.decode(data)
        added = tuple(r for r in missing if r not in current.replicas)
        if not added:
            return
        updated = fmt.UnderreplicatedLedger(current.replicas + added, clock())
        try:
            await zk.set(path, fmt.encode(updated), stat.version)
            return
        except (BadVersionError, NoNodeError):
            continue  # changed or removed underneath us: start over


async def get_underreplicated(
    zk: ZooKeeper, ledgers_root: str, ledger_id: int
) -> fmt.UnderreplicatedLedger | None:
    """The ledger's marker, or None when it is not marked under-replicated."""
    try:
        data, _ = await zk.get(fmt.ledger_znode(ledgers_root, ledger_id))
    except NoNodeError:
        return None
    return fmt.decode(data)


def _poke(event: asyncio.Event, _watched: WatchedEvent) -> None:
    event.set()


class IncompatibleLayoutError(MetadataSerializationError):
    """``underreplication/LAYOUT`` names a layout other than BASIC version 1
    (upstream's ReplicationException.CompatibilityException)."""

    default_message = "incompatible under-replication layout"


@dataclass
class _Lock:
    path: str
    #: The marker's znode version when the lock was taken; None when the
    #: ledger was not marked (a lock taken by :meth:`acquire_ledger`).
    mark_version: int | None


class UnderreplicationManager:
    """Upstream's ZkLedgerUnderreplicationManager: marks, the locks workers
    take on them, the switch that disables re-replication, and the settings
    the auditor reads from ZooKeeper.

    Locks are EPHEMERAL znodes of this client's session, so a worker that
    dies (or whose session expires) frees its ledgers. A lock is only ever
    deleted by the session that created it."""

    def __init__(self, zk: ZooKeeper, ledgers_root: str, *, owner: str = "") -> None:
        self.zk = zk
        self.ledgers_root = ledgers_root.rstrip("/")
        self.owner = owner
        self._held: dict[int, _Lock] = {}
        #: Locks given up with a delay, until they are deleted.
        self._releasing: dict[int, _Lock] = {}
        #: Paths whose children a ZooKeeper watch of ours is armed on, and
        #: the acquire() calls waiting for any of them to change (upstream's
        #: SubTreeCache): one armed watch per path, however many waiters.
        self._armed: set[str] = set()
        self._waiters: set[asyncio.Event] = set()
        self._tasks: set[asyncio.Task[None]] = set()
        self._closed = False

    # -- layout ---------------------------------------------------------------
    async def initialize(self) -> None:
        """Create ``underreplication`` with its LAYOUT, ``ledgers`` and
        ``locks`` when absent; refuse a LAYOUT of another kind."""
        root = self.ledgers_root
        await self.zk.ensure_path(fmt.base_path(root))
        layout = fmt.layout_path(root)
        while True:
            try:
                data, _ = await self.zk.get(layout)
            except NoNodeError:
                try:
                    await self.zk.create(layout, fmt.encode_layout())
                    break
                except NodeExistsError:
                    continue  # someone else made it: check theirs
            try:
                kind = fmt.decode_layout(data)
            except MetadataSerializationError as e:
                raise IncompatibleLayoutError(f"{layout}: invalid data: {e}") from e
            if kind != (fmt.LAYOUT_TYPE, fmt.LAYOUT_VERSION):
                raise IncompatibleLayoutError(
                    f"{layout}: incompatible layout {kind[0]}:{kind[1]} "
                    f"(dlog knows {fmt.LAYOUT_TYPE}:{fmt.LAYOUT_VERSION})"
                )
            break
        for path in (fmt.ledgers_path(root), fmt.locks_path(root)):
            try:
                await self.zk.create(path)
            except NodeExistsError:
                pass

    # -- marks ------------------------------------------------------------------
    async def mark(self, ledger_id: int, missing: Iterable[str]) -> None:
        """Mark ``ledger_id`` under-replicated, adding ``missing`` bookies."""
        await mark_underreplicated(self.zk, self.ledgers_root, ledger_id, missing)

    async def get(self, ledger_id: int) -> UnderreplicatedLedger | None:
        return await get_underreplicated(self.zk, self.ledgers_root, ledger_id)

    async def list(self) -> list[tuple[int, UnderreplicatedLedger]]:
        """Every marked ledger and its marker, by ledger id."""
        found: list[tuple[int, UnderreplicatedLedger]] = []
        queue = [fmt.ledgers_path(self.ledgers_root)]
        while queue:
            parent = queue.pop()
            try:
                children = await self.zk.get_children(parent)
            except NoNodeError:
                continue  # pruned meanwhile
            for child in children:
                lid = fmt.parse_ledger_node_name(child) if child.startswith("urL") else None
                if lid is None:
                    queue.append(f"{parent}/{child}")
                    continue
                info = await self.get(lid)
                if info is not None:
                    found.append((lid, info))
        return sorted(found, key=lambda item: item[0])

    async def lock_holder(self, ledger_id: int) -> str | None:
        """Who holds ``ledger_id``'s lock (its ``bookieId``): None when
        nobody does, "" when the lock does not say."""
        try:
            data, _ = await self.zk.get(fmt.lock_znode(self.ledgers_root, ledger_id))
        except NoNodeError:
            return None
        return fmt.decode_lock_data(data) or ""

    async def is_ledger_being_replicated(self, ledger_id: int) -> bool:
        return await self.zk.exists(fmt.lock_znode(self.ledgers_root, ledger_id)) is not None

    # -- locks ------------------------------------------------------------------
    @property
    def held(self) -> frozenset[int]:
        """The ledgers this manager holds the lock of."""
        return frozenset(self._held)

    async def acquire(self, *, wait: bool = True) -> int | None:
        """Lock a marked ledger nobody holds and return its id.

        ``wait``: block until there is one and re-replication is enabled
        (woken by ZooKeeper watches on the hierarchy and the locks, never by
        polling). Without it, None when there is none or re-replication is
        disabled. Ledgers are tried in random order, as upstream does, so
        that workers spread over them."""
        while True:
            if self._closed:
                raise ZooKeeperClosedError("the under-replication manager is closed")
            changed = asyncio.Event()
            self._waiters.add(changed)
            try:
                if wait:
                    await self.wait_replication_enabled()
                elif not await self.is_replication_enabled():
                    return None
                lid = await self._from_hierarchy(fmt.ledgers_path(self.ledgers_root), 0)
                if lid is not None or not wait:
                    return lid
                await changed.wait()
            except SessionExpiredError as e:
                if isinstance(e, ZooKeeperClosedError) or not wait:
                    raise
                # kazoo opens a new session by itself; every watch fired.
                log.warning("looking for a ledger to re-replicate: %s; trying again", e)
                await asyncio.sleep(_SESSION_RETRY_DELAY)
            finally:
                self._waiters.discard(changed)

    async def _children(self, path: str) -> builtins.list[str]:
        """The children of ``path``, with our watch armed on it."""
        watch = None
        if path not in self._armed:
            self._armed.add(path)
            watch = functools.partial(self._tree_changed, path)
        try:
            return await self.zk.get_children(path, watch=watch)
        except BaseException:
            if watch is not None:
                self._armed.discard(path)
            raise

    def _tree_changed(self, path: str, event: WatchedEvent) -> None:
        # Any event: the children changed, or (EventType NONE) the session
        # was lost and every watch with it.
        self._armed.discard(path)
        waiters, self._waiters = self._waiters, set()
        for w in waiters:
            w.set()

    async def _from_hierarchy(self, parent: str, depth: int) -> int | None:
        try:
            children = await self._children(parent)
        except NoNodeError:
            return None  # pruned by a worker that finished a ledger next to ours
        random.shuffle(children)
        if depth < 4:
            for child in children:
                lid = await self._from_hierarchy(f"{parent}/{child}", depth + 1)
                if lid is not None:
                    return lid
            return None
        locks = set(await self._children(fmt.locks_path(self.ledgers_root)))
        for child in children:
            lid = fmt.parse_ledger_node_name(child)
            if lid is None or child in locks:
                continue
            if await self._lock(lid, f"{parent}/{child}"):
                return lid
        return None

    async def _lock(self, ledger_id: int, mark_path: str | None) -> bool:
        """Take ``ledger_id``'s lock; remember its mark's version (read once
        locked, so that no worker can have removed and re-created it in
        between). False if someone else holds it, or if ``mark_path`` is
        given and the mark is gone."""
        if ledger_id in self._held or ledger_id in self._releasing:
            return False
        path = fmt.lock_znode(self.ledgers_root, ledger_id)
        try:
            await self.zk.create(path, fmt.encode_lock_data(self.owner), ephemeral=True)
        except NodeExistsError as e:
            # Retried after a connection loss, the create may meet its own
            # first attempt.
            if e.attempts <= 1 or not await self._owns(path):
                return False
        except NoNodeError:
            await self.zk.ensure_path(fmt.locks_path(self.ledgers_root))
            return await self._lock(ledger_id, mark_path)
        stat = await self.zk.exists(mark_path or fmt.ledger_znode(self.ledgers_root, ledger_id))
        if stat is None and mark_path is not None:
            await self._delete_lock(path)  # replicated meanwhile
            return False
        self._held[ledger_id] = _Lock(path, stat.version if stat is not None else None)
        return True

    async def _owns(self, path: str) -> ZnodeStat | None:
        """``path``'s stat if it is an ephemeral of our session."""
        stat = await self.zk.exists(path)
        sid = self.zk.session_id
        if stat is None or sid is None or stat.ephemeralOwner != sid:
            return None
        return stat

    async def _delete_lock(self, path: str) -> None:
        """Delete a lock, but only our own: after our session expired,
        another worker may have taken the ledger."""
        stat = await self._owns(path)
        if stat is None:
            return
        try:
            await self.zk.delete(path, stat.version)
        except (NoNodeError, BadVersionError):
            pass

    async def acquire_ledger(self, ledger_id: int) -> bool:
        """Lock ``ledger_id`` whether or not it is marked (for the shell and
        decommissioning); False if another holds it. If it is marked, a
        later :meth:`mark_replicated` removes the mark as :meth:`acquire`'s
        does (upstream leaves it)."""
        return await self._lock(ledger_id, None)

    async def mark_replicated(self, ledger_id: int) -> None:
        """The ledger is fully replicated: delete its mark, if it is still
        the version seen when locking (a ledger marked again meanwhile stays
        marked, to be checked again), prune the empty hierarchy above it,
        and release the lock. Nothing but the release when not held."""
        lock = self._held.get(ledger_id)
        try:
            if lock is not None and lock.mark_version is not None:
                znode = fmt.ledger_znode(self.ledgers_root, ledger_id)
                try:
                    await self.zk.delete(znode, lock.mark_version)
                except NoNodeError:
                    pass
                except BadVersionError:
                    log.info(
                        "ledger %d was marked again while re-replicated: left marked", ledger_id
                    )
                else:
                    await self._prune(znode)
        finally:
            await self.release(ledger_id)

    async def _prune(self, znode: str) -> None:
        parent = znode
        for _ in range(4):
            parent = parent.rsplit("/", 1)[0]
            try:
                await self.zk.delete(parent)
            except NoNodeError:
                continue
            except NotEmptyError:
                return  # another ledger of this subtree is marked

    async def release(self, ledger_id: int, *, delay: float = 0.0) -> None:
        """Give up ``ledger_id``'s lock, now or ``delay`` seconds later (in
        the background: meanwhile no worker, this one included, takes it)."""
        lock = self._held.pop(ledger_id, None)
        if lock is None:
            return
        if delay <= 0:
            await self._delete_lock(lock.path)
            return

        self._releasing[ledger_id] = lock

        async def later() -> None:
            try:
                await asyncio.sleep(delay)
                await self._delete_lock(lock.path)
            except ZooKeeperError as e:
                # Most likely the session went away, and the (ephemeral)
                # lock with it; if not, a stale lock only makes the next
                # acquire find the ledger taken until the session ends.
                log.warning("ledger %d: could not release its lock: %s", ledger_id, e)
            finally:
                # Whatever became of the delete, the ledger is free again
                # for this worker: kept here, it would be skipped for good.
                if self._releasing.get(ledger_id) is lock:
                    del self._releasing[ledger_id]

        self._spawn(later(), f"release lock of ledger {ledger_id}")

    # -- the disable switch ---------------------------------------------------
    async def is_replication_enabled(self) -> bool:
        return await self.zk.exists(fmt.disable_path(self.ledgers_root)) is None

    async def disable_replication(self) -> bool:
        """Create ``disable``; False when it was already there."""
        try:
            await self.zk.create(fmt.disable_path(self.ledgers_root), b"", makepath=True)
        except NodeExistsError as e:
            if e.attempts <= 1:
                log.warning("re-replication is already disabled")
                return False
        log.info("ledger re-replication disabled")
        return True

    async def enable_replication(self) -> bool:
        """Delete ``disable``; False when re-replication was enabled."""
        try:
            await self.zk.delete(fmt.disable_path(self.ledgers_root))
        except NoNodeError as e:
            if e.attempts <= 1:
                log.warning("re-replication is already enabled")
                return False
        log.info("ledger re-replication enabled")
        return True

    async def wait_replication_enabled(self) -> None:
        """Return once ``disable`` is absent (watching it meanwhile)."""
        path = fmt.disable_path(self.ledgers_root)
        while True:
            changed = asyncio.Event()
            if await self.zk.exists(path, watch=functools.partial(_poke, changed)) is None:
                return
            await changed.wait()

    # -- settings kept in ZooKeeper --------------------------------------------
    async def _get_seconds(self, path: str) -> int:
        data, _ = await self.zk.get(path)
        return fmt.decode_seconds(data, path)

    async def _set_seconds(self, path: str, seconds: int) -> None:
        while True:
            try:
                await self.zk.set(path, fmt.encode_seconds(seconds))
                return
            except NoNodeError:
                pass
            try:
                await self.zk.create(path, fmt.encode_seconds(seconds), makepath=True)
                return
            except NodeExistsError:
                continue

    async def _init_seconds(self, path: str, seconds: int) -> bool:
        try:
            await self.zk.create(path, fmt.encode_seconds(seconds), makepath=True)
        except NodeExistsError as e:
            return e.attempts > 1
        return True

    async def get_lost_bookie_recovery_delay(self) -> int:
        """lostBookieRecoveryDelay (s); NoNodeError until it is initialized."""
        return await self._get_seconds(fmt.lost_bookie_recovery_delay_path(self.ledgers_root))

    async def set_lost_bookie_recovery_delay(self, seconds: int) -> None:
        await self._set_seconds(fmt.lost_bookie_recovery_delay_path(self.ledgers_root), seconds)

    async def initialize_lost_bookie_recovery_delay(self, seconds: int) -> bool:
        """Create lostBookieRecoveryDelay unless present (an operator's value
        wins over the configuration); True if it was created."""
        return await self._init_seconds(
            fmt.lost_bookie_recovery_delay_path(self.ledgers_root), seconds
        )

    def watch_lost_bookie_recovery_delay(self, callback: Callable[[int], None]) -> None:
        """Call ``callback(seconds)`` on the loop each time the value changes,
        until :meth:`close`."""
        self._watch_seconds(fmt.lost_bookie_recovery_delay_path(self.ledgers_root), callback)

    async def get_orphan_check_interval(self) -> int | None:
        """orphanedLedgerCheckInterval (s), None while it is not set."""
        try:
            return await self._get_seconds(fmt.orphan_check_interval_path(self.ledgers_root))
        except NoNodeError:
            return None

    async def set_orphan_check_interval(self, seconds: int) -> None:
        await self._set_seconds(fmt.orphan_check_interval_path(self.ledgers_root), seconds)

    async def initialize_orphan_check_interval(self, seconds: int) -> bool:
        return await self._init_seconds(fmt.orphan_check_interval_path(self.ledgers_root), seconds)

    def watch_orphan_check_interval(self, callback: Callable[[int], None]) -> None:
        """As :meth:`watch_lost_bookie_recovery_delay`, for orphanedLedgerCheckInterval."""
        self._watch_seconds(fmt.orphan_check_interval_path(self.ledgers_root), callback)

    def _watch_seconds(self, path: str, callback: Callable[[int], None]) -> None:
        async def run() -> None:
            last: int | None = None
            first = True
            while not self._closed:
                changed = asyncio.Event()
                poke = functools.partial(_poke, changed)
                value: int | None = None
                try:
                    try:
                        data, _ = await self.zk.get(path, watch=poke)
                        value = fmt.decode_seconds(data, path)
                    except NoNodeError:
                        if await self.zk.exists(path, watch=poke) is not None:
                            continue  # created in between
                except MetadataSerializationError as e:
                    log.warning("%s", e)
                except ZooKeeperError as e:
                    if isinstance(e, ZooKeeperClosedError):
                        return
                    log.warning("watching %s: %s; trying again", path, e)
                    await asyncio.sleep(1.0)
                    continue
                if value is not None and value != last and not first:
                    try:
                        callback(value)
                    except Exception:
                        log.exception("callback for %s failed", path)
                if value is not None:
                    last = value
                first = False
                await changed.wait()

        self._spawn(run(), f"watch {path}")

    async def get_check_all_ledgers_ctime(self) -> int:
        """When (ms) the auditor last checked all ledgers; -1 if never."""
        try:
            data, _ = await self.zk.get(fmt.check_all_ledgers_ctime_path(self.ledgers_root))
        except NoNodeError:
            return fmt.UNASSIGNED_CTIME
        return fmt.decode_check_all_ledgers_ctime(data)

    async def set_check_all_ledgers_ctime(self, ctime_ms: int) -> None:
        path = fmt.check_all_ledgers_ctime_path(self.ledgers_root)
        data = fmt.encode_check_all_ledgers_ctime(ctime_ms)
        while True:
            try:
                await self.zk.set(path, data)
                return
            except NoNodeError:
                pass
            try:
                await self.zk.create(path, data, makepath=True)
                return
            except NodeExistsError:
                continue

    # -- lifecycle ----------------------------------------------------------------
    def _spawn(self, coro: Coroutine[Any, Any, None], name: str) -> None:
        task = asyncio.get_running_loop().create_task(coro, name=name)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    def close(self) -> None:
        """Stop the watches and delayed releases; the locks stay until the
        session ends (use :meth:`aclose` to release them now)."""
        self._closed = True
        for task in list(self._tasks):
            task.cancel()
        self._tasks.clear()
        waiters, self._waiters = self._waiters, set()
        for w in waiters:
            w.set()

    async def aclose(self) -> None:
        """:meth:`close`, then release every lock held, delayed ones too."""
        self.close()
        locks = [*self._held.values(), *self._releasing.values()]
        self._held.clear()
        self._releasing.clear()
        for lock in locks:
            await self._delete_lock(lock.path)
