"""The SubscriptionsStore interface: where each consumer keeps its position.

Both stores (ZooKeeper, log segment) implement it and both read both znode
formats, whatever ``logSegmentBasedSubscriptionsStoreEnabled`` says: the
flag only decides which format a store *writes*. Taking ownership of a
subscription stored in the other format converts it, fencing the previous
owner, never losing or regressing the position.

Positions are monotonic: advancing to a DLSN not greater than the current
one is a no-op, and an advance returns only once the position is durable.
"""

from __future__ import annotations

import abc
import dataclasses
import logging
from typing import TYPE_CHECKING, ClassVar

from dlog.dlsn import DLSN, NonInclusiveLowerBound
from dlog.errors import NoSuchLedgerError
from dlog.zk import NoNodeError
from subscriptions.format import (
    SEGMENT_FORMAT,
    ZK_FORMAT,
    SegmentSubscription,
    SubscriberZnode,
    ZkPosition,
    decode_commit,
    decode_znode,
    validate_subscriber_id,
)

if TYPE_CHECKING:
    from dlog.log import LogManager
    from dlog.loop_thread import LoopThread

log = logging.getLogger(__name__)


@dataclasses.dataclass(frozen=True)
class SubscriberInfo:
    """What ``dlog subscriptions show`` prints."""

    subscriber_id: str
    position: DLSN
    format: str  # "zookeeper", "log-segment" or "none" (never committed)
    segment_id: int | None
    znode_version: int | None
    owned_here: bool


