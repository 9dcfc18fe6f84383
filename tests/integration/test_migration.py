"""Migrating subscriptions between the ZooKeeper and log-segment formats
(subscriptions.migrate and ``dlog subscriptions migrate``), against a real
ZooKeeper and three real bookies."""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys

import pytest

from dlog.dlsn import DLSN, NonInclusiveLowerBound
from dlog.errors import SubscriptionFencedError
from dlog.namespace import Namespace
from subscriptions.format import SEGMENT_FORMAT, ZK_FORMAT, SegmentSubscription, ZkPosition
from subscriptions.migrate import (
    ALREADY,
    CONVERTED,
    DRY_RUN,
    FAILED,
    migrate_subscriptions,
    store_for,
)

pytestmark = pytest.mark.integration

#: stream -> subscriber -> position, committed in DistributedLog's format.
POSITIONS = {
    "orders": {"billing": DLSN(1, 5, 0), "audit": DLSN(3, 17, 2), "fresh": NonInclusiveLowerBound},
    "payments": {"billing": DLSN(2, 0, 0), "analytics": DLSN(7, 123456, 9)},
}


@pytest.fixture
def open_ns(open_namespace):  # type: ignore[no-untyped-def]
    async def factory(log_segment: bool = False) -> Namespace:
        return await open_namespace(logSegmentBasedSubscriptionsStoreEnabled=log_segment)

    return factory


async def seed_zk_format(ns: Namespace) -> None:
    """Subscribers committed by DistributedLog's ZooKeeper store."""
    for stream, subs in POSITIONS.items():
        lm = await ns.open_log(stream)
        store = store_for(lm.context, ZK_FORMAT)
        for sid, position in subs.items():
            await store.reset_position(sid, position)
        await store.close()


async def raw_znodes(ns: Namespace) -> dict[tuple[str, str], tuple[bytes, int]]:
    out = {}
    for stream, subs in POSITIONS.items():
        lm = await ns.open_log(stream)
        path = store_for(lm.context, ZK_FORMAT).path
        for sid in subs:
            data, stat = await ns.zk.get(f"{path}/{sid}")
            out[(stream, sid)] = (data, stat.version)
    return out


async def subscription_ledgers(ns: Namespace) -> list[int]:
    """Ledgers of any subscription (BP-44 data set .../subscribers/...)."""
    out = []
    for lid in await ns.bk.list_ledgers():
        md = await ns.bk.ledger_metadata(lid)
        ctx = md.create_context
        if ctx is not None and "/subscribers/" in (ctx.part_of_data_set or ""):
            out.append(lid)
    return out


def by_key(results):  # type: ignore[no-untyped-def]
    return {(r.stream, r.subscriber_id): r for r in results}


async def test_round_trip_zk_to_log_segment_and_back(open_ns) -> None:
    ns = await open_ns()
    await seed_zk_format(ns)
    expected = {(s, sid): p for s, subs in POSITIONS.items() for sid, p in subs.items()}

    planned: list[tuple[str, str]] = []
    seen = []
    results = await migrate_subscriptions(
        ns, "log-segment", on_plan=planned.extend, on_result=seen.append
    )
    assert sorted(planned) == sorted(expected)
    assert seen == results
    rows = by_key(results)
    assert rows.keys() == expected.keys()
    for key, position in expected.items():
        r = rows[key]
        assert r.result == CONVERTED, r
        assert (r.format_before, r.format_after) == (ZK_FORMAT, SEGMENT_FORMAT)
        assert r.position_before == r.position_after == position
    # What a graceful release leaves: the log-segment format, no segment,
    # last_commit_dlsn = the position; and no subscription ledger behind.
    for (stream, sid), position in expected.items():
        store = store_for((await ns.open_log(stream)).context, ZK_FORMAT)
        znode, _ = await store.read_znode(sid)
        assert isinstance(znode, SegmentSubscription), znode
        assert (znode.name, znode.segment_id, znode.last_commit) == (sid, None, position)
        # ... which a log-segment consumer opening it reads.
        owner = store_for((await ns.open_log(stream)).context, SEGMENT_FORMAT)
        assert await owner.acquire(sid) == position
        await owner.close()
    assert await subscription_ledgers(ns) == []

    back = by_key(await migrate_subscriptions(ns, "zk"))
    for (stream, sid), position in expected.items():
        r = back[(stream, sid)]
        assert r.result == CONVERTED, r
        assert (r.format_before, r.format_after) == (SEGMENT_FORMAT, ZK_FORMAT)
        assert r.position_before == r.position_after == position
        data, _ = await ns.zk.get(
            f"{store_for((await ns.open_log(stream)).context, ZK_FORMAT).path}/{sid}"
        )
        assert data == position.serialize().encode()  # DistributedLog's bytes exactly
    assert await subscription_ledgers(ns) == []


