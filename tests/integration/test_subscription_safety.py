"""The log-segment store's guarantees, each driven to the interleaving or
fault that would break it: one owner at a time, no regression, reads after
an owner dies, no leaked ledgers, rolls for each reason."""

from __future__ import annotations

import asyncio
import logging

import pytest

from dlog import failpoints
from dlog.dlsn import DLSN, NonInclusiveLowerBound
from dlog.errors import (
    NoSuchLedgerError,
    SubscriptionCorruptedError,
    SubscriptionFencedError,
    ZooKeeperError,
)
from dlog.ledger.metadata import CloseReason
from dlog.namespace import Namespace
from dlog.stream import StreamContext
from subscriptions.format import SegmentSubscription
from subscriptions.log_segment import LogSegmentSubscriptionsStore
from tests.crash import crash, expire_session


@pytest.fixture
def open_ns(open_namespace):  # type: ignore[no-untyped-def]
    async def factory(**overrides: object) -> Namespace:
        return await open_namespace(logSegmentBasedSubscriptionsStoreEnabled=True, **overrides)

    return factory


async def store_of(ns: Namespace, stream: str) -> LogSegmentSubscriptionsStore:
    store = (await ns.open_log(stream)).subscriptions
    assert isinstance(store, LogSegmentSubscriptionsStore)
    return store


async def lac_published(store: LogSegmentSubscriptionsStore, sid: str) -> None:
    """Wait until the owner has published its segment's LAC (it does so
    once its appends have been idle a moment)."""
    appender = store._subs[sid].appender
    assert appender is not None
    await asyncio.wait_for(appender.lac_settled(), 10)


def d(n: int) -> DLSN:
    return DLSN(1, n, 0)


async def ledgers_of(ns: Namespace | StreamContext, data_set: str) -> list[int]:
    """Ledgers whose BP-44 create context puts them in ``data_set``."""
    out = []
    for lid in await ns.bk.list_ledgers():
        try:
            md = await ns.bk.ledger_metadata(lid)
        except NoSuchLedgerError:
            continue
        if md.create_context is not None and md.create_context.part_of_data_set == data_set:
            out.append(lid)
    return out


async def _commit_until_parked(store, sid: str, gate, first: int) -> DLSN:  # type: ignore[no-untyped-def]
    """Commit d(first), d(first+1), ... one at a time until a segment switch
    starts, and wait for it to park at ``gate``; returns the last
    acknowledged commit. A commit made while a switch is on waits for the
    switch, so the loop checks for one before each: the append that crosses
    the roll threshold starts it before that commit is acknowledged. (Polling
    the gate instead hung whenever the switch took longer to reach it than
    the poll waited: the next commit then waited on the parked switch.)"""
    st = store._subs[sid]
    acked = NonInclusiveLowerBound
    for i in range(first, first + 1000):
        if st.switching is not None:
            await gate.wait_reached()
            return acked
        await store.advance_commit_position(sid, d(i))
        acked = d(i)
    raise AssertionError("no segment switch started")


