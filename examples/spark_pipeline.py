"""A data pipeline on Spark: JSON events from a dlog stream, counts and sums
per key per minute, written as Parquet.

Each record of the stream is a JSON event ``{"ts": <epoch ms>, "key": "...",
"value": <number>}``. The pipeline reads the stream with the ``dlog`` Spark
source (:mod:`dlog.spark`), parses the events, and aggregates them per key
per event-time minute: ``count`` and ``sum(value)``.

Streaming (the default) is a structured-streaming query with a 1-minute
watermark: a minute's row is written to Parquet once the watermark passes
its end (events more than a minute late are dropped), so every row written
is final. Progress is in the query's checkpoint and in the subscription
``--subscription`` of the stream, so operators see how far the pipeline is
with ``dlog subscriptions list`` and retention can respect it:

    URI=$(.venv/bin/dlog sandbox start --dir /tmp/sb | tail -1)
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
"""

from __future__ import annotations

import argparse
import os
import signal
import sys
import time
from pathlib import Path

EVENT_SCHEMA = "ts long, key string, value double"


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


def dlog_options(args: argparse.Namespace) -> dict[str, str]:
    options = {"uri": args.uri, "stream": args.stream}
    for item in args.set:
        key, _, value = item.partition("=")
        options[f"dlog.{key.strip()}"] = value.strip()
    return options


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
    raw = (
        spark.read.format("dlog")
        .options(**dlog_options(args))
        .option("startingPosition", args.start)
        .option("endingPosition", args.end)
        .load()
    )
    out = args.output / "reprocessed"
    t0 = time.perf_counter()
    per_minute(events(raw)).write.mode("overwrite").parquet(str(out))
    print(f"reprocessed {args.start} .. {args.end} in {time.perf_counter() - t0:.1f} s")
    show_table(spark, out, args.show)


def run_stream(spark, args: argparse.Namespace) -> None:  # type: ignore[no-untyped-def]
    reader = spark.readStream.format("dlog").options(**dlog_options(args))
    if args.subscription:
        reader = reader.option("subscription", args.subscription)
    if args.max_records_per_trigger:
        reader = reader.option("maxRecordsPerTrigger", str(args.max_records_per_trigger))
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
    if query.exception() is not None:
        raise SystemExit(f"the streaming query failed: {query.exception()}")
    events_read = sum(p["numInputRows"] for p in query.recentProgress)
    print(
        f"read {events_read} records in {len(query.recentProgress)} batches "
        f"({time.perf_counter() - t0:.1f} s); subscription {args.subscription!r}"
    )
    show_table(spark, out, args.show)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    spark = spark_session(args)
    try:
        if args.batch:
            run_batch(spark, args)
        else:
            run_stream(spark, args)
    finally:
        spark.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