@pytest.mark.parametrize("to", ["log-segment", "zk"])
async def test_a_second_run_writes_nothing_and_reports_already(open_ns, zk_server, to) -> None:
    ns = await open_ns()
    await seed_zk_format(ns)
    if to == "zk":  # start from the other format
        await migrate_subscriptions(ns, "log-segment")
    first = await migrate_subscriptions(ns, to)
    assert {r.result for r in first} == {CONVERTED}
    znodes = await raw_znodes(ns)
    await asyncio.sleep(0.2)
    zxid = zk_server.zxid()
    second = await migrate_subscriptions(ns, to)
    assert zk_server.zxid() == zxid, "an idempotent run wrote to ZooKeeper"
    assert await raw_znodes(ns) == znodes
    assert [r.result for r in second] == [ALREADY] * len(first)
    for a, b in zip(first, second, strict=True):
        assert b.format_before == b.format_after == a.format_after
        assert b.position_before == b.position_after == a.position_after


async def test_dry_run_writes_nothing(open_ns, zk_server) -> None:
    ns = await open_ns()
    await seed_zk_format(ns)
    # One stream already in the target format, to see both outcomes.
    await migrate_subscriptions(ns, "log-segment", streams=["payments"])
    znodes = await raw_znodes(ns)
    ledgers = await ns.bk.list_ledgers()
    await asyncio.sleep(0.2)
    zxid = zk_server.zxid()
    results = by_key(await migrate_subscriptions(ns, "log-segment", dry_run=True))
    assert zk_server.zxid() == zxid, "a dry run wrote to ZooKeeper"
    assert await raw_znodes(ns) == znodes
    assert await ns.bk.list_ledgers() == ledgers
    for sid, position in POSITIONS["orders"].items():
        r = results[("orders", sid)]
        assert r.result == DRY_RUN
        assert (r.format_before, r.format_after) == (ZK_FORMAT, SEGMENT_FORMAT)
        assert r.position_before == r.position_after == position
        assert isinstance(
            (await store_for((await ns.open_log("orders")).context, ZK_FORMAT).read_znode(sid))[0],
            ZkPosition,
        )
    for sid in POSITIONS["payments"]:
        assert results[("payments", sid)].result == ALREADY


async def test_a_missing_stream_is_an_error_and_a_bad_znode_fails_alone(open_ns) -> None:
    from dlog.errors import LogNotFoundError

    ns = await open_ns()
    await seed_zk_format(ns)
    with pytest.raises(LogNotFoundError):
        await migrate_subscriptions(ns, "log-segment", streams=["nope"])
    with pytest.raises(ValueError):
        await migrate_subscriptions(ns, "mysql")
    path = store_for((await ns.open_log("orders")).context, ZK_FORMAT).path
    await ns.zk.create(f"{path}/broken", b"\x00not a position")
    rows = by_key(await migrate_subscriptions(ns, "log-segment", streams=["orders"]))
    assert rows[("orders", "broken")].result == FAILED
    assert "broken" in rows[("orders", "broken")].reason
    assert rows[("orders", "broken")].result_text.startswith("FAILED: ")
    assert {rows[("orders", sid)].result for sid in POSITIONS["orders"]} == {CONVERTED}