async def test_a_takeover_racing_a_roll_leaves_one_owner_and_no_regression(open_ns) -> None:
    """The race of the subscriptions issue: a takeover reads the znode while
    the owner is between "create the new segment" and "switch". The owner
    then switches and commits; the takeover's compare-and-set fails. The old
    code had deleted the new segment before its compare-and-set and never
    fenced it, so the old owner kept getting commits acknowledged on a
    deleted ledger, and a later owner resumed below them."""
    settings = {"subscriptionSegmentMaxEntries": 10}
    old = await store_of(await open_ns(**settings), "race")
    new = await store_of(await open_ns(**settings), "race")
    await old.acquire("s")
    rolling = failpoints.arm("subscriptions.roll.after_new_segment")
    acked = await _commit_until_parked(old, "s", rolling, 1)
    claiming = failpoints.arm("subscriptions.takeover.before_claim")
    takeover = asyncio.ensure_future(new.acquire("s"))
    await claiming.wait_reached()  # the takeover has read (and fenced); not yet won
    # Both ledgers the old owner could still append to are fenced already:
    # its segment and the one its switch is creating (closed by recovery).
    intent, _ = await new.read_znode("s")
    assert isinstance(intent, SegmentSubscription) and intent.next_segment_id is not None
    for ledger_id in (intent.segment_id, intent.next_segment_id):
        assert (await new.bk.ledger_metadata(ledger_id)).is_closed, ledger_id
    rolling.release()  # the old owner switches onto its new segment...
    await asyncio.sleep(0.2)
    acked_after_switch = []
    for i in range(1000, 1005):  # ...and tries to commit on it
        try:
            await old.advance_commit_position("s", d(i))
        except SubscriptionFencedError:
            break
        acked_after_switch.append(d(i))
    if acked_after_switch:
        acked = acked_after_switch[-1]
    claiming.release()
    try:
        resumed = await asyncio.wait_for(takeover, 30)
    except SubscriptionFencedError:
        resumed = None  # its compare-and-set lost: a takeover may give up...
    if resumed is not None:
        # ...but once it wins, the old owner acknowledges nothing more.
        with pytest.raises(SubscriptionFencedError):
            await old.advance_commit_position("s", d(2000))
        assert resumed >= acked
    # A later owner never resumes below an acknowledged commit, and a fresh
    # reader sees it too.
    later = await store_of(await open_ns(**settings), "race")
    assert await later.get_last_commit_position("s") >= acked
    assert await later.acquire("s") >= acked
    for store in (old, new):
        with pytest.raises(SubscriptionFencedError):
            await store.advance_commit_position("s", d(3000))


async def test_a_read_lags_a_live_owner_but_not_a_dead_one(open_ns) -> None:
    """The owner's last commit is durable, but it died before publishing the
    LAC that covers it. While it lives a read may lag (documented); once its
    ZooKeeper session is gone the read includes that commit."""
    owner_ns = await open_ns()
    owner = await store_of(owner_ns, "dead")
    await owner.advance_commit_position("s", d(1))
    await lac_published(owner, "s")  # d(1)'s
    publishing = failpoints.arm("subscriptions.publish_lac")
    await owner.advance_commit_position("s", d(2))  # acknowledged
    await publishing.wait_reached()  # ...and its LAC not published
    reader = await store_of(await open_ns(), "dead")
    info = await reader.describe("s")
    assert info.owner is not None and not info.owned_here
    assert info.position == d(1), "a live owner's unpublished commit is not read (it may lag)"
    await crash(owner_ns)  # kill -9: the session ends, the LAC is never published
    info = await reader.describe("s")
    assert info.owner is None
    assert info.position == d(2)
    assert await reader.get_last_commit_positions() == {"s": d(2)}
    assert await reader.acquire("s") == d(2)  # and a new owner agrees


async def test_a_missing_current_segment_is_an_error_not_a_regression(open_ns) -> None:
    ns = await open_ns()
    owner = await store_of(ns, "gone")
    for i in range(1, 6):
        await owner.advance_commit_position("s", d(i))
    znode, _ = await owner.read_znode("s")
    assert isinstance(znode, SegmentSubscription) and znode.last_commit < d(5)
    await crash(ns)
    other_ns = await open_ns()
    await other_ns.bk.delete_ledger(znode.segment_id)  # lost behind the store's back
    store = await store_of(other_ns, "gone")
    for attempt in (store.get_last_commit_position("s"), store.acquire("s")):
        with pytest.raises(SubscriptionCorruptedError) as e:
            await attempt
        assert "'s'" in str(e.value) and f"ledger {znode.segment_id}" in str(e.value)
    # The way out: an operator decides where to resume.
    await store.reset_position("s", d(5))
    assert await store.get_last_commit_position("s") == d(5)
    await store.advance_commit_position("s", d(6))
    assert await (await store_of(await open_ns(), "gone")).acquire("s") == d(6)


async def test_a_segment_switched_away_from_may_be_gone(open_ns) -> None:
    """previous_segment_id is the one segment the znode records as switched
    away from: its absence is normal, never an error."""
    ns = await open_ns(subscriptionSegmentMaxEntries=3)
    store = await store_of(ns, "prev")
    for i in range(1, 10):
        await store.advance_commit_position("s", d(i))
    znode, _ = await store.read_znode("s")
    assert isinstance(znode, SegmentSubscription) and znode.previous_segment_id is not None
    with pytest.raises(NoSuchLedgerError):
        await ns.bk.ledger_metadata(znode.previous_segment_id)
    reader = await store_of(await open_ns(), "prev")
    assert await reader.get_last_commit_position("s") == d(9)


