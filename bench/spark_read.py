"""Spark batch read of a dlog stream against dlog's plain Python reader.

Starts a sandbox (a real ZooKeeper and three real bookie processes,
dlog.sandbox) and writes ``--records`` (1,000,000) records of 100 bytes to
one stream with the asyncio writer (pipelined, ``--in-flight`` records
outstanding; default replication, see ``dlog_settings`` in the report).
Then, in the same run, on the same data:

* Spark: a local session (``--master``, default ``local[2]``) reads the
  stream with the ``dlog`` source and computes ``count(*)`` and
  ``sum(length(payload))``, which forces every payload through Spark.
  Executors (Python workers) read the entries from the bookies; the driver
  plans from metadata. The query runs ``--spark-runs`` times: the first
  includes starting the Python workers, the best of the others is the
  steady state reported as ``rows_per_s``. Session start is timed apart.
* Baseline: dlog's plain Python reader (``LogManager.open_reader`` and
  ``read_bulk``, one process, one event loop) reading every record and
  summing the payload lengths.

Prints one JSON document: Spark rows/s, reader records/s, their ratio, the
timings, and the settings used (Spark master, partitions, entries, records
per entry, dlog settings).

    python bench/spark_read.py [--records 1000000] [--master local[2]] [--spark-runs 2]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import platform
import shutil
import signal
import sys
import tempfile
import time
from collections import deque
from pathlib import Path
from typing import Any

from common import effective_settings, parse_sets

from dlog.conf.dlog import DLogConfig
from dlog.dlsn import DLSN
from dlog.namespace import Namespace
from dlog.record import LogRecord
from dlog.sandbox.cluster import Sandbox

RECORD_SIZE = 100
STREAM = "spark-bench"
_REPORTED_KEYS = (
    "writerOutputBufferSize",
    "maxLogSegmentBytes",
    "compressionType",
    "readAheadBatchSize",
    "readAheadMaxRecords",
    "bkc.maxOutstandingReads",
    "bkcEnsembleSize",
    "bkcWriteQuorumSize",
    "bkcAckQuorumSize",
)


async def write(uri: str, conf: DLogConfig, count: int, in_flight: int) -> dict[str, Any]:
    async with await Namespace.open(uri, conf) as ns:
        if await ns.log_exists(STREAM):
            await ns.delete_log(STREAM)
        log = await ns.open_log(STREAM)
        writer = await log.open_writer()
        pad = os.urandom(RECORD_SIZE - 8)
        pending: deque[asyncio.Future[DLSN]] = deque()
        t0 = time.perf_counter()
        last = None
        for i in range(count):
            pending.append(writer.write_nowait(LogRecord(i, i.to_bytes(8, "big") + pad)))
            if len(pending) >= in_flight:
                last = await pending.popleft()
        while pending:
            last = await pending.popleft()
        await writer.close()
        seconds = time.perf_counter() - t0
        segments = [seg for seg, _ in await ns.store.get_segments(STREAM)]
    entries = sum(seg.last_entry_id + 1 for seg in segments)
    return {
        "records": count,
        "seconds": round(seconds, 3),
        "records_per_s": round(count / seconds),
        "segments": len(segments),
        "entries": entries,
        "records_per_entry": round(count / entries, 1) if entries else 0,
        "last_dlsn": f"{last[0]}/{last[1]}/{last[2]}" if last else None,
    }


async def python_reader(uri: str, conf: DLogConfig, count: int) -> dict[str, Any]:
    """The baseline: every record through dlog's own reader."""
    async with await Namespace.open(uri, conf) as ns:
        log = await ns.open_log(STREAM)
        n = total = 0
        t0 = time.perf_counter()
        async with await log.open_reader() as reader:
            while n < count:
                batch = await reader.read_bulk(10_000, timeout=30)
                if not batch:
                    raise RuntimeError(f"reader stalled after {n} records")
                n += len(batch)
                total += sum(len(r.payload) for r in batch)
        seconds = time.perf_counter() - t0
    return {
        "records": n,
        "payload_bytes": total,
        "seconds": round(seconds, 3),
        "records_per_s": round(n / seconds),
    }


