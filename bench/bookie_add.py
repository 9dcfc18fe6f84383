"""BenchBookie for dlog: pipelined 1 KiB adds against one real bookie process.

Runs twice, once per directory layout:

* ``one_disk``: the journal and the ledger directories on the same disk
  (the bench directory), so entry-log writeback competes with journal fsyncs;
* ``separate_devices``: the ledger directory on another device (a tmpfs under
  /dev/shm: this machine has one disk), so it shows what a dedicated
  journal disk gives.

For each: adds/s, MB/s and latency percentiles at full load (N outstanding
adds, closed loop), then at half load (an open-loop rate of half the full
throughput, or ``--half-rate`` to compare settings at one rate; no
coordinated omission): first until the checkpoints flushing
what full load left in the write cache are done (``settled_first_s``), then
over a window long enough to hold at least two checkpoints
(``flushInterval``, a fixed rate), with the number it held, the
worst one-second p99, the percentiles of the adds sent while a storage
flush (a checkpoint's) ran and of the others (``during_flush``,
``outside_flush``: the bookie's flush histogram, read every 0.5 s, bounds
each flush's span), the bookie's own per-stage journal percentiles
(queue and callback per add, write and fsync per batch; bucket
resolution) and event-loop lag, the
load generator's own share (how late it sent each add, and its CPU per
add: it runs on the same two cores), and the bookie's peak RSS beside its
cache limits. A bookie's CPU and RSS are those of its process and its
journal writers (child processes) together. After each layout, the device bound
(``device_bound_group_commit``): the same rate for the same window on the
journal's disk with no bookie, an ideal group commit in a plain loop
(write what has arrived, fdatasync, again), with each add's latency from
its arrival. The half-load percentiles are printed against it: when the
disk itself stalls an fdatasync for 100 ms, no journal can keep p99 lower.
The bookie runs with ``eventLoopStallDumpThresholdMs`` (printed): each
layout reports how many event-loop stalls were dumped over its whole run
and the innermost frames the dumps found busy (``loop_stalls``).

Then the memory bound: a bookie with small caches (64 MiB write, 32 MiB
read-ahead) takes full load until its write cache has filled many times,
then reads it all back; its peak RSS must stay within its idle size plus
the two cache limits plus a fixed 128 MiB.

The baseline is measured in the same run on the same disk: 1 KiB
write+fdatasync and 512 KiB write+fdatasync, with the ratios. Every bookie
setting that differs from BookKeeper's (dlog's) default is printed.

    python bench/bookie_add.py [--seconds 10] [--half-seconds 25] [--outstanding 1000]
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
from collections import Counter
from pathlib import Path
from typing import Any

from common import (
    check_bookie_settings,
    effective_settings,
    journal_settings,
    parse_sets,
    percentiles,
    scrape,
    split_by_spans,
    watch_flushes,
)

from dlog.bookie.main import install_event_loop_policy, tune_runtime
from dlog.conf.bookie import BookieConfig
from dlog.errors import STATUS_NAMES
from dlog.ledger.bookie_client import BookieClient
from dlog.ledger.digest import CRC32C, DigestManager
from dlog.sandbox.bookies import BookieProcess
from dlog.sandbox.ports import free_port
from dlog.sandbox.zookeeper import ZooKeeperServer
from dlog.stall_watchdog import HEADER as STALL_HEADER

ENTRY_SIZE = 1024


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


def group_commit_baseline(
    directory: Path, rate: float, seconds: float, record_bytes: int, prealloc_bytes: int
) -> dict[str, Any]:
    """What the disk allows a journal at an add rate, without a bookie.

    Adds arrive at ``rate`` (virtually, by the clock); a plain loop writes
    every record that has arrived in one write, fdatasyncs it, and goes
    again at once (an ideal group commit: no queue, no other work, space
    preallocated as the journal does). An add's latency runs from its
    arrival to the end of the fdatasync that covers it. No bookie can do
    better on this disk at this rate: its percentiles are the bound for the
    half-load ones, and a stall of the device shows up here as there."""
    path = directory / "group-commit-baseline.dat"
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    zeros = memoryview(bytes(record_bytes * int(rate)))  # up to one second of records
    latencies: list[float] = []
    syncs: list[float] = []
    allocated = offset = done = 0
    try:
        t0 = time.monotonic()
        while True:
            now = time.monotonic()
            if now - t0 >= seconds:
                break
            due = min(int((now - t0) * rate) + 1, done + int(rate))
            if due <= done:
                time.sleep(0.0002)
                continue
            size = (due - done) * record_bytes
            if offset + size > allocated:
                os.posix_fallocate(fd, allocated, prealloc_bytes)
                allocated += prealloc_bytes
            os.pwrite(fd, zeros[:size], offset)
            s0 = time.monotonic()
            os.fdatasync(fd)
            end = time.monotonic()
            syncs.append(end - s0)
            offset += size
            latencies += [end - (t0 + k / rate) for k in range(done, due)]
            done = due
    finally:
        os.close(fd)
        path.unlink()
    return {
        "adds_per_s": round(rate),
        "seconds": seconds,
        **percentiles(latencies),
        "fdatasyncs": len(syncs),
        "fdatasync_max_ms": round(max(syncs, default=0.0) * 1000, 1),
        "fdatasyncs_over_25ms": sum(x > 0.025 for x in syncs),
    }


def scrape_histogram(port: int, name: str, labels: str = "") -> dict[float, float]:
    """Cumulative bucket counts of a histogram, by upper bound (``labels``:
    the other labels of the series, as exported, e.g. ``generation="2",``)."""
    text = urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5).read().decode()
    out: dict[float, float] = {}
    for line in text.splitlines():
        m = re.match(rf'^{re.escape(name)}_bucket\{{{labels}le="([^"]+)"\}} (\S+)', line)
        if m:
            out[float("inf") if m.group(1) == "+Inf" else float(m.group(1))] = float(m.group(2))
    return out


def server_percentiles(before: dict[float, float], after: dict[float, float]) -> dict[str, Any]:
    """Bucket-resolution percentiles of what the bookie itself measured
    between two scrapes (upper bound of the bucket holding the percentile)."""
    bounds = sorted(after)
    counts = [after[b] - before.get(b, 0.0) for b in bounds]
    total = counts[-1] if counts else 0
    out: dict[str, Any] = {}
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
    out["server_count"] = total
    worst = [b for b, c, prev in zip(bounds, counts, [0.0, *counts], strict=False) if c > prev]
    if not worst:
        out["server_max_ms_le"] = None  # nothing observed
    elif worst[-1] == float("inf"):
        out["server_max_ms_le"] = f"over {round(bounds[-2] * 1000, 3)}"
    else:
        out["server_max_ms_le"] = round(worst[-1] * 1000, 3)
    return out


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
    errors: Counter[str] = Counter()
    stop_at = time.monotonic() + seconds
    sem = asyncio.Semaphore(outstanding)
    loop = asyncio.get_running_loop()
    finished = loop.create_future()
    inflight = 0

    def on_done(fut: asyncio.Future, t0: float) -> None:
        nonlocal done, inflight
        inflight -= 1
        sem.release()
        exc = fut.exception()
        if exc is not None:
            errors[type(exc).__name__] += 1
        elif (status := fut.result().status) != 0:
            errors[STATUS_NAMES.get(status, str(status))] += 1
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
        raise RuntimeError(f"{errors.total()} adds failed at full load: {dict(errors)}")
    return done, time.monotonic() - t_start, latencies


async def open_loop(
    load: Load,
    rate: float,
    seconds: float,
    sent_at: list[float] | None = None,
    send_lags: list[float] | None = None,
) -> tuple[int, float, list[float]]:
    """Send at a fixed rate regardless of completions (no coordinated omission);
    ``sent_at`` gets each latency's scheduled send time, in the same order,
    and ``send_lags`` how late each add left the load generator (its own
    share of the latencies).

    Completed futures are not kept: hundreds of thousands of live objects
    would make the load generator's own garbage collections pause it for
    tens of milliseconds, which would show up as the bookie's latency."""
    latencies: list[float] = []
    when = sent_at if sent_at is not None else []
    lags = send_lags if send_lags is not None else []
    interval = 1.0 / rate
    t_start = time.monotonic()
    sent = 0
    outstanding = 0
    failed: Counter[str] = Counter()
    drained = asyncio.get_running_loop().create_future()
    sending = True

    def on_done(fut: asyncio.Future, t0: float) -> None:
        nonlocal outstanding
        outstanding -= 1
        latencies.append(time.monotonic() - t0)
        when.append(t0)
        exc = fut.exception()
        if exc is not None:
            failed[type(exc).__name__] += 1
        elif (status := fut.result().status) != 0:
            failed[STATUS_NAMES.get(status, str(status))] += 1
        if not outstanding and not sending and not drained.done():
            drained.set_result(None)

    while True:
        now = time.monotonic()
        if now - t_start >= seconds:
            break
        due = int((now - t_start) / interval) + 1
        while sent < due:
            scheduled = t_start + sent * interval
            lags.append(now - scheduled)
            load.send().add_done_callback(lambda f, t0=scheduled: on_done(f, t0))
            outstanding += 1
            sent += 1
        # 1 ms, not less: uvloop's timers have millisecond resolution and a
        # shorter sleep returns at once, so the generator would spin a whole
        # core (of two) that the bookie needs. Sends are due by the schedule
        # above either way: a late send counts in the latency.
        await asyncio.sleep(0.001)
    sending = False
    if outstanding:
        await drained
    if failed:
        raise RuntimeError(f"{failed.total()} adds failed at half load: {dict(failed)}")
    return sent, time.monotonic() - t_start, latencies


