r"""A data pipeline on Spark: JSON events from a dlog stream, counts and sums
per key per minute, written as Parquet.

Each record of the stream is a JSON event ``{"ts": <epoch ms>, "key": "...",
"value": <number>}`` (other records are skipped). The pipeline reads
the stream with the ``dlog`` Spark source (:mod:`dlog.spark`), parses the
events, and aggregates them per key per event-time minute: ``count`` and
``sum(value)``.

The stream (``--stream``, default ``events``) must exist and hold events.
``--generate N`` writes N sample events first (spread over the last 12
minutes, keys checkout/login/search/view; the stream is created if
missing), or write your own, one JSON event a line, with ``dlog write``:

    URI=$(.venv/bin/dlog sandbox start --dir /tmp/sb | tail -1)
    .venv/bin/python examples/spark_pipeline.py --uri $URI --generate 2000 --once
    printf '{"ts": %s000, "key": "login", "value": 1.5}\n' $(date +%s) \
        | .venv/bin/dlog write events --uri $URI

Streaming (the default) is a structured-streaming query with a 1-minute
watermark: a minute's row is written to Parquet once the watermark passes
its end (events more than a minute late are dropped), so every row written
is final (the last minute or so of events stays open). Progress is in the
query's checkpoint and in the subscription ``--subscription`` of the
stream, so operators see how far the pipeline is with ``dlog subscriptions
list`` and retention can respect it:

    .venv/bin/python examples/spark_pipeline.py --uri $URI --once      # all there is, then exit
    .venv/bin/python examples/spark_pipeline.py --uri $URI --follow    # keep running (Ctrl-C)

A restarted query resumes from its checkpoint (``--checkpoint``, default
``<output>/_checkpoint``); a new query (new checkpoint) resumes after the
subscription's last commit.

Batch mode reprocesses a DLSN range (both ends included, any DLSN form,
``earliest``/``latest`` too) and overwrites ``<output>/reprocessed``:

    .venv/bin/python examples/spark_pipeline.py --uri $URI --batch --from 1/0/0 --to latest

Both print the aggregated table (the top ``--show`` rows) at the end. Spark
runs on ``local[*]`` unless ``--master`` names a cluster (its executors need
dlog and pyarrow installed, and ``PYSPARK_PYTHON`` pointing at that Python).

The source's options are checked before Spark starts
(``dlog.spark.check_options``): a missing namespace or stream, a bad DLSN
in ``--from``/``--to`` and the like print one line and exit with status 1.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import random
import signal
import sys
import time
from pathlib import Path
from typing import Any

EVENT_SCHEMA = "ts long, key string, value double"
SAMPLE_KEYS = ("checkout", "login", "search", "view")
PROG = "spark_pipeline.py"


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--uri", required=True, help="namespace URI (distributedlog://...)")
    parser.add_argument("--stream", default="events", help="stream(s), comma-separated")
    parser.add_argument("--output", type=Path, default=Path("spark-output"))
    parser.add_argument("--master", default="local[*]", help="Spark master (default local[*])")
    parser.add_argument("--subscription", default="spark-pipeline")
    parser.add_argument("--checkpoint", type=Path, help="default: <output>/_checkpoint")
    mode = parser.add_mutually_exclusive_group()
    mode.add_argument("--once", action="store_true", help="read what is there, then stop (default)")
    mode.add_argument("--follow", action="store_true", help="keep reading new events")
    mode.add_argument("--batch", action="store_true", help="reprocess --from .. --to")
    parser.add_argument("--from", dest="start", default="earliest", help="batch: first DLSN")
    parser.add_argument("--to", dest="end", default="latest", help="batch: last DLSN")
    parser.add_argument("--watermark", default="1 minute", help="allowed lateness")
    parser.add_argument("--trigger", default="10 seconds", help="--follow: batch interval")
    parser.add_argument("--max-records-per-trigger", type=int)
    parser.add_argument("--shuffle-partitions", type=int, default=4)
    parser.add_argument("--show", type=int, default=20, help="rows of the table to print")
    parser.add_argument(
        "--generate", type=int, metavar="N", help="first write N sample events to each stream"
    )
    parser.add_argument(
        "--set", action="append", default=[], metavar="KEY=VALUE", help="a dlog setting"
    )
    return parser.parse_args(argv)


def spark_session(args: argparse.Namespace):  # type: ignore[no-untyped-def]
    if args.master.startswith("local"):
        # Spark's Python workers must import dlog: use this interpreter.
        os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
        os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)
        os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")  # no network needed
    from pyspark.sql import SparkSession

    import dlog.spark

    spark = (
        SparkSession.builder.master(args.master)
        .appName("dlog-spark-pipeline")
        .config("spark.sql.shuffle.partitions", str(args.shuffle_partitions))
        .config("spark.ui.showConsoleProgress", "false")
        .getOrCreate()
    )
    spark.sparkContext.setLogLevel("ERROR")
    dlog.spark.register(spark)
    return spark


def settings(args: argparse.Namespace) -> dict[str, str]:
    """The dlog settings of ``--set KEY=VALUE``."""
    out = {}
    for item in args.set:
        key, _, value = item.partition("=")
        out[key.strip()] = value.strip()
    return out


def source_options(args: argparse.Namespace) -> dict[str, str]:
    """The dlog source's options for this run (checked before Spark starts)."""
    options = {"uri": args.uri, "stream": args.stream}
    options.update({f"dlog.{key}": value for key, value in settings(args).items()})
    if args.batch:
        options.update(startingPosition=args.start, endingPosition=args.end)
    else:
        if args.subscription:
            options["subscription"] = args.subscription
        if args.max_records_per_trigger:
            options["maxRecordsPerTrigger"] = str(args.max_records_per_trigger)
    return options


