"""dlog writer throughput and latency: 100-byte records to one stream,
replicated E=3 W=2 A=2 on three local bookie processes, with a tailing
reader in the same process.

Starts a real ZooKeeper and three real bookie processes (dlog.sandbox).
One writer keeps ``--in-flight`` records outstanding for ``--seconds``
after a warm-up; each record's write latency runs from ``write_nowait`` to
its DLSN. Every payload starts with the send time (``time.monotonic_ns``,
8 bytes big-endian); a reader tailing the stream in the same process
measures writer-to-reader latency when the record reaches the application.

In the same run, on the same bookies and client, the baseline: pipelined
1 KiB ledger appends (dlog.ledger.client.BookKeeper, E3 W2 A2, as
bench/ledger_throughput.py measures them) for ``--ledger-seconds``.

Prints one JSON document: records/s, MB/s, write and end-to-end latency
percentiles, the entries the writer made, the baseline's entries/s, the
ratios, and the settings used.

    python bench/dlog_write.py [--seconds 10] [--in-flight 10000] [--set key=value]
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import contextvars
import json
import os
import struct
import sys
import time
from typing import Any

from common import (
    BENCH_BOOKIE_SETTINGS,
    add_cluster_args,
    check_cluster_args,
    dlog_config,
    effective_settings,
    local_cluster,
    parse_sets,
    percentiles,
    reported_dlog_settings,
)
from ledger_throughput import closed_loop

from dlog.bookie.main import install_event_loop_policy, tune_runtime
from dlog.conf.bookie import BookieConfig
from dlog.conf.dlog import DLogConfig
from dlog.errors import BKError, DLogError
from dlog.ledger.metadata import DigestType
from dlog.log import LogManager
from dlog.namespace import Namespace
from dlog.reader import LogReader
from dlog.record import RECORD_HEADER_SIZE, LogRecord
from dlog.writer import LogWriter

RECORD_SIZE = 100
LEDGER_ENTRY_SIZE = 1024
STREAM = "bench"
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


def ms(samples_ns: list[int]) -> dict[str, float]:
    return percentiles([s / 1e9 for s in samples_ns])


class Tail:
    """A reader tailing the stream: checks order, and measures the
    writer-to-reader latency of records with txid >= ``measure_from``."""

    def __init__(self, reader: LogReader) -> None:
        self.reader = reader
        self.measure_from: int | None = None
        self.next_txid = 0
        self.latencies: list[int] = []
        self.entries: set[tuple[int, int]] = set()
        self.errors: list[str] = []
        self.read_in_window = 0
        self.wanted: int | None = None
        self.caught_up = asyncio.Event()
        self.task = asyncio.get_running_loop().create_task(self._run())

    async def _run(self) -> None:
        now = time.monotonic_ns
        unpack = _STAMP.unpack_from
        try:
            while True:
                batch = await self.reader.read_bulk(10_000, timeout=1.0)
                if not batch:
                    continue
                t = now()
                first = batch[0].txid
                if first != self.next_txid or batch[-1].txid != first + len(batch) - 1:
                    self.errors.append(f"out of order at txid {first}, expected {self.next_txid}")
                    return
                self.next_txid = batch[-1].txid + 1
                start = self.measure_from
                if start is not None and batch[-1].txid >= start:
                    lat = self.latencies
                    entries = self.entries
                    for r in batch:
                        if r.txid >= start:
                            lat.append(t - unpack(r.payload)[0])
                            entries.add((r.dlsn[0], r.dlsn[1]))
                    self.read_in_window = len(lat)
                if self.wanted is not None and self.next_txid >= self.wanted:
                    self.caught_up.set()
        except asyncio.CancelledError:
            raise
        except Exception as e:
            self.errors.append(repr(e))


async def write_window(
    writer: LogWriter, first_txid: int, in_flight: int, seconds: float
) -> dict[str, Any]:
    """Keep ``in_flight`` records outstanding for ``seconds``; per-record
    latency from write_nowait to its DLSN."""
    loop = asyncio.get_running_loop()
    now = time.monotonic_ns
    pad = os.urandom(RECORD_SIZE - _STAMP.size)
    pack = _STAMP.pack
    latencies: list[int] = []
    errors: list[str] = []
    room = asyncio.Event()
    drained = loop.create_future()
    outstanding = 0
    stopping = False

    def on_done(fut: asyncio.Future[Any], t0: int) -> None:
        nonlocal outstanding
        outstanding -= 1
        if fut.exception() is not None:
            if len(errors) < 5:
                errors.append(repr(fut.exception()))
        else:
            latencies.append(now() - t0)
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
        try:
            fut = writer.write_nowait(LogRecord(txid, pack(t0) + pad))
        except DLogError as e:
            errors.append(repr(e))
            break
        txid += 1
        outstanding += 1
        fut.add_done_callback(lambda f, t0=t0: on_done(f, t0), context=ctx)
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
        "next_txid": txid,
        "errors": errors,
    }


async def measured_window(
    writer: LogWriter, tail: Tail | None, first_txid: int, in_flight: int, seconds: float
) -> tuple[dict[str, Any], int]:
    """One measured write window (and the tailing reader's view of it);
    returns (result, next txid)."""
    if tail is not None:
        tail.measure_from = first_txid
        tail.latencies = []
        tail.entries = set()
        tail.read_in_window = 0
        tail.wanted = None
        tail.caught_up.clear()
    t0 = time.perf_counter()
    result = await write_window(writer, first_txid, in_flight, seconds)
    next_txid = result.pop("next_txid")
    result["in_flight"] = in_flight
    if tail is None:
        return {"write": result}, next_txid
    tail.wanted = next_txid
    try:
        await asyncio.wait_for(tail.caught_up.wait(), 30)
    except TimeoutError:
        tail.errors.append(f"reader stuck at txid {tail.next_txid} of {tail.wanted}")
    read_s = time.perf_counter() - t0
    entries = len(tail.entries)
    records_per_entry = result["records"] / entries if entries else 0.0
    result["entries"] = entries
    result["records_per_entry"] = round(records_per_entry, 1)
    result["avg_entry_bytes"] = round(13 + records_per_entry * (RECORD_HEADER_SIZE + RECORD_SIZE))
    end_to_end = {
        "records": len(tail.latencies),
        **ms(tail.latencies),
        "reader_records_per_s": round(tail.read_in_window / read_s) if read_s else 0,
        "errors": list(tail.errors),
    }
    return {"write": result, "end_to_end": end_to_end}, next_txid


async def dlog_phase(log: LogManager, args: argparse.Namespace) -> dict[str, Any]:
    """Full load (``--in-flight`` records outstanding: throughput, latency
    mostly queueing) then a moderate load (``--moderate-in-flight``)."""
    writer = await log.open_writer()
    reader = None if args.no_reader else await log.open_reader()
    tail = Tail(reader) if reader is not None else None
    try:
        warm = await write_window(writer, 0, args.in_flight, args.warmup)
        if warm["errors"]:
            return {"error": f"warm-up failed: {warm['errors']}"}
        full, next_txid = await measured_window(
            writer, tail, warm["next_txid"], args.in_flight, args.seconds
        )
        moderate, _ = await measured_window(
            writer, tail, next_txid, args.moderate_in_flight, max(2.0, args.seconds / 2)
        )
        full["write"]["segments_written"] = writer.segments_written
        return {**full, "moderate_load": moderate}
    finally:
        if tail is not None:
            tail.task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await tail.task
            await tail.reader.close()
        with contextlib.suppress(DLogError):
            await writer.close()


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


async def run(uri: str, conf: DLogConfig, args: argparse.Namespace) -> dict[str, Any]:
    async with await Namespace.open(uri, conf, bind=True) as ns:
        tune_runtime()  # the load generator must not be the one pausing for GC
        if len(await ns.bk.watcher.wait_for(args.bookies, 30)) < args.bookies:
            raise RuntimeError(f"only {len(ns.bk.writable_bookies())} bookies registered")
        log = await ns.open_log(STREAM)
        dlog = await dlog_phase(log, args)
        ledger = await ledger_phase(ns, args)
    return {"dlog": dlog, "ledger": ledger}


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--seconds", type=float, default=10.0)
    parser.add_argument("--warmup", type=float, default=2.0, help="seconds before measuring")
    parser.add_argument("--in-flight", type=int, default=10_000, help="records outstanding")
    parser.add_argument(
        "--moderate-in-flight", type=int, default=1_000, help="records outstanding, second window"
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
    settings: dict[str, Any] = {**BENCH_BOOKIE_SETTINGS, **parse_sets(args.bookie_set)}
    dlog_config("zk+hierarchical://127.0.0.1:2181/ledgers", args)  # bad --set fails early
    install_event_loop_policy()
    with local_cluster(args.bookies, settings, args.dir, "dlog-bench-write-") as (
        zk,
        bookies,
        ledgers_uri,
    ):
        conf = dlog_config(ledgers_uri, args)
        uri = f"distributedlog://{zk.connect_string}/bench"
        result = asyncio.run(run(uri, conf, args))

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
        "seconds": args.seconds,
        "warmup_seconds": args.warmup,
        "cpus": os.cpu_count(),
        "dlog": dl,
        "ledger_baseline": ledger,
        "ratios": ratios,
        "dlog_settings": reported_dlog_settings(conf, _REPORTED_KEYS),
        "bookie_settings": {
            "journalSyncData": bookies[0].conf.to_properties()["journalSyncData"],
            **effective_settings(bookies[0].conf, BookieConfig()),
        },
    }
    json.dump(report, sys.stdout, indent=2)
    print()
    failed = (
        "error" in dl
        or "error" in ledger
        or write.get("errors")
        or dl.get("end_to_end", {}).get("errors")
        or ledger.get("errors")
    )
    if failed:
        raise SystemExit(1)


if __name__ == "__main__":
    main()
