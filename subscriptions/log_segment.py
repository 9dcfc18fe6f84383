"""The log-segment SubscriptionsStore: positions in ledgers, not znodes.

Each subscription appends ``AdvanceLastCommitDLSN`` records to its own
segment (a ledger); its record (the ``segment`` child of its znode) holds
``Subscription{segment_id, last_commit_dlsn}`` and its znode holds
``last_commit_dlsn`` in DistributedLog's format, for Java readers. Both
are written, in one transaction, only when the segment switches. So a
commit costs a ledger append (group-committed by bookies), not a
ZooKeeper write. "The znode" below means that pair; its version is the
subscriber znode's.

Commits coalesce: an append carries the highest position requested so
far, a few appends may be in flight, and every caller's future resolves
when an append covering its position is durable on an ack quorum. Nothing
is acknowledged from memory.

What holds, and why:

* **One owner.** An owner acknowledges a commit only once an append to the
  segment the znode names is durable; it only starts on a new segment after
  a compare-and-set of the znode, at the version it last wrote, names it.
  A takeover first fences the znode's segment and its ``next_segment_id``
  (a switch the owner may be in the middle of), then compare-and-sets the
  znode. Once that wins, the earlier owner's appends fail (fenced) and its
  next switch fails (stale version): it acknowledges nothing more. A next
  segment that did not exist yet when fenced is harmless for the same
  reason: switching onto it needs the compare-and-set that just lost.
* **No regression.** A takeover resumes at the later of
  ``last_commit_dlsn`` and the last record of every segment it fenced;
  recovery of a fenced ledger keeps every acknowledged entry. A current
  segment that does not exist is SubscriptionCorruptedError, never "the
  position is last_commit_dlsn"; only a segment the znode records as
  switched away from (``previous_segment_id``) may be gone.
* **Nothing deleted too early, nothing leaked.** Ledgers are deleted only
  by the owner whose compare-and-set made them unused: a takeover deletes
  an earlier owner's leftover after winning, a switch deletes the old
  segment after switching. Every ledger id is in the znode before its
  ledger exists (``next_segment_id``), so a crash leaves nothing nobody
  knows about; a failed delete is logged with the ledger's id, and its
  BP-44 create context names the stream and subscriber.

A segment switch (roll by entries, bytes or age; taking ownership; graceful
close) runs in an order that is safe at every crash point:

0. record the new segment's ledger id in the znode (``next_segment_id``);
   for a takeover this compare-and-set is the one that wins ownership, and
   it records the leftover to delete in ``previous_segment_id``;
1. create that ledger and write the current position into it;
2. compare-and-set the znode to point at it, with ``last_commit_dlsn``
   (and the old one in ``previous_segment_id``);
3. close the old ledger (BP-44 close context: why, delete expected now)
   and delete it.

The owner also keeps an ephemeral ``owner`` child under the znode, so that
readers know whether the segment's writer is alive (see
:mod:`subscriptions.store`): it is advisory, fencing is what guarantees.
"""

from __future__ import annotations

import asyncio
import collections
import dataclasses
import functools
import logging
import time
from collections.abc import Callable

from dlog.dlsn import DLSN
from dlog.errors import BKTransmitError, DLogError, LedgerFencedError, SubscriptionFencedError
from dlog.failpoints import afailpoint
from dlog.ledger.appender import (
    LedgerAppender,
    RollPolicy,
    close_context,
    fail_futures,
)
from dlog.ledger.metadata import LedgerCloseContext, LedgerCreateContext, LedgerOwner
from dlog.singleflight import SingleFlight
from dlog.stream import StreamContext
from dlog.tasks import BackgroundTasks
from dlog.zk import BadVersionError, NodeExistsError, NoNodeError, TransactionOp, first_error
from subscriptions.format import (
    SEGMENT_FORMAT,
    SegmentSubscription,
    encode_commit,
    encode_subscriber,
)
from subscriptions.store import ATTEMPTS, SubscriptionsStore

log = logging.getLogger(__name__)

#: Appends a subscription keeps in flight; more commits coalesce into the next.
MAX_INFLIGHT = 4