def sample_events(n: int, seed: int = 7, minutes: int = 12) -> list[dict[str, Any]]:
    """``n`` events spread over the last ``minutes`` minutes, a little out of
    order (as real events arrive)."""
    rng = random.Random(seed)
    span = minutes * 60_000
    start = int(time.time() * 1000) - span
    return [
        {
            "ts": start + i * span // n + rng.randrange(-5_000, 5_000),
            "key": rng.choice(SAMPLE_KEYS),
            "value": round(rng.uniform(1, 100), 2),
        }
        for i in range(n)
    ]


def generate(args: argparse.Namespace) -> None:
    """Write ``--generate`` sample events to each stream, creating a missing
    stream (the namespace must exist: a mistyped URI creates nothing)."""
    from dlog.record import LogRecord
    from dlog.sync import Namespace

    events = [json.dumps(e).encode() for e in sample_events(args.generate)]
    with Namespace.open(args.uri, settings(args)) as ns:
        for stream in (s.strip() for s in args.stream.split(",") if s.strip()):
            if not ns.log_exists(stream):
                ns.create_log(stream)
            with ns.open_log(stream).open_writer() as writer:
                txid = max(writer.last_txid + 1, int(time.time() * 1000))
                last = None
                for k in range(0, len(events), 10_000):
                    chunk = events[k : k + 10_000]
                    records = [LogRecord(txid + k + i, e) for i, e in enumerate(chunk)]
                    last = writer.write_bulk(records)[-1]
            print(f"wrote {len(events)} sample events to stream {stream!r}, last DLSN {last}")


def error_line(error: BaseException) -> str | None:
    """The one line to print for ``error`` (None: not a dlog error)."""
    import dlog.spark

    line = dlog.spark.source_error(error)
    if isinstance(error, dlog.spark.DlogSourceStreamNotFoundError):
        line = (
            f"{line}; fill it first with --generate N, or write JSON events "
            f"with `dlog write {error.streams[0]}` (see --help)"
        )
    return None if line is None else f"{PROG}: {line}"


def events(raw):  # type: ignore[no-untyped-def]
    """Records -> events (``event_time`` a timestamp); records that are not
    JSON events are dropped."""
    from pyspark.sql import functions as F

    parsed = raw.select(
        "stream", "dlsn", F.from_json(F.col("payload").cast("string"), EVENT_SCHEMA).alias("e")
    )
    return parsed.where(
        F.col("e.ts").isNotNull() & F.col("e.key").isNotNull() & F.col("e.value").isNotNull()
    ).select(
        F.timestamp_millis(F.col("e.ts")).alias("event_time"),
        F.col("e.key").alias("key"),
        F.col("e.value").alias("value"),
    )


