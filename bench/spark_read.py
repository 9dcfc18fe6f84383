"""Spark batch read of a dlog stream against dlog's plain Python reader.

Starts a sandbox (a real ZooKeeper and three real bookie processes,
dlog.sandbox) and writes ``--records`` (1,000,000) records of 100 bytes to
one stream with the asyncio writer (pipelined, ``--in-flight`` records
outstanding; default replication, see ``dlog_settings`` in the report).
A second stream gets as many records of *varied* payload sizes
(``--var-min``..``--var-max`` bytes, uniform, seeded; mean 100 by default),
so that the executor's general decoding path is measured beside the
fixed-size one (records of one size are decoded as uniform runs, by Arrow
kernels; varied sizes are found by walking the record lengths).
Then, in the same run, on the same data:

* Spark: a local session (``--master``, default ``local[2]``) reads the
  stream with the ``dlog`` source and computes ``count(*)`` and
  ``sum(length(payload))``, which forces every payload through Spark.
  Executors (Python workers) read the entries from the bookies; the driver
  plans from metadata. The query runs ``--spark-runs`` times: the first
  includes starting the Python workers, the best of the others is the
  steady state reported as ``rows_per_s``. Session start is timed apart.
  The varied-size stream is then read ``--spark-runs - 1`` times (at least
  once) in the same session; its best run is ``variable_length.spark``.
* Baseline: dlog's plain Python reader (``LogManager.open_reader`` and
  ``read_bulk``, one process, one event loop) reading every record and
  summing the payload lengths, on each stream.

* Reference: Spark alone (``spark_noop_source``, unless ``--no-noop-source``):
  in a fresh process (a cold JVM, as the first run above has), the same
  query ``--spark-runs`` times on a Python data source with the same schema,
  rows and partitions that does no I/O and no decoding (it yields one
  prebuilt batch over and over; its workers import pyarrow, not dlog). Its
  steady runs are a ceiling for any Python source of this schema on this
  machine, and its first run shows what a cold start costs Spark itself:
  ``noop_source_first_run_vs_reader`` is the most any source's first run
  could reach against the reader here.

Prints one JSON document: Spark rows/s, reader records/s, their ratio, the
timings, and the settings used (Spark master, partitions, entries, records
per entry, dlog settings).

    python bench/spark_read.py [--records 1000000] [--master local[2]] [--spark-runs 4]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import platform
import random
import shutil
import signal
import subprocess
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
VAR_STREAM = "spark-bench-varied"
VAR_SEED = 1
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


def payload_sizes(count: int, sizes: tuple[int, int] | None) -> list[int]:
    """Each record's payload size: RECORD_SIZE, or uniform in ``sizes`` (seeded)."""
    if sizes is None:
        return [RECORD_SIZE] * count
    rnd = random.Random(VAR_SEED)
    return [rnd.randint(*sizes) for _ in range(count)]


async def write(
    uri: str, conf: DLogConfig, stream: str, sizes: list[int], in_flight: int
) -> dict[str, Any]:
    count = len(sizes)
    async with await Namespace.open(uri, conf) as ns:
        if await ns.log_exists(stream):
            await ns.delete_log(stream)
        log = await ns.open_log(stream)
        writer = await log.open_writer()
        pad = os.urandom(max(sizes, default=8))
        pending: deque[asyncio.Future[DLSN]] = deque()
        t0 = time.perf_counter()
        last = None
        for i, size in enumerate(sizes):
            payload = i.to_bytes(8, "big") + pad[: size - 8]
            pending.append(writer.write_nowait(LogRecord(i, payload)))
            if len(pending) >= in_flight:
                last = await pending.popleft()
        while pending:
            last = await pending.popleft()
        await writer.close()
        seconds = time.perf_counter() - t0
        segments = [seg for seg, _ in await ns.store.get_segments(stream)]
    entries = sum(seg.last_entry_id + 1 for seg in segments)
    return {
        "stream": stream,
        "records": count,
        "payload_bytes": sum(sizes),
        "seconds": round(seconds, 3),
        "records_per_s": round(count / seconds),
        "segments": len(segments),
        "entries": entries,
        "records_per_entry": round(count / entries, 1) if entries else 0,
        "last_dlsn": f"{last[0]}/{last[1]}/{last[2]}" if last else None,
    }