async def test_delete_subscriber_fences_its_owner_and_deletes_every_ledger(open_ns) -> None:
    owner = await store_of(await open_ns(subscriptionSegmentMaxEntries=4), "del")
    for i in range(1, 10):
        await owner.advance_commit_position("s", d(i))
    admin = await store_of(await open_ns(), "del")
    data_set = admin.data_set("s")
    assert await ledgers_of(admin.ctx, data_set)
    assert await admin.read_owner("s") is not None
    assert await admin.delete_subscriber("s")
    assert await ledgers_of(admin.ctx, data_set) == []
    assert await admin.read_znode("s") == (None, None)
    with pytest.raises(SubscriptionFencedError):
        await owner.advance_commit_position("s", d(100))
    assert await admin.get_last_commit_position("s") == NonInclusiveLowerBound
    assert not await admin.delete_subscriber("s")


async def test_deleting_a_stream_deletes_its_subscribers_ledgers(open_ns) -> None:
    ns = await open_ns()
    owner = await store_of(await open_ns(), "doomed")
    for sid in ("a", "b"):
        await owner.advance_commit_position(sid, d(1))
    await owner.release("b")  # a released subscriber keeps no ledger...
    await owner.advance_commit_position("c", d(1))
    data_sets = [owner.data_set(sid) for sid in ("a", "b", "c")]
    assert await ledgers_of(ns, data_sets[0])
    await ns.delete_log("doomed")
    for data_set in data_sets:
        assert await ledgers_of(ns, data_set) == []
    with pytest.raises(SubscriptionFencedError):
        await owner.advance_commit_position("a", d(2))


async def test_a_failed_delete_leaves_a_findable_ledger(open_ns, caplog, monkeypatch) -> None:
    ns = await open_ns()
    store = await store_of(ns, "leak")
    await store.advance_commit_position("s", d(1))
    segment = store._subs["s"].znode.segment_id

    async def refuse(ledger_id: int) -> None:
        raise ZooKeeperError("ZooKeeper went away")

    monkeypatch.setattr(ns.bk, "delete_ledger", refuse)
    with caplog.at_level(logging.WARNING, logger="subscriptions"):
        assert await store.delete_subscriber("s")
    assert f"ledger {segment}" in caplog.text
    md = await ns.bk.ledger_metadata(segment)  # still there, and says whose it is
    assert md.create_context is not None
    assert md.create_context.part_of_data_set == f"{ns.path}/leak/subscribers/s"
    assert md.create_context.created_by is not None
    assert md.create_context.created_by.service == "subscriptions"


async def _close_reason_of_next_roll(
    store: LogSegmentSubscriptionsStore, first: int
) -> CloseReason:
    """Commit until a roll closes the old segment; its BP-44 close reason."""
    closed = failpoints.arm("subscriptions.roll.after_close")
    old = store._subs["s"].znode.segment_id
    st = store._subs["s"]
    for i in range(first, first + 5000):
        await store.advance_commit_position("s", d(i))
        if st.switching is not None:  # a commit now would wait for the parked switch
            break
    await closed.wait_reached()
    md = await store.bk.ledger_metadata(old)
    closed.release()
    assert md.close_context is not None and md.close_context.reason is not None
    return md.close_context.reason


