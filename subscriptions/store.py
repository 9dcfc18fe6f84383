"""The SubscriptionsStore interface: where each consumer keeps its position.

Both stores (ZooKeeper, log segment) implement it and both read both znode
formats, whatever ``logSegmentBasedSubscriptionsStoreEnabled`` says: the
flag only decides which format a store *writes*. Taking ownership of a
subscription stored in the other format converts it, fencing the previous
owner, never losing or regressing the position.

Positions are monotonic: advancing to a DLSN not greater than the current
one is a no-op, and an advance returns only once the position is durable.

Reads (:meth:`SubscriptionsStore.get_last_commit_position`, ``describe``,
``dlog subscriptions show``) never fence an owner. A log-segment owner
holds an ephemeral ``owner`` child under its subscriber znode. While that
owner is alive a read returns what its segment's last add confirmed covers:
it can lag the owner's newest commits (those in flight, and those
acknowledged within the moment before the owner publishes its LAC). Once
the owner's ZooKeeper session is gone the read follows recovery's rules
beyond the LAC, so it returns at least every commit ever acknowledged.
"""

from __future__ import annotations

import abc
import asyncio
import dataclasses
import json
import logging
import os
import socket
from typing import ClassVar

from dlog.dlsn import DLSN, NonInclusiveLowerBound
from dlog.errors import (
    NoSuchLedgerError,
    SubscriptionCorruptedError,
    SubscriptionFencedError,
    ZooKeeperError,
)
from dlog.segment_reader import last_entry
from dlog.stream import StreamContext
from dlog.zk import BadVersionError, NoNodeError, NotEmptyError, first_error
from subscriptions.format import (
    HEADER,
    RECORD,
    SEGMENT_FORMAT,
    ZK_FORMAT,
    SegmentSubscription,
    SubscriberZnode,
    ZkPosition,
    decode_commit,
    decode_subscriber,
    validate_subscriber_id,
)

log = logging.getLogger(__name__)

#: Name of the ephemeral child a log-segment owner keeps under its znode.
OWNER = "owner"

#: Times a read or a takeover starts over because the znode changed under it.
ATTEMPTS = 10


@dataclasses.dataclass(frozen=True)
class SubscriberInfo:
    """What ``dlog subscriptions show`` prints."""

    subscriber_id: str
    position: DLSN
    format: str  # "zookeeper", "log-segment" or "none" (never committed)
    segment_id: int | None
    znode_version: int | None
    owned_here: bool
    #: The live log-segment owner ({"host", "pid", "session"}), if any: while
    #: it lives, ``position`` may lag its newest commits.
    owner: dict[str, str] | None = None


@dataclasses.dataclass(frozen=True)
class Takeover:
    """A subscription read with every ledger its owner could append to fenced."""

    znode: SubscriberZnode | None
    version: int | None
    #: The later of ``last_commit_dlsn`` and the last record of every fenced segment.
    position: DLSN

    @property
    def leftover(self) -> int | None:
        """A ledger of the znode no longer in use once this takeover wins: an
        earlier owner's half-done switch (``next_segment_id``), or a segment
        already switched away from (``previous_segment_id``). A segment
        switch writes only one of the two, so there is never more than one."""
        z = self.znode
        if not isinstance(z, SegmentSubscription):
            return None
        if z.next_segment_id is not None and z.next_segment_id != z.segment_id:
            return z.next_segment_id
        return z.previous_segment_id


