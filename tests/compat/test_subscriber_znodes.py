"""Subscriber znodes as Java DistributedLog reads them (see
:mod:`tests.compat.distributedlog_rules`): with either store, every child
of ``subscribers`` holds a valid DistributedLog position, never one that
makes a Java consumer silently start over; with the log-segment store it is
no older than the last segment switch, and the record lives beside it."""

from __future__ import annotations

import asyncio

import pytest

from dlog.dlsn import DLSN, NonInclusiveLowerBound
from dlog.errors import SubscriptionFencedError
from dlog.namespace import Namespace
from dlog.zk import ZooKeeper
from subscriptions.format import (
    HEADER,
    RECORD,
    SEGMENT_FORMAT,
    ZK_FORMAT,
    SegmentSubscription,
    ZkPosition,
    decode_record,
    encode_zk_position,
)
from subscriptions.log_segment import LogSegmentSubscriptionsStore
from subscriptions.store import OWNER, SubscriptionsStore
from subscriptions.zk_store import ZKSubscriptionsStore
from tests.compat.distributedlog_rules import java_is_valid, java_position


def d(n: int) -> DLSN:
    return DLSN(1, n, 0)


async def store_of(ns: Namespace, stream: str) -> SubscriptionsStore:
    return (await ns.open_log(stream)).subscriptions


async def java_view(zk: ZooKeeper, store: SubscriptionsStore) -> dict[str, DLSN]:
    """``ZKSubscriptionsStore.getLastCommitPositions``, by upstream's rules;
    asserts that each znode is a valid position (no silent fallback)."""
    out = {}
    for sid in await zk.get_children(store.path):
        data, _ = await zk.get(f"{store.path}/{sid}")
        assert java_is_valid(data), (sid, data)
        out[sid] = java_position(data)
    return out


async def test_java_reads_the_last_switch_position_never_the_start(
    open_namespace, zk: ZooKeeper
) -> None:
    ns = await open_namespace(
        logSegmentBasedSubscriptionsStoreEnabled=True, subscriptionSegmentMaxEntries=4
    )
    store = await store_of(ns, "j")
    assert isinstance(store, LogSegmentSubscriptionsStore)
    await store.acquire("app")
    assert await java_view(zk, store) == {"app": NonInclusiveLowerBound}  # nothing committed
    seen = []
    for i in range(1, 24):
        await store.advance_commit_position("app", d(i))
        switched_at = store._subs["app"].znode.last_commit
        java = (await java_view(zk, store))["app"]
        assert java == switched_at <= d(i)
        assert java >= d(i - 4), "older than the last switch"
        seen.append(java)
    assert store.switches >= 5 and seen == sorted(seen) and seen[-1] > NonInclusiveLowerBound
    # The record is the znode's child, and Java's listing sees only subscribers.
    assert sorted(await zk.get_children(store.znode("app"))) == [OWNER, RECORD]
    record = (await zk.get(store.record_znode("app")))[0]
    assert record.startswith(HEADER)
    assert decode_record(record, "app").segment_id == store._subs["app"].znode.segment_id
    # A graceful close leaves the final position where Java reads it.
    await store.release("app")
    assert await java_view(zk, store) == {"app": d(23)}
    assert await store.get_last_commit_position("app") == d(23)


async def test_a_zookeeper_store_subscriber_has_no_record(open_namespace, zk: ZooKeeper) -> None:
    seg = await store_of(await open_namespace(logSegmentBasedSubscriptionsStoreEnabled=True), "z")
    zks = await store_of(await open_namespace(), "z")
    assert isinstance(zks, ZKSubscriptionsStore)
    await zks.advance_commit_position("a", d(3))
    assert await zk.get_children(zks.znode("a")) == []
    await seg.advance_commit_position("a", d(7))  # converts: record created
    assert await zk.exists(seg.record_znode("a")) is not None
    zks = await store_of(await open_namespace(), "z")
    assert await zks.acquire("a") == d(7)  # converts back: record deleted, in one transaction
    assert await zk.get_children(zks.znode("a")) == []
    assert (await zks.read_znode("a"))[0] == ZkPosition(d(7))
    assert await java_view(zk, zks) == {"a": d(7)}


async def test_a_java_commit_to_the_znode_is_not_lost(open_namespace, zk: ZooKeeper) -> None:
    """A Java consumer writes its position to the znode (setData, version
    -1) and leaves the record: dlog reads the later of the two, and the
    dlog owner, whose version is gone, stops at its next switch."""
    ns = await open_namespace(
        logSegmentBasedSubscriptionsStoreEnabled=True, subscriptionSegmentMaxEntries=3
    )
    owner = await store_of(ns, "java")
    await owner.advance_commit_position("s", d(10))
    reader = await store_of(
        await open_namespace(logSegmentBasedSubscriptionsStoreEnabled=True), "java"
    )
    await zk.set(owner.znode("s"), encode_zk_position(d(50)))  # Java's commit
    assert await reader.get_last_commit_position("s") == d(50)
    info = await reader.describe("s")
    assert info.format == SEGMENT_FORMAT and info.position == d(50)
    with pytest.raises(SubscriptionFencedError):
        for i in range(11, 20):  # the owner's next switch meets the new version
            await owner.advance_commit_position("s", d(i))
    # A takeover carries Java's position; an older Java write regresses nothing.
    taker = await store_of(
        await open_namespace(logSegmentBasedSubscriptionsStoreEnabled=True), "java"
    )
    assert await taker.acquire("s") >= d(50)
    await zk.set(owner.znode("s"), encode_zk_position(d(1)))
    assert await reader.get_last_commit_position("s") >= d(50)


