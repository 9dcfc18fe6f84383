"""A structured-streaming query over a dlog stream, run as its own process by
tests/integration/test_spark_source.py, which kills it with SIGKILL in the
middle of a batch, then restarts the query on the same checkpoint (with
:func:`run`, in the test's own Spark session).

Each micro-batch is written by a foreachBatch sink to ``<output>/batch-<id>.json``
(written to a temporary name, then renamed: a batch file is there whole or
not at all; a batch Spark runs again after a crash rewrites its own file).
Before its (optionally slow) write, a batch drops ``<output>/started-<id>``,
so the test knows a batch is in progress.

    python spark_stream_job.py --uri URI --stream s --checkpoint DIR --output DIR \\
        [--subscription ID] [--max-records N] [--sleep SECONDS] [--log-segment-store]
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser()
    parser.add_argument("--uri", required=True)
    parser.add_argument("--stream", required=True)
    parser.add_argument("--checkpoint", required=True)
    parser.add_argument("--output", required=True, type=Path)
    parser.add_argument("--subscription")
    parser.add_argument("--max-records", type=int)
    parser.add_argument("--sleep", type=float, default=0.0)
    parser.add_argument("--log-segment-store", action="store_true")
    return parser.parse_args(argv)


def run(spark, args: argparse.Namespace) -> None:  # type: ignore[no-untyped-def]
    """Run the query until everything available now is processed (also
    called in-process by the test, to restart the query in its session)."""
    args.output.mkdir(parents=True, exist_ok=True)
    reader = spark.readStream.format("dlog").option("uri", args.uri).option("stream", args.stream)
    if args.subscription:
        reader = reader.option("subscription", args.subscription)
    if args.max_records:
        reader = reader.option("maxRecordsPerTrigger", str(args.max_records))
    if args.log_segment_store:
        reader = reader.option("dlog.logSegmentBasedSubscriptionsStoreEnabled", "true")

    def write_batch(df, batch_id: int) -> None:  # type: ignore[no-untyped-def]
        rows = [
            {"stream": r.stream, "dlsn": r.dlsn, "txid": r.txid, "payload": bytes(r.payload).hex()}
            for r in df.select("stream", "dlsn", "txid", "payload").collect()
        ]
        (args.output / f"started-{batch_id}").touch()
        print(f"batch {batch_id} started: {len(rows)} rows", flush=True)
        time.sleep(args.sleep)
        final = args.output / f"batch-{batch_id:05d}.json"
        tmp = final.with_suffix(".tmp")
        tmp.write_text(json.dumps(rows))
        os.replace(tmp, final)
        print(f"batch {batch_id} written", flush=True)

    query = (
        reader.load()
        .writeStream.foreachBatch(write_batch)
        .option("checkpointLocation", args.checkpoint)
        .trigger(availableNow=True)
        .start()
    )
    query.awaitTermination()
    if query.exception() is not None:
        raise RuntimeError(f"the query failed: {query.exception()}")


def main() -> int:
    args = parse_args()
    os.environ["PYSPARK_PYTHON"] = sys.executable
    os.environ["PYSPARK_DRIVER_PYTHON"] = sys.executable
    from pyspark.sql import SparkSession

    import dlog.spark

    spark = (
        SparkSession.builder.master("local[2]")
        .appName("dlog-spark-stream-job")
        .config("spark.sql.shuffle.partitions", "2")
        .config("spark.driver.memory", "512m")
        .config("spark.ui.enabled", "false")
        .config("spark.driver.host", "127.0.0.1")
        .config("spark.driver.bindAddress", "127.0.0.1")
        .getOrCreate()
    )
    spark.sparkContext.setLogLevel("ERROR")
    dlog.spark.register(spark)
    run(spark, args)
    print("done", flush=True)
    spark.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