def per_minute(df):  # type: ignore[no-untyped-def]
    from pyspark.sql import functions as F

    return (
        df.groupBy(F.window("event_time", "1 minute"), "key")
        .agg(F.count(F.lit(1)).alias("count"), F.sum("value").alias("sum"))
        .select(
            F.col("window.start").alias("minute"),
            "key",
            "count",
            F.round("sum", 3).alias("sum"),
        )
    )


def show_table(spark, path: Path, rows: int) -> int:  # type: ignore[no-untyped-def]
    """Print the aggregated table at ``path``; returns its row count."""
    from pyspark.sql.utils import AnalysisException

    try:
        table = spark.read.parquet(str(path))
    except AnalysisException:
        print(f"no aggregated rows in {path} yet (no minute has closed)")
        return 0
    total = table.count()
    print(f"aggregated table {path}: {total} rows (minute, key), top {min(rows, total)}:")
    table.orderBy("minute", "key").show(rows, truncate=False)
    return total


def run_batch(spark, args: argparse.Namespace) -> None:  # type: ignore[no-untyped-def]
    raw = spark.read.format("dlog").options(**source_options(args)).load()
    out = args.output / "reprocessed"
    t0 = time.perf_counter()
    per_minute(events(raw)).write.mode("overwrite").parquet(str(out))
    print(f"reprocessed {args.start} .. {args.end} in {time.perf_counter() - t0:.1f} s")
    show_table(spark, out, args.show)


def run_stream(spark, args: argparse.Namespace) -> None:  # type: ignore[no-untyped-def]
    reader = spark.readStream.format("dlog").options(**source_options(args))
    out = args.output / "per_minute"
    checkpoint = args.checkpoint or args.output / "_checkpoint"
    aggregated = per_minute(events(reader.load()).withWatermark("event_time", args.watermark))
    writer = (
        aggregated.writeStream.format("parquet")
        .outputMode("append")
        .option("path", str(out))
        .option("checkpointLocation", str(checkpoint))
    )
    if args.follow:
        writer = writer.trigger(processingTime=args.trigger)
    else:
        writer = writer.trigger(availableNow=True)
    t0 = time.perf_counter()
    query = writer.start()
    if args.follow:
        # Ctrl-C / SIGTERM: stop the query between two checks, cleanly (not
        # PySpark's handler, which cancels jobs from inside a py4j call).
        stopping: list[int] = []
        for sig in (signal.SIGINT, signal.SIGTERM):
            signal.signal(sig, lambda signum, _frame: stopping.append(signum))
        print(f"following {args.stream} (Ctrl-C to stop); Parquet in {out}", flush=True)
        printed = -1
        while query.isActive and not stopping:
            query.awaitTermination(1)
            for progress in query.recentProgress:
                if progress["batchId"] > printed:
                    printed = progress["batchId"]
                    watermark = progress.get("eventTime", {}).get("watermark", "-")
                    print(
                        f"batch {printed}: {progress['numInputRows']} events, "
                        f"watermark {watermark}",
                        flush=True,
                    )
        if stopping:
            print("stopping", flush=True)
            query.stop()
    else:
        query.awaitTermination()
    failure = query.exception()
    if failure is not None:
        import dlog.spark

        raise SystemExit(
            f"the streaming query failed: {dlog.spark.source_error(failure) or failure}"
        )
    events_read = sum(p["numInputRows"] for p in query.recentProgress)
    print(
        f"read {events_read} records in {len(query.recentProgress)} batches "
        f"({time.perf_counter() - t0:.1f} s); subscription {args.subscription!r}"
    )
    show_table(spark, out, args.show)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    # The ZooKeeper client logs each failed connection attempt; dlog's error
    # says what failed, in one line.
    logging.getLogger("kazoo").setLevel(logging.CRITICAL)
    import dlog.spark
    from dlog.errors import DLogError

    try:
        if args.generate:
            generate(args)
        # Before Spark starts: Spark would report a problem with the options
        # as a Python traceback inside a JVM one.
        dlog.spark.check_options(source_options(args), streaming=not args.batch)
    except DLogError as e:
        print(error_line(e), file=sys.stderr)
        return 1
    spark = spark_session(args)
    try:
        if args.batch:
            run_batch(spark, args)
        else:
            run_stream(spark, args)
    except Exception as e:
        line = error_line(e)  # e.g. the stream was deleted since the check
        if line is None:
            raise
        print(line, file=sys.stderr)
        return 1
    finally:
        spark.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