@pytest.mark.parametrize("live_format", [SEGMENT_FORMAT, ZK_FORMAT])
async def test_a_live_consumer_is_fenced_and_the_position_never_regresses(
    open_ns, live_format: str
) -> None:
    """A consumer keeps committing while the migration converts its
    subscription: it is fenced, every commit it had acknowledged is in the
    converted position, and no admin read ever sees the position go back."""
    to = "zk" if live_format == SEGMENT_FORMAT else "log-segment"
    # A ZooKeeper-store consumer has no ownership to take away: converting
    # needs one compare-and-set between two of its commits, so it commits
    # at a realistic pace (one ZooKeeper write each). A log-segment consumer
    # is fenced on its ledger, so it may commit flat out.
    pace = 0.01 if live_format == ZK_FORMAT else 0.0
    live_ns = await open_ns(live_format == SEGMENT_FORMAT)
    live = (await live_ns.open_log("events")).subscriptions
    assert live.format == live_format
    await live.acquire("app")
    await live.advance_commit_position("app", DLSN(1, 1, 0))
    acked: list[DLSN] = []
    fenced: list[BaseException] = []
    twenty = asyncio.Event()

    async def committer() -> None:
        entry = 1
        while True:
            entry += 1
            try:
                await live.advance_commit_position("app", DLSN(1, entry, 0))
            except SubscriptionFencedError as e:
                fenced.append(e)
                return
            acked.append(DLSN(1, entry, 0))
            if len(acked) >= 20:
                twenty.set()
            if pace:
                await asyncio.sleep(pace)

    admin_ns = await open_ns()
    admin = store_for((await admin_ns.open_log("events")).context, ZK_FORMAT)
    observed: list[DLSN] = []
    stop = asyncio.Event()

    async def observer() -> None:
        while not stop.is_set():
            observed.append(await admin.get_last_commit_position("app"))
            await asyncio.sleep(0.001)

    task = asyncio.ensure_future(committer())
    watch = asyncio.ensure_future(observer())
    await asyncio.wait_for(twenty.wait(), 10)
    migrator_ns = await open_ns()
    [result] = await migrate_subscriptions(migrator_ns, to)
    assert result.result == CONVERTED, result
    assert result.format_after == target(to)
    # The live consumer's next commit fails.
    await asyncio.wait_for(task, 10)
    assert fenced, "the live consumer was not fenced"
    if live_format == SEGMENT_FORMAT:  # and every later one (its ledger is fenced)
        with pytest.raises(SubscriptionFencedError):
            await live.advance_commit_position("app", DLSN(9, 0, 0))
    stop.set()
    await watch
    final = await admin.get_last_commit_position("app")
    assert final >= acked[-1], f"acknowledged {acked[-1]} but the position is {final}"
    assert result.position_after >= result.position_before
    assert observed == sorted(observed), "an admin read saw the position go back"
    assert final >= max(observed)
    znode, _ = await admin.read_znode("app")
    assert isinstance(znode, SegmentSubscription if to == "log-segment" else ZkPosition)
    # The fenced consumer restarts (flag flipped to the target) and resumes there.
    restarted = (await (await open_ns(to == "log-segment")).open_log("events")).subscriptions
    assert await restarted.acquire("app") == final
    await restarted.advance_commit_position("app", final.next())
    await restarted.close()


