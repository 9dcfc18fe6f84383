"""Marking a ledger under-replicated in a real ZooKeeper writes the znode
upstream's ZkLedgerUnderreplicationManager writes (and reads its)."""

from __future__ import annotations

from dlog.ledger.underreplication import get_underreplicated, mark_underreplicated
from dlog.protocol import underreplication as ur
from dlog.zk import ZooKeeper


async def test_mark_sets_ctime_and_merges_replicas(zk: ZooKeeper, zk_root: str) -> None:
    root = f"{zk_root}/ledgers"
    assert await get_underreplicated(zk, root, 77) is None
    await mark_underreplicated(zk, root, 77, ["b1:3181"], clock=lambda: 1000)
    path = f"{root}/underreplication/ledgers/0000/0000/0000/004d/urL0000000077"
    data, _ = await zk.get(path)
    assert data == b'replica: "b1:3181"\nctime: 1000\n'
    # Nothing new: left as it is (the time says when the set last grew).
    await mark_underreplicated(zk, root, 77, ["b1:3181"], clock=lambda: 2000)
    assert (await zk.get(path))[0] == data
    # A new replica is added and the time refreshed.
    await mark_underreplicated(zk, root, 77, ["b2:3181", "b1:3181"], clock=lambda: 3000)
    assert await get_underreplicated(zk, root, 77) == ur.UnderreplicatedLedger(
        ("b1:3181", "b2:3181"), 3000
    )


async def test_reads_markers_of_older_upstream_writers(zk: ZooKeeper, zk_root: str) -> None:
    root = f"{zk_root}/ledgers"
    await zk.create(ur.ledger_znode(root, 5), b'replica: "b9:3181"\n', makepath=True)
    info = await get_underreplicated(zk, root, 5)
    assert info == ur.UnderreplicatedLedger(("b9:3181",), ur.UNASSIGNED_CTIME)
    # Marking it again adds the replica and a ctime.
    await mark_underreplicated(zk, root, 5, ["b8:3181"], clock=lambda: 42)
    assert await get_underreplicated(zk, root, 5) == ur.UnderreplicatedLedger(
        ("b9:3181", "b8:3181"), 42
    )


async def test_default_clock_is_wall_time_in_ms(zk: ZooKeeper, zk_root: str) -> None:
    import time

    root = f"{zk_root}/ledgers"
    before = int(time.time() * 1000)
    await mark_underreplicated(zk, root, 9, ["b1:3181"])
    info = await get_underreplicated(zk, root, 9)
    assert info is not None and before <= info.ctime <= int(time.time() * 1000)