STAGES = {
    "queue": "bookie_journal_queue_latency_seconds",
    "write": "bookie_journal_write_latency_seconds",
    "fsync": "bookie_journal_fsync_latency_seconds",
    "callback": "bookie_journal_callback_latency_seconds",
    "add": "bookie_add_entry_latency_seconds",
    "loop_lag": "bookie_event_loop_lag_seconds",
    "full_python_gc": "bookie_python_gc_pause_seconds",
}
#: Label filters of the staged histograms that have other labels.
STAGE_LABELS = {"full_python_gc": 'generation="2",'}


def stage_snapshot(port: int) -> dict[str, dict[float, float]]:
    return {
        stage: scrape_histogram(port, name, STAGE_LABELS.get(stage, ""))
        for stage, name in STAGES.items()
    }


def stage_percentiles(
    before: dict[str, dict[float, float]], after: dict[str, dict[float, float]]
) -> dict[str, dict[str, Any]]:
    return {s: server_percentiles(before[s], after[s]) for s in STAGES}


def p99_by_second(sent_at: list[float], latencies: list[float]) -> list[float]:
    """The p99 of each one-second slice of the window, by send time: a
    checkpoint's stall shows here even when the window's p99 hides it."""
    if not sent_at:
        return []
    t0 = min(sent_at)
    slices: dict[int, list[float]] = {}
    for t, lat in zip(sent_at, latencies, strict=True):
        slices.setdefault(int(t - t0), []).append(lat)
    return [percentiles(slices[k])["p99_ms"] for k in sorted(slices) if len(slices[k]) >= 100]


