"""DistributedLog's ZooKeeper SubscriptionsStore: one znode per subscriber
holding the base64 DLSN, one ZooKeeper write per position change.

Writes are compare-and-set on the znode version, so a store notices when
someone else changed the node: it keeps the later position and never
regresses, and if another store converted the subscription to the
log-segment format it stops with SubscriptionFencedError.
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging

from dlog.dlsn import DLSN
from dlog.errors import SubscriptionFencedError
from dlog.singleflight import SingleFlight
from dlog.stream import StreamContext
from dlog.zk import BadVersionError, NodeExistsError, NoNodeError, TransactionOp, first_error
from subscriptions.format import ZK_FORMAT, SegmentSubscription, ZkPosition, encode_zk_position
from subscriptions.store import ATTEMPTS, SubscriptionsStore

log = logging.getLogger(__name__)


@dataclasses.dataclass
class _State:
    position: DLSN
    version: int | None  # None: the znode does not exist
    lock: asyncio.Lock = dataclasses.field(default_factory=asyncio.Lock)


class ZKSubscriptionsStore(SubscriptionsStore):
    format = ZK_FORMAT

    def __init__(self, ctx: StreamContext) -> None:
        super().__init__(ctx)
        self._states: dict[str, _State] = {}
        self._stale: dict[str, _State] = {}
        #: Subscriptions another store took over from this one: their commits
        #: keep failing until this store is asked to acquire them again.
        self._fenced: dict[str, SubscriptionFencedError] = {}
        self._loading: SingleFlight[_State] = SingleFlight()

    def _owned(self, subscriber_id: str) -> tuple[DLSN, int | None] | None:
        st = self._states.get(subscriber_id)
        return (st.position, st.version) if st is not None and not st.lock.locked() else None

    def _lost(self, subscriber_id: str) -> None:
        # Not an error for DistributedLog's store: the next write compares
        # versions and decides; just stop trusting the cached position.
        st = self._states.get(subscriber_id)
        if st is not None:
            self._states.pop(subscriber_id, None)
            self._stale[subscriber_id] = st

    def _forget(self, subscriber_id: str) -> None:
        self._states.pop(subscriber_id, None)
        self._stale.pop(subscriber_id, None)

    async def _state(self, subscriber_id: str) -> _State:
        st = self._states.get(subscriber_id)
        if st is not None:
            return st
        stale = self._stale.pop(subscriber_id, None)
        if stale is not None:
            # We wrote it before and someone changed it since: our next
            # compare-and-set must notice that, not silently reload.
            self._states[subscriber_id] = stale
            return stale
        return await self._loading.run(subscriber_id, lambda: self._load_and_keep(subscriber_id))

    async def _load_and_keep(self, subscriber_id: str) -> _State:
        st = await self._load(subscriber_id)
        self._states[subscriber_id] = st
        return st

    async def _load(self, subscriber_id: str, *, allow_missing: bool = False) -> _State:
        """Read (converting from the log-segment format); ``allow_missing``
        for a reset, which does not need a lost current segment."""
        for _ in range(ATTEMPTS):
            found = await self._take_over(subscriber_id, allow_missing=allow_missing)
            if not isinstance(found.znode, SegmentSubscription):
                return _State(found.position, found.version)
            # Convert: every segment its owner could append to is fenced;
            # write the position in DistributedLog's format and delete the
            # record, in one transaction (compare-and-set: if the owner
            # switched segments meanwhile, fence again), then drop the
            # segments and the owner's registration.
            data = encode_zk_position(found.position)
            assert found.version is not None
            ops: list[TransactionOp] = [
                ("set_data", (self.znode(subscriber_id), data), {"version": found.version})
            ]
            if not found.znode.inline:
                ops.append(("delete", (self.record_znode(subscriber_id),), {}))
            error = first_error(await self.zk.transaction(ops))
            if error is not None and not (
                isinstance(error, BadVersionError)
                and await self._landed(subscriber_id, error, found.version + 1, data, None)
            ):
                if isinstance(error, (BadVersionError, NoNodeError)):
                    continue  # changed or deleted meanwhile: read again
                raise error
            version = found.version + 1
            z = found.znode
            await self._delete_ledgers(z.segment_id, z.next_segment_id, z.previous_segment_id)
            try:
                await self.zk.delete(self.owner_znode(subscriber_id))
            except NoNodeError:
                pass
            log.info(
                "stream %s: converted subscriber %s to the ZooKeeper format at %s",
                self.stream,
                subscriber_id,
                found.position,
            )
            return _State(found.position, version)
        raise SubscriptionFencedError(
            f"stream {self.stream!r}: subscriber {subscriber_id!r} kept changing while converting"
        )

    async def acquire(self, subscriber_id: str) -> DLSN:
        self._fenced.pop(subscriber_id, None)
        return (await self._state(subscriber_id)).position

    async def advance_commit_position(self, subscriber_id: str, dlsn: DLSN) -> None:
        fenced = self._fenced.get(subscriber_id)
        if fenced is not None:
            # Do not silently take it back: that would fence the new owner.
            raise fenced.clone()
        st = await self._state(subscriber_id)
        if dlsn <= st.position:
            return
        async with st.lock:
            if dlsn > st.position:
                await self._write(subscriber_id, st, dlsn)

    async def reset_position(self, subscriber_id: str, dlsn: DLSN) -> None:
        self._forget(subscriber_id)
        self._fenced.pop(subscriber_id, None)
        st = await self._load(subscriber_id, allow_missing=True)
        self._states[subscriber_id] = st
        async with st.lock:
            await self._write(subscriber_id, st, dlsn, force=True)

    async def release(self, subscriber_id: str) -> None:
        self._forget(subscriber_id)

    async def _write(
        self, subscriber_id: str, st: _State, dlsn: DLSN, *, force: bool = False
    ) -> None:
        path = self.znode(subscriber_id)
        data = encode_zk_position(dlsn)
        for _ in range(10):
            try:
                if st.version is None:
                    await self.zk.create(path, data, makepath=True)
                    st.version = 0
                else:
                    st.version = (await self.zk.set(path, data, version=st.version)).version
                st.position = dlsn
                return
            except (BadVersionError, NodeExistsError, NoNodeError):
                znode, version = await self.read_znode(subscriber_id)
            if isinstance(znode, SegmentSubscription):
                self._forget(subscriber_id)
                error = SubscriptionFencedError(
                    f"stream {self.stream!r}: subscriber {subscriber_id!r} was taken over by a log-segment store"
                )
                self._fenced[subscriber_id] = error
                raise error
            st.version = version
            if isinstance(znode, ZkPosition) and znode.position >= dlsn and not force:
                st.position = znode.position  # someone committed further: keep it
                return
        raise SubscriptionFencedError(
            f"stream {self.stream!r}: subscriber {subscriber_id!r} keeps changing under this store"
        )

    async def close(self) -> None:
        await super().close()
        self._states.clear()
        self._stale.clear()
        self._fenced.clear()
