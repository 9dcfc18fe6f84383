"""Re-replication throughput against the ledger read throughput of the same
cluster, in the same run.

ZooKeeper and ``--bookies`` (default 4) bookie processes; the ledger client
writes ``--ledgers`` closed ledgers (E3/W2/A2 by default) of ``--entries``
entries of ``--entry-size`` bytes. Then, on the same cluster:

* **baseline**: every ledger is read back through the ledger client, one
  ledger after another in ``--read-batch`` ranges (what a catching-up
  reader does); payload MB/s;
* **re-replication**: one bookie is killed (kill -9) and every fragment it
  held is copied, as a replication worker does it
  (:func:`dlog.ledger.replicator.replicate_ledger`, one ledger after
  another, ``rereplicationEntryBatchSize`` entries at a time), from the
  surviving replicas to the spare bookie, with the metadata updated by
  compare-and-set. MB/s of entry bodies copied (payload plus digest header).

``ratio`` is re-replication MB/s over read MB/s: one replication worker's
share of the read bandwidth the cluster gives a reader. Each copied entry is
read from one bookie, verified, and added to another (a journal fsync per
batch), so it is expected below 1.

    python bench/rereplication.py [--ledgers 8] [--entries 2000] [--entry-size 4096]
                                  [--batch 10] [--set key=value]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import time
from pathlib import Path
from typing import Any

from common import BENCH_BOOKIE_SETTINGS, check_bookie_settings, local_cluster, parse_sets

from dlog.ledger.client import BookKeeper
from dlog.ledger.replicator import replicate_ledger
from dlog.sandbox.bookies import BookieProcess

PASSWORD = b"bench"


async def write(bk: BookKeeper, args: Any) -> list[int]:
    payload = b"r" * args.entry_size
    ids = []
    for _ in range(args.ledgers):
        wh = await bk.create_ledger(
            args.ensemble, args.write_quorum, args.ack_quorum, password=PASSWORD
        )
        for start in range(0, args.entries, 500):
            await asyncio.gather(
                *(wh.append_nowait(payload) for _ in range(min(500, args.entries - start)))
            )
        await wh.close()
        ids.append(wh.ledger_id)
    return ids


async def read_all(bk: BookKeeper, ids: list[int], batch: int) -> tuple[float, int]:
    t0 = time.monotonic()
    total = 0
    for lid in ids:
        rh = await bk.open_ledger(lid, PASSWORD)
        for first in range(0, rh.last_add_confirmed + 1, batch):
            entries = await rh.read(first, min(first + batch, rh.last_add_confirmed + 1) - 1)
            total += sum(len(e.data) for e in entries)
        await rh.close()
    return time.monotonic() - t0, total


async def run(procs: list[BookieProcess], uri: str, args: Any) -> dict[str, Any]:
    async with BookKeeper(uri) as bk:
        await bk.watcher.wait_for(len(procs), 30)
        ids = await write(bk, args)
        # Baseline: the same cluster's read throughput (bookie read caches
        # warmed by a first pass, as the copy below reads the same entries).
        await read_all(bk, ids, args.read_batch)
        read_s, read_bytes = await read_all(bk, ids, args.read_batch)
        victim_id = (await bk.ledger_metadata(ids[0])).ensembles[0][1][0]
        victim = next(p for p in procs if p.bookie_id == victim_id)
        victim.kill()
        t0 = time.monotonic()
        copied_bytes = copied_entries = fragments = 0
        for lid in ids:
            outcome = await replicate_ledger(bk, lid, bookies=[victim_id], batch_size=args.batch)
            if not outcome.fully_replicated:
                raise SystemExit(f"ledger {lid} not fully replicated: {outcome.failed}")
            copied_bytes += outcome.bytes_copied
            copied_entries += outcome.entries_copied
            fragments += len(outcome.replicated)
        rerep_s = time.monotonic() - t0
        for lid in ids:
            assert victim_id not in (await bk.ledger_metadata(lid)).bookies()
    read_mb_s = read_bytes / read_s / 1e6
    rerep_mb_s = copied_bytes / rerep_s / 1e6
    return {
        "read": {
            "bytes": read_bytes,
            "seconds": round(read_s, 3),
            "mb_per_s": round(read_mb_s, 2),
        },
        "rereplication": {
            "lost_bookie": victim_id,
            "fragments": fragments,
            "entries_copied": copied_entries,
            "bytes_copied": copied_bytes,
            "seconds": round(rerep_s, 3),
            "mb_per_s": round(rerep_mb_s, 2),
            "entries_per_s": round(copied_entries / rerep_s),
        },
        "baseline": "read",
        "ratio_rereplication_vs_read": round(rerep_mb_s / read_mb_s, 3),
    }


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--bookies", type=int, default=4)
    parser.add_argument("--ledgers", type=int, default=8)
    parser.add_argument("--entries", type=int, default=2000, help="entries per ledger")
    parser.add_argument("--entry-size", type=int, default=4096)
    parser.add_argument("--ensemble", type=int, default=3)
    parser.add_argument("--write-quorum", type=int, default=2)
    parser.add_argument("--ack-quorum", type=int, default=2)
    parser.add_argument(
        "--batch",
        type=int,
        default=10,
        help="rereplicationEntryBatchSize (BookKeeper's default 10)",
    )
    parser.add_argument(
        "--read-batch", type=int, default=100, help="entries per read request range"
    )
    parser.add_argument("--dir", type=Path, default=None)
    parser.add_argument("--set", action="append", default=[], help="bookie setting key=value")
    args = parser.parse_args()
    if args.bookies <= args.ensemble:
        parser.error("--bookies must exceed --ensemble: a spare bookie takes the lost one's place")
    settings = {**BENCH_BOOKIE_SETTINGS, **parse_sets(args.set)}
    check_bookie_settings(settings, "--set")
    with local_cluster(args.bookies, settings, args.dir, "dlog-bench-rerep-") as (_zk, procs, uri):
        result = asyncio.run(run(procs, uri, args))
    print(
        json.dumps(
            {
                "benchmark": "rereplication",
                "bookies": args.bookies,
                "ledgers": args.ledgers,
                "entries_per_ledger": args.entries,
                "entry_size": args.entry_size,
                "quorums": [args.ensemble, args.write_quorum, args.ack_quorum],
                "rereplication_entry_batch_size": args.batch,
                **result,
            },
            indent=2,
        )
    )


if __name__ == "__main__":
    main()
