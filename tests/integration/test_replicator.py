"""Re-replication of a ledger's fragments (dlog.ledger.replicator) on real
bookies: entries land, entry by entry, on the new bookie; the metadata
swaps the bookie by compare-and-set and keeps everything else."""

from __future__ import annotations

import asyncio

import pytest

from dlog.errors import LedgerFencedError
from dlog.ledger import replicator
from dlog.ledger.client import BookKeeper
from dlog.ledger.fragments import fragments, stored_entries
from dlog.ledger.metadata import LedgerCloseContext, LedgerCreateContext, LedgerState
from dlog.ledger.metadata_store import LedgerMetadataStore
from dlog.ledger.quorum import write_set
from dlog.ledger.replicator import replicate_ledger


async def start_bookies(make_bookie, n: int) -> dict:  # type: ignore[no-untyped-def]
    bookies = [await make_bookie(f"b{i}") for i in range(n)]
    return {b.bookie_id: b for b in bookies}


async def stop_for_good(bk: BookKeeper, bookie) -> None:  # type: ignore[no-untyped-def]
    await bookie.stop()
    for _ in range(200):
        if bookie.bookie_id not in bk.watcher.writable | bk.watcher.readonly:
            return
        await asyncio.sleep(0.02)
    raise AssertionError(f"{bookie.bookie_id} still registered")


async def check_every_replica(bk: BookKeeper, ledger_id: int, payloads: list[bytes]) -> None:
    """Every bookie of every fragment lists and serves every entry it should
    store, with a valid digest and the written payload."""
    md = await bk.ledger_metadata(ledger_id)
    rh = await bk.open_ledger(ledger_id, md.password, recovery=False)
    for f in fragments(md):
        want = stored_entries(md, f)
        conn = await bk.pool.get(f.bookie)
        listed = set(await conn.entries_of_ledger(ledger_id)) if want else set()
        for e in want:
            assert e in listed, (f, e)
            resp = await conn.read_entry(ledger_id, e)
            assert resp.status == 0, (f, e)
            assert bytes(rh.digest.verify(resp.readResponse.body, e).payload) == payloads[e]
    assert [x.data for x in await rh.read(0, len(payloads) - 1)] == payloads
    await rh.close()


async def test_closed_ledger_is_replicated_off_a_dead_bookie(make_bookie, ledgers_uri: str) -> None:
    bookies = await start_bookies(make_bookie, 4)
    ctx = LedgerCreateContext(part_of_data_set="stream-a")
    async with BookKeeper(ledgers_uri) as bk:
        wh = await bk.create_ledger(3, 2, 2, password=b"pw", create_context=ctx)
        payloads = [b"entry-%d" % i for i in range(50)]
        for p in payloads:
            wh.append_nowait(p)
        await wh.close(LedgerCloseContext.no_more_data(expect_delete_after=123))
        before = await bk.ledger_metadata(wh.ledger_id)
        dead = before.last_ensemble[1]
        await stop_for_good(bk, bookies[dead])

        out = await replicate_ledger(bk, wh.ledger_id, batch_size=7)

        assert out.fully_replicated and not out.fenced and not out.failed
        assert [f.bookie for f, _ in out.replicated] == [dead]
        new = out.replicated[0][1]
        assert new not in before.last_ensemble and new in bookies
        after = await bk.ledger_metadata(wh.ledger_id)
        assert dead not in after.bookies()
        assert after.last_ensemble == tuple(new if b == dead else b for b in before.last_ensemble)
        # Nothing but the ensemble changed: state, end, length, contexts.
        assert after.replace(ensembles=before.ensembles) == before
        assert after.create_context == ctx and after.close_context is not None
        want = stored_entries(after, fragments(after)[1])
        assert out.entries_copied == len(want) == 34  # 2 of 3 stripes of 50 entries
        assert out.bytes_copied > out.entries_copied * 32
        names = [m.name for m in bk.metrics._metrics]
        assert names.count("replication_worker_entries_copied") == 1
        await check_every_replica(bk, wh.ledger_id, payloads)
        # A second pass finds nothing to do.
        again = await replicate_ledger(bk, wh.ledger_id)
        assert again.fully_replicated and not again.replicated and again.entries_copied == 0


