"""BenchThroughputLatency for dlog: pipelined 1 KiB ledger appends through
the ledger client, replicated E=3 W=2 A=2 on three local bookie processes.

Starts a real ZooKeeper and real bookie processes (dlog.sandbox). One
client keeps ``--outstanding`` appends in flight for ``--seconds`` after a
warm-up and measures each entry's latency from append to completion (ack
quorum reached and every earlier entry complete). In the same run, with the
same client and settings, the baseline: E=W=A=1 while only one bookie is up.

Prints one JSON document: entries/s, MB/s, latency p50/p99/p999 and
ensemble changes for both, and the ratio of the replicated rate to the
single-bookie rate.

    python bench/ledger_throughput.py [--seconds 10] [--outstanding 1000] [--set key=value]
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import sys
import time
from typing import Any

from common import (
    BENCH_BOOKIE_SETTINGS,
    add_cluster_args,
    check_cluster_args,
    effective_settings,
    local_cluster,
    parse_sets,
    percentiles,
    start_bookies,
)

from dlog.bookie.main import install_event_loop_policy, tune_runtime
from dlog.conf.bookie import BookieConfig
from dlog.conf.bookkeeper import ClientConfig
from dlog.errors import BKError, ConfigError
from dlog.ledger.client import BookKeeper
from dlog.ledger.metadata import DigestType
from dlog.ledger.write_handle import WriteHandle

ENTRY_SIZE = 1024


async def closed_loop(
    handles: list[WriteHandle], payload: bytes, outstanding: int, seconds: float
) -> dict[str, Any]:
    """Keep ``outstanding`` appends in flight over ``handles`` (round robin)
    for ``seconds``; per-entry latency from append to completion."""
    latencies: list[float] = []
    done = 0
    errors: list[str] = []
    sem = asyncio.Semaphore(outstanding)
    loop = asyncio.get_running_loop()
    drained = loop.create_future()
    inflight = 0
    stop_at = time.perf_counter() + seconds
    changes0 = sum(h.ensemble_changes for h in handles)

    def on_done(fut: asyncio.Future[int], t0: float) -> None:
        nonlocal done, inflight
        inflight -= 1
        sem.release()
        exc = fut.exception()
        if exc is not None:
            if len(errors) < 5:
                errors.append(repr(exc))
        else:
            done += 1
            latencies.append(time.perf_counter() - t0)
        if inflight == 0 and time.perf_counter() >= stop_at and not drained.done():
            drained.set_result(None)

    cpu0 = time.process_time()
    t_start = time.perf_counter()
    turn = 0
    while time.perf_counter() < stop_at and not errors:
        await sem.acquire()
        handle = handles[turn % len(handles)]
        turn += 1
        t0 = time.perf_counter()
        try:
            fut = handle.append_nowait(payload)
        except BKError as e:  # the ledger already failed
            sem.release()
            errors.append(repr(e))
            break
        inflight += 1
        fut.add_done_callback(lambda f, t0=t0: on_done(f, t0))
    if inflight:
        if not drained.done() and time.perf_counter() < stop_at:
            stop_at = time.perf_counter()  # stopped early on an error: drain now
        await drained
    elapsed = time.perf_counter() - t_start
    cpu = time.process_time() - cpu0
    rate = done / elapsed if elapsed else 0.0
    return {
        "entries": done,
        "seconds": round(elapsed, 3),
        "entries_per_s": round(rate),
        "mb_per_s": round(rate * len(payload) / 1e6, 2),
        **percentiles(latencies),
        "ensemble_changes": sum(h.ensemble_changes for h in handles) - changes0,
        # One core is 100: near it, the load generator itself is the limit.
        "client_cpu_percent": round(100 * cpu / elapsed) if elapsed else 0,
        "errors": errors,
    }


async def measure(
    bk: BookKeeper,
    quorum: tuple[int, int, int],
    *,
    ledgers: int,
    outstanding: int,
    seconds: float,
    warmup: float,
) -> dict[str, Any]:
    e, w, a = quorum
    payload = os.urandom(ENTRY_SIZE)
    handles = [
        await bk.create_ledger(e, w, a, digest_type=DigestType.CRC32C, password=b"bench")
        for _ in range(ledgers)
    ]
    warm = await closed_loop(handles, payload, outstanding, warmup)
    result = {"ensemble": e, "write_quorum": w, "ack_quorum": a}
    if warm["errors"]:
        result["error"] = f"warm-up failed: {warm['errors']}"
        return result
    result.update(await closed_loop(handles, payload, outstanding, seconds))
    result["bookie_adds_per_s"] = result["entries_per_s"] * w  # each entry goes to W bookies
    result["ensemble_changes_incl_warmup"] = result["ensemble_changes"] + warm["ensemble_changes"]
    for h in handles:
        with contextlib.suppress(BKError):
            await h.close()
    if not result["errors"]:
        del result["errors"]
    return result


async def run(
    uri: str,
    client_conf: ClientConfig,
    start_more_bookies: Any,
    total_bookies: int,
    args: argparse.Namespace,
) -> dict[str, Any]:
    async with BookKeeper(conf=client_conf.with_overrides({"metadataServiceUri": uri})) as bk:
        tune_runtime()  # the load generator must not be the one pausing for GC
        opts = {
            "ledgers": args.ledgers,
            "outstanding": args.outstanding,
            "seconds": args.seconds,
            "warmup": args.warmup,
        }
        # Baseline: one bookie up, E=W=A=1.
        if len(await bk.watcher.wait_for(1, 30)) < 1:
            raise RuntimeError("the first bookie did not register")
        baseline = await measure(bk, (1, 1, 1), **opts)
        baseline["bookies"] = 1
        # Replicated: the other bookies join, same client.
        await asyncio.to_thread(start_more_bookies)
        if len(await bk.watcher.wait_for(total_bookies, 30)) < total_bookies:
            raise RuntimeError(f"only {len(bk.writable_bookies())} bookies registered")
        replicated = await measure(bk, (args.ensemble, args.write_quorum, args.ack_quorum), **opts)
        replicated["bookies"] = total_bookies
    return {"replicated": replicated, "baseline": baseline}


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--seconds", type=float, default=10.0)
    parser.add_argument("--warmup", type=float, default=2.0, help="seconds before measuring")
    parser.add_argument("--outstanding", type=int, default=1000, help="appends in flight")
    parser.add_argument("--ledgers", type=int, default=1, help="ledgers written round robin")
    add_cluster_args(parser)
    parser.add_argument(
        "--set", action="append", default=[], help="bookie setting key=value (repeatable)"
    )
    parser.add_argument(
        "--client-set", action="append", default=[], help="client setting key=value (repeatable)"
    )
    args = parser.parse_args()
    check_cluster_args(args)

    overrides: dict[str, Any] = {**BENCH_BOOKIE_SETTINGS, **parse_sets(args.set)}
    try:
        client_conf = ClientConfig.load(None, parse_sets(args.client_set))
    except ConfigError as e:
        raise SystemExit(f"--client-set: {e}") from None
    install_event_loop_policy()
    # The baseline runs on the first bookie alone; the rest join afterwards.
    with local_cluster(args.bookies, overrides, args.dir, "dlog-bench-ledger-", started=1) as (
        _zk,
        bookies,
        uri,
    ):
        result = asyncio.run(
            run(uri, client_conf, lambda: start_bookies(bookies[1:]), args.bookies, args)
        )

    rep, bl = result["replicated"], result["baseline"]
    report = {
        "benchmark": "ledger_throughput",
        "entry_size": ENTRY_SIZE,
        "digest_type": "CRC32C",
        "outstanding": args.outstanding,
        "ledgers": args.ledgers,
        "seconds": args.seconds,
        "warmup_seconds": args.warmup,
        "cpus": os.cpu_count(),
        # What differs from the documented defaults, plus the journal's durability.
        "bookie_settings": {
            "journalSyncData": bookies[0].conf.to_properties()["journalSyncData"],
            **effective_settings(bookies[0].conf, BookieConfig()),
        },
        "client_settings": effective_settings(client_conf, ClientConfig()),
        "replicated": rep,
        "baseline_single_bookie": bl,
        "ratios": {
            "entries_per_s_vs_single_bookie": (
                round(rep["entries_per_s"] / bl["entries_per_s"], 3)
                if rep.get("entries_per_s") and bl.get("entries_per_s")
                else None
            ),
        },
    }
    json.dump(report, sys.stdout, indent=2)
    print()
    if "error" in rep or "error" in bl or rep.get("errors") or bl.get("errors"):
        raise SystemExit(1)


if __name__ == "__main__":
    main()
