"""What ``make demo`` runs: a sandbox, then dlog end to end, in five steps.

1. Start a sandbox: ZooKeeper and 3 bookies on loopback, in ``.sandbox/``
   (a sandbox left there by an earlier run is stopped and deleted first).
2. ``examples/quickstart.py``: write 100,000 records, tail them back, verify.
3. ``examples/at_least_once_consumer.py``, a consumer with the log-segment
   subscriptions store, reads part of the stream, commits, and is killed
   with SIGKILL; a new consumer resumes right after the last commit and
   catches up.
4. ``examples/demo_spark_pipeline.py``: a Spark structured-streaming query
   (``local[2]``) reads a stream of JSON events and writes counts and sums
   per key per minute as Parquet; the rows are checked against the events.
   Skipped if that file is absent.
5. Stop the sandbox (also on failure or Ctrl-C).

    python examples/demo.py [--dir .sandbox] [--records 100000]
"""

from __future__ import annotations

import argparse
import shutil
import signal
import subprocess
import sys
from pathlib import Path

from dlog.sandbox.cluster import Sandbox

HERE = Path(__file__).resolve().parent


def step(title: str) -> None:
    print(f"\n=== {title} ===", flush=True)


def run(*args: str) -> None:
    subprocess.run([sys.executable, *args], check=True)


def consumer_resume(uri: str, records: int) -> None:
    """Kill a committing consumer and show the next one resuming."""
    script = str(HERE / "at_least_once_consumer.py")
    common = [
        "--uri",
        uri,
        "--stream",
        "quickstart",
        "--subscriber",
        "demo",
        "--commit-every",
        "1000",
    ]
    # A slow consumer (0.1 ms of "work" per record), killed mid-work after a
    # few durable commits: no graceful shutdown, no final commit.
    proc = subprocess.Popen(
        [sys.executable, script, *common, "--work-ms", "0.1", "--max-records", str(records)],
        stdout=subprocess.PIPE,
        text=True,
    )
    assert proc.stdout is not None
    commits = 0
    for line in proc.stdout:
        print(f"  [consumer 1] {line.rstrip()}", flush=True)
        if line.startswith("committed"):
            commits += 1
            if commits == 3:
                break
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    print("  [consumer 1] killed with SIGKILL", flush=True)
    # A new consumer resumes right after the last commit, and catches up.
    result = subprocess.run(
        [sys.executable, script, *common, "--idle-exit", "1.5"],
        capture_output=True,
        text=True,
        check=True,
    )
    lines = result.stdout.splitlines()
    for line in lines[:2] + (["  ..."] if len(lines) > 4 else []) + lines[-2:]:
        print(f"  [consumer 2] {line}", flush=True)


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--dir", type=Path, default=Path(".sandbox"))
    parser.add_argument("--records", type=int, default=100_000)
    args = parser.parse_args()
    if args.dir.exists():
        try:
            Sandbox.load(args.dir).stop()
        except Exception:
            pass
        shutil.rmtree(args.dir)
    step("starting a sandbox: ZooKeeper + 3 bookies")
    sandbox = Sandbox(args.dir, bookies=3)
    sandbox.start()
    try:
        uri = sandbox.namespace_uri
        print(f"namespace: {uri}\nbookies:   {', '.join(sandbox.bookie_ids)}")
        step(f"quickstart: write {args.records:,} records, tail them back")
        run(str(HERE / "quickstart.py"), "--uri", uri, "--records", str(args.records))
        step("a consumer with the log-segment subscriptions store, killed and resumed")
        consumer_resume(uri, args.records)
        if (HERE / "demo_spark_pipeline.py").exists():
            step("a Spark pipeline reading a stream: counts and sums per key per minute")
            run(str(HERE / "demo_spark_pipeline.py"), "--uri", uri)
    finally:
        step("stopping the sandbox")
        sandbox.stop()
    print("\ndemo finished", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