def with_children(pid: int) -> list[int]:
    """A bookie's process and its children (a journal writer per journal
    directory, dlog.bookie.journal_writer): the bookie's CPU and memory
    are theirs together."""
    pids = [pid]
    for task in Path(f"/proc/{pid}/task").iterdir():
        try:
            pids += [int(c) for c in (task / "children").read_text().split()]
        except FileNotFoundError:
            pass  # a thread (a read-pool worker) that ended meanwhile
    return pids


def cpu_seconds(pid: int) -> float:
    """User plus system CPU time a bookie's processes have used so far."""
    total = 0
    for p in with_children(pid):
        fields = Path(f"/proc/{p}/stat").read_text().rsplit(")", 1)[1].split()
        total += int(fields[11]) + int(fields[12])
    return total / os.sysconf("SC_CLK_TCK")


def rss_mb(pid: int, field: str) -> float:
    """VmRSS (now) or VmHWM (peak) of a bookie's processes together, in MiB
    (peaks are summed: a bound on the peak they reached together)."""
    kib = 0
    for p in with_children(pid):
        lines = Path(f"/proc/{p}/status").read_text().splitlines()
        values = [int(x.split()[1]) for x in lines if x.startswith(field + ":")]
        if not values:
            raise RuntimeError(f"no {field} for pid {p}")
        kib += values[0]
    return round(kib / 1024, 1)


