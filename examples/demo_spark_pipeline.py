"""The Spark pipeline step of ``make demo`` (examples/demo.py runs every
``examples/demo_*.py`` with ``--uri``).

1. Write 2,000 JSON events ``{"ts", "key", "value"}`` spread over the last
   12 minutes (the pipeline's own ``--generate`` sample) to the stream
   ``events`` (deleted first if it exists), keeping them to check against.
2. Run examples/spark_pipeline.py once (``--once``: a structured-streaming
   query with Trigger.AvailableNow on ``local[2]``): counts and sums per key
   per minute, with a 1-minute watermark, written as Parquet. It prints the
   aggregated table.
3. Check every row written against the events (each closed minute exactly
   once, with the right count and sum), and show the query's progress as
   the subscription ``spark-pipeline`` of the stream (what ``dlog
   subscriptions list`` shows).

    python examples/demo_spark_pipeline.py --uri URI [--events 2000]
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
from collections import defaultdict
from pathlib import Path

from spark_pipeline import sample_events  # examples/ is on sys.path when run as a script

from dlog.record import LogRecord
from dlog.sync import Namespace

HERE = Path(__file__).resolve().parent
STREAM = "events"
SUBSCRIPTION = "spark-pipeline"


def expected_per_minute(
    events: list[dict[str, object]],
) -> dict[tuple[int, str], tuple[int, float]]:
    acc: dict[tuple[int, str], list[float]] = defaultdict(lambda: [0, 0.0])
    for e in events:
        slot = acc[(int(e["ts"]) // 60_000 * 60_000, str(e["key"]))]  # type: ignore[call-overload]
        slot[0] += 1
        slot[1] += float(e["value"])  # type: ignore[arg-type]
    return {k: (int(v[0]), round(v[1], 3)) for k, v in acc.items()}


def check(output: Path, events: list[dict[str, object]]) -> list[str]:
    """Problems with the Parquet rows (empty when every row is right)."""
    import pyarrow.parquet as pq

    want = expected_per_minute(events)
    table = pq.read_table(output / "per_minute").to_pylist()
    problems = []
    seen = set()
    for row in table:
        minute = row["minute"]
        key = (int(minute.timestamp() * 1000), row["key"])
        if key in seen:
            problems.append(f"minute {minute} key {row['key']} written twice")
        seen.add(key)
        if key not in want:
            problems.append(f"minute {minute} key {row['key']}: no such events")
        elif (row["count"], round(row["sum"], 3)) != want[key]:
            problems.append(f"minute {minute} key {row['key']}: {row} != {want[key]}")
    open_minutes = {m for m, _ in want} - {m for m, _ in seen}
    if seen and open_minutes and min(open_minutes) < max(m for m, _ in seen):
        problems.append("a minute older than a written one is missing")
    print(
        f"checked {len(table)} rows: {len(seen)} (minute, key) pairs written, "
        f"{len(open_minutes)} most recent minute(s) still open (waiting for the watermark)"
    )
    return problems


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--uri", required=True)
    parser.add_argument("--events", type=int, default=2000)
    args = parser.parse_args()

    events = sample_events(args.events)
    with Namespace.open(args.uri) as ns:
        if ns.log_exists(STREAM):
            ns.delete_log(STREAM)
        log = ns.open_log(STREAM)
        with log.open_writer() as writer:
            last = writer.write_bulk(
                [LogRecord(i, json.dumps(e).encode()) for i, e in enumerate(events)]
            )[-1]
        print(f"wrote {len(events)} JSON events to stream {STREAM!r}, last DLSN {last}", flush=True)

    with tempfile.TemporaryDirectory(prefix="dlog-spark-demo-") as tmp:
        output = Path(tmp)
        cmd = [
            sys.executable,
            str(HERE / "spark_pipeline.py"),
            "--uri",
            args.uri,
            "--stream",
            STREAM,
            "--once",
            "--master",
            "local[2]",
            "--output",
            str(output),
            "--subscription",
            SUBSCRIPTION,
            "--show",
            "12",
        ]
        print("$ " + " ".join(cmd[1:]), flush=True)
        subprocess.run(cmd, check=True)
        problems = check(output, events)

    with Namespace.open(args.uri) as ns:
        position = ns.open_log(STREAM).subscriptions.get_last_commit_position(SUBSCRIPTION)
        print(f"subscription {SUBSCRIPTION!r} of stream {STREAM!r} committed at {position}")
        if position != last:
            problems.append(f"the subscription is at {position}, not at the last event {last}")
    for p in problems:
        print(f"problem: {p}")
    print("FAIL" if problems else "PASS")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