async def test_an_older_release_inline_record_is_read_then_moved(
    open_namespace, zk: ZooKeeper
) -> None:
    ns = await open_namespace(logSegmentBasedSubscriptionsStoreEnabled=True)
    store = await store_of(ns, "old")
    await store.advance_commit_position("s", d(8))
    await store.close()
    # What an older release left: the record in the subscriber znode itself.
    path, record = store.znode("s"), (await zk.get(store.record_znode("s")))[0]
    await zk.transaction(
        [("set_data", (path, record), {}), ("delete", (store.record_znode("s"),), {})]
    )
    assert java_position((await zk.get(path))[0]) == NonInclusiveLowerBound  # Java's view today
    for fmt in (True, False):  # both stores read it
        other = await store_of(
            await open_namespace(logSegmentBasedSubscriptionsStoreEnabled=fmt), "old"
        )
        assert await other.get_last_commit_position("s") == d(8)
        znode, _ = await other.read_znode("s")
        assert isinstance(znode, SegmentSubscription) and znode.inline
    # A log-segment consumer's takeover moves the record beside a position.
    new = await store_of(await open_namespace(logSegmentBasedSubscriptionsStoreEnabled=True), "old")
    assert await new.acquire("s") == d(8)
    assert java_position((await zk.get(path))[0]) == d(8)
    znode, _ = await new.read_znode("s")
    assert isinstance(znode, SegmentSubscription) and not znode.inline
    await new.advance_commit_position("s", d(9))
    assert await new.get_last_commit_position("s") == d(9)


async def test_a_stream_without_a_subscribers_znode(open_namespace, zk: ZooKeeper) -> None:
    """Java creates ``subscribers`` with its first subscriber, not with the log."""
    ns = await open_namespace(logSegmentBasedSubscriptionsStoreEnabled=True)
    store = await store_of(ns, "bare")
    await zk.delete(store.path)
    await store.advance_commit_position("s", d(4))
    assert await java_view(zk, store) == {"s": NonInclusiveLowerBound}
    assert await store.get_last_commit_position("s") == d(4)


async def test_a_read_racing_a_conversion_never_reports_the_switch_position(
    open_namespace, zk: ZooKeeper
) -> None:
    """A reader reads the znode (the last switch's position), then, before it
    reads the record, a ZooKeeper-store consumer converts the subscription
    (recording every commit, deleting the record): the reader must read
    again, not report the older switch position as the current one."""
    ns = await open_namespace(logSegmentBasedSubscriptionsStoreEnabled=True)
    owner = await store_of(ns, "race")
    for i in range(1, 6):
        await owner.advance_commit_position("s", d(i))
    await owner.close()  # the owner is gone; the znode says d(5)
    owner = await store_of(
        await open_namespace(logSegmentBasedSubscriptionsStoreEnabled=True), "race"
    )
    for i in range(6, 9):
        await owner.advance_commit_position("s", d(i))  # in the segment only
    assert java_position((await zk.get(owner.znode("s")))[0]) == d(5)

    reader_ns = await open_namespace()
    reader = await store_of(reader_ns, "race")
    converter = await store_of(await open_namespace(), "race")
    real_get = reader.zk.get
    converted = asyncio.Event()

    async def get(path: str, *args: object, **kwargs: object) -> object:
        if path.endswith(f"/{RECORD}") and not converted.is_set():
            converted.set()
            assert await converter.acquire("s") == d(8)
        return await real_get(path, *args, **kwargs)

    reader.zk.get = get  # type: ignore[method-assign]
    try:
        info = await reader.describe("s")
    finally:
        del reader.zk.get
    assert converted.is_set()
    assert (info.format, info.position) == (ZK_FORMAT, d(8))


async def test_moving_inline_records_refuses_a_live_owner(open_namespace, zk: ZooKeeper) -> None:
    from subscriptions.upgrade import LiveSubscriberError, move_inline_records

    ns = await open_namespace(logSegmentBasedSubscriptionsStoreEnabled=True)
    store = await store_of(ns, "live")
    for sid in ("a", "b"):
        await store.advance_commit_position(sid, d(6))
    await store.close()
    for sid in ("a", "b"):  # as an older release left them
        record = (await zk.get(store.record_znode(sid)))[0]
        await zk.set(store.znode(sid), record)
        await zk.delete(store.record_znode(sid))
    await zk.create(store.owner_znode("b"), b"{}", ephemeral=True)  # an older release's owner
    before = {sid: (await zk.get(store.znode(sid)))[0] for sid in ("a", "b")}
    with pytest.raises(LiveSubscriberError, match="/b is owned by a live consumer"):
        await move_inline_records(zk, store.path)
    assert {sid: (await zk.get(store.znode(sid)))[0] for sid in ("a", "b")} == before
    await zk.delete(store.owner_znode("b"))
    assert await move_inline_records(zk, store.path, dry_run=True) == ["a", "b"]
    assert await move_inline_records(zk, store.path) == ["a", "b"]
    assert await java_view(zk, store) == {"a": d(6), "b": d(6)}
    assert await move_inline_records(zk, store.path) == []
    reader = await store_of(await open_namespace(), "live")
    assert await reader.get_last_commit_positions() == {"a": d(6), "b": d(6)}
