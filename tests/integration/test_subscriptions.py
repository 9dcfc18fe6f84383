"""Subscriptions stores against real ZooKeeper and bookies."""

from __future__ import annotations

import asyncio
import random

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from dlog import failpoints
from dlog.dlsn import DLSN, NonInclusiveLowerBound
from dlog.errors import IllegalStateError, SubscriptionFencedError
from dlog.namespace import Namespace
from dlog.record import LogRecord
from subscriptions.format import SEGMENT_FORMAT, ZK_FORMAT, SegmentSubscription, ZkPosition
from subscriptions.log_segment import LogSegmentSubscriptionsStore
from subscriptions.zk_store import ZKSubscriptionsStore

#: Representative of the suite: runs with entry log per ledger off and on.
pytestmark = pytest.mark.both_entry_log_modes


@pytest.fixture
def open_ns(open_namespace):  # type: ignore[no-untyped-def]
    async def factory(log_segment: bool, **overrides: object) -> Namespace:
        return await open_namespace(
            logSegmentBasedSubscriptionsStoreEnabled=log_segment, **overrides
        )

    return factory


def d(n: int) -> DLSN:
    return DLSN(1, n, 0)


@pytest.mark.parametrize("log_segment", [False, True], ids=["zk", "log-segment"])
async def test_store_basics(open_ns, log_segment: bool) -> None:
    ns = await open_ns(log_segment)
    store = (await ns.open_log("s")).subscriptions
    assert isinstance(store, LogSegmentSubscriptionsStore if log_segment else ZKSubscriptionsStore)
    assert await store.get_last_commit_position("never") == NonInclusiveLowerBound
    await store.advance_commit_position("a", d(5))
    await store.advance_commit_position("a", d(3))  # not greater: a no-op
    await store.advance_commit_position("b", d(7))
    assert await store.get_last_commit_position("a") == d(5)
    assert await store.get_last_commit_positions() == {"a": d(5), "b": d(7)}
    info = await store.describe("a")
    assert info.format == (SEGMENT_FORMAT if log_segment else ZK_FORMAT)
    assert await store.delete_subscriber("a")
    assert not await store.delete_subscriber("a")
    assert await store.get_last_commit_position("a") == NonInclusiveLowerBound
    # Another process reads positions without disturbing the owner.
    reader_ns = await open_ns(log_segment)
    other = (await reader_ns.open_log("s")).subscriptions
    assert await other.get_last_commit_position("b") == d(7)
    await store.advance_commit_position("b", d(9))
    assert await other.get_last_commit_position("b") == d(9)
    await store.close()


async def test_concurrent_commits_coalesce_to_the_maximum(open_ns) -> None:
    ns = await open_ns(True)
    store = (await ns.open_log("c")).subscriptions
    await store.acquire("x")
    rng = random.Random(7)
    targets = [d(rng.randrange(1, 100_000)) for _ in range(2000)]
    seen: list[DLSN] = []

    async def watch() -> None:
        for _ in range(50):
            seen.append(await store.get_last_commit_position("x"))
            await asyncio.sleep(0)

    await asyncio.gather(*(store.advance_commit_position("x", t) for t in targets), watch())
    assert await store.get_last_commit_position("x") == max(targets)
    assert seen == sorted(seen), "the position moved backwards"
    # Coalescing: far fewer appends than commits.
    st = store._subs["x"]
    assert st.entries < len(targets) / 4
    # And it is durable: a new owner (fencing this one) finds it.
    ns2 = await open_ns(True)
    assert await (await ns2.open_log("c")).subscriptions.acquire("x") == max(targets)


_counter = iter(range(1_000_000))