async def test_listed_live_bookie_is_replicated_off(make_bookie, ledgers_uri: str) -> None:
    """`recover BOOKIE` of a live bookie: its fragments move too, and it
    gets a BP-32 write close for the ledger."""
    bookies = await start_bookies(make_bookie, 4)
    async with BookKeeper(ledgers_uri) as bk:
        wh = await bk.create_ledger(3, 3, 2, password=b"")
        payloads = [b"x%d" % i for i in range(20)]
        for p in payloads:
            await wh.append(p)
        await wh.close()
        leaving = wh.metadata.last_ensemble[0]
        await asyncio.sleep(0.2)  # the close's own write closes
        closes_before = bookies[leaving].metrics.write_close.get(("true",))
        out = await replicate_ledger(bk, wh.ledger_id, bookies=[leaving])
        for _ in range(100):
            if bookies[leaving].metrics.write_close.get(("true",)) > closes_before:
                break
            await asyncio.sleep(0.02)
        assert bookies[leaving].metrics.write_close.get(("true",)) > closes_before
        assert out.fully_replicated and out.entries_copied == 20
        assert leaving not in (await bk.ledger_metadata(wh.ledger_id)).bookies()
        await check_every_replica(bk, wh.ledger_id, payloads)


async def test_open_ledger_last_fragment_waits_for_fencing(make_bookie, ledgers_uri: str) -> None:
    bookies = await start_bookies(make_bookie, 4)
    async with BookKeeper(ledgers_uri) as bk:
        wh = await bk.create_ledger(3, 2, 2, password=b"pw")
        payloads = [b"p%d" % i for i in range(20)]
        for p in payloads:
            await wh.append(p)
        dead = wh.metadata.last_ensemble[2]
        await stop_for_good(bk, bookies[dead])
        before = await bk.ledger_metadata(wh.ledger_id)

        out = await replicate_ledger(bk, wh.ledger_id)
        assert not out.fully_replicated and [f.bookie for f in out.open_fragments] == [dead]
        assert out.entries_copied == 0 and await bk.ledger_metadata(wh.ledger_id) == before

        out = await replicate_ledger(bk, wh.ledger_id, fence_open=True)
        assert out.fenced and out.fully_replicated and not out.open_fragments
        after = await bk.ledger_metadata(wh.ledger_id)
        assert after.state is LedgerState.CLOSED and after.last_entry_id == 19
        assert dead not in after.bookies()
        await check_every_replica(bk, wh.ledger_id, payloads)
        with pytest.raises(LedgerFencedError):
            await wh.append(b"late")


async def test_open_ledger_earlier_fragment_needs_no_fencing(make_bookie, ledgers_uri: str) -> None:
    bookies = await start_bookies(make_bookie, 4)
    async with BookKeeper(ledgers_uri) as bk:
        wh = await bk.create_ledger(3, 2, 2, password=b"pw")
        payloads = [b"p%d" % i for i in range(10)]
        for p in payloads:
            await wh.append(p)
        dead = wh.metadata.last_ensemble[0]
        await stop_for_good(bk, bookies[dead])
        for i in range(10, 20):  # the writer changes its ensemble
            payloads.append(b"p%d" % i)
            await wh.append(payloads[-1])
        md = await bk.ledger_metadata(wh.ledger_id)
        assert len(md.ensembles) == 2 and dead not in md.last_ensemble

        out = await replicate_ledger(bk, wh.ledger_id)
        assert out.fully_replicated and not out.fenced and len(out.replicated) == 1
        after = await bk.ledger_metadata(wh.ledger_id)
        assert after.state is LedgerState.OPEN and dead not in after.bookies()
        # The writer goes on, and nothing was lost.
        payloads.append(b"after")
        await wh.append(payloads[-1])
        await wh.close()
        await check_every_replica(bk, wh.ledger_id, payloads)