async def run(
    address: str,
    metrics_port: int,
    args: argparse.Namespace,
    half_seconds: float,
    bookie_pid: int,
    flush_interval_s: float,
) -> dict:
    client = BookieClient(address)
    await client.connect()
    tune_runtime()  # the load generator must not be the one pausing for GC
    load = Load(client, args.ledgers)
    await closed_loop(load, args.outstanding, 2.0)  # warm-up

    lat_name = "bookie_add_entry_latency_seconds"
    h0 = scrape_histogram(metrics_port, lat_name)
    fs0, t0 = scrape(metrics_port, "bookie_journal_fsync_latency_seconds_count"), time.monotonic()
    cpu0, mine0 = cpu_seconds(bookie_pid), time.process_time()
    n, elapsed, lat = await closed_loop(load, args.outstanding, args.seconds)
    cpu1, mine1 = cpu_seconds(bookie_pid), time.process_time()
    fsyncs = (scrape(metrics_port, "bookie_journal_fsync_latency_seconds_count") - fs0) / (
        time.monotonic() - t0
    )
    full_rate = n / elapsed
    # Half of this run's own full load, unless --half-rate fixes it (to
    # compare settings across runs: the full-load figure varies by 20%).
    half_rate = args.half_rate or full_rate / 2
    full = {
        "outstanding": args.outstanding,
        "seconds": args.seconds,
        "adds_per_s": round(full_rate),
        "mb_per_s": round(full_rate * ENTRY_SIZE / 1e6, 2),
        **percentiles(lat),
        "journal_fsyncs_per_s": round(fsyncs),
        "adds_per_fsync": round(full_rate / fsyncs, 1) if fsyncs else None,
        # CPU per add, all threads and the journal writers: what throughput
        # hangs on with 2 cores, and steadier than a rate when other work
        # shares the machine.
        "bookie_cpu_us_per_add": round((cpu1 - cpu0) / n * 1e6, 1),
        "client_cpu_us_per_add": round((mine1 - mine0) / n * 1e6, 1),
        **server_percentiles(h0, scrape_histogram(metrics_port, lat_name)),
    }
    # Settle at half load before the window: the full-load phase leaves
    # hundreds of MB in the write cache, and the checkpoints flushing them
    # belong to that phase, not to steady half load. Two checkpoints must
    # complete (the second one started after full load ended), at most
    # 2.5 flushIntervals; the report prints how long it took.
    settle_start = time.monotonic()
    cp_full = scrape(metrics_port, "bookie_checkpoint_latency_seconds_count")
    while (
        scrape(metrics_port, "bookie_checkpoint_latency_seconds_count") < cp_full + 2
        and time.monotonic() - settle_start < 2.5 * flush_interval_s
    ):
        await open_loop(load, half_rate, 1.0)
    settle_seconds = time.monotonic() - settle_start
    stages0 = stage_snapshot(metrics_port)
    cp0 = scrape(metrics_port, "bookie_checkpoint_latency_seconds_count")
    cps0 = scrape(metrics_port, "bookie_checkpoint_latency_seconds_sum")
    fl0 = scrape(metrics_port, "bookie_ledger_storage_flush_latency_seconds_count")
    fs0, t0 = scrape(metrics_port, "bookie_journal_fsync_latency_seconds_count"), time.monotonic()
    sent_at: list[float] = []
    send_lags: list[float] = []
    spans: list[tuple[float, float]] = []
    window_over = asyncio.Event()
    watcher = asyncio.create_task(watch_flushes(metrics_port, window_over, spans))
    mine0 = time.process_time()
    n, elapsed, lat = await open_loop(load, half_rate, half_seconds, sent_at, send_lags)
    mine1 = time.process_time()
    window_over.set()
    await watcher
    fsyncs = (scrape(metrics_port, "bookie_journal_fsync_latency_seconds_count") - fs0) / (
        time.monotonic() - t0
    )
    by_second = p99_by_second(sent_at, lat)
    checkpoints = scrape(metrics_port, "bookie_checkpoint_latency_seconds_count") - cp0
    checkpoint_seconds = scrape(metrics_port, "bookie_checkpoint_latency_seconds_sum") - cps0
    half = {
        "target_adds_per_s": round(half_rate),
        "target_fixed_by_half_rate": bool(args.half_rate),
        "settled_first_s": round(settle_seconds, 1),
        "seconds": half_seconds,
        "adds_per_s": round(n / elapsed),
        "mb_per_s": round(n / elapsed * ENTRY_SIZE / 1e6, 2),
        **percentiles(lat),
        "worst_second_p99_ms": max(by_second, default=0.0),
        "p99_by_second_ms": by_second,
        **split_by_spans(zip(sent_at, lat, strict=True), spans),
        "checkpoints_in_window": round(checkpoints),
        # How long one took (each starts every flushInterval, a fixed rate).
        "checkpoint_mean_s": round(checkpoint_seconds / checkpoints, 2) if checkpoints else None,
        "storage_flushes_in_window": round(
            scrape(metrics_port, "bookie_ledger_storage_flush_latency_seconds_count") - fl0
        ),
        "journal_fsyncs_per_s": round(fsyncs),
        # The load generator's own part: how late it sent (scheduled to
        # sent), and its CPU per add (it shares the machine's cores).
        "client_send_lag": percentiles(send_lags),
        "client_cpu_us_per_add": round((mine1 - mine0) / n * 1e6, 1),
        "server_stages_ms_le": stage_percentiles(stages0, stage_snapshot(metrics_port)),
    }
    await client.close()
    return {"full_load": full, "half_load": half}