@pytest.mark.parametrize(
    ("settings", "reason"),
    [
        ({"subscriptionSegmentMaxEntries": 5}, CloseReason.MAX_ENTRY_COUNT_REACHED),
        ({"subscriptionSegmentMaxBytes": 1024}, CloseReason.MAX_LENGTH_REACHED),
        ({"subscriptionSegmentMaxAgeMinutes": 1}, CloseReason.TIME_ROTATION),
    ],
    ids=["entries", "bytes", "age"],
)
async def test_each_roll_reason(open_ns, settings: dict[str, int], reason: CloseReason) -> None:
    store = await store_of(await open_ns(**settings), "rolls")
    now = [1000.0]
    store.clock = lambda: now[0]  # type: ignore[method-assign]
    await store.acquire("s")
    if reason is CloseReason.TIME_ROTATION:
        for i in range(1, 30):  # no roll within the minute...
            await store.advance_commit_position("s", d(i))
        assert store.switches == 1
        now[0] += 61  # ...and one once it has passed
    assert await _close_reason_of_next_roll(store, 100) is reason
    assert store.switches == 2
    expected = {
        CloseReason.MAX_ENTRY_COUNT_REACHED: 5,
        CloseReason.MAX_LENGTH_REACHED: 1024 // len(b"\n\x19" + bytes(25)) + 1,
    }.get(reason)
    if expected is not None:  # it rolled at the threshold, not later
        assert store._subs["s"].znode.last_commit <= d(100 + expected)
    reader = await store_of(await open_ns(), "rolls")
    assert await reader.get_last_commit_position("s") == store._subs["s"].durable


async def test_an_owner_whose_session_expires_registers_again(open_ns) -> None:
    ns = await open_ns()
    owner = await store_of(ns, "expiry")
    await owner.advance_commit_position("s", d(1))
    before = await owner.read_owner("s")
    await expire_session(ns.zk)
    for _ in range(100):  # the store registers again in the background
        after = await owner.read_owner("s")
        if after is not None and after != before:
            break
        await asyncio.sleep(0.05)
    assert after is not None and after["session"] == f"{ns.zk.session_id:#x}"
    await owner.advance_commit_position("s", d(2))  # still the owner


async def test_a_fenced_owner_never_passes_for_the_live_one(open_ns) -> None:
    """A zombie (taken over, not knowing it yet) whose session expires must
    not register as the owner again: readers would trust the wrong LAC. Its
    commits fail from then on, and it does not take the subscription back."""
    zombie_ns = await open_ns()
    zombie = await store_of(zombie_ns, "zombie")
    await zombie.advance_commit_position("s", d(1))
    owner_ns = await open_ns()
    owner = await store_of(owner_ns, "zombie")
    assert await owner.acquire("s") == d(1)
    await expire_session(zombie_ns.zk)
    for _ in range(100):  # it finds out while trying to register again
        if zombie._subs["s"].error is not None:
            break
        await asyncio.sleep(0.05)
    assert isinstance(zombie._subs["s"].error, SubscriptionFencedError)
    assert (await owner.read_owner("s"))["session"] == f"{owner_ns.zk.session_id:#x}"
    for _ in range(2):  # and it stays fenced: no silent takeover
        with pytest.raises(SubscriptionFencedError):
            await zombie.advance_commit_position("s", d(5))
    await owner.advance_commit_position("s", d(2))
    publishing = failpoints.arm("subscriptions.publish_lac")
    await owner.advance_commit_position("s", d(3))
    await publishing.wait_reached()
    await crash(owner_ns)
    reader = await store_of(await open_ns(), "zombie")
    assert await reader.get_last_commit_position("s") == d(3)


async def test_a_late_read_of_its_own_older_znode_is_still_its_own(open_ns) -> None:
    """A read whose answer predates the owner's own segment switches (it was
    in flight while they ran) sees an older version of the znode, one the
    owner wrote itself: the owner neither takes that for a takeover (its
    commits go on) nor reports a position below what it acknowledged."""
    store = await store_of(await open_ns(subscriptionSegmentMaxEntries=3), "late")
    await store.advance_commit_position("s", d(1))
    early = await store.read_znode("s")  # the answer a slow read would get
    for i in range(2, 12):  # several switches move the znode on
        await store.advance_commit_position("s", d(i))
    assert store.switches > 1
    _, now_version = await store.read_znode("s")
    assert early[1] is not None and now_version is not None and early[1] < now_version

    async def late_read(subscriber_id: str) -> tuple[object, int | None]:
        return early

    store.read_znode = late_read  # type: ignore[method-assign]
    assert await store.get_last_commit_position("s") == d(11)
    del store.read_znode
    await store.advance_commit_position("s", d(12))  # still the owner
    assert await store.get_last_commit_position("s") == d(12)
