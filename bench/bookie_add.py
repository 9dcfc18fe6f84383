"""BenchBookie for dlog: pipelined 1 KiB adds against one real bookie process.

Prints one JSON document: adds/s, MB/s and latency percentiles at full load
(N outstanding adds) and at half load (an open-loop rate of half the full
throughput), the journal's fsyncs per second, and the raw-disk baseline
measured in the same run on the same disk: 1 KiB write+fdatasync, and
512 KiB write+fdatasync, with the ratios.

    python bench/bookie_add.py [--seconds 10] [--outstanding 1000]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import re
import shutil
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

from common import check_bookie_settings, journal_settings, parse_sets

from dlog.bookie.main import install_event_loop_policy, tune_runtime
from dlog.ledger.bookie_client import BookieClient
from dlog.ledger.digest import CRC32C, DigestManager
from dlog.sandbox.bookies import BookieProcess
from dlog.sandbox.zookeeper import ZooKeeperServer, free_port

ENTRY_SIZE = 1024


def percentiles(samples: list[float]) -> dict[str, float]:
    if not samples:
        return {"p50_ms": 0.0, "p99_ms": 0.0, "p999_ms": 0.0}
    s = sorted(samples)

    def pick(q: float) -> float:
        return round(s[min(len(s) - 1, int(q * len(s)))] * 1000, 3)

    return {"p50_ms": pick(0.50), "p99_ms": pick(0.99), "p999_ms": pick(0.999)}


def raw_fsync_baseline(directory: Path, seconds: float) -> dict[str, float]:
    """What the disk does without a bookie: small synced writes, big synced writes."""
    path = directory / "baseline.dat"
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    try:
        os.posix_fallocate(fd, 0, 256 * 1024 * 1024)
        os.fsync(fd)
        small = b"x" * 1024
        n, off, t0 = 0, 0, time.monotonic()
        while time.monotonic() - t0 < seconds:
            os.pwrite(fd, small, off)
            os.fdatasync(fd)
            off += len(small)
            n += 1
        small_rate = n / (time.monotonic() - t0)
        big = b"y" * (512 * 1024)
        n, off, t0 = 0, 0, time.monotonic()
        while time.monotonic() - t0 < seconds:
            os.pwrite(fd, big, off)
            os.fdatasync(fd)
            off = (off + len(big)) % (200 * 1024 * 1024)
            n += 1
        big_mb = n * len(big) / (time.monotonic() - t0) / 1e6
    finally:
        os.close(fd)
        path.unlink()
    return {
        "write_fdatasync_1k_per_s": round(small_rate),
        "write_fdatasync_512k_mb_per_s": round(big_mb, 1),
    }


def scrape_histogram(port: int, name: str) -> dict[float, float]:
    """Cumulative bucket counts of a histogram, by upper bound."""
    text = urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5).read().decode()
    out: dict[float, float] = {}
    for line in text.splitlines():
        m = re.match(rf'^{re.escape(name)}_bucket\{{le="([^"]+)"\}} (\S+)', line)
        if m:
            out[float("inf") if m.group(1) == "+Inf" else float(m.group(1))] = float(m.group(2))
    return out


def server_percentiles(
    before: dict[float, float], after: dict[float, float]
) -> dict[str, float | None]:
    """Bucket-resolution percentiles of what the bookie itself measured
    between two scrapes (upper bound of the bucket holding the percentile)."""
    bounds = sorted(after)
    counts = [after[b] - before.get(b, 0.0) for b in bounds]
    total = counts[-1] if counts else 0
    out: dict[str, float | None] = {}
    for label, q in (
        ("server_p50_ms_le", 0.5),
        ("server_p99_ms_le", 0.99),
        ("server_p999_ms_le", 0.999),
    ):
        value = None
        for b, c in zip(bounds, counts, strict=True):
            if total and c >= q * total:
                value = None if b == float("inf") else round(b * 1000, 3)
                break
        out[label] = value
    return out


def scrape(port: int, name: str) -> float:
    text = urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5).read().decode()
    total = 0.0
    for line in text.splitlines():
        if re.match(rf"^{re.escape(name)}(\{{.*\}})? ", line):
            total += float(line.rsplit(" ", 1)[1])
    return total


class Load:
    def __init__(self, client: BookieClient, ledgers: int) -> None:
        self.client = client
        self.digests = [DigestManager(lid, CRC32C, b"bench") for lid in range(1, ledgers + 1)]
        self.next_entry = [0] * ledgers
        self.payload = os.urandom(ENTRY_SIZE)
        self.turn = 0

    def send(self) -> asyncio.Future:
        i = self.turn = (self.turn + 1) % len(self.digests)
        dm = self.digests[i]
        eid = self.next_entry[i]
        self.next_entry[i] = eid + 1
        body = dm.compute(eid, eid - 1, (eid + 1) * ENTRY_SIZE, self.payload)
        return self.client.add_entry(dm.ledger_id, eid, dm.master_key, body)


async def closed_loop(
    load: Load, outstanding: int, seconds: float
) -> tuple[int, float, list[float]]:
    """Keep ``outstanding`` adds in flight; returns (adds, elapsed, latencies)."""
    latencies: list[float] = []
    done = 0
    errors = 0
    stop_at = time.monotonic() + seconds
    sem = asyncio.Semaphore(outstanding)
    loop = asyncio.get_running_loop()
    finished = loop.create_future()
    inflight = 0

    def on_done(fut: asyncio.Future, t0: float) -> None:
        nonlocal done, errors, inflight
        inflight -= 1
        sem.release()
        if fut.exception() is not None or fut.result().status != 0:
            errors += 1
        else:
            done += 1
            latencies.append(time.monotonic() - t0)
        if inflight == 0 and time.monotonic() >= stop_at and not finished.done():
            finished.set_result(None)

    t_start = time.monotonic()
    while time.monotonic() < stop_at:
        await sem.acquire()
        inflight += 1
        t0 = time.monotonic()
        load.send().add_done_callback(lambda f, t0=t0: on_done(f, t0))
    if inflight:
        await finished
    if errors:
        raise RuntimeError(f"{errors} adds failed")
    return done, time.monotonic() - t_start, latencies


async def open_loop(load: Load, rate: float, seconds: float) -> tuple[int, float, list[float]]:
    """Send at a fixed rate regardless of completions (no coordinated omission)."""
    latencies: list[float] = []
    pending: list[asyncio.Future] = []
    interval = 1.0 / rate
    t_start = time.monotonic()
    sent = 0
    while True:
        now = time.monotonic()
        if now - t_start >= seconds:
            break
        due = int((now - t_start) / interval) + 1
        while sent < due:
            scheduled = t_start + sent * interval
            fut = load.send()
            fut.add_done_callback(lambda f, t0=scheduled: latencies.append(time.monotonic() - t0))
            pending.append(fut)
            sent += 1
        await asyncio.sleep(0.0005)
    results = await asyncio.gather(*pending)
    if any(r.status != 0 for r in results):
        raise RuntimeError("adds failed at half load")
    return sent, time.monotonic() - t_start, latencies


async def run(
    address: str, metrics_port: int, seconds: float, outstanding: int, ledgers: int
) -> dict:
    client = BookieClient(address)
    await client.connect()
    tune_runtime()  # the load generator must not be the one pausing for GC
    load = Load(client, ledgers)
    await closed_loop(load, outstanding, 2.0)  # warm-up

    lat_name = "bookie_add_entry_latency_seconds"
    h0 = scrape_histogram(metrics_port, lat_name)
    fs0, t0 = scrape(metrics_port, "bookie_journal_fsync_latency_seconds_count"), time.monotonic()
    n, elapsed, lat = await closed_loop(load, outstanding, seconds)
    fsyncs = (scrape(metrics_port, "bookie_journal_fsync_latency_seconds_count") - fs0) / (
        time.monotonic() - t0
    )
    full_rate = n / elapsed
    full = {
        "outstanding": outstanding,
        "adds_per_s": round(full_rate),
        "mb_per_s": round(full_rate * ENTRY_SIZE / 1e6, 2),
        **percentiles(lat),
        "journal_fsyncs_per_s": round(fsyncs),
        "adds_per_fsync": round(full_rate / fsyncs, 1) if fsyncs else None,
        **server_percentiles(h0, scrape_histogram(metrics_port, lat_name)),
    }
    h0 = scrape_histogram(metrics_port, lat_name)
    fs0, t0 = scrape(metrics_port, "bookie_journal_fsync_latency_seconds_count"), time.monotonic()
    n, elapsed, lat = await open_loop(load, full_rate / 2, seconds)
    fsyncs = (scrape(metrics_port, "bookie_journal_fsync_latency_seconds_count") - fs0) / (
        time.monotonic() - t0
    )
    half = {
        "target_adds_per_s": round(full_rate / 2),
        "adds_per_s": round(n / elapsed),
        "mb_per_s": round(n / elapsed * ENTRY_SIZE / 1e6, 2),
        **percentiles(lat),
        "journal_fsyncs_per_s": round(fsyncs),
        **server_percentiles(h0, scrape_histogram(metrics_port, lat_name)),
    }
    await client.close()
    return {"full_load": full, "half_load": half}


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--seconds", type=float, default=10.0)
    parser.add_argument("--outstanding", type=int, default=1000)
    parser.add_argument("--ledgers", type=int, default=4)
    parser.add_argument(
        "--dir",
        type=Path,
        default=None,
        help="where the bookie keeps its files (default: a temp dir)",
    )
    parser.add_argument(
        "--set", action="append", default=[], help="bookie setting key=value (repeatable)"
    )
    args = parser.parse_args()
    # Journal and entry logs share one disk here: spreading entry-log
    # writeback (flushEntrylogBytes) keeps checkpoint flushes from queueing
    # journal fsyncs behind hundreds of MB of dirty pages.
    settings = {
        "dbStorage_writeCacheMaxSizeMb": 512,
        "flushEntrylogBytes": 1048576,
        **parse_sets(args.set),
    }
    check_bookie_settings(settings, "--set")
    install_event_loop_policy()
    base = args.dir or Path(tempfile.mkdtemp(prefix="dlog-bench-"))
    base.mkdir(parents=True, exist_ok=True)
    baseline = raw_fsync_baseline(base, 2.0)
    with ZooKeeperServer(base / "zk") as zk:
        metrics_port = free_port()
        bookie = BookieProcess(
            base / "bookie",
            f"zk+hierarchical://{zk.connect_string}/ledgers",
            enableStatistics=True,
            prometheusStatsHttpPort=metrics_port,
            prometheusStatsHttpAddress="127.0.0.1",
            journalSyncData=True,
            **settings,
        ).start()
        try:
            result = asyncio.run(
                run(bookie.bookie_id, metrics_port, args.seconds, args.outstanding, args.ledgers)
            )
        finally:
            bookie.stop()
    if args.dir is None:
        shutil.rmtree(base, ignore_errors=True)
    full = result["full_load"]
    report = {
        "benchmark": "bookie_add",
        "entry_size": ENTRY_SIZE,
        "journalSyncData": True,
        "bookie_settings": settings,
        # Defaults included: the sandbox's bookies differ from BookKeeper's.
        "journal_settings": journal_settings(bookie.conf),
        **result,
        "baseline": baseline,
        "ratios": {
            "adds_vs_raw_1k_fdatasync": round(
                full["adds_per_s"] / baseline["write_fdatasync_1k_per_s"], 2
            ),
            "mb_vs_raw_512k_fdatasync": round(
                full["mb_per_s"] / baseline["write_fdatasync_512k_mb_per_s"], 3
            ),
        },
        "targets": {
            "adds_per_s_at_least_30000": full["adds_per_s"] >= 30000,
            "half_load_p99_under_10ms": result["half_load"]["p99_ms"] < 10.0,
        },
    }
    json.dump(report, sys.stdout, indent=2)
    print()


if __name__ == "__main__":
    main()