class SubscriptionsStore(abc.ABC):
    """Positions of a stream's subscribers."""

    #: The znode format this store writes.
    format: ClassVar[str]

    def __init__(self, ctx: StreamContext) -> None:
        self.ctx = ctx
        self.stream = ctx.name
        self.zk = ctx.zk
        self.bk = ctx.bk
        self.conf = ctx.conf
        self.path = ctx.paths.subscribers
        self.closed = False

    def znode(self, subscriber_id: str) -> str:
        return f"{self.path}/{validate_subscriber_id(subscriber_id)}"

    def owner_znode(self, subscriber_id: str) -> str:
        return f"{self.znode(subscriber_id)}/{OWNER}"

    def record_znode(self, subscriber_id: str) -> str:
        """The child holding a log-segment subscription's record."""
        return f"{self.znode(subscriber_id)}/{RECORD}"

    def data_set(self, subscriber_id: str) -> str:
        """The BP-44 data set of a subscription's segment ledgers."""
        return f"{self.ctx.data_set}/subscribers/{subscriber_id}"

    # ------------------------------------------------------------------
    # the interface
    # ------------------------------------------------------------------
    @abc.abstractmethod
    async def advance_commit_position(self, subscriber_id: str, dlsn: DLSN) -> None:
        """Move the position forward to ``dlsn`` (a no-op unless greater);
        returns once it is durable. Takes ownership on first use."""

    def advance_commit_position_nowait(
        self, subscriber_id: str, dlsn: DLSN
    ) -> asyncio.Future[None]:
        """Start :meth:`advance_commit_position`; the future resolves when the
        position is durable (DistributedLog's advanceCommitPosition returns a
        future too). For pipelined consumers: many commits in flight without
        a coroutine each. Call it from the event loop."""
        return asyncio.ensure_future(self.advance_commit_position(subscriber_id, dlsn))

    async def get_last_commit_position(self, subscriber_id: str) -> DLSN:
        """The committed position; NonInclusiveLowerBound if never committed.

        Reading never fences the subscription's owner. While a log-segment
        owner in another process is alive, the result may lag its newest
        commits (in flight, or acknowledged a moment ago); once that owner's
        ZooKeeper session is gone it includes every acknowledged commit."""
        return (await self.describe(subscriber_id)).position

    async def get_last_commit_positions(self) -> dict[str, DLSN]:
        """Every subscriber's committed position (never fencing owners; see
        :meth:`get_last_commit_position`)."""
        out: dict[str, DLSN] = {}
        for sid in await self.list_subscribers():
            info = await self.describe(sid)
            if info.format != "none":  # deleted since it was listed
                out[sid] = info.position
        return out

    async def delete_subscriber(self, subscriber_id: str) -> bool:
        """Forget a subscriber and delete its segments; False if it did not
        exist. A log-segment owner is fenced first, so it cannot go on
        acknowledging commits of a deleted subscription."""
        validate_subscriber_id(subscriber_id)
        self._forget(subscriber_id)
        for _ in range(ATTEMPTS):
            found = await self._take_over(subscriber_id, allow_missing=True)
            if found.znode is None:
                return False
            try:
                await self._delete_znode(subscriber_id, found.version)
            except (BadVersionError, NotEmptyError):
                continue  # changed (or an owner registered) meanwhile: fence again
            except NoNodeError as e:
                if e.attempts <= 1:
                    return False
                # A retry after a lost answer: the first attempt deleted it.
            if isinstance(found.znode, SegmentSubscription):
                z = found.znode
                await self._delete_ledgers(z.segment_id, z.next_segment_id, z.previous_segment_id)
            log.info("stream %s: deleted subscriber %s", self.stream, subscriber_id)
            return True
        raise SubscriptionFencedError(
            f"stream {self.stream!r}: subscriber {subscriber_id!r} kept changing while being deleted"
        )

    async def delete_all_subscribers(self) -> list[str]:
        """Delete every subscriber and its segments (the stream is going)."""
        deleted = []
        for sid in await self.list_subscribers():
            if await self.delete_subscriber(sid):
                deleted.append(sid)
        return deleted

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
        it takes ownership, fencing a running consumer). Also the way out of
        SubscriptionCorruptedError."""

    async def close(self) -> None:
        """Release every subscription this store owns."""
        self.closed = True

    # ------------------------------------------------------------------
    # hooks for subclasses
    # ------------------------------------------------------------------
    def _owned(self, subscriber_id: str) -> tuple[DLSN, int | None] | None:
        """(position, znode version) of a subscription this store owns."""
        return None

    def _floor(self, subscriber_id: str, version: int | None) -> DLSN | None:
        """A position this store had acknowledged and still stands by, when
        :meth:`_owned` cannot answer (a segment switch under way)."""
        return None

    def _wrote(self, subscriber_id: str, version: int | None) -> bool:
        """Whether this store itself wrote the znode at ``version`` (and
        still owns the subscription)."""
        return False

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
        """The subscriber and its znode's version (the version every owner's
        compare-and-set is on).

        The znode is read first, then its record child, so the record is the
        one of that version or a later one: dlog writes both together. A
        later record is safe to act on with the earlier version: a takeover
        fences the later record's segments too and its compare-and-set at
        the earlier version then fails and reads again; a position read from
        it is a later one. A record gone since the znode was read (converted
        to the ZooKeeper format) means the znode changed: read again, rather
        than take the last switch's position for the current one. A znode
        without children has no record, which saves the second read."""
        path = self.znode(subscriber_id)
        for _ in range(ATTEMPTS):
            try:
                data, stat = await self.zk.get(path)
            except NoNodeError:
                return None, None
            record: bytes | None = None
            if stat.numChildren and not data.startswith(HEADER):
                try:
                    record, _ = await self.zk.get(f"{path}/{RECORD}")
                except NoNodeError:
                    # Deleted after the znode was read (converted to the
                    # ZooKeeper format)? Then the znode changed too.
                    now = await self.zk.exists(path)
                    if now is None or now.mzxid != stat.mzxid:
                        continue
            return decode_subscriber(data, record, path), stat.version
        raise SubscriptionFencedError(
            f"stream {self.stream!r}: subscriber {subscriber_id!r} kept changing while being read"
        )

    async def read_owner(self, subscriber_id: str) -> dict[str, str] | None:
        """The live log-segment owner's registration, or None."""
        try:
            data, _ = await self.zk.get(self.owner_znode(subscriber_id))
        except NoNodeError:
            return None
        try:
            owner = json.loads(data)
        except ValueError:
            owner = None
        return owner if isinstance(owner, dict) else {"raw": data.decode(errors="replace")}

    async def describe(self, subscriber_id: str) -> SubscriberInfo:
        for _ in range(ATTEMPTS):
            owner = None
            znode, version = await self.read_znode(subscriber_id)
            owned = self._owned(subscriber_id)
            if (
                owned is not None
                and owned[1] != version
                and not self._wrote(subscriber_id, version)
            ):
                # Someone else wrote the znode: this store no longer owns it.
                # (An older version of its own, read while a switch of its
                # own moved the znode on, is still its own.)
                self._lost(subscriber_id)
                owned = None
            if znode is None:
                position, fmt, segment = NonInclusiveLowerBound, "none", None
            elif isinstance(znode, ZkPosition):
                position, fmt, segment = znode.position, ZK_FORMAT, None
            elif owned is not None:
                position, fmt, segment = owned[0], SEGMENT_FORMAT, znode.segment_id
            else:
                fmt, segment = SEGMENT_FORMAT, znode.segment_id
                owner = await self.read_owner(subscriber_id)
                try:
                    position = await self._segment_position(
                        znode, fence=False, owner_alive=owner is not None
                    )
                except NoSuchLedgerError:
                    if await self._changed_since(subscriber_id, version):
                        continue  # switched away and deleted meanwhile: read again
                    raise self._missing_segment(subscriber_id, znode.segment_id) from None
                if owner is None and await self.read_owner(subscriber_id) is not None:
                    # An owner registered while the segment was read beyond
                    # its LAC: what was read may be its commits in flight
                    # (it registers before it appends). Read again, to the LAC.
                    continue
            if owned is not None:
                position = max(position, owned[0])
            elif fmt == SEGMENT_FORMAT:
                # Mid-switch, this store still owns it: a read must not fall
                # below what it has had acknowledged itself.
                floor = self._floor(subscriber_id, version)
                if floor is not None:
                    position = max(position, floor)
            return SubscriberInfo(
                subscriber_id, position, fmt, segment, version, owned is not None, owner
            )
        raise SubscriptionFencedError(
            f"stream {self.stream!r}: subscriber {subscriber_id!r} kept changing while being read"
        )

    async def _segment_position(
        self, sub: SegmentSubscription, *, fence: bool, owner_alive: bool
    ) -> DLSN:
        """The later of ``last_commit_dlsn`` and the last record of the
        current segment (NoSuchLedgerError if it is missing). ``fence``
        recovers the segment, closing it to its writer; otherwise a live
        owner's segment is read to its LAC and a dead owner's by recovery's
        rules beyond it (see the module docstring)."""
        position = sub.last_commit
        if sub.segment_id is not None:
            last = await self._last_commit_in(
                sub.segment_id, fence=fence, beyond_lac=not owner_alive
            )
            if last is not None:
                position = max(position, last)
        return position

    async def _last_commit_in(
        self, ledger_id: int, *, fence: bool, beyond_lac: bool = False
    ) -> DLSN | None:
        """The commit in a segment's last entry; None if it has none."""
        entry = await last_entry(
            self.bk, ledger_id, self.ctx.password, fence=fence, beyond_lac=beyond_lac
        )
        if entry is None:
            return None
        return decode_commit(entry.data, f"ledger {ledger_id} entry {entry.entry_id}")

    async def _changed_since(self, subscriber_id: str, version: int | None) -> bool:
        return (await self.read_znode(subscriber_id))[1] != version

    def _missing_segment(
        self, subscriber_id: str, ledger_id: int | None
    ) -> SubscriptionCorruptedError:
        return SubscriptionCorruptedError(
            f"stream {self.stream!r}: subscriber {subscriber_id!r}: its current segment, "
            f"ledger {ledger_id}, does not exist, so commits acknowledged on it cannot be "
            f"read; reset the position (dlog subscriptions reset) to resume"
        )

    async def _take_over(self, subscriber_id: str, *, allow_missing: bool = False) -> Takeover:
        """Read a subscription and fence every ledger an earlier log-segment
        owner could still append to: its segment and the next segment of a
        switch it may be in the middle of. The caller wins ownership with a
        compare-and-set on ``version``; until then nothing may be deleted.

        A next segment that does not exist yet needs no fence: its creator
        can only start acknowledging commits on it after switching the znode
        to it, and that compare-and-set fails once the caller's has won (or
        wins first, and the caller's fails and takes over again).

        A missing current segment raises SubscriptionCorruptedError, unless
        ``allow_missing`` (an admin reset or delete, which do not need it)."""
        for _ in range(ATTEMPTS):
            znode, version = await self.read_znode(subscriber_id)
            if znode is None:
                return Takeover(None, None, NonInclusiveLowerBound)
            if isinstance(znode, ZkPosition):
                return Takeover(znode, version, znode.position)
            try:
                position = await self._segment_position(znode, fence=True, owner_alive=False)
            except NoSuchLedgerError:
                if await self._changed_since(subscriber_id, version):
                    continue
                if not allow_missing:
                    raise self._missing_segment(subscriber_id, znode.segment_id) from None
                log.warning(
                    "stream %s: subscriber %s: current segment %s is missing",
                    self.stream,
                    subscriber_id,
                    znode.segment_id,
                )
                position = znode.last_commit
            nxt = znode.next_segment_id
            if nxt is not None and nxt != znode.segment_id:
                try:
                    last = await self._last_commit_in(nxt, fence=True)
                except NoSuchLedgerError:
                    last = None  # not created (yet): see the docstring
                if last is not None:
                    position = max(position, last)
            return Takeover(znode, version, position)
        raise SubscriptionFencedError(
            f"stream {self.stream!r}: subscriber {subscriber_id!r} kept changing during a takeover"
        )

    async def _delete_znode(self, subscriber_id: str, version: int | None) -> None:
        """Delete the subscriber's znode (at ``version``) and its owner child
        in one transaction."""
        path = self.znode(subscriber_id)
        children = await self.zk.get_children(path)
        ops: list[tuple[str, tuple[object, ...], dict[str, object]]] = [
            ("delete", (f"{path}/{child}",), {}) for child in children
        ]
        ops.append(("delete", (path,), {"version": version if version is not None else -1}))
        error = first_error(await self.zk.transaction(ops))
        if error is not None:
            raise error

    async def _landed(
        self,
        subscriber_id: str,
        error: ZooKeeperError,
        version: int,
        data: bytes,
        record: bytes | None,
    ) -> bool:
        """Whether a write that failed with ``error`` had in fact landed:
        retried after a lost answer (``error.attempts > 1``), its first
        attempt may have written ``data`` (and ``record``, or deleted the
        record if None) at ``version``, and the retry then met its own write
        (BadVersion, NodeExists)."""
        if error.attempts <= 1:
            return False
        found, found_record, found_version = await self._read_raw(subscriber_id)
        return found == data and found_record == record and found_version == version

    async def _read_raw(self, subscriber_id: str) -> tuple[bytes | None, bytes | None, int | None]:
        """The subscriber znode's bytes, its record's and its version; None
        for what does not exist. (Not one moment's: for :meth:`_landed`,
        which compares with a write that carries a unique record.)"""
        path = self.znode(subscriber_id)
        try:
            data, stat = await self.zk.get(path)
        except NoNodeError:
            return None, None, None
        try:
            record, _ = await self.zk.get(f"{path}/{RECORD}")
        except NoNodeError:
            record = None
        return data, record, stat.version

    async def _delete_ledgers(self, *ledger_ids: int | None) -> None:
        """Delete ledgers that may or may not exist (cleanup is idempotent).
        A failure is logged with the ledger's id; its BP-44 create context
        names the stream and subscriber, so it can be found and deleted later."""
        for lid in dict.fromkeys(ledger_ids):
            if lid is None:
                continue
            try:
                await self.bk.delete_ledger(lid)
            except NoSuchLedgerError:
                pass
            except Exception as e:
                log.warning(
                    "stream %s: could not delete subscription ledger %d (BP-44 data set %s/*): %s",
                    self.stream,
                    lid,
                    f"{self.ctx.data_set}/subscribers",
                    e,
                )

    # ------------------------------------------------------------------
    # the owner's registration (log-segment store)
    # ------------------------------------------------------------------
    async def _register_owner(self, subscriber_id: str, version: int) -> bool:
        """Make this session's ephemeral ``owner`` child the subscription's,
        replacing an earlier owner's, in one transaction that also checks the
        subscriber znode is still at ``version`` (the one this owner wrote).
        False when it is not: someone took over since, and a fenced owner
        must never pass for the live one (readers would trust its LAC)."""
        znode, path = self.znode(subscriber_id), self.owner_znode(subscriber_id)
        session = self.zk.session_id
        data = json.dumps(
            {
                "host": socket.gethostname(),
                "pid": str(os.getpid()),
                "session": f"{session:#x}" if session is not None else "?",
            }
        ).encode()
        for _ in range(ATTEMPTS):
            stat = await self.zk.exists(path)
            ops: list[tuple[str, tuple[object, ...], dict[str, object]]] = [
                ("check", (znode, version), {})
            ]
            if stat is not None and stat.ephemeralOwner == session:
                ops.append(("check", (path, stat.version), {}))  # ours already
            else:
                if stat is not None:
                    ops.append(("delete", (path,), {"version": stat.version}))
                ops.append(("create", (path, data), {"ephemeral": True}))
            results = await self.zk.transaction(ops)
            if first_error(results) is None:
                return True
            if isinstance(results[0], (BadVersionError, NoNodeError)):
                return False  # the znode moved on (or is gone): not ours
            # The owner child changed between the read and the transaction.
        return False

    async def _unregister_owner(self, subscriber_id: str) -> None:
        """Delete the ``owner`` child if this session created it."""
        path = self.owner_znode(subscriber_id)
        try:
            stat = await self.zk.exists(path)
            if stat is not None and stat.ephemeralOwner == self.zk.session_id:
                await self.zk.delete(path, version=stat.version)
        except (NoNodeError, BadVersionError):
            pass