#: eventLoopStallDumpThresholdMs of the layouts' bookies.
STALL_DUMP_MS = 100

#: Innermost frames of threads that are only waiting for work.
_IDLE_FRAMES = ("in wait\n", "in select\n", "in get\n", "in _worker\n", "in serve_forever\n")


def _short_frame(frame: str) -> str:
    """'"/x/dlog/bookie/fileio.py", line 68 in pwritev' -> 'bookie/fileio.py:68 pwritev'."""
    m = re.match(r'"(.*)", line (\d+) in (.*)', frame)
    if m is None:
        return frame
    return f"{'/'.join(Path(m[1]).parts[-2:])}:{m[2]} {m[3]}"


def loop_stalls(log_path: Path, threshold_ms: int) -> dict[str, Any]:
    """The stall dumps in a bookie's log: how many, and the innermost frame
    of each thread that was not idle, most frequent first."""
    dumps = log_path.read_text(errors="replace").split(STALL_HEADER)[1:]
    frames: Counter[str] = Counter()
    for dump in dumps:
        innermost = None  # awaiting the first frame of a thread
        for line in dump.splitlines():
            line = line.strip()
            if line.startswith("Thread 0x"):
                innermost = ""
            elif innermost == "" and line.startswith("File "):
                innermost = line.removeprefix("File ")
                if not (innermost + "\n").endswith(_IDLE_FRAMES):
                    frames[_short_frame(innermost)] += 1
    return {
        "threshold_ms": threshold_ms,
        "dumped": len(dumps),
        "busy_innermost_frames": dict(frames.most_common(8)),
    }