class SubscriptionsStore(abc.ABC):
    """Positions of a stream's subscribers."""

    #: The znode format this store writes.
    format: ClassVar[str]

    def __init__(self, log_manager: LogManager) -> None:
        self.log = log_manager
        self.stream = log_manager.name
        self.zk = log_manager.namespace.zk
        self.bk = log_manager.namespace.bk
        self.conf = log_manager.conf
        self.path = log_manager.store.paths(log_manager.name).subscribers
        self.closed = False

    def znode(self, subscriber_id: str) -> str:
        return f"{self.path}/{validate_subscriber_id(subscriber_id)}"

    def data_set(self, subscriber_id: str) -> str:
        """The BP-44 data set of a subscription's segment ledgers."""
        return f"{self.log.data_set}/subscribers/{subscriber_id}"

    # ------------------------------------------------------------------
    # the interface
    # ------------------------------------------------------------------
    @abc.abstractmethod
    async def advance_commit_position(self, subscriber_id: str, dlsn: DLSN) -> None:
        """Move the position forward to ``dlsn`` (a no-op unless greater);
        returns once it is durable. Takes ownership on first use."""

    async def get_last_commit_position(self, subscriber_id: str) -> DLSN:
        """The committed position; NonInclusiveLowerBound if never committed.
        Reading never fences the subscription's owner."""
        return (await self.describe(subscriber_id)).position

    async def get_last_commit_positions(self) -> dict[str, DLSN]:
        """Every subscriber's committed position (never fencing owners)."""
        out: dict[str, DLSN] = {}
        for sid in await self.list_subscribers():
            try:
                out[sid] = await self.get_last_commit_position(sid)
            except NoNodeError:
                continue
        return out

    async def delete_subscriber(self, subscriber_id: str) -> bool:
        """Forget a subscriber (and its segments); False if it did not exist."""
        validate_subscriber_id(subscriber_id)
        self._forget(subscriber_id)
        znode, version = await self.read_znode(subscriber_id)
        if znode is None:
            return False
        if isinstance(znode, SegmentSubscription):
            await self.delete_ledgers(
                znode.segment_id, znode.next_segment_id, znode.previous_segment_id
            )
        try:
            await self.zk.delete(
                self.znode(subscriber_id), version=version if version is not None else -1
            )
        except NoNodeError:
            return False
        log.info("stream %s: deleted subscriber %s", self.stream, subscriber_id)
        return True

    @abc.abstractmethod
    async def acquire(self, subscriber_id: str) -> DLSN:
        """Become the subscription's single owner, converting it to this
        store's format if needed; returns its position."""

    @abc.abstractmethod
    async def release(self, subscriber_id: str) -> None:
        """Stop owning a subscription gracefully (its position stays)."""

    @abc.abstractmethod
    async def reset_position(self, subscriber_id: str, dlsn: DLSN) -> None:
        """Set the position to ``dlsn``, even backwards (an admin operation:
        it takes ownership, fencing a running consumer)."""

    async def close(self) -> None:
        """Release every subscription this store owns."""
        self.closed = True

    # ------------------------------------------------------------------
    # hooks for subclasses
    # ------------------------------------------------------------------
    def _owned(self, subscriber_id: str) -> tuple[DLSN, int | None] | None:
        """(position, znode version) of a subscription this store owns."""
        return None

    def _lost(self, subscriber_id: str) -> None:  # noqa: B027 - optional hook
        """Another owner wrote the subscription's znode."""

    def _forget(self, subscriber_id: str) -> None:  # noqa: B027 - optional hook
        """Drop local state of a subscription being deleted."""

    # ------------------------------------------------------------------
    # shared: reading both formats, taking over segments
    # ------------------------------------------------------------------
    async def list_subscribers(self) -> list[str]:
        try:
            return sorted(await self.zk.get_children(self.path))
        except NoNodeError:
            return []

    async def read_znode(self, subscriber_id: str) -> tuple[SubscriberZnode | None, int | None]:
        path = self.znode(subscriber_id)
        try:
            data, stat = await self.zk.get(path)
        except NoNodeError:
            return None, None
        return decode_znode(data, path), stat.version

    async def describe(self, subscriber_id: str) -> SubscriberInfo:
        znode, version = await self.read_znode(subscriber_id)
        owned = self._owned(subscriber_id)
        if owned is not None and owned[1] != version:
            # Someone else wrote the znode: this store no longer owns it.
            self._lost(subscriber_id)
            owned = None
        if znode is None:
            position, fmt, segment = NonInclusiveLowerBound, "none", None
        elif isinstance(znode, ZkPosition):
            position, fmt, segment = znode.position, ZK_FORMAT, None
        elif owned is not None:
            position, fmt, segment = owned[0], SEGMENT_FORMAT, znode.segment_id
        else:
            position = await self.segment_position(znode, fence=False)
            fmt, segment = SEGMENT_FORMAT, znode.segment_id
        if owned is not None:
            position = max(position, owned[0])
        return SubscriberInfo(subscriber_id, position, fmt, segment, version, owned is not None)

    async def segment_position(self, sub: SegmentSubscription, *, fence: bool) -> DLSN:
        """The position a log-segment subscription stands at: the later of
        ``last_commit_dlsn`` and the last record of its segment. With
        ``fence`` the segment is recovered (closing it to its writer)."""
        position = sub.last_commit
        if sub.segment_id is None:
            return position
        try:
            rh = await self.bk.open_ledger(sub.segment_id, self.log.password, recovery=fence)
        except NoSuchLedgerError:
            # Deleted after a completed switch away from it; last_commit holds.
            return position
        try:
            lac = rh.last_add_confirmed if fence else await rh.read_last_add_confirmed()
            if lac >= 0:
                entry = (await rh.read_unconfirmed(lac, lac))[0]
                position = max(
                    position, decode_commit(entry.data, f"ledger {sub.segment_id} entry {lac}")
                )
        finally:
            await rh.close()
        return position

    async def delete_ledgers(self, *ledger_ids: int | None) -> None:
        """Delete ledgers that may or may not exist (cleanup is idempotent)."""
        for lid in ledger_ids:
            if lid is None:
                continue
            try:
                await self.bk.delete_ledger(lid)
            except NoSuchLedgerError:
                pass
            except Exception as e:  # visible later as an orphan: BP-44 close context
                log.warning(
                    "stream %s: could not delete subscription ledger %d: %s", self.stream, lid, e
                )

    async def take_over(
        self, subscriber_id: str
    ) -> tuple[SubscriberZnode | None, int | None, DLSN]:
        """Read a subscription and fence whoever owned its segment, if any:
        returns (znode, version, position)."""
        znode, version = await self.read_znode(subscriber_id)
        if znode is None:
            return None, None, NonInclusiveLowerBound
        if isinstance(znode, ZkPosition):
            return znode, version, znode.position
        position = await self.segment_position(znode, fence=True)
        return znode, version, position


class SyncSubscriptionsStore:
    """Blocking twin of a store (runs its coroutines on a loop thread)."""

    def __init__(self, store: SubscriptionsStore, runner: LoopThread) -> None:
        self.store = store
        self._run = runner.run

    def get_last_commit_position(self, subscriber_id: str) -> DLSN:
        return self._run(self.store.get_last_commit_position(subscriber_id))

    def get_last_commit_positions(self) -> dict[str, DLSN]:
        return self._run(self.store.get_last_commit_positions())

    def advance_commit_position(self, subscriber_id: str, dlsn: DLSN) -> None:
        self._run(self.store.advance_commit_position(subscriber_id, dlsn))

    def delete_subscriber(self, subscriber_id: str) -> bool:
        return self._run(self.store.delete_subscriber(subscriber_id))

    def describe(self, subscriber_id: str) -> SubscriberInfo:
        return self._run(self.store.describe(subscriber_id))

    def close(self) -> None:
        self._run(self.store.close())
