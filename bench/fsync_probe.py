"""What the disk alone does meanwhile: 1 KiB write+fdatasync at a fixed rate.

    python bench/fsync_probe.py DIR RATE SECONDS

Appends 1 KiB and fdatasyncs a file in DIR (on the disk under test) RATE
times a second for SECONDS, in a process of its own so it takes nothing
from the process being measured, then prints one JSON line: the
fdatasync latency percentiles, the longest, and how many took over 5 ms.
A benchmark runs it beside a latency window: a record cannot be durable
sooner than the disk syncs it, so when the disk stalls, so does every
record in flight.
"""

from __future__ import annotations

import json
import os
import sys
import time
from pathlib import Path

from common import percentiles


def probe(directory: Path, rate: float, seconds: float) -> dict[str, object]:
    path = directory / f"fsync-probe-{os.getpid()}.dat"
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    block = os.urandom(1024)
    latencies: list[float] = []
    try:
        start = time.monotonic()
        for i in range(max(1, round(rate * seconds))):
            delay = start + i / rate - time.monotonic()
            if delay > 0:
                time.sleep(delay)
            t0 = time.perf_counter()
            os.write(fd, block)
            os.fdatasync(fd)
            latencies.append(time.perf_counter() - t0)
    finally:
        os.close(fd)
        path.unlink(missing_ok=True)
    return {
        "rate_per_s": rate,
        "fdatasyncs": len(latencies),
        **percentiles(latencies),
        "over_5ms": sum(lat > 0.005 for lat in latencies),
    }


if __name__ == "__main__":
    if len(sys.argv) != 4:
        raise SystemExit("usage: fsync_probe.py DIR RATE SECONDS")
    print(json.dumps(probe(Path(sys.argv[1]), float(sys.argv[2]), float(sys.argv[3]))), flush=True)
