"""UnderreplicationManager against a real ZooKeeper: the layout upstream's
ZkLedgerUnderreplicationManager writes, ephemeral locks shared between
workers on separate sessions, marks deleted at the version seen when
locking, the disable switch, and the settings watched in ZooKeeper."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

import pytest

from dlog.errors import NoNodeError
from dlog.ledger.underreplication import IncompatibleLayoutError, UnderreplicationManager
from dlog.protocol import underreplication as ur
from dlog.sandbox.zookeeper import ZooKeeperServer
from dlog.zk import ZooKeeper

Sessions = Callable[[], Awaitable[ZooKeeper]]


@pytest.fixture
async def session(zk_server: ZooKeeperServer) -> AsyncIterator[Sessions]:
    """Open ZooKeeper sessions of their own (stopped at the end unless the test did)."""
    opened: list[ZooKeeper] = []

    async def open_one() -> ZooKeeper:
        client = ZooKeeper(zk_server.connect_string)
        await client.start()
        opened.append(client)
        return client

    yield open_one
    for client in opened:
        if client.connected:
            await client.stop()


@pytest.fixture
def root(zk_root: str) -> str:
    return f"{zk_root}/ledgers"


async def manager(zk: ZooKeeper, root: str, owner: str) -> UnderreplicationManager:
    urm = UnderreplicationManager(zk, root, owner=owner)
    await urm.initialize()
    return urm


async def test_initialize_writes_upstream_layout(zk: ZooKeeper, root: str) -> None:
    await manager(zk, root, "w1")
    data, _ = await zk.get(f"{root}/underreplication/LAYOUT")
    assert data == b'type: "BASIC"\nversion: 1\n'
    assert await zk.exists(f"{root}/underreplication/ledgers") is not None
    assert await zk.exists(f"{root}/underreplication/locks") is not None
    await manager(zk, root, "w2")  # a second one accepts it


@pytest.mark.parametrize(
    "layout", [b'type: "BASIC"\nversion: 2\n', b'type: "FANCY"\nversion: 1\n', b"junk"]
)
async def test_initialize_refuses_a_foreign_layout(zk: ZooKeeper, root: str, layout: bytes) -> None:
    await zk.create(f"{root}/underreplication/LAYOUT", layout, makepath=True)
    with pytest.raises(IncompatibleLayoutError):
        await manager(zk, root, "w1")


async def test_lock_is_ephemeral_with_owner_data(session: Sessions, root: str) -> None:
    zk = await session()
    urm = await manager(zk, root, "worker-1:3181")
    assert await urm.acquire(wait=False) is None
    await urm.mark(7, ["b1:3181"])
    assert await urm.acquire(wait=False) == 7
    lock = f"{root}/underreplication/locks/urL0000000007"
    data, stat = await zk.get(lock)
    assert data == b'bookieId: "worker-1:3181"\n'
    assert stat.ephemeralOwner == zk.session_id
    assert await urm.lock_holder(7) == "worker-1:3181"
    assert await urm.is_ledger_being_replicated(7)
    # Held: not handed out again, to this manager or another.
    assert await urm.acquire(wait=False) is None
    other = await manager(await session(), root, "w2")
    assert await other.acquire(wait=False) is None
    assert not await other.acquire_ledger(7)


async def test_contention_between_sessions(session: Sessions, root: str) -> None:
    zk_a, zk_b = await session(), await session()
    a, b = await manager(zk_a, root, "a"), await manager(zk_b, root, "b")
    for lid in (1, 2):
        await a.mark(lid, ["gone:3181"])
    got = {await a.acquire(), await b.acquire()}
    assert got == {1, 2}
    assert a.held.isdisjoint(b.held)
    # Nothing left: b waits, until a gives a ledger back.
    waiting = asyncio.create_task(b.acquire())
    await asyncio.sleep(0.3)
    assert not waiting.done()
    (mine,) = a.held
    await a.release(mine)
    assert await asyncio.wait_for(waiting, 10) == mine
    assert await b.lock_holder(mine) == "b"


async def test_lock_goes_with_the_session(session: Sessions, root: str) -> None:
    zk_a, zk_b = await session(), await session()
    a, b = await manager(zk_a, root, "a"), await manager(zk_b, root, "b")
    await a.mark(9, ["gone:3181"])
    assert await a.acquire() == 9
    waiting = asyncio.create_task(b.acquire())
    await asyncio.sleep(0.3)
    assert not waiting.done()
    await zk_a.stop()  # the worker dies: its session closes, its ephemeral lock goes
    assert await asyncio.wait_for(waiting, 10) == 9


async def test_acquire_waits_on_watches_not_polling(zk: ZooKeeper, root: str) -> None:
    urm = await manager(zk, root, "w")
    await urm.mark(3, ["b:3181"])
    assert await urm.acquire() == 3
    calls: list[str] = []
    real = zk.get_children

    async def counting(path: str, *args: Any, **kwargs: Any) -> list[str]:
        calls.append(path)
        return await real(path, *args, **kwargs)

    zk.get_children = counting  # type: ignore[method-assign]
    waiting = asyncio.create_task(urm.acquire())
    await asyncio.sleep(0.2)
    walked = len(calls)
    await asyncio.sleep(1.0)
    assert len(calls) == walked, "acquire() listed znodes again while nothing changed"
    assert not waiting.done()
    await urm.mark(0x1_0000_0000, ["b:3181"])  # another subtree altogether
    assert await asyncio.wait_for(waiting, 10) == 0x1_0000_0000
    # The watches are armed again for the next change of the same znodes.
    for lid in (0x2_0000_0000, 0x3_0000_0000):
        waiting = asyncio.create_task(urm.acquire())
        await asyncio.sleep(0.3)
        assert not waiting.done()
        await urm.mark(lid, ["b:3181"])
        assert await asyncio.wait_for(waiting, 10) == lid


async def test_acquire_order_is_random(zk: ZooKeeper, root: str) -> None:
    urm = await manager(zk, root, "w")
    ids = list(range(100, 120))
    for lid in ids:
        await urm.mark(lid, ["b:3181"])
    got = [await urm.acquire(wait=False) for _ in ids]
    assert sorted(got) == ids  # type: ignore[type-var]
    assert got != ids and got != ids[::-1]
    assert await urm.acquire(wait=False) is None


async def test_mark_replicated_deletes_the_mark_and_prunes(zk: ZooKeeper, root: str) -> None:
    urm = await manager(zk, root, "w")
    await urm.mark(0x0001_0002_0003_0004, ["b:3181"])
    await urm.mark(0x0001_0002_0003_0005, ["b:3181"])
    lid = await urm.acquire()
    assert lid is not None
    await urm.mark_replicated(lid)
    assert await urm.get(lid) is None
    assert not await urm.is_ledger_being_replicated(lid)
    assert lid not in urm.held
    base = f"{root}/underreplication/ledgers"
    # The sibling keeps the hierarchy.
    assert len(await urm.list()) == 1
    other = await urm.acquire()
    assert other is not None and other != lid
    await urm.mark_replicated(other)
    assert await zk.get_children(base) == []  # pruned up to ledgers/


async def test_a_ledger_marked_again_meanwhile_stays_marked(zk: ZooKeeper, root: str) -> None:
    urm = await manager(zk, root, "w")
    await urm.mark(5, ["b1:3181"])
    assert await urm.acquire() == 5
    await urm.mark(5, ["b2:3181"])  # the auditor finds another replica missing
    await urm.mark_replicated(5)
    info = await urm.get(5)
    assert info is not None and info.replicas == ("b1:3181", "b2:3181")
    assert not await urm.is_ledger_being_replicated(5)
    assert await urm.acquire(wait=False) == 5  # and it is handed out again
    # Marking with nothing new changes nothing: the mark is deleted.
    await urm.mark(5, ["b1:3181"])
    await urm.mark_replicated(5)
    assert await urm.get(5) is None


async def test_acquire_ledger_for_the_shell(zk: ZooKeeper, root: str) -> None:
    urm = await manager(zk, root, "shell")
    assert await urm.acquire_ledger(11)  # not marked: only locked
    await urm.mark_replicated(11)
    assert not await urm.is_ledger_being_replicated(11)
    await urm.mark(12, ["b:3181"])
    assert await urm.acquire_ledger(12)
    await urm.mark_replicated(12)
    assert await urm.get(12) is None


async def test_release_after_a_delay(zk: ZooKeeper, root: str) -> None:
    urm = await manager(zk, root, "w")
    await urm.mark(4, ["b:3181"])
    assert await urm.acquire() == 4
    await urm.release(4, delay=0.5)
    assert await urm.is_ledger_being_replicated(4)
    assert await urm.acquire(wait=False) is None
    assert await asyncio.wait_for(urm.acquire(), 10) == 4
    assert await urm.get(4) is not None  # released, not replicated


async def test_release_never_deletes_another_sessions_lock(session: Sessions, root: str) -> None:
    zk_a, zk_b = await session(), await session()
    a, b = await manager(zk_a, root, "a"), await manager(zk_b, root, "b")
    await a.mark(8, ["b:3181"])
    assert await a.acquire() == 8
    # As after a session expiry: a's lock is gone and b took the ledger.
    await zk_b.delete(f"{root}/underreplication/locks/urL0000000008")
    assert await b.acquire() == 8
    await a.mark_replicated(8)
    assert await b.lock_holder(8) == "b"


async def test_disable_blocks_acquire_until_enabled(session: Sessions, root: str) -> None:
    zk_a, zk_admin = await session(), await session()
    worker, admin = await manager(zk_a, root, "w"), await manager(zk_admin, root, "admin")
    assert await admin.is_replication_enabled()
    assert await admin.disable_replication()
    assert not await admin.disable_replication()  # already
    data, _ = await zk_admin.get(f"{root}/underreplication/disable")
    assert data == b""
    await admin.mark(6, ["b:3181"])
    assert await worker.acquire(wait=False) is None
    waiting = asyncio.create_task(worker.acquire())
    await asyncio.sleep(0.5)
    assert not waiting.done()
    assert await admin.enable_replication()
    assert not await admin.enable_replication()
    assert await asyncio.wait_for(waiting, 10) == 6


async def test_lost_bookie_recovery_delay(session: Sessions, root: str) -> None:
    zk_a, zk_b = await session(), await session()
    a, b = await manager(zk_a, root, "a"), await manager(zk_b, root, "b")
    with pytest.raises(NoNodeError):
        await a.get_lost_bookie_recovery_delay()
    assert await a.initialize_lost_bookie_recovery_delay(30)
    assert not await b.initialize_lost_bookie_recovery_delay(60)  # the first value stays
    assert (await zk_a.get(f"{root}/underreplication/lostBookieRecoveryDelay"))[0] == b"30"
    seen: asyncio.Queue[int] = asyncio.Queue()
    a.watch_lost_bookie_recovery_delay(seen.put_nowait)
    await asyncio.sleep(0.2)
    await b.set_lost_bookie_recovery_delay(5)
    assert await asyncio.wait_for(seen.get(), 10) == 5
    await b.set_lost_bookie_recovery_delay(7)  # the watch lasts
    assert await asyncio.wait_for(seen.get(), 10) == 7
    assert await a.get_lost_bookie_recovery_delay() == 7
    await zk_b.delete(f"{root}/underreplication/lostBookieRecoveryDelay")
    await b.set_lost_bookie_recovery_delay(9)  # deleted and created again
    assert await asyncio.wait_for(seen.get(), 10) == 9
    a.close()
    await b.set_lost_bookie_recovery_delay(11)
    await asyncio.sleep(0.3)
    assert seen.empty()


async def test_orphan_check_interval(session: Sessions, root: str) -> None:
    zk_a, zk_b = await session(), await session()
    a, b = await manager(zk_a, root, "a"), await manager(zk_b, root, "b")
    assert await a.get_orphan_check_interval() is None
    seen: asyncio.Queue[int] = asyncio.Queue()
    a.watch_orphan_check_interval(seen.put_nowait)
    await asyncio.sleep(0.2)
    assert await b.initialize_orphan_check_interval(600)
    assert await asyncio.wait_for(seen.get(), 10) == 600
    await b.set_orphan_check_interval(60)
    assert await asyncio.wait_for(seen.get(), 10) == 60
    data, _ = await zk_a.get(f"{root}/underreplication/orphanedLedgerCheckInterval")
    assert data == b"60"
    assert await a.get_orphan_check_interval() == 60
    a.close()


async def test_check_all_ledgers_ctime_is_binary(zk: ZooKeeper, root: str) -> None:
    urm = await manager(zk, root, "w")
    assert await urm.get_check_all_ledgers_ctime() == -1
    await urm.set_check_all_ledgers_ctime(1_700_000_000_000)
    await urm.set_check_all_ledgers_ctime(1_700_000_000_001)
    data, _ = await zk.get(f"{root}/underreplication/checkallledgersctime")
    assert data == ur.encode_check_all_ledgers_ctime(1_700_000_000_001)
    assert data[0] == 0x08  # field 1, varint: binary, not text
    assert await urm.get_check_all_ledgers_ctime() == 1_700_000_000_001


async def test_list_sorted_with_markers(zk: ZooKeeper, root: str) -> None:
    urm = await manager(zk, root, "w")
    for lid in (0x5_0000_0000, 3, 70000):
        await urm.mark(lid, [f"b{lid}:3181"])
    assert [(lid, info.replicas) for lid, info in await urm.list()] == [
        (3, ("b3:3181",)),
        (70000, ("b70000:3181",)),
        (0x5_0000_0000, (f"b{0x5_0000_0000}:3181",)),
    ]


async def test_aclose_releases_locks(zk: ZooKeeper, root: str) -> None:
    urm = await manager(zk, root, "w")
    for lid in (1, 2):
        await urm.mark(lid, ["b:3181"])
    await urm.acquire()
    second = await urm.acquire()
    assert second is not None
    await urm.release(second, delay=60)
    await urm.aclose()
    assert await zk.get_children(f"{root}/underreplication/locks") == []


async def test_session_expiry_frees_locks_and_acquire_goes_on(
    session: Sessions, root: str, zk_server: ZooKeeperServer
) -> None:
    from kazoo.client import KazooClient

    zk_a, zk_b = await session(), await session()
    a, b = await manager(zk_a, root, "a"), await manager(zk_b, root, "b")
    await a.mark(1, ["gone:3181"])
    assert await a.acquire() == 1
    waiting = asyncio.create_task(a.acquire())
    await asyncio.sleep(0.3)
    # Expire a's session for real: another client attaches to it and closes it.
    other = KazooClient(hosts=zk_server.connect_string, client_id=zk_a.client.client_id)
    await asyncio.to_thread(other.start)
    await asyncio.to_thread(other.stop)
    await asyncio.to_thread(other.close)
    assert await asyncio.wait_for(b.acquire(), 20) == 1  # a's lock went with its session
    await asyncio.sleep(1.0)
    assert not waiting.done(), "a's acquire() failed or took b's ledger"
    await b.mark(2, ["gone:3181"])
    assert await asyncio.wait_for(waiting, 20) == 2  # a's acquire() survived the expiry
    await a.mark_replicated(1)  # a's lock on 1 is gone: b's is left alone
    assert await b.lock_holder(1) == "b"


async def test_a_delayed_release_that_fails_frees_the_ledger_all_the_same(
    session: Sessions, root: str
) -> None:
    """The lock's delete fails (the session went away meanwhile, as in a
    chaos run): the ledger must not stay barred from this worker for good.
    Its lock was ephemeral, gone with the session; the next acquire on the
    new session takes the ledger again."""
    zk = await session()
    urm = await manager(zk, root, "w")
    await urm.mark(4, ["b:3181"])
    assert await urm.acquire() == 4
    await urm.release(4, delay=0.3)
    await zk.stop()  # the delayed delete fails: no session
    await asyncio.sleep(0.6)
    await zk.start()
    assert await asyncio.wait_for(urm.acquire(), 10) == 4
