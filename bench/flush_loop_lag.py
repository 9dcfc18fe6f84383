"""How long the event loop waits while a write-cache flush runs beside it.

One storage directory on the bench disk, a write cache holding N 1 KiB
entries of a few ledgers, then one paced flush (``dbStorage_flushMaxCpuPercent``
at its default) while a ticker on the event loop sleeps 0.5 ms at a time and
records how late it wakes. Twice, alternating: with the flush pacing itself
by sleeping between slices (the default) and, as the alternative in the
same run, with the turns the loop lends the flush (dlog.bookie.pacer,
``dbStorage_flushLendTurns=true``). A late tick is what every request the
loop serves meanwhile waits, on top of its own work.

Prints JSON: for each mode, the flush's duration and the loop's lateness
percentiles (ms), the ticks over 2 ms, and the turns granted and overrun;
then the p99 ratio of sleeping (the default) to turns.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import shutil
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from common import percentiles

from dlog.bookie.ledger_storage import SingleDirectoryDbLedgerStorage
from dlog.conf.bookie import BookieConfig

TICK = 0.0005


async def one_flush(base: Path, entries: int, ledgers: int, turns: bool) -> dict[str, Any]:
    shutil.rmtree(base, ignore_errors=True)
    d = base / "ledgers" / "current"
    d.mkdir(parents=True)
    conf = BookieConfig.from_mapping(
        {
            "journalDirectories": str(base / "journal"),
            "ledgerDirectories": str(base / "ledgers"),
            "dbStorage_flushLendTurns": turns,
        }
    )
    sd = SingleDirectoryDbLedgerStorage(
        d, conf, write_cache_bytes=4 << 30, read_cache_bytes=conf.read_cache_bytes
    )
    payload = bytes(1024)
    for i in range(entries):
        if not sd.try_add(1 + i % ledgers, i // ledgers, bytes(payload)):
            raise SystemExit("the write cache is too small for --entries")
    late: list[float] = []
    done = False

    async def ticker() -> None:
        while not done:
            t = time.perf_counter()
            await asyncio.sleep(TICK)
            late.append(time.perf_counter() - t - TICK)

    task = asyncio.create_task(ticker())
    t0 = time.perf_counter()
    await sd.flush()
    took = time.perf_counter() - t0
    done = True
    await task
    t = sd.pacer.turns
    await sd.close()
    return {
        "flush_s": round(took, 2),
        "ticks": len(late),
        **{f"late_{k}": v for k, v in percentiles(late).items()},
        "ticks_over_2ms": sum(x > 0.002 for x in late),
        "turns_granted": t.granted,
        "turns_overrun": t.overruns,
        "turns_missed": t.missed,
    }


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--entries", type=int, default=250_000)
    parser.add_argument("--ledgers", type=int, default=4)
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--dir", type=Path, default=None, help="default: a temp dir")
    args = parser.parse_args()
    sys.setswitchinterval(0.001)  # as the bookie sets it (dlog.bookie.main)
    base = args.dir or Path(tempfile.mkdtemp(prefix="dlog-bench-flush-"))
    runs: dict[str, list[dict[str, Any]]] = {"turns": [], "sleeping": []}
    try:
        for _ in range(args.rounds):
            for mode in ("turns", "sleeping"):
                runs[mode].append(
                    asyncio.run(one_flush(base / mode, args.entries, args.ledgers, mode == "turns"))
                )
    finally:
        shutil.rmtree(base, ignore_errors=True)

    def worst(mode: str, key: str) -> float:
        return max(r[key] for r in runs[mode])

    print(
        json.dumps(
            {
                "benchmark": "flush_loop_lag",
                "entries": args.entries,
                "entry_size": 1024,
                "runs": runs,
                "ratios": {
                    "late_p99_sleeping_vs_turns": round(
                        worst("sleeping", "late_p99_ms") / worst("turns", "late_p99_ms"), 1
                    )
                },
            },
            indent=1,
        )
    )


if __name__ == "__main__":
    main()