async def python_reader(uri: str, conf: DLogConfig, stream: str, count: int) -> dict[str, Any]:
    """The baseline: every record through dlog's own reader."""
    async with await Namespace.open(uri, conf) as ns:
        log = await ns.open_log(stream)
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


def session(master: str) -> Any:
    """A local Spark session with the bench's settings (no UI, loopback only)."""
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)
    from pyspark.sql import SparkSession

    spark = (
        SparkSession.builder.master(master)
        .appName("dlog-bench-spark-read")
        .config("spark.ui.enabled", "false")
        .config("spark.driver.host", "127.0.0.1")
        .config("spark.driver.bindAddress", "127.0.0.1")
        .config("spark.ui.showConsoleProgress", "false")
        .getOrCreate()
    )
    spark.sparkContext.setLogLevel("ERROR")
    return spark


def noop_source_child(args: argparse.Namespace) -> None:
    """Run in a process of its own (``--noop-child``): the same query on a
    Python data source of the same schema, partitions and rows that does no
    I/O and no decoding (it yields one prebuilt batch over and over). Its
    runs are what Spark itself costs, cold start included; prints JSON.

    Its workers import pyarrow only, never dlog: what they run refers to
    nothing of dlog's (cloudpickle sends it by value), so the first run is
    Spark's own cold start, a floor for any Python source's first run."""
    import pyarrow as pa
    from pyspark.sql import functions as F
    from pyspark.sql.datasource import DataSource, DataSourceReader, InputPartition

    from dlog.spark.reader import ARROW_SCHEMA, SCHEMA, dlsn_text

    rows, partitions, batch_rows = args.records, args.noop_child, 32_768
    # Plain values, captured by the classes below (no dlog name in them).
    arrow_schema, dlsn = ARROW_SCHEMA, dlsn_text(1, 0, 0)

    # Defined here, so that Spark pickles them by value for its workers.
    class Part(InputPartition):
        def __init__(self, rows: int) -> None:
            self.rows = rows

    class NoopReader(DataSourceReader):
        def partitions(self) -> list[InputPartition]:
            share = [rows // partitions + (i < rows % partitions) for i in range(partitions)]
            return [Part(n) for n in share]

        def read(self, partition: InputPartition) -> Any:
            assert isinstance(partition, Part)
            n = min(batch_rows, partition.rows)
            ints = pa.array(range(n), pa.int64())
            columns = [
                pa.array([STREAM] * n, pa.string()),
                pa.array([dlsn] * n, pa.string()),
                pa.repeat(pa.scalar(1, pa.int64()), n),
                pa.repeat(pa.scalar(0, pa.int64()), n),
                ints,
                ints,
                pa.array([b"x" * RECORD_SIZE] * n, pa.binary()),
            ]
            batch = pa.RecordBatch.from_arrays(columns, schema=arrow_schema)
            left = partition.rows
            while left > 0:
                yield batch.slice(0, min(left, n))
                left -= n

    class NoopSource(DataSource):
        @classmethod
        def name(cls) -> str:
            return "dlog-bench-noop"

        def schema(self) -> str:
            return SCHEMA

        def reader(self, schema: Any) -> DataSourceReader:
            return NoopReader()

    spark = session(args.master)
    try:
        spark.dataSource.register(NoopSource)
        df = spark.read.format("dlog-bench-noop").load()
        df.rdd.getNumPartitions()  # plans the read before the first run, as for dlog
        runs = []
        for _ in range(args.spark_runs):
            t = time.perf_counter()
            row = df.agg(
                F.count(F.lit(1)).alias("rows"), F.sum(F.length("payload")).alias("bytes")
            ).collect()[0]
            runs.append({"seconds": round(time.perf_counter() - t, 3), "rows": row["rows"]})
    finally:
        spark.stop()
    json.dump(runs, sys.stdout)


def noop_source(args: argparse.Namespace, partitions: int) -> dict[str, Any]:
    """:func:`noop_source_child` in a fresh process (a cold JVM and cold
    Python workers, as the dlog query's first run has)."""
    cmd = [sys.executable, os.path.abspath(__file__), "--noop-child", str(partitions),
           "--records", str(args.records), "--master", args.master,
           "--spark-runs", str(args.spark_runs)]  # fmt: skip
    out = subprocess.run(cmd, capture_output=True, text=True, check=True).stdout
    runs = json.loads(out)
    best = min(runs[1:] or runs, key=lambda r: r["seconds"])
    return {
        "what": "a Python data source of the same schema, rows and partitions doing no I/O "
        "(one prebuilt batch yielded over and over), same query, fresh JVM",
        "runs": runs,
        "first_run_rows_per_s": round(runs[0]["rows"] / runs[0]["seconds"]),
        "rows_per_s": round(best["rows"] / best["seconds"]),
    }


def spark_read(uri: str, args: argparse.Namespace, dlog_settings: dict[str, str]) -> dict[str, Any]:
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)
    import pyspark
    from pyspark.sql import functions as F

    import dlog.spark

    t0 = time.perf_counter()
    spark = session(args.master)
    dlog.spark.register(spark)
    session_start = time.perf_counter() - t0

    def query(stream: str, times: int) -> tuple[int, list[dict[str, Any]]]:
        reader = (
            spark.read.format("dlog")
            .option("uri", uri)
            .option("stream", stream)
            .option("entriesPerPartition", str(args.entries_per_partition))
        )
        for k, v in dlog_settings.items():
            reader = reader.option(f"dlog.{k}", v)
        df = reader.load()
        partitions = df.rdd.getNumPartitions()
        runs = []
        for _ in range(times):
            t = time.perf_counter()
            row = df.agg(
                F.count(F.lit(1)).alias("rows"), F.sum(F.length("payload")).alias("bytes")
            ).collect()[0]
            seconds = time.perf_counter() - t
            runs.append({"seconds": round(seconds, 3), "rows": row["rows"], "bytes": row["bytes"]})
        return partitions, runs

    try:
        partitions, runs = query(STREAM, args.spark_runs)
        var_partitions, var_runs = query(VAR_STREAM, max(1, args.spark_runs - 1))
    finally:
        spark.stop()
    steady = runs[1:] or runs
    best = min(steady, key=lambda r: r["seconds"])
    var_best = min(var_runs, key=lambda r: r["seconds"])
    return {
        "master": args.master,
        "pyspark": pyspark.__version__,
        "session_start_seconds": round(session_start, 3),
        "partitions": partitions,
        "entries_per_partition": args.entries_per_partition,
        "spark_runs": args.spark_runs,
        "runs": runs,
        "first_run_rows_per_s": round(runs[0]["rows"] / runs[0]["seconds"]),
        "rows": best["rows"],
        "payload_bytes": best["bytes"],
        "seconds": best["seconds"],
        "rows_per_s": round(best["rows"] / best["seconds"]),
        "variable_length": {
            "partitions": var_partitions,
            "runs": var_runs,
            "rows": var_best["rows"],
            "payload_bytes": var_best["bytes"],
            "seconds": var_best["seconds"],
            "rows_per_s": round(var_best["rows"] / var_best["seconds"]),
        },
    }


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--records", type=int, default=1_000_000)
    parser.add_argument("--in-flight", type=int, default=20_000, help="writes outstanding")
    parser.add_argument("--master", default="local[2]")
    parser.add_argument("--spark-runs", type=int, default=4, help="Spark queries (first is cold)")
    parser.add_argument("--var-min", type=int, default=8, help="smallest varied payload (>= 8)")
    parser.add_argument("--var-max", type=int, default=192, help="largest varied payload")
    parser.add_argument("--entries-per-partition", type=int, default=256)
    parser.add_argument(
        "--no-noop-source",
        dest="noop_source",
        action="store_false",
        help="skip the Spark-only reference (a no-I/O source in a fresh process)",
    )
    parser.add_argument("--noop-child", type=int, default=None, help=argparse.SUPPRESS)
    parser.add_argument("--dir", type=Path, default=None, help="where the sandbox keeps files")
    parser.add_argument(
        "--set", action="append", default=[], help="DLogConfig setting key=value (repeatable)"
    )
    args = parser.parse_args()
    if args.noop_child is not None:
        noop_source_child(args)
        return
    if not 8 <= args.var_min <= args.var_max:
        parser.error("need 8 <= --var-min <= --var-max")
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
        fixed_sizes = payload_sizes(args.records, None)
        var_sizes = payload_sizes(args.records, (args.var_min, args.var_max))
        written = asyncio.run(write(uri, conf, STREAM, fixed_sizes, args.in_flight))
        var_written = asyncio.run(write(uri, conf, VAR_STREAM, var_sizes, args.in_flight))
        spark = spark_read(uri, args, dlog_settings)
        baseline = asyncio.run(python_reader(uri, conf, STREAM, args.records))
        var_baseline = asyncio.run(python_reader(uri, conf, VAR_STREAM, args.records))
        noop = noop_source(args, spark["partitions"]) if args.noop_source else None
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
    var = spark.pop("variable_length")
    var_bytes = var_written["payload_bytes"]
    if var["rows"] != args.records or var["payload_bytes"] != var_bytes:
        problems.append(f"Spark read {var['rows']} rows / {var['payload_bytes']} bytes (varied)")
    if var_baseline["records"] != args.records or var_baseline["payload_bytes"] != var_bytes:
        problems.append(f"the reader read {var_baseline['records']} records (varied)")
    settings = {k: conf.to_properties()[k] for k in _REPORTED_KEYS}
    settings.update(effective_settings(conf, DLogConfig()))
    report = {
        "benchmark": "spark_read",
        "record_size": RECORD_SIZE,
        "records": args.records,
        "bookies": 3,
        "cpus": os.cpu_count(),
        "python": platform.python_version(),
        # Spark's Python processes (planner, executors) import dlog afresh:
        # without a bytecode cache (PYTHONDONTWRITEBYTECODE and no __pycache__,
        # unlike a pip install) each compiles dlog's modules from source, which
        # the first run pays.
        "python_writes_bytecode": not sys.dont_write_bytecode,
        "write": written,
        "spark": spark,
        "python_reader_baseline": baseline,
        "spark_noop_source": noop,
        "ratios": {
            "spark_rows_per_s_vs_reader_records_per_s": round(
                spark["rows_per_s"] / baseline["records_per_s"], 3
            ),
            "spark_first_run_vs_reader": round(
                spark["first_run_rows_per_s"] / baseline["records_per_s"], 3
            ),
            **(
                {
                    "spark_rows_per_s_vs_noop_source": round(
                        spark["rows_per_s"] / noop["rows_per_s"], 3
                    ),
                    "spark_first_run_vs_noop_source_first_run": round(
                        spark["first_run_rows_per_s"] / noop["first_run_rows_per_s"], 3
                    ),
                    # Spark's cold start alone against the reader: no Python
                    # source's first run can do better than this here.
                    "noop_source_first_run_vs_reader": round(
                        noop["first_run_rows_per_s"] / baseline["records_per_s"], 3
                    ),
                }
                if noop
                else {}
            ),
        },
        "variable_length": {
            "payload_sizes": f"uniform {args.var_min}..{args.var_max} bytes, seed {VAR_SEED}",
            "write": var_written,
            "spark": var,
            "python_reader_baseline": var_baseline,
            "ratios": {
                "spark_rows_per_s_vs_reader_records_per_s": round(
                    var["rows_per_s"] / var_baseline["records_per_s"], 3
                ),
                "spark_rows_per_s_vs_fixed_size": round(var["rows_per_s"] / spark["rows_per_s"], 3),
            },
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