#: A segment switch that is not a roll (whose reasons are the appender's).
TAKEOVER = "takeover"


def appends_to_send(inflight: int, requested: DLSN, sent: DLSN) -> bool:
    """Whether to send another append now: there is a position asked for
    beyond the last one sent, and fewer than MAX_INFLIGHT appends are in
    flight (otherwise commits wait and coalesce into the next append)."""
    return inflight < MAX_INFLIGHT and requested > sent


def covering_append(targets: list[DLSN], dlsn: DLSN) -> int | None:
    """Index of the first append in flight (their targets, in send order)
    whose durability covers a commit of ``dlsn``; None if none does."""
    for i, target in enumerate(targets):
        if target >= dlsn:
            return i
    return None


@dataclasses.dataclass(eq=False, slots=True)
class _Append:
    """One append in flight, and the commits it acknowledges when durable."""

    target: DLSN
    waiters: list[asyncio.Future[None]]


@dataclasses.dataclass(eq=False, slots=True)
class _Owned:
    subscriber_id: str
    znode: SegmentSubscription
    version: int
    durable: DLSN
    appender: LedgerAppender | None = None
    #: Highest position asked for, and highest sent in an append.
    requested: DLSN = dataclasses.field(default=None)  # type: ignore[assignment]
    sent: DLSN = dataclasses.field(default=None)  # type: ignore[assignment]
    #: Commits not covered by an append sent yet.
    waiting: list[asyncio.Future[None]] = dataclasses.field(default_factory=list)
    inflight: collections.deque[_Append] = dataclasses.field(default_factory=collections.deque)
    switching: asyncio.Task[None] | None = None
    idle: asyncio.Event = dataclasses.field(default_factory=asyncio.Event)
    error: DLogError | None = None
    pump_scheduled: bool = False
    #: The znode version this owner's compare-and-set chain started at.
    #: Each of its writes is a compare-and-set at the version it wrote
    #: last, so versions ``first_version..version`` are all its own.
    first_version: int = -1

    def __post_init__(self) -> None:
        self.requested = self.sent = self.durable
        self.first_version = self.version
        self.idle.set()

    def wrote(self, version: int | None) -> bool:
        """Whether the znode at ``version`` was written by this owner."""
        return version is not None and self.first_version <= version <= self.version

    @property
    def entries(self) -> int:
        """Entries in the current segment."""
        return self.appender.entries if self.appender is not None else 0


