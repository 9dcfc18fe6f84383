"""kill -9 bookies and writers under a replicated ledger."""

from __future__ import annotations

import asyncio
import subprocess
import sys
import time
from pathlib import Path

import pytest

from dlog.errors import EFENCED
from dlog.ledger.client import BookKeeper

pytestmark = pytest.mark.fault


def test_kill_9_a_bookie_in_the_middle_of_20000_appends(bookie_cluster, ledgers_uri: str) -> None:
    cluster = bookie_cluster(4)
    by_id = {b.bookie_id: b for b in cluster.bookies}

    async def run() -> None:
        async with BookKeeper(ledgers_uri) as bk:
            wh = await bk.create_ledger(3, 2, 2, password=b"pw")
            victim = by_id[wh.ensemble[0]]
            acked: list[int] = []
            futures = []
            for i in range(20_000):
                fut = wh.append_nowait(b"payload-%d" % i)
                fut.add_done_callback(
                    lambda f: acked.append(f.result()) if f.exception() is None else None
                )
                futures.append(fut)
                if i == 10_000:
                    victim.kill()
                if i % 500 == 499:
                    await asyncio.gather(*futures)  # keep up to 500 in flight
                    futures.clear()
            await asyncio.gather(*futures)
            assert acked == list(range(20_000))
            await wh.close()
            md = await bk.ledger_metadata(wh.ledger_id)
            assert len(md.ensembles) >= 2, md.ensembles
            assert victim.bookie_id in md.ensembles[0][1]
            assert victim.bookie_id not in md.last_ensemble
            rh = await bk.open_ledger(wh.ledger_id, b"pw")
            assert rh.last_add_confirmed == 19_999
            for start in range(0, 20_000, 2000):
                entries = await rh.read(start, start + 1999)
                assert [e.data for e in entries] == [
                    b"payload-%d" % i for i in range(start, start + 2000)
                ]

    asyncio.run(run())


def test_kill_9_the_writer_then_recover(bookie_cluster, ledgers_uri: str) -> None:
    bookie_cluster(3)
    proc = subprocess.Popen(
        [sys.executable, str(Path(__file__).with_name("ledger_writer.py")), ledgers_uri, "200"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        first = proc.stdout.readline()
        assert first.startswith("LEDGER "), first + proc.stderr.read()
        ledger_id = int(first.split()[1])
        last_acked = -1
        deadline = time.monotonic() + 60
        while last_acked < 3000 and time.monotonic() < deadline:
            line = proc.stdout.readline()
            if line.startswith("ACK "):
                last_acked = int(line.split()[1])
        proc.kill()
        for line in proc.stdout:  # acknowledgements already printed before the kill
            if line.startswith("ACK "):
                last_acked = int(line.split()[1])
    finally:
        proc.kill()
        proc.wait()
    assert last_acked >= 3000

    async def recover() -> None:
        async with BookKeeper(ledgers_uri) as bk:
            rh = await bk.open_ledger(ledger_id, b"pw", recovery=True)
            assert rh.is_closed
            assert rh.last_add_confirmed >= last_acked
            entries = await rh.read(0, rh.last_add_confirmed)
            assert [e.data for e in entries] == [
                b"entry-%08d" % i for i in range(rh.last_add_confirmed + 1)
            ]
            # The dead writer's handle is fenced: its bookies refuse its adds.
            md = rh.metadata
            body = rh.digest.compute(
                rh.last_add_confirmed + 1, rh.last_add_confirmed, rh.length + 1, b"z"
            )
            statuses = []
            for bookie in md.last_ensemble:
                conn = await bk.pool.get(bookie)
                r = await conn.add_entry(ledger_id, rh.last_add_confirmed + 1, rh.master_key, body)
                statuses.append(r.status)
            assert statuses == [EFENCED] * len(md.last_ensemble)

    asyncio.run(recover())