def run_layout(
    name: str,
    base: Path,
    ledgers_dir: Path,
    zk_uri: str,
    settings: dict,
    args: argparse.Namespace,
) -> dict:
    metrics_port = free_port()
    bookie = BookieProcess(
        base / f"bookie-{name}",
        zk_uri,
        enableStatistics=True,
        prometheusStatsHttpPort=metrics_port,
        prometheusStatsHttpAddress="127.0.0.1",
        ledgerDirectories=str(ledgers_dir),
        **{"eventLoopStallDumpThresholdMs": STALL_DUMP_MS, **settings},
    ).start()
    try:
        assert bookie.pid is not None
        idle = rss_mb(bookie.pid, "VmRSS")
        half_seconds = args.half_seconds or max(20.0, 2.5 * bookie.conf.flush_interval / 1000)
        result = asyncio.run(
            run(
                bookie.bookie_id,
                metrics_port,
                args,
                half_seconds,
                bookie.pid,
                bookie.conf.flush_interval / 1000,
            )
        )
        peak = rss_mb(bookie.pid, "VmHWM")
    finally:
        bookie.stop()
    # The same half-load rate and window on the journal's disk, without a
    # bookie (one journal record: a 4-byte length and the entry).
    half = result["half_load"]
    device = group_commit_baseline(
        Path(bookie.conf.journal_directories[0]),
        half["target_adds_per_s"],
        half_seconds,
        4 + ENTRY_SIZE,
        bookie.conf.journal_pre_alloc_size_mb * 2**20,
    )
    half["device_bound_group_commit"] = device
    half["p99_vs_device_bound"] = round(half["p99_ms"] / device["p99_ms"], 1)
    half["p999_vs_device_bound"] = round(half["p999_ms"] / device["p999_ms"], 1)
    caches = (bookie.conf.write_cache_bytes + bookie.conf.read_cache_bytes) / 2**20
    stalls = loop_stalls(bookie.log_path, bookie.conf.event_loop_stall_dump_threshold_ms)
    return {
        "journal_device": os.stat(base).st_dev,
        "ledgers_device": os.stat(ledgers_dir).st_dev,
        **result,
        "memory": {
            "rss_idle_mb": idle,
            "rss_peak_mb": peak,
            # default-sized caches are far from full in this window: the
            # bound is checked apart, with caches it fills (memory_bound)
            "write_plus_read_cache_limit_mb": round(caches),
        },
        "loop_stalls": stalls,
        # Everything that differs from a user's default, sandbox tuning included.
        "settings_not_default": effective_settings(bookie.conf, BookieConfig()),
        "journal_settings": journal_settings(bookie.conf),
    }


#: Caches of the memory check: small, so a short run fills them many times over.
MEMORY_CHECK_CACHES_MB = {
    "dbStorage_writeCacheMaxSizeMb": 64,
    "dbStorage_readAheadCacheMaxSizeMb": 32,
}
#: What a bookie may hold beyond its idle size and its caches' limits:
#: request and response buffers, the flushing half's sorted lists, RocksDB.
FIXED_OVERHEAD_MB = 128


async def fill_caches(address: str, args: argparse.Namespace) -> dict:
    """Closed-loop adds for ``args.seconds`` (the write cache fills and is
    flushed many times), then pipelined reads of what was written, from the
    entry logs (the read-ahead cache fills)."""
    client = BookieClient(address)
    await client.connect()
    load = Load(client, args.ledgers)
    n, _, _ = await closed_loop(load, args.outstanding, args.seconds)
    reads = 0
    sem = asyncio.Semaphore(100)
    stop_at = time.monotonic() + args.seconds / 2

    async def read(lid: int, eid: int) -> None:
        nonlocal reads
        try:
            r = await client.read_entry(lid, eid)
            if r.status == 0:
                reads += 1
        finally:
            sem.release()

    tasks = []
    for eid in range(min(load.next_entry)):
        if time.monotonic() >= stop_at:
            break
        for dm in load.digests:
            await sem.acquire()
            tasks.append(asyncio.ensure_future(read(dm.ledger_id, eid)))
    await asyncio.gather(*tasks)
    await client.close()
    return {"adds": n, "reads": reads}


