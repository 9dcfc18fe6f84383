"""The log-segment SubscriptionsStore: positions in ledgers, not znodes.

Each subscription appends ``AdvanceLastCommitDLSN`` records to its own
segment (a ledger); its znode holds ``Subscription{segment_id,
last_commit_dlsn}`` and is written only when the segment switches. So a
commit costs a ledger append (group-committed by bookies), not a
ZooKeeper write.

Commits coalesce: an append carries the highest position requested so
far, a few appends may be in flight, and every caller's future resolves
when an append covering its position is durable on an ack quorum. Nothing
is acknowledged from memory.

A segment switch (roll at size/entry/age thresholds, taking ownership,
graceful close) runs in an order that is safe at every crash point:

0. record the new segment's ledger id in the znode (``next_segment_id``),
   so a crash cannot leave a ledger nobody knows about;
1. create that ledger and write the current position into it;
2. compare-and-set the znode to point at it, with ``last_commit_dlsn``
   (and the old one in ``previous_segment_id``);
3. close the old ledger (BP-44 close context: delete expected now) and
   delete it.

Whoever opens the subscription next cleans up a ``next_segment_id`` that is
not in use and a ``previous_segment_id`` that still exists. Opening it
recovers (fences) its segment, so the previous owner's commits fail, and
the position is the later of the segment's last record and
``last_commit_dlsn``: a crash never regresses it.
"""

from __future__ import annotations

import asyncio
import dataclasses
import heapq
import itertools
import logging
import time
from typing import TYPE_CHECKING

from dlog.dlsn import DLSN
from dlog.errors import (
    BKError,
    BKTransmitError,
    DLogError,
    LedgerFencedError,
    SubscriptionFencedError,
)
from dlog.failpoints import failpoint
from dlog.ledger.metadata import LedgerCloseContext, LedgerCreateContext, LedgerOwner
from dlog.singleflight import SingleFlight
from dlog.zk import BadVersionError, NodeExistsError, NoNodeError
from subscriptions.format import (
    SEGMENT_FORMAT,
    SegmentSubscription,
    encode_commit,
    encode_segment_subscription,
)
from subscriptions.store import SubscriptionsStore

if TYPE_CHECKING:
    from dlog.ledger.write_handle import WriteHandle
    from dlog.log import LogManager

log = logging.getLogger(__name__)

#: Appends a subscription keeps in flight; more commits coalesce into the next.
MAX_INFLIGHT = 4


@dataclasses.dataclass(eq=False)
class _Owned:
    subscriber_id: str
    znode: SegmentSubscription
    version: int
    durable: DLSN
    handle: WriteHandle | None = None
    requested: DLSN = dataclasses.field(default=None)  # type: ignore[assignment]
    sent: DLSN = dataclasses.field(default=None)  # type: ignore[assignment]
    entries: int = 0
    bytes: int = 0
    started: float = 0.0
    inflight: int = 0
    waiters: list[tuple[DLSN, int, asyncio.Future[None]]] = dataclasses.field(default_factory=list)
    switching: asyncio.Task[None] | None = None
    idle: asyncio.Event = dataclasses.field(default_factory=asyncio.Event)
    error: DLogError | None = None
    lac_task: asyncio.Task[None] | None = None
    pump_scheduled: bool = False

    def __post_init__(self) -> None:
        self.requested = self.sent = self.durable
        self.idle.set()