class LogSegmentSubscriptionsStore(SubscriptionsStore):
    format = SEGMENT_FORMAT

    #: The clock segment ages are measured with (tests move it).
    clock: Callable[[], float] = staticmethod(time.monotonic)

    def __init__(self, ctx: StreamContext) -> None:
        super().__init__(ctx)
        conf = self.conf
        self.max_entries = conf.subscription_segment_max_entries
        self.max_bytes = conf.subscription_segment_max_bytes
        self.max_age = conf.subscription_segment_max_age_minutes * 60.0
        self._roll_policy = RollPolicy(self.max_entries, self.max_bytes, self.max_age)
        self._subs: dict[str, _Owned] = {}
        self._acquiring: SingleFlight[_Owned] = SingleFlight()
        self._tasks = BackgroundTasks()
        self.switches = 0
        self.zk.add_state_listener(self._on_zk_state)
        self._session_lost = False
        # Set on first use. Cached: asyncio.get_running_loop() costs a
        # getpid() system call on Python 3.11, too much to pay per commit.
        self._loop: asyncio.AbstractEventLoop | None = None

    # ------------------------------------------------------------------
    # ownership
    # ------------------------------------------------------------------
    def _owned(self, subscriber_id: str) -> tuple[DLSN, int | None] | None:
        st = self._subs.get(subscriber_id)
        if st is None or st.error is not None or st.switching is not None:
            return None
        return st.durable, st.version

    def _floor(self, subscriber_id: str, version: int | None) -> DLSN | None:
        st = self._subs.get(subscriber_id)
        if st is None or st.error is not None:
            return None
        if st.switching is None and not st.wrote(version):
            return None  # written by someone else: not ours to vouch for
        return st.durable

    def _wrote(self, subscriber_id: str, version: int | None) -> bool:
        st = self._subs.get(subscriber_id)
        return st is not None and st.error is None and st.wrote(version)

    def _lost(self, subscriber_id: str) -> None:
        # The failed state stays: commits keep failing until the caller
        # acquires again. Dropping it would make the next commit take the
        # subscription back silently, fencing its rightful owner.
        st = self._subs.get(subscriber_id)
        if st is not None:
            self._fail(st, self._fenced(subscriber_id))

    def _forget(self, subscriber_id: str) -> None:
        st = self._subs.pop(subscriber_id, None)
        if st is not None:
            self._fail(st, SubscriptionFencedError(f"subscriber {subscriber_id!r} was deleted"))

    def _fenced(self, subscriber_id: str) -> SubscriptionFencedError:
        return SubscriptionFencedError(
            f"stream {self.stream!r}: subscriber {subscriber_id!r} is owned by another process now"
        )

    async def acquire(self, subscriber_id: str) -> DLSN:
        return (await self._state(subscriber_id)).durable

    async def _state(self, subscriber_id: str, *, position: DLSN | None = None) -> _Owned:
        st = self._subs.get(subscriber_id)
        if st is not None and st.error is None and position is None:
            return st
        return await self._acquiring.run(subscriber_id, lambda: self._own(subscriber_id, position))

    async def _own(self, subscriber_id: str, position: DLSN | None) -> _Owned:
        self._loop = asyncio.get_running_loop()
        st = await self._take_ownership(subscriber_id, position)
        self._subs[subscriber_id] = st
        return st

    async def _take_ownership(self, subscriber_id: str, position: DLSN | None) -> _Owned:
        """Fence, win the znode (step 0 of a switch), clean up, switch to a
        fresh segment. ``position`` (an admin reset) replaces the one found."""
        # Reserve the new segment's id first: the read, the fencing and the
        # compare-and-set that follow then race a busy owner over a shorter window.
        new_id = await self.bk.generate_ledger_id()
        for _ in range(ATTEMPTS):
            found = await self._take_over(subscriber_id, allow_missing=position is not None)
            start = position if position is not None else found.position
            current = (
                found.znode.segment_id if isinstance(found.znode, SegmentSubscription) else None
            )
            intent = SegmentSubscription(
                name=subscriber_id,
                segment_id=current,
                last_commit=start,
                next_segment_id=new_id,
                previous_segment_id=found.leftover,
            )
            await afailpoint("subscriptions.takeover.before_claim")
            try:
                version = await self._cas(
                    subscriber_id,
                    intent,
                    found.version,
                    record_exists=isinstance(found.znode, SegmentSubscription)
                    and not found.znode.inline,
                )
                break
            except SubscriptionFencedError:
                # The owner switched segments (or someone else took over)
                # after we read: fence what the znode names now.
                log.debug(
                    "stream %s: subscriber %s changed; taking over again",
                    self.stream,
                    subscriber_id,
                )
        else:
            raise SubscriptionFencedError(
                f"stream {self.stream!r}: subscriber {subscriber_id!r} kept changing during a takeover"
            )
        await afailpoint("subscriptions.takeover.after_claim")
        # Ours now: no earlier owner can use the leftover any more.
        await self._delete_ledgers(found.leftover)
        st = _Owned(subscriber_id, intent, version, start)
        await self._switch_to(st, new_id, TAKEOVER)
        if not await self._register_owner(subscriber_id, st.version):
            raise self._fenced(subscriber_id)  # taken over again meanwhile
        log.info(
            "stream %s: owning subscriber %s at %s (segment %s)",
            self.stream,
            subscriber_id,
            start,
            st.znode.segment_id,
        )
        return st

    def _on_zk_state(self, state: str) -> None:
        """A new ZooKeeper session lost our ``owner`` children: recreate them.
        (Ownership itself does not depend on the session: fencing does.)"""
        if state == "LOST":
            self._session_lost = True
        elif state == "CONNECTED" and self._session_lost and not self.closed:
            self._session_lost = False
            for st in list(self._subs.values()):
                if st.error is None:
                    self._tasks.spawn(self._reregister(st))

    async def _reregister(self, st: _Owned) -> None:
        """After a new session: register again, or learn we were fenced."""
        while st.error is None and self._subs.get(st.subscriber_id) is st:
            version = st.version
            if await self._register_owner(st.subscriber_id, version):
                return
            if st.version == version:  # not our own switch moving it on
                self._lost(st.subscriber_id)
                return

    # ------------------------------------------------------------------
    # commits
    # ------------------------------------------------------------------
    async def advance_commit_position(self, subscriber_id: str, dlsn: DLSN) -> None:
        st = self._subs.get(subscriber_id)
        if st is None or st.error is not None:
            if st is not None:
                raise st.error.clone()  # type: ignore[union-attr]
            st = await self._state(subscriber_id)
        if dlsn > st.durable:
            await self._waiter(st, dlsn)

    def advance_commit_position_nowait(
        self, subscriber_id: str, dlsn: DLSN
    ) -> asyncio.Future[None]:
        st = self._subs.get(subscriber_id)
        if st is None or st.error is not None or dlsn <= st.durable:
            return super().advance_commit_position_nowait(subscriber_id, dlsn)
        return self._waiter(st, dlsn)

    def _waiter(self, st: _Owned, dlsn: DLSN) -> asyncio.Future[None]:
        """A future resolved once an append covering ``dlsn`` is durable."""
        loop = self._loop
        if loop is None:
            loop = self._loop = asyncio.get_running_loop()
        fut: asyncio.Future[None] = loop.create_future()
        if dlsn <= st.sent:
            # An append in flight covers it: wait for the first such one.
            i = covering_append([a.target for a in st.inflight], dlsn)
            if i is not None:
                st.inflight[i].waiters.append(fut)
        else:
            if dlsn > st.requested:
                st.requested = dlsn
            st.waiting.append(fut)
            if not st.pump_scheduled:
                # Send at the end of this loop iteration, not now: the commits
                # made in the same iteration (every consumer woken by one
                # durable append) then share one append instead of each taking
                # a free in-flight slot alone.
                st.pump_scheduled = True
                loop.call_soon(self._scheduled_pump, st)
        return fut

    def _scheduled_pump(self, st: _Owned) -> None:
        st.pump_scheduled = False
        self._pump(st)

    def _pump(self, st: _Owned) -> None:
        appender = st.appender
        if st.error is not None or st.switching is not None or appender is None:
            return
        while appends_to_send(len(st.inflight), st.requested, st.sent):
            target = st.sent = st.requested
            append = _Append(target, st.waiting)
            try:
                appender.append(
                    encode_commit(target), functools.partial(self._appended, st, appender, append)
                )
            except DLogError as e:
                self._fail(st, e)
                return
            st.waiting = []
            st.inflight.append(append)
            st.idle.clear()
            reason = appender.roll_reason()
            if reason is not None:
                self._start_roll(st, reason)
                return

    def _appended(
        self, st: _Owned, appender: LedgerAppender, append: _Append, fut: asyncio.Future[int]
    ) -> None:
        if st.error is not None:
            return  # _fail answered its waiters already
        exc = fut.exception()
        if exc is not None:
            self._fail(st, appender.map_error(exc))
            return
        # A ledger completes appends in order, and targets only grow.
        st.inflight.popleft()
        st.durable = append.target
        for w in append.waiters:
            try:
                w.set_result(None)
            except asyncio.InvalidStateError:
                pass  # its caller stopped waiting (cancelled)
        if not st.inflight:
            st.idle.set()
        self._pump(st)

    def _fail(self, st: _Owned, error: DLogError) -> None:
        if st.error is None:
            st.error = error
            log.warning("stream %s: subscriber %s: %s", self.stream, st.subscriber_id, error)
        waiters = st.waiting
        for a in st.inflight:
            waiters.extend(a.waiters)
        st.waiting, st.inflight = [], collections.deque()
        fail_futures(waiters, error)
        st.idle.set()

    # ------------------------------------------------------------------
    # segment switches
    # ------------------------------------------------------------------
    def _start_roll(self, st: _Owned, reason: str) -> None:
        if st.switching is None:
            st.switching = self._tasks.spawn(self._roll(st, reason))

    async def _roll(self, st: _Owned, reason: str) -> None:
        try:
            await st.idle.wait()
            if st.error is None:
                await self._switch(st, reason)
        except DLogError as e:
            self._fail(st, e)
        except Exception as e:
            self._fail(st, BKTransmitError(f"rolling the subscription segment failed: {e!r}"))
        finally:
            st.switching = None
        self._pump(st)

    async def _switch(self, st: _Owned, reason: str) -> None:
        """Step 0 of a roll, then the rest of the switch."""
        new_id = await self.bk.generate_ledger_id()
        intent = st.znode.replace(next_segment_id=new_id, previous_segment_id=None)
        st.version = await self._cas(st.subscriber_id, intent, st.version)
        st.znode = intent
        await afailpoint("subscriptions.roll.after_intent")
        await self._switch_to(st, new_id, reason)

    async def _switch_to(self, st: _Owned, new_id: int, reason: str) -> None:
        """Steps 1-3: move the subscription to segment ``new_id`` (recorded
        in the znode already), holding ``st.durable``."""
        sid = st.subscriber_id
        old_appender, old_segment = st.appender, st.znode.segment_id
        position = st.durable
        # 1. the new segment, holding the position
        appender = await LedgerAppender.create(
            self.bk,
            self.ctx.ledger_spec(),
            LedgerCreateContext(
                created_by=LedgerOwner(system="dlog", service="subscriptions"),
                part_of_data_set=self.data_set(sid),
                expected_max_entries=self.max_entries,
                expected_max_length=self.max_bytes,
                expected_max_open_duration_ms=int(self.max_age * 1000),
                follows_ledger=old_segment,
            ),
            ledger_id=new_id,
            name=f"stream {self.stream!r}: subscriber {sid!r}",
            tasks=self._tasks,
            fenced=lambda: self._fenced(sid),
            fenced_by=(LedgerFencedError, SubscriptionFencedError),
            passthrough=(DLogError,),
            policy=self._roll_policy,
            # Publish the LAC only when no commit waits for an append once
            # the woken callers have run: a busy subscription's next append
            # carries it anyway.
            lac_wanted=lambda: st.error is None and st.requested <= st.sent,
            lac_failpoint="subscriptions.publish_lac",
            clock=lambda: self.clock(),
        )
        first = encode_commit(position)
        try:
            await appender.handle.append(first)
            await afailpoint("subscriptions.roll.after_new_segment")
            # 2. switch
            switched = SegmentSubscription(
                name=sid, segment_id=new_id, last_commit=position, previous_segment_id=old_segment
            )
            st.version = await self._cas(sid, switched, st.version)
        except BaseException:
            # Not switched: nobody else will ever use this ledger.
            await appender.discard(
                self.bk, "subscription switch failed", expect_delete_after=_now_ms()
            )
            raise
        st.znode = switched
        st.appender = appender
        appender.entries, appender.bytes = 1, len(first)
        self.switches += 1
        await afailpoint("subscriptions.roll.after_switch")
        # 3. the old segment goes
        if old_appender is not None:
            try:
                await old_appender.close(close_context(reason, expect_delete_after=_now_ms()))
            except DLogError as e:
                log.warning("subscriber %s: closing old segment %s failed: %s", sid, old_segment, e)
        await afailpoint("subscriptions.roll.after_close")
        await self._delete_ledgers(old_segment)
        await afailpoint("subscriptions.roll.after_delete")
        log.debug(
            "subscriber %s: %s: segment %s -> %d at %s", sid, reason, old_segment, new_id, position
        )

    async def _cas(
        self,
        subscriber_id: str,
        sub: SegmentSubscription,
        version: int | None,
        *,
        record_exists: bool = True,
    ) -> int:
        """Write the subscriber (its znode and its record, one transaction)
        if its znode is still at ``version`` (None: if it does not exist);
        returns the new version. SubscriptionFencedError if it is not.
        ``record_exists`` is False when taking over a subscriber without a
        record child (ZooKeeper format, or an older dlog's inline record)."""
        path, record_path = self.znode(subscriber_id), self.record_znode(subscriber_id)
        data, record = encode_subscriber(sub)
        ops: list[TransactionOp]
        if version is None or version < 0:
            ops = [("create", (path, data), {}), ("create", (record_path, record), {})]
        else:
            ops = [("set_data", (path, data), {"version": version})]
            if record_exists:
                ops.append(("set_data", (record_path, record), {}))
            else:
                ops.append(("create", (record_path, record), {}))
        results = await self.zk.transaction(ops)
        error = first_error(results)
        if isinstance(error, NoNodeError) and ops[0][0] == "create":
            # No subscribers znode yet (Java creates it with the first subscriber).
            await self.zk.ensure_path(self.path)
            results = await self.zk.transaction(ops)
            error = first_error(results)
        if error is None:
            return 0 if version is None or version < 0 else int(results[0].version)
        new_version = 0 if version is None or version < 0 else version + 1
        if isinstance(error, (BadVersionError, NodeExistsError, NoNodeError)):
            if await self._landed(subscriber_id, error, new_version, data, record):
                return new_version
            raise SubscriptionFencedError(
                f"stream {self.stream!r}: subscriber {subscriber_id!r} was changed by another owner"
            ) from None
        raise error

    # ------------------------------------------------------------------
    # admin and shutdown
    # ------------------------------------------------------------------
    async def reset_position(self, subscriber_id: str, dlsn: DLSN) -> None:
        st = self._subs.pop(subscriber_id, None)
        if st is not None:
            await self._quiesce(st)
        await self._state(subscriber_id, position=dlsn)

    async def _quiesce(self, st: _Owned) -> None:
        """Wait until every commit requested so far is durable (or failed)."""
        while True:
            if st.switching is not None:
                try:
                    await asyncio.shield(st.switching)
                except Exception:
                    pass
            self._pump(st)  # commits whose (scheduled) pump has not run yet go now
            if st.error is not None or (not st.inflight and st.switching is None):
                return
            # ``idle`` may have been set and cleared again before this task
            # runs (an append completes, then the pump sends more), so the
            # loop checks the appends in flight itself rather than the event.
            await st.idle.wait()

    async def release(self, subscriber_id: str) -> None:
        """Graceful close: write last_commit_dlsn and clear segment_id, then
        close and delete the segment."""
        st = self._subs.pop(subscriber_id, None)
        if st is None:
            return
        await self._quiesce(st)
        if st.error is not None:
            return
        old_appender, old_segment = st.appender, st.znode.segment_id
        closed = SegmentSubscription(
            name=subscriber_id,
            segment_id=None,
            last_commit=st.durable,
            previous_segment_id=old_segment,
        )
        try:
            st.version = await self._cas(subscriber_id, closed, st.version)
        except SubscriptionFencedError as e:
            log.warning("stream %s: %s; not closing it", self.stream, e)
            return
        st.znode = closed
        # Set before failing, so that releasing is not logged as a failure.
        st.error = SubscriptionFencedError(f"subscriber {subscriber_id!r} was released")
        self._fail(st, st.error)
        if old_appender is not None:
            try:
                await old_appender.close(
                    LedgerCloseContext.client_shutdown(expect_delete_after=_now_ms())
                )
            except DLogError as e:
                log.warning(
                    "subscriber %s: closing segment %s failed: %s", subscriber_id, old_segment, e
                )
        await self._delete_ledgers(old_segment)
        await self._unregister_owner(subscriber_id)

    async def close(self) -> None:
        await super().close()
        self.zk.remove_state_listener(self._on_zk_state)
        for sid in list(self._subs):
            try:
                await self.release(sid)
            except Exception as e:
                log.warning("stream %s: releasing subscriber %s failed: %s", self.stream, sid, e)
        self._tasks.cancel_all()


def _now_ms() -> int:
    return int(time.time() * 1000)