async def test_a_corrupt_replica_is_never_copied(make_bookie, ledgers_uri: str) -> None:
    from dlog.bookie.entry_log import split_location

    bookies = await start_bookies(make_bookie, 3)

    def corrupt(bookie, ledger_id: int, entry_id: int) -> None:  # type: ignore[no-untyped-def]
        storage = bookie.core.storage.storage_for(ledger_id)
        storage.read_cache = type(storage.read_cache)(0)
        log_id, offset = split_location(storage.locations.get(ledger_id, entry_id))
        with open(storage.entry_logger.path_of(log_id), "r+b") as f:
            f.seek(offset + 40)
            byte = f.read(1)
            f.seek(offset + 40)
            f.write(bytes([byte[0] ^ 0xFF]))

    async with BookKeeper(ledgers_uri) as bk:
        handles = []
        for _ in range(2):
            wh = await bk.create_ledger(3, 3, 2, password=b"pw")
            for i in range(10):
                await wh.append(b"payload-%d" % i)
            await wh.close()
            handles.append(wh)
        spare = await make_bookie("b3")  # the only place for the copies
        for b in bookies.values():
            await b.core.checkpointer.checkpoint()
        dead = handles[0].metadata.last_ensemble[2]
        ens0 = handles[0].metadata.last_ensemble
        ens1 = handles[1].metadata.last_ensemble  # same bookies, maybe another order
        # Ledger 0: the first replica the copy reads of entries 4 and 5 is corrupt.
        for e in (4, 5):
            first = next(i for i in write_set(e, 3, 3) if ens0[i] != dead)
            corrupt(bookies[ens0[first]], handles[0].ledger_id, e)
        # Ledger 1: entry 3 is corrupt on both survivors.
        for b in ens1:
            if b != dead:
                corrupt(bookies[b], handles[1].ledger_id, 3)
        await stop_for_good(bk, bookies[dead])

        out = await replicate_ledger(bk, handles[0].ledger_id)
        assert out.fully_replicated and out.entries_copied == 10
        new = out.replicated[0][1]
        assert new == spare.bookie_id
        conn = await bk.pool.get(new)
        rh = await bk.open_ledger(handles[0].ledger_id, b"pw")
        for e in range(10):
            body = (await conn.read_entry(handles[0].ledger_id, e)).readResponse.body
            assert bytes(rh.digest.verify(body, e).payload) == b"payload-%d" % e

        before = await bk.ledger_metadata(handles[1].ledger_id)
        out = await replicate_ledger(bk, handles[1].ledger_id)
        assert not out.fully_replicated and len(out.failed) == 1
        assert "digest" in out.failed[0][1]
        assert await bk.ledger_metadata(handles[1].ledger_id) == before


async def test_swap_races_a_writers_ensemble_change(
    make_bookie, ledgers_uri: str, monkeypatch
) -> None:
    bookies = await start_bookies(make_bookie, 5)
    async with BookKeeper(ledgers_uri) as bk, BookKeeper(ledgers_uri) as writer:
        wh = await writer.create_ledger(3, 2, 2, password=b"pw")
        payloads = [b"p%d" % i for i in range(10)]
        for p in payloads:
            await wh.append(p)
        a, _, c = wh.metadata.last_ensemble
        await stop_for_good(bk, bookies[c])
        for i in range(10, 15):
            payloads.append(b"p%d" % i)
            await wh.append(payloads[-1])
        assert len(wh.metadata.ensembles) == 2

        attempts = []

        class RacingStore(LedgerMetadataStore):
            async def write(self, md, expected_version):  # type: ignore[no-untyped-def]
                attempts.append(md)
                if len(attempts) == 1:
                    # The writer changes its ensemble between our read and write.
                    await stop_for_good(bk, bookies[a])
                    payloads.append(b"racing")
                    await wh.append(payloads[-1])
                    assert len(wh.metadata.ensembles) == 3
                return await super().write(md, expected_version)

        monkeypatch.setattr(replicator, "LedgerMetadataStore", RacingStore)
        out = await replicate_ledger(bk, wh.ledger_id, bookies=[c])
        monkeypatch.undo()

        assert len(attempts) == 2  # the first write lost the race, the second re-read
        after = await bk.ledger_metadata(wh.ledger_id)
        assert len(after.ensembles) == 3  # the writer's change stands
        assert c not in after.ensembles[0][1]
        assert out.replicated and out.replicated[0][1] in after.ensembles[0][1]
        assert after.state is LedgerState.OPEN
        payloads.append(b"last")
        await wh.append(payloads[-1])
        await wh.close()
        # Only bookie a's fragments are left to move (it is stopped too).
        out = await replicate_ledger(bk, wh.ledger_id)
        assert out.fully_replicated
        await check_every_replica(bk, wh.ledger_id, payloads)


async def test_deleted_ledger_counts_as_done(make_bookie, ledgers_uri: str) -> None:
    await start_bookies(make_bookie, 3)
    async with BookKeeper(ledgers_uri) as bk:
        out = await replicate_ledger(bk, 987654)
        assert out.deleted and out.fully_replicated
