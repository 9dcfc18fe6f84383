"""BP-32 on a real bookie with entry log per ledger: what write-closes a
ledger (a client's close, a fence read) seals its entry log at the next
checkpoint, and a failed add rotates it before the error goes out."""

from __future__ import annotations

from dlog import failpoints
from dlog.errors import EIO, EOK
from dlog.ledger.client import BookKeeper
from tests.integration.test_bookie_server import KEY, connect, entry
from tests.integration.test_entry_log_per_ledger_config import ledger_dirs, logs_on_disk
from tests.waiting import eventually

PER_LEDGER = {"entryLogPerLedgerEnabled": True, "flushInterval": 600000}


def sealed(bookie, lid: int) -> list[bool]:  # type: ignore[no-untyped-def]
    """For each entry log holding ``lid``: whether it is sealed."""
    return [x.sealed for x in logs_on_disk(ledger_dirs(bookie)) if lid in x.ledgers]


async def test_a_client_close_seals_the_ledgers_log_at_the_next_checkpoint(
    make_bookie, ledgers_uri: str
) -> None:
    bookies = [await make_bookie(f"b{i}", **PER_LEDGER) for i in range(3)]
    async with BookKeeper(ledgers_uri) as bk:
        closed = await bk.create_ledger(3, 3, 2, password=b"pw")
        still_open = await bk.create_ledger(3, 3, 2, password=b"pw")
        for i in range(10):
            await closed.append(b"c%d" % i)
            await still_open.append(b"o%d" % i)
        for b in bookies:
            await b.core.checkpointer.checkpoint()
        assert all(sealed(b, closed.ledger_id) == [False] for b in bookies)

        await closed.close()
        await eventually(lambda: bk.write_close_outcomes.get(("success",)) == 1)
        for b in bookies:
            await b.core.checkpointer.checkpoint()
        # The closed ledger's log is sealed everywhere; the open one's is not.
        assert all(sealed(b, closed.ledger_id) == [True] for b in bookies)
        assert all(sealed(b, still_open.ledger_id) == [False] for b in bookies)
        rh = await bk.open_ledger(closed.ledger_id, b"pw")
        assert [e.data for e in await rh.read(0, 9)] == [b"c%d" % i for i in range(10)]


async def test_a_fence_read_write_closes_even_an_already_fenced_ledger(make_bookie) -> None:
    bookie = await make_bookie("b0", **PER_LEDGER)
    c = await connect(bookie)
    lid = 21
    for e in range(5):
        assert (await c.add_entry(lid, e, KEY, entry(lid, e))).status == EOK
    await bookie.core.checkpointer.checkpoint()
    assert sealed(bookie, lid) == [False]

    r = await c.read_entry(lid, 4, fence=True, master_key=KEY)
    assert r.status == EOK
    await bookie.core.checkpointer.checkpoint()
    assert sealed(bookie, lid) == [True]

    # A recoverer re-adds (recovery adds pass the fence) into a new log; a
    # second recoverer's fence read finds the ledger fenced already.
    assert (await c.add_entry(lid, 5, KEY, entry(lid, 5), recovery=True)).status == EOK
    await bookie.core.checkpointer.checkpoint()
    assert sorted(sealed(bookie, lid)) == [False, True]
    r = await c.read_entry(lid, 5, fence=True, master_key=KEY)
    assert r.status == EOK
    await bookie.core.checkpointer.checkpoint()
    assert sealed(bookie, lid) == [True, True]
    await c.close()


async def test_a_failed_add_rotates_the_ledgers_log_first(make_bookie) -> None:
    bookie = await make_bookie("b0", **PER_LEDGER)
    c = await connect(bookie)
    lid = 31
    for e in range(5):
        assert (await c.add_entry(lid, e, KEY, entry(lid, e))).status == EOK
    await bookie.core.checkpointer.checkpoint()
    [before] = [x.name for x in logs_on_disk(ledger_dirs(bookie)) if lid in x.ledgers]
    try:
        failpoints.configure("journal.write=eio*1")
        assert (await c.add_entry(lid, 5, KEY, entry(lid, 5))).status == EIO
    finally:
        failpoints.configure("")
    # The journal is gone (the bookie is read-only now); storage still
    # flushes: the log that held the ledger is sealed, the failed add's
    # entry (cached before the journal failed) went to a new one.
    await bookie.core.storage.flush()
    logs = {x.name: x for x in logs_on_disk(ledger_dirs(bookie)) if lid in x.ledgers}
    assert logs[before].sealed, logs
    await c.close()
