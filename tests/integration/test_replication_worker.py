"""The replication worker (dlog.autorecovery.worker) on real ZooKeeper and
real bookies: it takes marked ledgers, restores them and removes the mark;
two workers never hold the same ledger; a failure or an open ledger keeps
the lock for its grace period; stop() gives back what it holds."""

from __future__ import annotations

import asyncio

from dlog.autorecovery import worker as worker_module
from dlog.autorecovery.worker import ReplicationWorker
from dlog.conf.bookie import BookieConfig
from dlog.errors import SessionExpiredError
from dlog.ledger.client import BookKeeper
from dlog.ledger.fragments import fragments, stored_entries
from dlog.ledger.metadata import LedgerState
from dlog.ledger.underreplication import UnderreplicationManager
from tests.waiting import eventually


def conf(**settings: object) -> BookieConfig:
    base: dict[str, object] = {
        "openLedgerRereplicationGracePeriod": 300,
        "lockReleaseOfFailedLedgerGracePeriod": 1000,
        "rwRereplicateBackoffMs": 100,
        "rereplicationEntryBatchSize": 4,
    }
    base.update(settings)
    return BookieConfig.from_mapping(base, "test")


async def start_bookies(make_bookie, n: int) -> dict:  # type: ignore[no-untyped-def]
    bookies = [await make_bookie(f"b{i}") for i in range(n)]
    return {b.bookie_id: b for b in bookies}


async def stop_for_good(bk: BookKeeper, bookie) -> None:  # type: ignore[no-untyped-def]
    await bookie.stop()
    await eventually(lambda: bookie.bookie_id not in bk.watcher.writable | bk.watcher.readonly)


async def new_manager(bk: BookKeeper, owner: str) -> UnderreplicationManager:
    urm = UnderreplicationManager(bk.zk, bk.uri.ledgers_root, owner=owner)
    await urm.initialize()
    return urm


async def write_closed(bk: BookKeeper, n: int = 30, e: int = 3, w: int = 2) -> int:
    wh = await bk.create_ledger(e, w, 2, password=b"pw")
    for i in range(n):
        wh.append_nowait(b"e%d" % i)
    await wh.close()
    return wh.ledger_id


async def fully_on_live_bookies(bk: BookKeeper, ledger_id: int) -> bool:
    md = await bk.ledger_metadata(ledger_id)
    live = bk.watcher.writable | bk.watcher.readonly
    for f in fragments(md):
        if f.bookie not in live:
            return False
        want = stored_entries(md, f)
        if want:
            conn = await bk.pool.get(f.bookie)
            if not set(want) <= set(await conn.entries_of_ledger(ledger_id)):
                return False
    return True


async def test_worker_restores_a_marked_ledger(make_bookie, ledgers_uri: str) -> None:
    bookies = await start_bookies(make_bookie, 4)
    async with BookKeeper(ledgers_uri) as bk:
        lid = await write_closed(bk)
        dead = (await bk.ledger_metadata(lid)).last_ensemble[0]
        await stop_for_good(bk, bookies[dead])
        urm = await new_manager(bk, "worker-1")
        await urm.mark(lid, [dead])
        gone = 98765  # marked, but deleted meanwhile
        await urm.mark(gone, [dead])
        worker = ReplicationWorker(bk, urm, conf())
        await worker.start()
        try:
            await eventually(lambda: worker.ledgers_replicated.get() == 2)
            assert await urm.get(lid) is None and await urm.get(gone) is None
            assert not await urm.is_ledger_being_replicated(lid)
            assert await fully_on_live_bookies(bk, lid)
            assert dead not in (await bk.ledger_metadata(lid)).bookies()
            names = [m.name for m in bk.metrics._metrics]
            assert "replication_worker_entries_copied" in names
        finally:
            await worker.stop()
        urm.close()


async def test_two_workers_never_hold_the_same_ledger(
    make_bookie, ledgers_uri: str, monkeypatch
) -> None:
    bookies = await start_bookies(make_bookie, 5)
    async with (
        BookKeeper(ledgers_uri) as bk,
        BookKeeper(ledgers_uri) as bk1,
        BookKeeper(ledgers_uri) as bk2,
    ):
        lids = [await write_closed(bk, 20, 4, 2) for _ in range(6)]
        dead = next(iter(bookies))
        await stop_for_good(bk, bookies[dead])
        for b in (bk1, bk2):
            await eventually(lambda b=b: dead not in b.watcher.writable)
        admin = await new_manager(bk, "admin")
        for lid in lids:
            await admin.mark(lid, [dead])

        active: set[int] = set()
        overlaps: list[int] = []
        by: dict[int, list[str]] = {}
        real = worker_module.replicate_ledger

        async def watched(bk_, ledger_id, **kw):  # type: ignore[no-untyped-def]
            if ledger_id in active:
                overlaps.append(ledger_id)
            active.add(ledger_id)
            by.setdefault(ledger_id, []).append(str(id(bk_)))
            try:
                await asyncio.sleep(0.05)  # widen the window
                return await real(bk_, ledger_id, **kw)
            finally:
                active.discard(ledger_id)

        monkeypatch.setattr(worker_module, "replicate_ledger", watched)
        urms = [await new_manager(bk1, "w1"), await new_manager(bk2, "w2")]
        workers = [ReplicationWorker(bk1, urms[0], conf()), ReplicationWorker(bk2, urms[1], conf())]
        for w in workers:
            await w.start()
        try:

            async def all_done() -> bool:
                return sum(w.ledgers_replicated.get() for w in workers) == len(lids)

            await eventually(all_done, 30)
        finally:
            for w in workers:
                await w.stop()
        assert not overlaps
        assert not await admin.list()
        assert all(len(v) == 1 for v in by.values()), by  # each ledger was done once
        for lid in lids:
            assert await fully_on_live_bookies(bk, lid)
        for u in urms:
            u.close()
        admin.close()


