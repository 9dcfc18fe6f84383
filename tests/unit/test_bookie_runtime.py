"""The bookie's process tuning (dlog.bookie.main.tune_runtime)."""

from __future__ import annotations

import subprocess
import sys

SCRIPT = """
import sys
from pathlib import Path

def rss_mb():
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024

if sys.argv[1] == "keep":
    from dlog.bookie.main import keep_freed_memory
    assert keep_freed_memory()
base = rss_mb()
blocks = [[bytes(1000) + bytes([i % 251]) for i in range(4096)] for _ in range(60)]
peak = rss_mb()
while blocks:
    blocks.pop()
print(round((rss_mb() - base) / (peak - base), 2))
"""


def kept_fraction(mode: str) -> float:
    out = subprocess.run(
        [sys.executable, "-c", SCRIPT, mode], capture_output=True, text=True, check=True
    )
    return float(out.stdout)


def test_freed_write_cache_memory_stays_with_the_process() -> None:
    """A flushed write-cache half (here 240 MB of 1 KB objects) is not
    handed back to the kernel, whose unmapping would stall the loop; the
    control shows glibc's default does give it back."""
    assert kept_fraction("keep") > 0.8
    assert kept_fraction("default") < 0.2


FAULTS = """
import ctypes
import resource
import sys

from dlog.bookie.main import M_TRIM_THRESHOLD, keep_freed_memory

if sys.argv[1] == "keep":
    assert keep_freed_memory()
else:  # the trim threshold alone, as the bookie once set it
    assert ctypes.CDLL(None).mallopt(M_TRIM_THRESHOLD, 2**31 - 1)
data = b"x" * 8_000_000
copies = [data[i:] for i in range(3)]  # the heap has seen blocks of this size
del copies
before = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
for i in range(100):
    block = data[i % 7 :]  # a fresh 8 MB block, written, then freed
    del block
print((resource.getrusage(resource.RUSAGE_SELF).ru_minflt - before) / 100)
"""


def faults_per_block(mode: str) -> float:
    out = subprocess.run(
        [sys.executable, "-c", FAULTS, mode], capture_output=True, text=True, check=True
    )
    return float(out.stdout)


def test_large_blocks_are_reused_not_mapped_afresh() -> None:
    """A large block (an entry read off a socket, a journal group) is taken
    from the heap and reused once freed, not mapped and faulted in page by
    page each time (an 8 MB block: about 2,000 faults); the control shows
    the trim threshold alone leaves glibc mapping such blocks."""
    assert faults_per_block("keep") < 20
    assert faults_per_block("trim-only") > 1000


def test_gc_pauses_are_observed_by_generation() -> None:
    import gc

    from prometheus_client import CollectorRegistry

    from dlog.bookie.metrics import BookieMetrics, observe_gc_pauses

    metrics = BookieMetrics(CollectorRegistry())
    before = list(gc.callbacks)
    observe_gc_pauses(metrics.gc_pause)
    try:
        gc.collect(2)
        gc.collect(0)
    finally:
        gc.callbacks[:] = before
    r = metrics.registry
    assert r.get_sample_value("bookie_python_gc_pause_seconds_count", {"generation": "2"}) >= 1
    assert r.get_sample_value("bookie_python_gc_pause_seconds_count", {"generation": "0"}) >= 1
    assert r.get_sample_value("bookie_python_gc_pause_seconds_sum", {"generation": "2"}) > 0