class LogSegmentSubscriptionsStore(SubscriptionsStore):
    format = SEGMENT_FORMAT

    def __init__(self, log_manager: LogManager) -> None:
        super().__init__(log_manager)
        conf = self.conf
        self.max_entries = conf.subscription_segment_max_entries
        self.max_bytes = conf.subscription_segment_max_bytes
        self.max_age = conf.subscription_segment_max_age_minutes * 60.0
        self._subs: dict[str, _Owned] = {}
        self._acquiring: SingleFlight[_Owned] = SingleFlight()
        self._seq = itertools.count()
        self._tasks: set[asyncio.Task[object]] = set()
        self.switches = 0

    # ------------------------------------------------------------------
    # ownership
    # ------------------------------------------------------------------
    def _owned(self, subscriber_id: str) -> tuple[DLSN, int | None] | None:
        st = self._subs.get(subscriber_id)
        if st is None or st.error is not None or st.switching is not None:
            return None
        return st.durable, st.version

    def _lost(self, subscriber_id: str) -> None:
        st = self._subs.pop(subscriber_id, None)
        if st is not None:
            self._fail(
                st,
                SubscriptionFencedError(
                    f"stream {self.stream!r}: subscriber {subscriber_id!r} is owned by another process now"
                ),
            )

    def _forget(self, subscriber_id: str) -> None:
        st = self._subs.pop(subscriber_id, None)
        if st is not None:
            self._fail(st, SubscriptionFencedError(f"subscriber {subscriber_id!r} was deleted"))

    async def acquire(self, subscriber_id: str) -> DLSN:
        return (await self._state(subscriber_id)).durable

    async def _state(self, subscriber_id: str, *, position: DLSN | None = None) -> _Owned:
        st = self._subs.get(subscriber_id)
        if st is not None and st.error is None and position is None:
            return st
        return await self._acquiring.run(subscriber_id, lambda: self._own(subscriber_id, position))

    async def _own(self, subscriber_id: str, position: DLSN | None) -> _Owned:
        st = await self._take_ownership(subscriber_id, position)
        self._subs[subscriber_id] = st
        return st

    async def _take_ownership(self, subscriber_id: str, position: DLSN | None) -> _Owned:
        # Reserve the new segment's id first: the read, the fencing and the
        # compare-and-set that follow then race a busy owner over a shorter window.
        new_id = await self.bk.generate_ledger_id()
        znode, version, current = await self.take_over(subscriber_id)  # fences the old owner
        if position is None:
            position = current
        leftovers: list[int | None] = []
        old_segment = None
        if isinstance(znode, SegmentSubscription):
            old_segment = znode.segment_id
            if znode.next_segment_id not in (None, znode.segment_id):
                leftovers.append(znode.next_segment_id)  # a roll that crashed before its switch
            leftovers.append(znode.previous_segment_id)  # a switch that crashed before its delete
        await self.delete_ledgers(*leftovers)
        base = SegmentSubscription(name=subscriber_id, segment_id=old_segment, last_commit=position)
        st = _Owned(subscriber_id, base, version if version is not None else -1, position)
        # Writing the znode (a switch to a fresh segment) is what makes this
        # process the owner: a zombie's next switch fails its compare-and-set.
        await self._switch(st, fresh=version is None, reason="takeover", new_id=new_id)
        log.info(
            "stream %s: owning subscriber %s at %s (segment %s)",
            self.stream,
            subscriber_id,
            position,
            st.znode.segment_id,
        )
        return st

    # ------------------------------------------------------------------
    # commits
    # ------------------------------------------------------------------
    async def advance_commit_position(self, subscriber_id: str, dlsn: DLSN) -> None:
        st = self._subs.get(subscriber_id)
        if st is None or st.error is not None:
            if st is not None:
                raise st.error.clone()  # type: ignore[union-attr]
            st = await self._state(subscriber_id)
        if dlsn <= st.durable:
            return
        loop = asyncio.get_running_loop()
        fut: asyncio.Future[None] = loop.create_future()
        heapq.heappush(st.waiters, (dlsn, next(self._seq), fut))
        if dlsn > st.requested:
            st.requested = dlsn
        if not st.pump_scheduled:
            # Send at the end of this loop iteration, not now: the commits
            # made in the same iteration (every consumer woken by one
            # durable append) then share one append instead of each taking
            # a free in-flight slot alone.
            st.pump_scheduled = True
            loop.call_soon(self._scheduled_pump, st)
        await fut

    def _scheduled_pump(self, st: _Owned) -> None:
        st.pump_scheduled = False
        self._pump(st)

    def _pump(self, st: _Owned) -> None:
        handle = st.handle
        if st.error is not None or st.switching is not None or handle is None:
            return
        while st.inflight < MAX_INFLIGHT and st.requested > st.sent:
            target = st.sent = st.requested
            data = encode_commit(target)
            try:
                fut = handle.append_nowait(data)
            except BKError as e:
                self._fail(st, self._map_error(st, e))
                return
            st.inflight += 1
            st.idle.clear()
            st.entries += 1
            st.bytes += len(data)
            fut.add_done_callback(lambda f, t=target: self._appended(st, t, f))
            if (
                st.entries >= self.max_entries
                or st.bytes >= self.max_bytes
                or time.monotonic() - st.started >= self.max_age
            ):
                self._start_roll(st)
                return

    def _appended(self, st: _Owned, target: DLSN, fut: asyncio.Future[int]) -> None:
        st.inflight -= 1
        exc = fut.exception()
        if exc is not None:
            self._fail(st, self._map_error(st, exc))
            return
        if target > st.durable:
            st.durable = target
        waiters = st.waiters
        while waiters and waiters[0][0] <= st.durable:
            _, _, w = heapq.heappop(waiters)
            if not w.done():
                w.set_result(None)
        if st.inflight == 0:
            st.idle.set()
            if st.lac_task is None and st.switching is None:
                st.lac_task = self._spawn(self._publish_lac(st))  # type: ignore[assignment]
        self._pump(st)

    async def _publish_lac(self, st: _Owned) -> None:
        """Keep the segment's LAC current while idle, so admin reads (which
        never fence) see the latest commit."""
        try:
            handle = st.handle
            while handle is not None and handle.last_add_confirmed > handle.lac_published:
                await handle.write_lac()
        except Exception as e:
            log.debug("subscriber %s: explicit LAC failed: %s", st.subscriber_id, e)
        finally:
            st.lac_task = None

    def _map_error(self, st: _Owned, exc: BaseException) -> DLogError:
        if isinstance(exc, (LedgerFencedError, SubscriptionFencedError)):
            return SubscriptionFencedError(
                f"stream {self.stream!r}: subscriber {st.subscriber_id!r} is owned by another process now"
            )
        if isinstance(exc, DLogError):
            return exc if not isinstance(exc, BKError) else BKTransmitError(f"commit failed: {exc}")
        return BKTransmitError(f"commit failed: {exc!r}")

    def _fail(self, st: _Owned, error: DLogError) -> None:
        if st.error is None:
            st.error = error
            log.warning("stream %s: subscriber %s: %s", self.stream, st.subscriber_id, error)
        waiters, st.waiters = st.waiters, []
        for _, _, w in waiters:
            if not w.done():
                w.set_exception(error.clone())
                w.exception()
        st.idle.set()

    # ------------------------------------------------------------------
    # segment switches
    # ------------------------------------------------------------------
    def _start_roll(self, st: _Owned) -> None:
        if st.switching is None:
            st.switching = self._spawn(self._roll(st))  # type: ignore[assignment]

    async def _roll(self, st: _Owned) -> None:
        try:
            await st.idle.wait()
            if st.error is None:
                await self._switch(st, fresh=False, reason="roll")
        except DLogError as e:
            self._fail(st, e)
        except Exception as e:
            self._fail(st, BKTransmitError(f"rolling the subscription segment failed: {e!r}"))
        finally:
            st.switching = None
        self._pump(st)

    async def _switch(
        self, st: _Owned, *, fresh: bool, reason: str, new_id: int | None = None
    ) -> None:
        """Move the subscription to a new segment holding ``st.durable``."""
        sid = st.subscriber_id
        old_handle, old_segment = st.handle, st.znode.segment_id
        position = st.durable
        if new_id is None:
            new_id = await self.bk.generate_ledger_id()
        # 0. intent
        intent = st.znode.replace(next_segment_id=new_id, previous_segment_id=None)
        st.version = await self._cas(sid, intent, None if fresh else st.version)
        st.znode = intent
        failpoint("subscriptions.roll.after_intent")
        # 1. the new segment, holding the position
        handle = await self.bk.create_ledger(
            self.conf.ensemble_size,
            self.conf.write_quorum_size,
            self.conf.ack_quorum_size,
            self.conf.bk_digest_type,
            self.log.password,
            create_context=LedgerCreateContext(
                created_by=LedgerOwner(system="dlog", service="subscriptions"),
                part_of_data_set=self.data_set(sid),
                expected_max_entries=self.max_entries,
                expected_max_length=self.max_bytes,
                expected_max_open_duration_ms=int(self.max_age * 1000),
                follows_ledger=old_segment,
            ),
            ledger_id=new_id,
        )
        first = encode_commit(position)
        await handle.append(first)
        failpoint("subscriptions.roll.after_new_segment")
        # 2. switch
        switched = SegmentSubscription(
            name=sid, segment_id=new_id, last_commit=position, previous_segment_id=old_segment
        )
        try:
            st.version = await self._cas(sid, switched, st.version)
        except BaseException:
            await handle.close(
                LedgerCloseContext.abnormal(
                    "subscription switch failed", expect_delete_after=_now_ms()
                )
            )
            raise
        st.znode = switched
        st.handle = handle
        st.entries, st.bytes, st.started = 1, len(first), time.monotonic()
        self.switches += 1
        failpoint("subscriptions.roll.after_switch")
        # 3. the old segment goes
        if old_handle is not None:
            close = (
                LedgerCloseContext.max_entries_reached(expect_delete_after=_now_ms())
                if reason == "roll"
                else LedgerCloseContext.client_shutdown(expect_delete_after=_now_ms())
            )
            try:
                await old_handle.close(close)
            except DLogError as e:
                log.warning("subscriber %s: closing old segment %s failed: %s", sid, old_segment, e)
        await self.delete_ledgers(old_segment)
        failpoint("subscriptions.roll.after_delete")
        log.debug("subscriber %s: %s to segment %d at %s", sid, reason, new_id, position)

    async def _cas(self, subscriber_id: str, sub: SegmentSubscription, version: int | None) -> int:
        path = self.znode(subscriber_id)
        data = encode_segment_subscription(sub)
        try:
            if version is None or version < 0:
                await self.zk.create(path, data, makepath=True)
                return 0
            return (await self.zk.set(path, data, version=version)).version
        except (BadVersionError, NodeExistsError, NoNodeError):
            raise SubscriptionFencedError(
                f"stream {self.stream!r}: subscriber {subscriber_id!r} was changed by another owner"
            ) from None

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
            if st.error is not None or (st.inflight == 0 and st.switching is None):
                return
            # ``idle`` may have been set and cleared again before this task
            # runs (an append completes, then the pump sends more), so the
            # loop checks ``inflight`` itself rather than trusting the event.
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
        old_handle, old_segment = st.handle, st.znode.segment_id
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
        st.error = SubscriptionFencedError(f"subscriber {subscriber_id!r} was released")
        if old_handle is not None:
            try:
                await old_handle.close(
                    LedgerCloseContext.client_shutdown(expect_delete_after=_now_ms())
                )
            except DLogError as e:
                log.warning(
                    "subscriber %s: closing segment %s failed: %s", subscriber_id, old_segment, e
                )
        await self.delete_ledgers(old_segment)

    async def close(self) -> None:
        await super().close()
        for sid in list(self._subs):
            try:
                await self.release(sid)
            except Exception as e:
                log.warning("stream %s: releasing subscriber %s failed: %s", self.stream, sid, e)
        for t in list(self._tasks):
            t.cancel()

    def _spawn(self, coro: object) -> asyncio.Task[object]:
        task = asyncio.get_running_loop().create_task(coro)  # type: ignore[arg-type]
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)
        return task


def _now_ms() -> int:
    return int(time.time() * 1000)