async def test_a_zookeeper_error_after_the_copy_fails_the_attempt_not_the_worker(
    make_bookie, ledgers_uri: str, monkeypatch
) -> None:
    """The session expiring while a mark is being removed (a chaos run's
    ZooKeeper restart did it): that attempt fails, its ledger stays marked
    and is taken again after the grace, and the worker goes on repairing
    every marked ledger. A worker task that died of it left every later
    mark unrepaired while AutoRecovery ran on."""
    bookies = await start_bookies(make_bookie, 4)
    async with BookKeeper(ledgers_uri) as bk:
        lids = [await write_closed(bk) for _ in range(3)]
        ensembles = [set((await bk.ledger_metadata(lid)).bookies()) for lid in lids]
        dead = sorted(set.intersection(*ensembles))[0]
        await stop_for_good(bk, bookies[dead])
        urm = await new_manager(bk, "w")
        for lid in lids:
            await urm.mark(lid, [dead])
        real = urm.mark_replicated
        failed: list[int] = []

        async def session_expires_once(ledger_id: int) -> None:
            if not failed:
                failed.append(ledger_id)
                raise SessionExpiredError(path="/ledgers/underreplication/locks")
            await real(ledger_id)

        monkeypatch.setattr(urm, "mark_replicated", session_expires_once)
        worker = ReplicationWorker(bk, urm, conf(lockReleaseOfFailedLedgerGracePeriod=200))
        await worker.start()
        try:
            await eventually(
                lambda: worker.ledgers_replicated.get() == len(lids), what="all repaired"
            )
            assert worker.running
            assert failed and worker.ledgers_failed.get() == 1
            assert not await urm.list()
            for lid in lids:
                assert await fully_on_live_bookies(bk, lid)
        finally:
            await worker.stop()
        urm.close()


async def test_a_failed_ledger_is_retried_after_its_grace(make_bookie, ledgers_uri: str) -> None:
    bookies = await start_bookies(make_bookie, 3)
    async with BookKeeper(ledgers_uri) as bk:
        lid = await write_closed(bk)
        dead = (await bk.ledger_metadata(lid)).last_ensemble[1]
        await stop_for_good(bk, bookies[dead])
        urm = await new_manager(bk, "w")
        await urm.mark(lid, [dead])
        worker = ReplicationWorker(bk, urm, conf(lockReleaseOfFailedLedgerGracePeriod=1500))
        await worker.start()
        try:
            # No bookie to copy to: the attempt fails, the lock stays a while.
            await eventually(lambda: worker.ledgers_failed.get() >= 1)
            assert await urm.get(lid) is not None
            assert await urm.is_ledger_being_replicated(lid)
            await asyncio.sleep(0.5)
            assert worker.ledgers_failed.get() == 1  # not retried in a loop
            await make_bookie("b9")
            await eventually(lambda: worker.ledgers_replicated.get() == 1)
            assert await urm.get(lid) is None
            assert await fully_on_live_bookies(bk, lid)
        finally:
            await worker.stop()
        urm.close()


async def test_open_ledger_is_fenced_after_the_grace_period(make_bookie, ledgers_uri: str) -> None:
    bookies = await start_bookies(make_bookie, 4)
    async with BookKeeper(ledgers_uri) as bk:
        wh = await bk.create_ledger(3, 2, 2, password=b"pw")
        for i in range(12):
            await wh.append(b"e%d" % i)
        dead = wh.metadata.last_ensemble[0]
        await stop_for_good(bk, bookies[dead])
        urm = await new_manager(bk, "w")
        await urm.mark(wh.ledger_id, [dead])
        worker = ReplicationWorker(bk, urm, conf(openLedgerRereplicationGracePeriod=1000))
        await worker.start()
        try:
            await eventually(lambda: worker.ledgers_deferred.get() == 1)
            # Within the grace period the writer's ledger stays open and locked.
            md = await bk.ledger_metadata(wh.ledger_id)
            assert md.state is LedgerState.OPEN
            assert await urm.is_ledger_being_replicated(wh.ledger_id)
            await eventually(lambda: worker.ledgers_replicated.get() == 1)
            md = await bk.ledger_metadata(wh.ledger_id)
            assert md.state is LedgerState.CLOSED and md.last_entry_id == 11
            assert dead not in md.bookies()
            assert await urm.get(wh.ledger_id) is None
            assert await fully_on_live_bookies(bk, wh.ledger_id)
        finally:
            await worker.stop()
        urm.close()


async def test_stop_releases_the_lock_it_holds(make_bookie, ledgers_uri: str) -> None:
    bookies = await start_bookies(make_bookie, 4)
    async with BookKeeper(ledgers_uri) as bk:
        wh = await bk.create_ledger(3, 2, 2, password=b"pw")
        await wh.append(b"x")
        dead = wh.metadata.last_ensemble[0]
        await stop_for_good(bk, bookies[dead])
        urm = await new_manager(bk, "w")
        await urm.mark(wh.ledger_id, [dead])
        worker = ReplicationWorker(bk, urm, conf(openLedgerRereplicationGracePeriod=600000))
        await worker.start()
        await eventually(lambda: worker.ledgers_deferred.get() == 1)
        assert await urm.is_ledger_being_replicated(wh.ledger_id)
        await worker.stop()
        assert not worker.running
        assert not await urm.is_ledger_being_replicated(wh.ledger_id)
        assert await urm.get(wh.ledger_id) is not None  # still marked for another worker
        assert (await bk.ledger_metadata(wh.ledger_id)).state is LedgerState.OPEN
        urm.close()