async def test_a_consumer_restarting_during_the_conversion_keeps_its_commits(
    open_ns, monkeypatch
) -> None:
    """The migration to zk reads a log-segment subscription; before it
    writes, a consumer restarted with the flag off converts the same
    subscription itself and commits further. The migration must keep that
    acknowledged commit, not write back the position it read."""
    from subscriptions.zk_store import ZKSubscriptionsStore

    ns = await open_ns(True)
    seg = (await ns.open_log("events")).subscriptions
    await seg.advance_commit_position("app", DLSN(1, 10, 0))
    await seg.release("app")
    paused, resume = asyncio.Event(), asyncio.Event()
    original = ZKSubscriptionsStore._take_over
    calls = 0

    async def slow_take_over(self, subscriber_id, **kwargs):  # type: ignore[no-untyped-def]
        nonlocal calls
        calls += 1
        result = await original(self, subscriber_id, **kwargs)
        if calls == 1:  # the migration's: stall between its read and its write
            paused.set()
            await resume.wait()
        return result

    monkeypatch.setattr(ZKSubscriptionsStore, "_take_over", slow_take_over)
    migration = asyncio.ensure_future(migrate_subscriptions(await open_ns(), "zk"))
    await asyncio.wait_for(paused.wait(), 10)
    consumer = (await (await open_ns(False)).open_log("events")).subscriptions
    assert await consumer.acquire("app") == DLSN(1, 10, 0)
    await consumer.advance_commit_position("app", DLSN(1, 20, 0))  # acknowledged
    resume.set()
    [result] = await asyncio.wait_for(migration, 10)
    assert result.result == CONVERTED, result
    admin = store_for((await ns.open_log("events")).context, ZK_FORMAT)
    assert await admin.get_last_commit_position("app") == DLSN(1, 20, 0)
    assert result.position_after == DLSN(1, 20, 0)
    await consumer.advance_commit_position("app", DLSN(1, 30, 0))  # still its owner
    assert await admin.get_last_commit_position("app") == DLSN(1, 30, 0)


def target(to: str) -> str:
    return SEGMENT_FORMAT if to == "log-segment" else ZK_FORMAT


async def test_cli_migrate(open_ns, zk_server, zk_root) -> None:
    ns = await open_ns()
    await seed_zk_format(ns)
    uri = f"distributedlog://{zk_server.connect_string}{zk_root}/ns"

    def dlog(*args: str) -> subprocess.CompletedProcess[str]:
        env = {k: v for k, v in os.environ.items() if k != "DLOG_URI"}
        env["COLUMNS"] = "200"
        return subprocess.run(
            [sys.executable, "-m", "dlog", "subscriptions", "migrate", "--uri", uri, *args],
            capture_output=True,
            text=True,
            timeout=60,
            env=env,
            stdin=subprocess.DEVNULL,
        )

    # The bookies run in this process's event loop: keep it running.
    dry = await asyncio.to_thread(dlog, "--to", "log-segment", "--dry-run")
    assert dry.returncode == 0, dry.stderr
    assert dry.stdout.count("│ dry-run") == 5, dry.stdout
    assert "5 subscriber(s): 5 dry-run" in dry.stdout
    r = await asyncio.to_thread(dlog, "--to", "log-segment", "--stream", "orders")
    assert r.returncode == 0, r.stdout + r.stderr
    lines = [line for line in r.stdout.splitlines() if "orders" in line]
    for sid, position in POSITIONS["orders"].items():
        [line] = [ln for ln in lines if f" {sid} " in ln]
        assert "converted" in line and "zookeeper" in line and "log-segment" in line, line
        s, e, n = position
        assert line.count(f"{s}/{e}/{n}") == 2, line  # before and after
    assert "payments" not in r.stdout
    assert "3 subscriber(s): 3 converted" in r.stdout
    # A subscriber that cannot be converted: FAILED in the table, exit 1.
    path = store_for((await ns.open_log("payments")).context, ZK_FORMAT).path
    await ns.zk.create(f"{path}/broken", b"\x00garbage")
    r = await asyncio.to_thread(dlog, "--to", "log-segment")
    assert r.returncode == 1, r.stdout + r.stderr
    assert "Traceback" not in r.stderr
    [broken] = [ln for ln in r.stdout.splitlines() if " broken " in ln]
    assert "FAILED" in broken
    for sid in POSITIONS["payments"]:
        assert any(f" {sid} " in ln and "converted" in ln for ln in r.stdout.splitlines())
    assert r.stdout.count("│ already") == 3
    assert "6 subscriber(s): 3 already, 2 converted, 1 FAILED" in r.stdout