@settings(
    max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(
    tasks=st.lists(
        st.lists(
            st.tuples(st.integers(1, 3), st.integers(0, 50), st.integers(0, 3)),
            min_size=1,
            max_size=30,
        ),
        min_size=1,
        max_size=12,
    ),
    log_segment=st.booleans(),
)
async def test_many_tasks_commit_concurrently(open_ns, tasks, log_segment) -> None:
    """Whatever the interleaving, the stored position is the maximum
    committed, and it never moves back while the commits run."""
    ns = await open_ns(log_segment)
    store = (await ns.open_log("h")).subscriptions
    sid = f"sub-{next(_counter)}"
    observed: list[DLSN] = []
    done = asyncio.Event()

    async def committer(dlsns: list[tuple[int, int, int]]) -> None:
        for seq, entry, slot in dlsns:
            await store.advance_commit_position(sid, DLSN(seq, entry, slot))

    async def observer() -> None:
        while not done.is_set():
            observed.append(await store.get_last_commit_position(sid))
            await asyncio.sleep(0)

    watch = asyncio.ensure_future(observer())
    await asyncio.gather(*(committer(t) for t in tasks))
    done.set()
    await watch
    expected = max(DLSN(*x) for t in tasks for x in t)
    assert await store.get_last_commit_position(sid) == expected
    assert observed == sorted(observed)
    await store.close()


async def test_zombie_owner_is_fenced(open_ns) -> None:
    ns1, ns2 = await open_ns(True), await open_ns(True)
    old = (await ns1.open_log("z")).subscriptions
    await old.advance_commit_position("s", d(10))
    new = (await ns2.open_log("z")).subscriptions
    assert await new.acquire("s") == d(10)
    with pytest.raises(SubscriptionFencedError):
        await old.advance_commit_position("s", d(11))
    await new.advance_commit_position("s", d(12))
    assert await new.get_last_commit_position("s") == d(12)


async def test_each_store_reads_the_other_and_the_flag_flips_both_ways(open_ns) -> None:
    zk_ns, seg_ns = await open_ns(False), await open_ns(True)
    zk_store = (await zk_ns.open_log("f")).subscriptions
    seg_store = (await seg_ns.open_log("f")).subscriptions
    # Rollout: upgraded code with the flag off writes DistributedLog's format.
    await zk_store.advance_commit_position("app", d(100))
    raw, _ = await zk_store.read_znode("app")
    assert isinstance(raw, ZkPosition)
    assert await seg_store.get_last_commit_position("app") == d(100)  # reads the other format
    # Flag on: the log-segment store takes over and converts, no regression.
    assert await seg_store.acquire("app") == d(100)
    await seg_store.advance_commit_position("app", d(200))
    raw, _ = await seg_store.read_znode("app")
    assert isinstance(raw, SegmentSubscription) and raw.segment_id is not None
    assert await zk_store.get_last_commit_position("app") == d(200)  # and the other way
    # The ZooKeeper store's stale owner notices the change and stops, and
    # stays stopped: it must not take the subscription back by itself.
    with pytest.raises(SubscriptionFencedError):
        await zk_store.advance_commit_position("app", d(150))
    with pytest.raises(SubscriptionFencedError):
        await zk_store.advance_commit_position("app", d(160))
    await seg_store.advance_commit_position("app", d(210))  # the new owner is undisturbed
    assert await seg_store.get_last_commit_position("app") == d(210)
    # Roll back: flag off again; the ZooKeeper store converts back.
    zk_again = (await (await open_ns(False)).open_log("f")).subscriptions
    assert await zk_again.acquire("app") == d(210)
    with pytest.raises(SubscriptionFencedError):
        await seg_store.advance_commit_position("app", d(250))  # the segment was fenced
    await zk_again.advance_commit_position("app", d(300))
    raw, _ = await zk_again.read_znode("app")
    assert raw == ZkPosition(d(300))
    assert await seg_store.get_last_commit_position("app") == d(300)


async def test_graceful_close_clears_the_segment(open_ns) -> None:
    ns = await open_ns(True)
    lm = await ns.open_log("g")
    store = lm.subscriptions
    await store.advance_commit_position("s", d(42))
    segment = store._subs["s"].znode.segment_id
    await store.release("s")
    raw, _ = await store.read_znode("s")
    assert raw.segment_id is None and raw.last_commit == d(42)
    assert segment not in await ns.bk.list_ledgers()
    assert await store.get_last_commit_position("s") == d(42)


async def _subscription_ledgers(ns: Namespace, data_set: str) -> list[int]:
    out = []
    for lid in await ns.bk.list_ledgers():
        md = await ns.bk.ledger_metadata(lid)
        if md.create_context is not None and md.create_context.part_of_data_set == data_set:
            out.append(lid)
    return out


@pytest.mark.parametrize(
    "point",
    [
        "subscriptions.roll.after_intent",
        "subscriptions.roll.after_new_segment",
        "subscriptions.roll.after_switch",
        "subscriptions.roll.after_delete",
    ],
)
async def test_a_crash_at_each_roll_step_never_regresses(open_ns, point: str) -> None:
    ns = await open_ns(True, subscriptionSegmentMaxEntries=20)
    store = (await ns.open_log("r")).subscriptions
    await store.acquire("s")
    acked = NonInclusiveLowerBound
    failpoints.configure(f"{point}=raise")
    try:
        for i in range(1, 200):
            await store.advance_commit_position("s", d(i))
            acked = d(i)
    except Exception:
        pass
    failpoints.configure("")
    assert acked >= d(19), "the roll should have been reached"
    # The crashed owner is abandoned; a new process takes over.
    ns2 = await open_ns(True, subscriptionSegmentMaxEntries=20)
    store2 = (await ns2.open_log("r")).subscriptions
    position = await store2.acquire("s")
    assert position >= acked
    await store2.advance_commit_position("s", position.next())
    # At most the current segment is left: the crashed roll's leftovers are gone.
    data_set = store2.data_set("s")
    assert await _subscription_ledgers(ns2, data_set) == [store2._subs["s"].znode.segment_id]
    # And rolls keep working after recovery.
    for i in range(50):
        await store2.advance_commit_position("s", DLSN(2, i, 0))
    assert await _subscription_ledgers(ns2, data_set) == [store2._subs["s"].znode.segment_id]


async def test_ten_thousand_commits_touch_zookeeper_at_most_twice(open_ns, zk_server) -> None:
    ns = await open_ns(True)
    store = (await ns.open_log("zx")).subscriptions
    await store.acquire("s")
    await asyncio.sleep(0.5)  # let the acquisition's writes settle
    before = zk_server.zxid()
    for wave in range(100):  # 10,000 commits, 100 in flight at a time
        await asyncio.gather(
            *(store.advance_commit_position("s", d(wave * 100 + i)) for i in range(1, 101))
        )
    for i in range(10_001, 10_101):  # and some one at a time
        await store.advance_commit_position("s", d(i))
    assert zk_server.zxid() - before <= 2
    assert await store.get_last_commit_position("s") == d(10_100)


async def test_consumer_resumes_after_its_last_commit(open_ns) -> None:
    ns = await open_ns(True)
    lm = await ns.open_log("events")
    writer = await lm.open_writer()
    await writer.write_bulk([LogRecord(i, b"e%d" % i) for i in range(100)])
    consumer = await lm.subscribe("app")
    got = []
    while len(got) < 40:
        got.extend(await consumer.read_bulk(40 - len(got), timeout=10))
    await consumer.commit(got[-1])
    assert await consumer.committed() == got[-1].dlsn
    await consumer.close()
    again = await lm.subscribe("app")
    first = await again.read(timeout=10)
    assert first.txid == 40
    await again.seek(DLSN.INITIAL)
    assert (await again.read(timeout=10)).txid == 0
    await again.close()
    await writer.close()


@pytest.mark.parametrize("log_segment", [False, True], ids=["zk", "log-segment"])
async def test_pipelined_commits_without_a_coroutine_each(open_ns, log_segment: bool) -> None:
    ns = await open_ns(log_segment)
    store = (await ns.open_log("nowait")).subscriptions
    # Before ownership: the first call takes it (in a task).
    first = store.advance_commit_position_nowait("s", d(1))
    futures = [store.advance_commit_position_nowait("s", d(i)) for i in range(2, 300)]
    futures.append(store.advance_commit_position_nowait("s", d(5)))  # older: resolves too
    await asyncio.gather(first, *futures)
    assert await store.get_last_commit_position("s") == d(299)
    if log_segment:
        assert store._subs["s"].entries < 100, "pipelined commits coalesce into few appends"
    # Durable: a new owner finds the last one.
    ns2 = await open_ns(log_segment)
    assert await (await ns2.open_log("nowait")).subscriptions.acquire("s") == d(299)
    if log_segment:  # a fenced owner's nowait commits fail like its awaited ones
        with pytest.raises(SubscriptionFencedError):
            await store.advance_commit_position_nowait("s", d(400))


async def test_consumer_commit_nowait_and_no_commit_after_close(open_ns) -> None:
    ns = await open_ns(True)
    lm = await ns.open_log("cn")
    writer = await lm.open_writer()
    await writer.write_bulk([LogRecord(i, b"e%d" % i) for i in range(50)])
    consumer = await lm.subscribe("app")
    records = []
    while len(records) < 50:
        records.extend(await consumer.read_bulk(50 - len(records), timeout=10))
    await asyncio.gather(*(consumer.commit_nowait(r) for r in records))
    assert await consumer.committed() == records[-1].dlsn
    await consumer.close()
    for commit in (consumer.commit, consumer.commit_nowait):
        with pytest.raises(IllegalStateError):
            await commit(records[0])  # would take the released subscription back
    store = lm.subscriptions
    assert (await store.describe("app")).owned_here is False
    await writer.close()
