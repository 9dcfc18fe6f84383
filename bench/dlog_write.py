"""dlog writer throughput and latency: 100-byte records to one stream,
replicated E=3 W=2 A=2 on three local bookie processes, with a tailing
reader in a process of its own (bench/tail_reader.py), as consumers are.

Starts a real ZooKeeper and three real bookie processes (dlog.sandbox).
Three modes, each on its own stream with its settings printed:

* **Throughput** (the user's defaults): one writer keeps ``--in-flight``
  records outstanding for ``--seconds`` after a warm-up, in bulk writes of
  ``--bulk`` records (``write_bulk_nowait``: one future per bulk); then a
  moderate load, ``--moderate-in-flight`` records outstanding, in steady
  state: it first runs until every bookie has completed two checkpoints
  (flushing what full load left in its write cache), and its window holds
  two checkpoints of its own (``--moderate-seconds``, default 2.5
  flushIntervals), counted per bookie from the bookies' metrics; then
  ``--single-seconds`` of one ``write_nowait`` per record (a future each).
* **Light load** (``writerOutputBufferSize=0``, ``enableImmediateFlush=true``:
  every record sent at once, its LAC published as soon as it completes):
  ``--light-rate`` records a second, open loop, for ``--light-seconds``,
  in steady state: it first runs until every bookie has completed two
  checkpoints (flushing what the heavier loads left in its write cache), as
  the moderate load does, and reports the checkpoints its window held;
  beside it, the same rate of bare 1 KiB write+fdatasync on the bookies'
  disk in the same window (bench/fsync_probe.py), since no record can be
  durable sooner than the disk syncs it.

A record's write latency runs from the call that wrote it to its DLSN.
Every payload starts with the send time (``time.monotonic_ns``, 8 bytes
big-endian; the clock is the machine's, shared by every process); a
reader tailing the stream in another process measures writer-to-reader
latency when the record reaches its application, and the p99 of each
second of the window (the reader falling behind, or a checkpoint's stall,
shows there). In the moderate and light windows, the bookies' flush
histograms are read every 0.5 s, and the end-to-end percentiles are also
given for the records sent while any bookie flushed and for the others
(``end_to_end.by_flush``): how much of the tail the flushes make.

In the same run, on the same bookies and client, the baseline: pipelined
1 KiB ledger appends (dlog.ledger.client.BookKeeper, E3 W2 A2, as
bench/ledger_throughput.py measures them) for ``--ledger-seconds``.

Prints one JSON document: records/s, MB/s, write and end-to-end latency
percentiles, the entries the writer made, the baseline's entries/s, the
ratios, and the settings used.

    python bench/dlog_write.py [--seconds 10] [--in-flight 10000] [--bulk 100] [--set key=value]
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import contextvars
import functools
import json
import os
import struct
import sys
import tempfile
import time
from collections.abc import Awaitable, Callable, Iterable, Sequence
from pathlib import Path
from typing import Any

from common import (
    BENCH_BOOKIE_SETTINGS,
    add_cluster_args,
    check_cluster_args,
    dlog_config,
    effective_settings,
    latency_log,
    local_cluster,
    parse_sets,
    percentiles,
    reported_dlog_settings,
    scrape,
    watch_flushes,
)
from ledger_throughput import closed_loop

from dlog.bookie.main import install_event_loop_policy, tune_runtime
from dlog.conf.bookie import BookieConfig
from dlog.conf.dlog import DLogConfig
from dlog.errors import BKError, DLogError
from dlog.ledger.metadata import DigestType
from dlog.log import LogManager
from dlog.namespace import Namespace
from dlog.record import RECORD_HEADER_SIZE, LogRecord
from dlog.writer import LogWriter

RECORD_SIZE = 100
LEDGER_ENTRY_SIZE = 1024
STREAM = "bench"
LIGHT_STREAM = "bench-light"
#: The light-load mode's settings: each record is sent at once and its LAC
#: published as soon as its entry completes (DistributedLog's pairing for
#: the lowest latency).
LIGHT_SETTINGS = {"writerOutputBufferSize": "0", "enableImmediateFlush": "true"}
_STAMP = struct.Struct(">q")
#: Writer and reader settings always reported, whether defaults or not.
_REPORTED_KEYS = (
    "writerOutputBufferSize",
    "periodicFlushFrequencyMilliSeconds",
    "enableImmediateFlush",
    "compressionType",
    "maxLogSegmentBytes",
    "logSegmentRollingMinutes",
    "bkDigestType",
    "readAheadBatchSize",
    "readAheadMaxRecords",
    "readLACLongPollTimeout",
    "bkcEnsembleSize",
    "bkcWriteQuorumSize",
    "bkcAckQuorumSize",
)


def ms(samples_ns: Iterable[int]) -> dict[str, float]:
    return percentiles([s / 1e9 for s in samples_ns])


class Tail:
    """A reader tailing the stream in its own process (bench/tail_reader.py):
    checks order, and measures the writer-to-reader latency of each window."""

    def __init__(self, proc: asyncio.subprocess.Process, conf_file: Path) -> None:
        self.proc = proc
        self.conf_file = conf_file

    @classmethod
    async def start(cls, uri: str, conf: DLogConfig, stream: str) -> Tail:
        fd, name = tempfile.mkstemp(prefix="dlog-bench-tail-", suffix=".conf")
        with os.fdopen(fd, "w") as f:
            f.write(conf.dumps())
        proc = await asyncio.create_subprocess_exec(
            sys.executable,
            str(Path(__file__).with_name("tail_reader.py")),
            uri,
            name,
            stream,
            stdin=asyncio.subprocess.PIPE,
            stdout=asyncio.subprocess.PIPE,
        )
        tail = cls(proc, Path(name))
        line = await tail._line(60)
        if line != "ready":
            await tail.close()
            raise RuntimeError(f"the tailing reader did not start: {line!r}")
        return tail

    async def _line(self, timeout: float) -> str:
        assert self.proc.stdout is not None
        return (await asyncio.wait_for(self.proc.stdout.readline(), timeout)).decode().strip()

    async def _send(self, command: str) -> None:
        assert self.proc.stdin is not None
        self.proc.stdin.write(f"{command}\n".encode())
        await self.proc.stdin.drain()

    async def measure(self, first_txid: int) -> None:
        """Measure records from ``first_txid`` on."""
        await self._send(f"measure {first_txid}")

    async def until(self, next_txid: int) -> dict[str, Any]:
        """The window's end-to-end figures, once every record before
        ``next_txid`` was read (the reader gives up after 30 s)."""
        await self._send(f"until {next_txid}")
        line = await self._line(60)
        if not line:
            return {"records": 0, "errors": [f"the tailing reader exited ({self.proc.returncode})"]}
        result: dict[str, Any] = json.loads(line)
        return result

    async def by_flush(self, spans: list[tuple[float, float]]) -> dict[str, Any]:
        """The last window's records split by whether they were sent while
        a bookie flushed (during one of ``spans``)."""
        await self._send(f"split {json.dumps(spans)}")
        line = await self._line(120)
        result: dict[str, Any] = json.loads(line) if line else {"error": "no answer"}
        return result

    async def close(self) -> None:
        with contextlib.suppress(ConnectionError):
            await self._send("quit")
        try:
            await asyncio.wait_for(self.proc.wait(), 30)
        except TimeoutError:
            self.proc.kill()
            await self.proc.wait()
        self.conf_file.unlink(missing_ok=True)


async def write_window(
    writer: LogWriter, first_txid: int, in_flight: int, seconds: float, bulk: int = 1
) -> dict[str, Any]:
    """Keep ``in_flight`` records outstanding for ``seconds``, written one
    by one (``bulk`` 1: write_nowait) or ``bulk`` at a time
    (write_bulk_nowait); per-record latency from the call to its DLSN."""
    loop = asyncio.get_running_loop()
    now = time.monotonic_ns
    pad = os.urandom(RECORD_SIZE - _STAMP.size)
    pack = _STAMP.pack
    latencies = latency_log()
    errors: list[str] = []
    room = asyncio.Event()
    drained = loop.create_future()
    outstanding = 0
    stopping = False

    def on_done(fut: asyncio.Future[Any], t0: int, n: int) -> None:
        nonlocal outstanding
        outstanding -= n
        if fut.exception() is not None:
            if len(errors) < 5:
                errors.append(repr(fut.exception()))
        else:
            lat = now() - t0
            if n == 1:
                latencies.append(lat)
            else:
                latencies.extend([lat] * n)
        if outstanding < in_flight:
            room.set()
        if stopping and outstanding == 0 and not drained.done():
            drained.set_result(None)

    # One context for every callback: add_done_callback otherwise copies the
    # current context per call (about 0.5 us here).
    ctx = contextvars.copy_context()
    txid = first_txid
    cpu0 = time.process_time()
    t_start = time.perf_counter()
    stop_at = t_start + seconds
    perf = time.perf_counter
    while not errors and perf() < stop_at:
        if outstanding >= in_flight:
            room.clear()
            await room.wait()
            continue
        t0 = now()
        stamp = pack(t0) + pad
        fut: asyncio.Future[Any]
        try:
            if bulk == 1:
                fut = writer.write_nowait(LogRecord(txid, stamp))
            else:
                fut = writer.write_bulk_nowait(
                    [LogRecord(t, stamp) for t in range(txid, txid + bulk)]
                )
        except DLogError as e:
            errors.append(repr(e))
            break
        txid += bulk
        outstanding += bulk
        fut.add_done_callback(functools.partial(on_done, t0=t0, n=bulk), context=ctx)
    stopping = True
    if outstanding:
        await drained
    elapsed = time.perf_counter() - t_start
    cpu = time.process_time() - cpu0
    rate = len(latencies) / elapsed if elapsed else 0.0
    return {
        "records": len(latencies),
        "seconds": round(elapsed, 3),
        "records_per_s": round(rate),
        "mb_per_s": round(rate * RECORD_SIZE / 1e6, 2),
        "write_latency": ms(latencies),
        "client_cpu_percent": round(100 * cpu / elapsed) if elapsed else 0,
        "client_cpu_us_per_record": round(1e6 * cpu / len(latencies), 2) if latencies else 0,
        "next_txid": txid,
        "errors": errors,
    }


async def open_loop_window(
    writer: LogWriter, first_txid: int, rate: float, seconds: float
) -> dict[str, Any]:
    """One write_nowait every 1/``rate`` s for ``seconds`` (open loop: on a
    fixed schedule, whatever the latency); per-record latency to its DLSN."""
    loop = asyncio.get_running_loop()
    now = time.monotonic_ns
    pad = os.urandom(RECORD_SIZE - _STAMP.size)
    latencies = latency_log()
    errors: list[str] = []
    pending: set[asyncio.Future[Any]] = set()

    def on_done(fut: asyncio.Future[Any], t0: int) -> None:
        pending.discard(fut)
        if fut.exception() is not None:
            if len(errors) < 5:
                errors.append(repr(fut.exception()))
        else:
            latencies.append(now() - t0)

    txid = first_txid
    interval = 1.0 / rate
    start = loop.time()
    count = max(1, round(rate * seconds))
    for i in range(count):
        delay = start + i * interval - loop.time()
        if delay > 0:
            await asyncio.sleep(delay)
        if errors:
            break
        t0 = now()
        try:
            fut = writer.write_nowait(LogRecord(txid, _STAMP.pack(t0) + pad))
        except DLogError as e:
            errors.append(repr(e))
            break
        txid += 1
        pending.add(fut)
        fut.add_done_callback(functools.partial(on_done, t0=t0))
    if pending:
        await asyncio.wait(pending, timeout=30)
    elapsed = loop.time() - start
    return {
        "records": len(latencies),
        "seconds": round(elapsed, 3),
        "rate_per_s": rate,
        "write_latency": ms(latencies),
        "next_txid": txid,
        "errors": errors,
    }


async def measured_window(
    writer: LogWriter,
    tail: Tail | None,
    first_txid: int,
    window: Any,
    what: dict[str, Any],
    flush_ports: Sequence[int] = (),
) -> tuple[dict[str, Any], int]:
    """One measured write window (the coroutine function ``window`` given
    the first txid) and the tailing reader's view of it; returns (result,
    next txid). ``what`` describes the load, into the result. With
    ``flush_ports`` (bookies' metrics ports), the end-to-end figures are
    also split by whether a record was sent while any of them flushed."""
    if tail is not None:
        await tail.measure(first_txid)
    entries_before = writer.entries_written
    spans: list[tuple[float, float]] = []
    window_over = asyncio.Event()
    watchers = [asyncio.create_task(watch_flushes(p, window_over, spans)) for p in flush_ports]
    try:
        result = await window(first_txid)
    finally:
        window_over.set()
    next_txid = result.pop("next_txid")
    result.update(what)
    entries = writer.entries_written - entries_before
    records_per_entry = result["records"] / entries if entries else 0.0
    result["entries"] = entries
    result["records_per_entry"] = round(records_per_entry, 1)
    result["avg_entry_bytes"] = round(13 + records_per_entry * (RECORD_HEADER_SIZE + RECORD_SIZE))
    if tail is None:
        await asyncio.gather(*watchers)
        return {"write": result}, next_txid
    end_to_end, *_ = await asyncio.gather(tail.until(next_txid), *watchers)
    if watchers:
        spans.sort()
        end_to_end["by_flush"] = await tail.by_flush(spans)
    return {"write": result, "end_to_end": end_to_end}, next_txid


async def closed_loop_window(
    writer: LogWriter,
    tail: Tail | None,
    first_txid: int,
    in_flight: int,
    seconds: float,
    bulk: int,
    flush_ports: Sequence[int] = (),
) -> tuple[dict[str, Any], int]:
    return await measured_window(
        writer,
        tail,
        first_txid,
        lambda txid: write_window(writer, txid, in_flight, seconds, bulk),
        {"in_flight": in_flight, "bulk_records": bulk},
        flush_ports,
    )


async def open_tail(log: LogManager, args: argparse.Namespace) -> Tail | None:
    if args.no_reader:
        return None
    return await Tail.start(args.uri, log.conf, log.name)


async def close_all(writer: LogWriter, tail: Tail | None) -> None:
    if tail is not None:
        await tail.close()
    with contextlib.suppress(DLogError):
        await writer.close()


async def checkpoints(args: argparse.Namespace) -> list[float]:
    """How many checkpoints each bookie has completed (from its metrics,
    scraped off the loop so the writer keeps going)."""
    return [
        await asyncio.to_thread(scrape, port, "bookie_checkpoint_latency_seconds_count")
        for port in args.bookie_metrics_ports
    ]


async def settle(
    args: argparse.Namespace, txid: int, second: Callable[[int], Awaitable[dict[str, Any]]]
) -> tuple[dict[str, Any], list[float]]:
    """Run ``second`` (one second of a phase's load from txid) until every
    bookie has completed two checkpoints, the second started after the
    previous load ended, for at most 2.5 flushIntervals: what a heavier load
    left in the write caches is then flushed before the window, whose
    checkpoints are the phase's own. Returns what to report (how long it took,
    whether the cap came first, the next txid or an error) and the bookies'
    checkpoint counts at the end."""
    start = time.monotonic()
    cp0 = await checkpoints(args)
    done = [c + 2 for c in cp0]

    def settled() -> bool:
        return all(c >= d for c, d in zip(cp0, done, strict=True))

    while not settled() and time.monotonic() - start < 2.5 * args.flush_interval_s:
        result = await second(txid)
        if result["errors"]:
            return {"error": result["errors"]}, cp0
        txid = result["next_txid"]
        cp0 = await checkpoints(args)
    return {
        "next_txid": txid,
        "settled_first_s": round(time.monotonic() - start, 1),
        # False: the cap came first, and the window may still hold the
        # flushing of what the heavier load left behind.
        "settled_two_checkpoints_first": settled(),
    }, cp0


async def dlog_phase(log: LogManager, args: argparse.Namespace) -> dict[str, Any]:
    """Full load (``--in-flight`` records outstanding: throughput, latency
    mostly queueing), a moderate load (``--moderate-in-flight``), then
    single-record writes at full load."""
    writer = await log.open_writer()
    tail = await open_tail(log, args)
    try:
        warm = await write_window(writer, 0, args.in_flight, args.warmup, args.bulk)
        if warm["errors"]:
            return {"error": f"warm-up failed: {warm['errors']}"}
        full, txid = await closed_loop_window(
            writer, tail, warm["next_txid"], args.in_flight, args.seconds, args.bulk
        )
        # Settle at the moderate load first: the full-load window leaves
        # hundreds of MB in each bookie's write cache, and the checkpoints
        # flushing them belong to that window, not to a steady moderate
        # load. Then the window holds the moderate load's own checkpoints
        # (2.5 flushIntervals: two of each bookie's), and the report prints
        # how long settling took and how many checkpoints the window held.
        settled, cp0 = await settle(
            args,
            txid,
            lambda t: write_window(writer, t, args.moderate_in_flight, 1.0, args.bulk),
        )
        if "error" in settled:
            return {"error": f"settling at moderate load failed: {settled['error']}"}
        txid = settled.pop("next_txid")
        moderate, txid = await closed_loop_window(
            writer,
            tail,
            txid,
            args.moderate_in_flight,
            args.moderate_seconds or max(args.seconds / 2, 2.5 * args.flush_interval_s),
            args.bulk,
            args.bookie_metrics_ports,
        )
        moderate.update(settled)
        moderate["checkpoints_in_window_per_bookie"] = [
            round(b - a) for a, b in zip(cp0, await checkpoints(args), strict=True)
        ]
        out = {**full, "moderate_load": moderate}
        if args.single_seconds > 0:
            out["single_record_writes"], txid = await closed_loop_window(
                writer, tail, txid, args.in_flight, args.single_seconds, 1
            )
        full["write"]["segments_written"] = writer.segments_written
        return out
    finally:
        await close_all(writer, tail)


async def light_phase(log: LogManager, args: argparse.Namespace) -> dict[str, Any]:
    """Open loop at ``--light-rate`` records a second, one record at a time."""
    writer = await log.open_writer()
    tail = await open_tail(log, args)
    try:
        warm = await open_loop_window(writer, 0, args.light_rate, 1.0)
        if warm["errors"]:
            return {"error": f"warm-up failed: {warm['errors']}"}
        # The loads before this one left their entries in the bookies' write
        # caches: their checkpoints are flushed first, at the light rate.
        settled, cp0 = await settle(
            args, warm["next_txid"], lambda t: open_loop_window(writer, t, args.light_rate, 1.0)
        )
        if "error" in settled:
            return {"error": f"settling at light load failed: {settled['error']}"}
        txid = settled.pop("next_txid")
        probe = await asyncio.create_subprocess_exec(
            sys.executable,
            str(Path(__file__).with_name("fsync_probe.py")),
            str(args.probe_dir),
            str(args.light_rate),
            str(args.light_seconds),
            stdout=asyncio.subprocess.PIPE,
        )
        result, _ = await measured_window(
            writer,
            tail,
            txid,
            lambda t: open_loop_window(writer, t, args.light_rate, args.light_seconds),
            {},
            args.bookie_metrics_ports,
        )
        result.update(settled)
        result["checkpoints_in_window_per_bookie"] = [
            round(b - a) for a, b in zip(cp0, await checkpoints(args), strict=True)
        ]
        out, _ = await probe.communicate()
        # The disk meanwhile, alone: when it stalls, every record in flight waits.
        result["device_fdatasync_same_window"] = json.loads(out) if out else {"error": "no output"}
        return result
    finally:
        await close_all(writer, tail)


async def ledger_phase(ns: Namespace, args: argparse.Namespace) -> dict[str, Any]:
    """The baseline: pipelined 1 KiB ledger appends, same client, same bookies."""
    payload = os.urandom(LEDGER_ENTRY_SIZE)
    handle = await ns.bk.create_ledger(
        args.ensemble, args.write_quorum, args.ack_quorum, DigestType.CRC32C, b"bench"
    )
    try:
        warm = await closed_loop([handle], payload, args.ledger_outstanding, 1.0)
        if warm["errors"]:
            return {"error": f"warm-up failed: {warm['errors']}"}
        result = await closed_loop([handle], payload, args.ledger_outstanding, args.ledger_seconds)
    finally:
        with contextlib.suppress(BKError):
            await handle.close()
    result["entry_size"] = LEDGER_ENTRY_SIZE
    result["outstanding"] = args.ledger_outstanding
    return result


async def run(
    uri: str, conf: DLogConfig, light_conf: DLogConfig, args: argparse.Namespace
) -> dict[str, Any]:
    async with await Namespace.open(uri, conf, bind=True) as ns:
        tune_runtime()  # the load generator must not be the one pausing for GC
        if len(await ns.bk.watcher.wait_for(args.bookies, 30)) < args.bookies:
            raise RuntimeError(f"only {len(ns.bk.writable_bookies())} bookies registered")
        log = await ns.open_log(STREAM)
        dlog = await dlog_phase(log, args)
        if args.light_seconds > 0:
            async with await Namespace.open(uri, light_conf) as light_ns:
                light_log = await light_ns.open_log(LIGHT_STREAM)
                dlog["light_load"] = await light_phase(light_log, args)
        ledger = await ledger_phase(ns, args)
    return {"dlog": dlog, "ledger": ledger}


def light_config(ledgers_uri: str, args: argparse.Namespace) -> DLogConfig:
    """The light-load mode's config: ``--set`` with LIGHT_SETTINGS on top."""
    light = [f"{k}={v}" for k, v in LIGHT_SETTINGS.items()]
    return dlog_config(ledgers_uri, argparse.Namespace(**{**vars(args), "set": args.set + light}))


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--seconds", type=float, default=10.0)
    parser.add_argument("--warmup", type=float, default=2.0, help="seconds before measuring")
    parser.add_argument("--in-flight", type=int, default=10_000, help="records outstanding")
    parser.add_argument(
        "--bulk", type=int, default=100, help="records per write_bulk_nowait (1: write_nowait)"
    )
    parser.add_argument(
        "--single-seconds",
        type=float,
        default=3.0,
        help="full load written one record per write_nowait, after the moderate load (0: skip)",
    )
    parser.add_argument(
        "--light-rate", type=float, default=100.0, help="light load: records a second, open loop"
    )
    parser.add_argument(
        "--light-seconds", type=float, default=10.0, help="light load duration (0: skip)"
    )
    parser.add_argument(
        "--moderate-in-flight", type=int, default=1_000, help="records outstanding, second window"
    )
    parser.add_argument(
        "--moderate-seconds",
        type=float,
        default=0.0,
        help="moderate-load window (default: room for two checkpoints, at least --seconds/2)",
    )
    parser.add_argument("--ledger-seconds", type=float, default=5.0, help="baseline duration")
    parser.add_argument(
        "--ledger-outstanding", type=int, default=1000, help="baseline appends in flight"
    )
    parser.add_argument("--no-reader", action="store_true", help="no tailing reader (writer alone)")
    add_cluster_args(parser)
    parser.add_argument(
        "--set", action="append", default=[], help="DLogConfig setting key=value (repeatable)"
    )
    parser.add_argument(
        "--bookie-set", action="append", default=[], help="bookie setting key=value (repeatable)"
    )
    args = parser.parse_args()
    check_cluster_args(args)
    if args.bulk < 1 or args.light_rate <= 0:
        raise SystemExit("--bulk must be at least 1 and --light-rate positive")
    settings: dict[str, Any] = {**BENCH_BOOKIE_SETTINGS, **parse_sets(args.bookie_set)}
    dlog_config("zk+hierarchical://127.0.0.1:2181/ledgers", args)  # bad --set fails early
    install_event_loop_policy()
    with local_cluster(args.bookies, settings, args.dir, "dlog-bench-write-", metrics=True) as (
        zk,
        bookies,
        ledgers_uri,
    ):
        args.bookie_metrics_ports = [b.conf.prometheus_stats_http_port for b in bookies]
        args.flush_interval_s = bookies[0].conf.flush_interval / 1000
        conf = dlog_config(ledgers_uri, args)
        light_conf = light_config(ledgers_uri, args)
        uri = args.uri = f"distributedlog://{zk.connect_string}/bench"
        args.probe_dir = bookies[0].base_dir.parent  # the bookies' disk
        result = asyncio.run(run(uri, conf, light_conf, args))

    dl, ledger = result["dlog"], result["ledger"]
    write = dl.get("write", {})
    ratios: dict[str, float | None] = {"records_per_s_vs_ledger_entries_per_s": None}
    if write.get("records_per_s") and ledger.get("entries_per_s"):
        ratios["records_per_s_vs_ledger_entries_per_s"] = round(
            write["records_per_s"] / ledger["entries_per_s"], 3
        )
        ratios["payload_bytes_per_s_vs_ledger_bytes_per_s"] = round(
            write["records_per_s"] * RECORD_SIZE / (ledger["entries_per_s"] * LEDGER_ENTRY_SIZE),
            3,
        )
    report = {
        "benchmark": "dlog_write",
        "record_size": RECORD_SIZE,
        "streams": 1,
        "bookies": args.bookies,
        "ensemble": args.ensemble,
        "write_quorum": args.write_quorum,
        "ack_quorum": args.ack_quorum,
        "in_flight": args.in_flight,
        "bulk_records": args.bulk,
        "light_rate_per_s": args.light_rate,
        "seconds": args.seconds,
        "warmup_seconds": args.warmup,
        "cpus": os.cpu_count(),
        "dlog": dl,
        "ledger_baseline": ledger,
        "ratios": ratios,
        "dlog_settings": reported_dlog_settings(conf, _REPORTED_KEYS),
        "light_load_dlog_settings": reported_dlog_settings(light_conf, _REPORTED_KEYS),
        "bookie_settings": {
            "journalSyncData": bookies[0].conf.to_properties()["journalSyncData"],
            **effective_settings(bookies[0].conf, BookieConfig()),
        },
    }
    json.dump(report, sys.stdout, indent=2)
    print()
    windows = [dl, dl.get("moderate_load", {}), dl.get("single_record_writes", {})]
    windows.append(dl.get("light_load", {}))
    failed = (
        any("error" in w or w.get("write", {}).get("errors") for w in windows)
        or any(w.get("end_to_end", {}).get("errors") for w in windows)
        or "error" in ledger
        or ledger.get("errors")
    )
    if failed:
        raise SystemExit(1)


if __name__ == "__main__":
    main()
