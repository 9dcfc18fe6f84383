"""AutoRecovery proofs over 4 real bookie processes (issue 15).

* a bookie killed for good is fully re-replicated within
  lostBookieRecoveryDelay plus one audit pass, checked entry by entry on
  the bookies the metadata now names;
* kill -9 the auditor, then a replication worker, mid-way: another daemon
  takes over and nothing is lost;
* 50 rounds of kill -9 of a random bookie during writes, then restarting
  it: every acknowledged entry is readable afterwards, and AutoRecovery,
  running all along, leaves every replica in place.
"""

from __future__ import annotations

import asyncio
import random
import time
from pathlib import Path

import pytest

from dlog.ledger.client import BookKeeper
from dlog.ledger.underreplication import UnderreplicationManager
from dlog.uri import parse_metadata_service_uri
from tests.fault.autorecovery_proof_support import (
    AutoRecoveryProcess,
    check_every_replica,
    lock_owner,
    payload,
)

pytestmark = pytest.mark.fault

PW = b"pw"
#: Quick to notice in a test: a lost bookie counts after 2 s.
FAST = {
    "lostBookieRecoveryDelay": 2,
    "openLedgerRereplicationGracePeriod": 1000,
    "rwRereplicateBackoffMs": 200,
    "lockReleaseOfFailedLedgerGracePeriod": 2000,
}


async def write_ledgers(
    bk: BookKeeper, count: int, entries: int, quorums: list[tuple[int, int, int]]
) -> dict[int, list[bytes]]:
    written: dict[int, list[bytes]] = {}
    for i in range(count):
        e, w, a = quorums[i % len(quorums)]
        wh = await bk.create_ledger(e, w, a, password=PW)
        data = [payload(wh.ledger_id, n) for n in range(entries)]
        await asyncio.gather(*(wh.append_nowait(d) for d in data))
        await wh.close()
        written[wh.ledger_id] = data
    return written


async def wait_replicated(
    bk: BookKeeper,
    urm: UnderreplicationManager,
    dead: str,
    ledgers: list[int],
    timeout: float,
    logs: str = "",
) -> float:
    """Seconds until no ledger names ``dead`` and no mark is left."""
    start = time.monotonic()
    while True:
        mds = [await bk.ledger_metadata(lid) for lid in ledgers]
        left = [md.ledger_id for md in mds if dead in md.bookies()]
        marks = await urm.list()
        if not left and not marks:
            return time.monotonic() - start
        if time.monotonic() - start > timeout:
            raise AssertionError(
                f"after {timeout} s ledgers {left} still name {dead}; marks {marks}\n{logs}"
            )
        await asyncio.sleep(0.25)


def daemons_log(daemons: list[AutoRecoveryProcess]) -> str:
    return "\n".join(f"--- {d.name}\n{d.log_tail()}" for d in daemons)


def test_a_bookie_lost_for_good_is_rereplicated_entry_by_entry(
    bookie_cluster, ledgers_uri: str, tmp_path: Path
) -> None:
    cluster = bookie_cluster(4)
    by_id = {b.bookie_id: b for b in cluster.bookies}
    daemon = AutoRecoveryProcess(tmp_path / "ar", ledgers_uri, "ar", **FAST).start()
    uri = parse_metadata_service_uri(ledgers_uri)

    async def run() -> None:
        async with BookKeeper(ledgers_uri) as bk:
            written = await write_ledgers(bk, 8, 150, [(3, 2, 2), (3, 3, 2)])
            # The open ledger: its last fragment waits for its writer, then is fenced.
            wh = await bk.create_ledger(3, 2, 2, password=PW)
            open_data = [payload(wh.ledger_id, n) for n in range(100)]
            await asyncio.gather(*(wh.append_nowait(d) for d in open_data))
            victim = by_id[wh.ensemble[0]]
            on_victim = [
                lid
                for lid in written
                if victim.bookie_id in (await bk.ledger_metadata(lid)).bookies()
            ]
            assert on_victim, "no ledger on the victim: the test proves nothing"
            victim.kill()
            urm = UnderreplicationManager(bk.zk, uri.ledgers_root)
            took = await wait_replicated(
                bk, urm, victim.bookie_id, [*written, wh.ledger_id], 90, daemons_log([daemon])
            )
            reads = 0
            for lid, data in written.items():
                reads += await check_every_replica(bk, lid, PW, data)
            # The open ledger was fenced and closed at what its writer had acknowledged.
            reads += await check_every_replica(bk, wh.ledger_id, PW, open_data)
            assert reads > 0
            print(f"re-replicated in {took:.1f} s; {reads} replica reads checked")

    try:
        asyncio.run(run())
    finally:
        daemon.stop()


