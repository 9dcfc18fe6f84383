"""`dlog shell recover BOOKIE` and `dlog shell decommissionbookie`, run as
a user runs them, against real bookie processes."""

from __future__ import annotations

import asyncio
import subprocess

from dlog.ledger.client import BookKeeper
from dlog.ledger.fragments import fragments, stored_entries
from tests.cli import dlog, error_line, ok


def shell(*args: str, uri: str) -> subprocess.CompletedProcess[str]:
    return dlog("shell", *args, "--service-uri", uri, timeout=120)


async def write(uri: str, closed: int, open_: int) -> list[int]:
    async with BookKeeper(uri) as bk:
        ids = []
        for n in range(closed + open_):
            wh = await bk.create_ledger(3, 2, 2, password=b"")
            for i in range(25):
                wh.append_nowait(b"L%d-e%d" % (n, i))
            await wh.wait_pending()
            if n < closed:
                await wh.close()
            ids.append(wh.ledger_id)
        return ids


async def check(uri: str, ledger_ids: list[int], gone: str) -> None:
    async with BookKeeper(uri) as bk:
        for lid in ledger_ids:
            md = await bk.ledger_metadata(lid)
            assert gone not in md.bookies(), (lid, md)
            for f in fragments(md):
                want = stored_entries(md, f)
                if want:
                    conn = await bk.pool.get(f.bookie)
                    assert set(want) <= set(await conn.entries_of_ledger(lid)), f
            rh = await bk.open_ledger(lid, b"")
            got = [e.data for e in await rh.read(0, rh.last_add_confirmed)]
            n = ledger_ids.index(lid)
            assert got == [b"L%d-e%d" % (n, i) for i in range(25)]


async def bookies_of(uri: str, lid: int) -> tuple[str, ...]:
    async with BookKeeper(uri) as bk:
        return (await bk.ledger_metadata(lid)).last_ensemble


def test_recover_a_dead_bookie(bookie_cluster, ledgers_uri: str) -> None:
    cluster = bookie_cluster(4)
    ids = asyncio.run(write(ledgers_uri, 3, 1))
    ensemble = asyncio.run(bookies_of(ledgers_uri, ids[0]))
    victim = next(b for b in cluster if b.bookie_id == ensemble[0])
    victim.kill()
    dead = victim.bookie_id
    on_dead = [lid for lid in ids if dead in asyncio.run(bookies_of(ledgers_uri, lid))]

    # --query lists the ledgers with data there; --dryrun their fragments; nothing changes.
    out = ok(shell("recover", dead, "--query", uri=ledgers_uri))
    for lid in on_dead:
        assert f"│ {lid:>6} │" in out or f" {lid} " in out, out
    out = ok(shell("recover", dead, "-dr", uri=ledgers_uri))
    assert f"on {dead}" in out
    assert dead in asyncio.run(bookies_of(ledgers_uri, on_dead[0]))
    # -l restricts to one ledger; --skipOpenLedgers leaves the open one.
    out = ok(shell("recover", dead, "-l", str(on_dead[0]), "-f", uri=ledgers_uri))
    assert "replicated 1 ledger(s)" in out, out
    asyncio.run(check(ledgers_uri, [on_dead[0]], dead))
    r = shell("recover", dead, "-sk", "-f", uri=ledgers_uri)
    if ids[-1] in on_dead:
        assert "skipping 1 open ledger(s)" in r.stderr
        assert dead in asyncio.run(bookies_of(ledgers_uri, ids[-1]))
    # Then everything, fencing the open ledger.
    out = ok(shell("recover", dead, "-f", uri=ledgers_uri))
    assert "replicated" in out or "no ledger has data" in out
    asyncio.run(check(ledgers_uri, ids, dead))
    out = ok(shell("recover", dead, "-q", uri=ledgers_uri))
    assert "0 ledger(s)" in out


def test_recover_one_ledger_keeps_its_old_form(bookie_cluster, ledgers_uri: str) -> None:
    bookie_cluster(3)
    ids = asyncio.run(write(ledgers_uri, 0, 1))
    out = ok(shell("recover", "-l", str(ids[0]), uri=ledgers_uri))
    assert "recovered and closed" in out and "last entry id 24" in out
    assert "give the bookie" in error_line(shell("recover", uri=ledgers_uri), 2)


def test_decommission_a_stopped_bookie(bookie_cluster, ledgers_uri: str) -> None:
    cluster = bookie_cluster(4)
    ids = asyncio.run(write(ledgers_uri, 4, 1))
    victim = cluster[0]
    bookie = victim.bookie_id
    err = error_line(shell("decommissionbookie", "--bookieid", bookie, uri=ledgers_uri))
    assert "still running" in err

    async def cookie_exists() -> bool:
        async with BookKeeper(ledgers_uri) as bk:
            return await bk.zk.exists(f"{bk.uri.ledgers_root}/cookies/{bookie}") is not None

    assert asyncio.run(cookie_exists())
    victim.stop()
    out = ok(shell("decommissionbookie", "--bookieid", bookie, uri=ledgers_uri))
    assert f"decommissioned {bookie}" in out and "cookie deleted" in out
    assert not asyncio.run(cookie_exists())
    asyncio.run(check(ledgers_uri, ids, bookie))