def memory_check(base: Path, zk_uri: str, settings: dict, args: argparse.Namespace) -> dict:
    """Peak RSS of a bookie whose caches are filled many times over, against
    its bound: idle size + write and read cache limits + a fixed overhead."""
    bookie = BookieProcess(
        base / "bookie-memory",
        zk_uri,
        ledgerDirectories=str(base / "ledgers-memory"),
        **{**settings, **MEMORY_CHECK_CACHES_MB},
    ).start()
    try:
        assert bookie.pid is not None
        idle = rss_mb(bookie.pid, "VmRSS")
        work = asyncio.run(fill_caches(bookie.bookie_id, args))
        peak = rss_mb(bookie.pid, "VmHWM")
    finally:
        bookie.stop()
    caches = sum(MEMORY_CHECK_CACHES_MB.values())
    written_mb = work["adds"] * ENTRY_SIZE / 2**20
    return {
        "cache_settings": MEMORY_CHECK_CACHES_MB,
        **work,
        "written_mb": round(written_mb),
        "rss_idle_mb": idle,
        "rss_peak_mb": peak,
        "bound_mb": round(idle + caches + FIXED_OVERHEAD_MB),
        "within_bound": peak <= idle + caches + FIXED_OVERHEAD_MB,
    }


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--seconds", type=float, default=10.0, help="full-load window")
    parser.add_argument(
        "--half-seconds",
        type=float,
        default=0.0,
        help="half-load window (default: room for two checkpoints, at least 20 s)",
    )
    parser.add_argument(
        "--half-rate",
        type=float,
        default=0.0,
        help="half-load rate in adds/s (default: half of the run's own full load)",
    )
    parser.add_argument("--outstanding", type=int, default=1000)
    parser.add_argument("--ledgers", type=int, default=4)
    parser.add_argument(
        "--layouts",
        default="one_disk,separate_devices",
        help="which directory layouts to run (one_disk, separate_devices)",
    )
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
    layouts = [x.strip() for x in args.layouts.split(",") if x.strip()]
    for layout in layouts:
        if layout not in ("one_disk", "separate_devices"):
            raise SystemExit(f"--layouts: unknown layout {layout!r}")
    # The user's defaults for the caches (the sandbox shrinks them for test
    # machines): a checkpoint then flushes everything added since the last.
    settings = {
        "journalSyncData": True,
        "dbStorage_writeCacheMaxSizeMb": 0,
        "dbStorage_readAheadCacheMaxSizeMb": 0,
        **parse_sets(args.set),
    }
    check_bookie_settings(settings, "--set")
    install_event_loop_policy()
    base = args.dir or Path(tempfile.mkdtemp(prefix="dlog-bench-"))
    base.mkdir(parents=True, exist_ok=True)
    shm = Path(tempfile.mkdtemp(prefix="dlog-bench-ledgers-", dir="/dev/shm"))
    baseline = raw_fsync_baseline(base, 2.0)
    results: dict[str, dict] = {}
    try:
        with ZooKeeperServer(base / "zk") as zk:
            uri = f"zk+hierarchical://{zk.connect_string}/ledgers"
            for layout in layouts:
                ledgers = base / "ledgers-one-disk" if layout == "one_disk" else shm / "ledgers"
                results[layout] = run_layout(layout, base, ledgers, uri, settings, args)
            memory = memory_check(base, uri, settings, args)
    finally:
        shutil.rmtree(shm, ignore_errors=True)
        if args.dir is None:
            shutil.rmtree(base, ignore_errors=True)
    main_layout = results[layouts[0]]
    full = main_layout["full_load"]
    report = {
        "benchmark": "bookie_add",
        "entry_size": ENTRY_SIZE,
        "bookie_settings": settings,
        "layouts": results,
        "memory_bound": memory,
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
            "adds_per_s_at_least_50000": full["adds_per_s"] >= 50000,
            "peak_rss_within_caches_plus_fixed_overhead": memory["within_bound"],
            **{
                f"{name}_half_load_p99_at_most_10ms": r["half_load"]["p99_ms"] <= 10.0
                for name, r in results.items()
            },
            **{
                f"{name}_half_load_p999_at_most_25ms": r["half_load"]["p999_ms"] <= 25.0
                for name, r in results.items()
            },
            **{
                f"{name}_two_checkpoints_in_window": r["half_load"]["checkpoints_in_window"] >= 2
                for name, r in results.items()
            },
        },
    }
    json.dump(report, sys.stdout, indent=2)
    print()


if __name__ == "__main__":
    main()
