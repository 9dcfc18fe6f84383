"""What ``make demo`` runs: a sandbox, then dlog end to end.

1. Start a sandbox: ZooKeeper and 3 bookies on loopback, in ``.sandbox/``.
2. ``examples/quickstart.py``: write 100,000 records, tail them back, verify.
3. A consumer with the log-segment subscriptions store reads part of the
   stream, commits, and is killed with SIGKILL; a new consumer resumes right
   after the last commit.
4. Stop the sandbox (also on failure or Ctrl-C).

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
    common = ["--uri", uri, "--stream", "quickstart", "--subscriber", "demo", "--commit-every", "1000"]
    proc = subprocess.Popen(
        [sys.executable, script, *common, "--max-records", str(records // 2), "--linger"],
        stdout=subprocess.PIPE,
        text=True,
    )
    assert proc.stdout is not None
    for line in proc.stdout:
        print(f"  [consumer 1] {line.rstrip()}", flush=True)
        if line.startswith("LINGER"):
            break
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    print("  [consumer 1] killed with SIGKILL", flush=True)
    result = subprocess.run(
        [sys.executable, script, *common, "--max-records", "1000"], capture_output=True, text=True, check=True
    )
    for line in result.stdout.splitlines():
        print(f"  [consumer 2] {line}", flush=True)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
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
        for extra in sorted(HERE.glob("demo_*.py")):
            step(extra.stem.removeprefix("demo_").replace("_", " "))
            run(str(extra), "--uri", uri)
    finally:
        step("stopping the sandbox")
        sandbox.stop()
    print("\ndemo finished", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