def spark_read(uri: str, args: argparse.Namespace, dlog_settings: dict[str, str]) -> dict[str, Any]:
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)
    import pyspark
    from pyspark.sql import SparkSession
    from pyspark.sql import functions as F

    import dlog.spark

    t0 = time.perf_counter()
    spark = (
        SparkSession.builder.master(args.master)
        .appName("dlog-bench-spark-read")
        .config("spark.ui.enabled", "false")
        .config("spark.driver.host", "127.0.0.1")
        .config("spark.driver.bindAddress", "127.0.0.1")
        .config("spark.ui.showConsoleProgress", "false")
        .getOrCreate()
    )
    spark.sparkContext.setLogLevel("ERROR")
    dlog.spark.register(spark)
    session_start = time.perf_counter() - t0
    try:
        reader = (
            spark.read.format("dlog")
            .option("uri", uri)
            .option("stream", STREAM)
            .option("entriesPerPartition", str(args.entries_per_partition))
        )
        for k, v in dlog_settings.items():
            reader = reader.option(f"dlog.{k}", v)
        df = reader.load()
        partitions = df.rdd.getNumPartitions()
        runs = []
        for _ in range(args.spark_runs):
            t = time.perf_counter()
            row = df.agg(
                F.count(F.lit(1)).alias("rows"), F.sum(F.length("payload")).alias("bytes")
            ).collect()[0]
            seconds = time.perf_counter() - t
            runs.append({"seconds": round(seconds, 3), "rows": row["rows"], "bytes": row["bytes"]})
    finally:
        spark.stop()
    steady = runs[1:] or runs
    best = min(steady, key=lambda r: r["seconds"])
    return {
        "master": args.master,
        "pyspark": pyspark.__version__,
        "session_start_seconds": round(session_start, 3),
        "partitions": partitions,
        "entries_per_partition": args.entries_per_partition,
        "runs": runs,
        "first_run_rows_per_s": round(runs[0]["rows"] / runs[0]["seconds"]),
        "rows": best["rows"],
        "payload_bytes": best["bytes"],
        "seconds": best["seconds"],
        "rows_per_s": round(best["rows"] / best["seconds"]),
    }


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--records", type=int, default=1_000_000)
    parser.add_argument("--in-flight", type=int, default=20_000, help="writes outstanding")
    parser.add_argument("--master", default="local[2]")
    parser.add_argument("--spark-runs", type=int, default=2, help="Spark queries (first is cold)")
    parser.add_argument("--entries-per-partition", type=int, default=256)
    parser.add_argument("--dir", type=Path, default=None, help="where the sandbox keeps files")
    parser.add_argument(
        "--set", action="append", default=[], help="DLogConfig setting key=value (repeatable)"
    )
    args = parser.parse_args()
    dlog_settings = parse_sets(args.set)
    conf = DLogConfig.load(overrides=dlog_settings)  # a bad --set fails before anything starts

    def on_term(*_: object) -> None:
        raise KeyboardInterrupt

    signal.signal(signal.SIGTERM, on_term)  # stop the sandbox on SIGTERM too

    own_dir = args.dir is None
    base = args.dir or Path(tempfile.mkdtemp(prefix="dlog-bench-spark-"))
    sandbox = Sandbox(base / "sandbox", bookies=3)
    try:
        sandbox.start()
        uri = sandbox.namespace_uri
        written = asyncio.run(write(uri, conf, args.records, args.in_flight))
        spark = spark_read(uri, args, dlog_settings)
        baseline = asyncio.run(python_reader(uri, conf, args.records))
    except KeyboardInterrupt:
        print("interrupted: stopping the sandbox", file=sys.stderr)
        raise SystemExit(130) from None
    finally:
        sandbox.stop()
        if own_dir:
            shutil.rmtree(base, ignore_errors=True)

    expected_bytes = args.records * RECORD_SIZE
    problems = []
    if spark["rows"] != args.records or spark["payload_bytes"] != expected_bytes:
        problems.append(f"Spark read {spark['rows']} rows / {spark['payload_bytes']} bytes")
    if baseline["records"] != args.records or baseline["payload_bytes"] != expected_bytes:
        problems.append(f"the reader read {baseline['records']} records")
    settings = {k: conf.to_properties()[k] for k in _REPORTED_KEYS}
    settings.update(effective_settings(conf, DLogConfig()))
    report = {
        "benchmark": "spark_read",
        "record_size": RECORD_SIZE,
        "records": args.records,
        "bookies": 3,
        "cpus": os.cpu_count(),
        "python": platform.python_version(),
        "write": written,
        "spark": spark,
        "python_reader_baseline": baseline,
        "ratios": {
            "spark_rows_per_s_vs_reader_records_per_s": round(
                spark["rows_per_s"] / baseline["records_per_s"], 3
            ),
            "spark_first_run_vs_reader": round(
                spark["first_run_rows_per_s"] / baseline["records_per_s"], 3
            ),
        },
        "dlog_settings": settings,
        "problems": problems,
    }
    json.dump(report, sys.stdout, indent=2)
    print()
    if problems:
        raise SystemExit(1)


if __name__ == "__main__":
    main()