def test_kill_9_the_auditor_and_a_worker_midway(
    bookie_cluster, ledgers_uri: str, tmp_path: Path
) -> None:
    cluster = bookie_cluster(4)
    daemons = [
        AutoRecoveryProcess(
            tmp_path / f"ar{i}", ledgers_uri, f"ar{i}", **FAST, rereplicationEntryBatchSize=1
        ).start()
        for i in range(3)
    ]
    uri = parse_metadata_service_uri(ledgers_uri)

    async def run() -> None:
        from dlog.autorecovery.election import current_auditor

        async with BookKeeper(ledgers_uri) as bk:
            written = await write_ledgers(bk, 24, 300, [(3, 2, 2), (3, 3, 2)])
            victim = random.choice(cluster.bookies)
            urm = UnderreplicationManager(bk.zk, uri.ledgers_root)
            deadline = time.monotonic() + 30
            while (auditor := await current_auditor(bk.zk, uri.ledgers_root)) is None:
                assert time.monotonic() < deadline, daemons_log(daemons)
                await asyncio.sleep(0.1)
            victim.kill()
            # Wait for the first marks: the auditor is at work.
            deadline = time.monotonic() + 30
            while not await urm.list():
                assert time.monotonic() < deadline, daemons_log(daemons)
                await asyncio.sleep(0.05)
            elected = next(d for d in daemons if d.candidate_id == auditor)
            elected.kill()
            # A worker holding a ledger's lock, killed mid-copy.
            holder = None
            deadline = time.monotonic() + 30
            while holder is None and time.monotonic() < deadline:
                for lid, _ in await urm.list():
                    owner = await lock_owner(bk.zk, uri.ledgers_root, lid)
                    holder = next(
                        (d for d in daemons if d.running() and d.candidate_id == owner), None
                    )
                    if holder is not None:
                        break
                await asyncio.sleep(0.05)
            assert holder is not None, "no worker was caught holding a ledger\n" + daemons_log(
                daemons
            )
            holder.kill()
            survivors = [d for d in daemons if d.running()]
            assert survivors, "every daemon was killed"
            deadline = time.monotonic() + 30
            while (now := await current_auditor(bk.zk, uri.ledgers_root)) in (None, auditor):
                assert time.monotonic() < deadline, daemons_log(daemons)
                await asyncio.sleep(0.1)
            assert now in {d.candidate_id for d in survivors}
            await wait_replicated(
                bk, urm, victim.bookie_id, list(written), 120, daemons_log(daemons)
            )
            for lid, data in written.items():
                await check_every_replica(bk, lid, PW, data)

    try:
        asyncio.run(run())
    finally:
        for d in daemons:
            d.stop()


def test_fifty_rounds_of_killing_a_random_bookie_during_writes(
    bookie_cluster, ledgers_uri: str, tmp_path: Path
) -> None:
    cluster = bookie_cluster(4)
    # The entries check every 3 s: an entry acknowledged by the ack quorum
    # just before its third bookie died is missing there once that bookie
    # is back, and only that check can find it.
    daemon = AutoRecoveryProcess(
        tmp_path / "ar", ledgers_uri, "ar", **FAST, auditorPeriodicCheckInterval=3
    ).start()
    rng = random.Random(15)
    acked: dict[int, list[bytes]] = {}

    async def run() -> None:
        async with BookKeeper(ledgers_uri) as bk:
            for round_ in range(50):
                e, w, a = rng.choice([(3, 2, 2), (3, 3, 2)])
                wh = await bk.create_ledger(e, w, a, password=PW)
                victim = rng.choice(cluster.bookies)
                data: list[bytes] = []
                futures = []
                for n in range(60):
                    if n == 20:
                        victim.kill()
                    d = payload(wh.ledger_id, n, 64)
                    futures.append(wh.append_nowait(d))
                    data.append(d)
                    if n % 10 == 9:
                        await asyncio.sleep(0.01)
                results = await asyncio.gather(*futures, return_exceptions=True)
                ok = [i for i, r in enumerate(results) if not isinstance(r, BaseException)]
                # Acknowledged entries form a prefix (completions are in order).
                assert ok == list(range(len(ok))), (round_, results)
                try:
                    await wh.close()
                except Exception:
                    pass  # closed by recovery below
                acked[wh.ledger_id] = data[: len(ok)]
                await asyncio.to_thread(victim.start)
            stored: dict[int, list[bytes]] = {}
            for lid, data in acked.items():
                rh = await bk.open_ledger(lid, PW)
                assert rh.last_add_confirmed >= len(data) - 1, (lid, rh.last_add_confirmed)
                got = [bytes(x.data) for x in await rh.read(0, rh.last_add_confirmed)]
                # Recovery may keep an entry whose add failed, never lose an acknowledged one.
                assert got[: len(data)] == data, lid
                stored[lid] = got
                await rh.close()
            # And AutoRecovery, running all along, puts back every replica.
            deadline = time.monotonic() + 120
            while True:
                try:
                    for lid, got in stored.items():
                        await check_every_replica(bk, lid, PW, got)
                    break
                except AssertionError:
                    if time.monotonic() > deadline:
                        print(daemon.log_tail())
                        raise
                    await asyncio.sleep(1)

    try:
        asyncio.run(run())
    finally:
        daemon.stop()
