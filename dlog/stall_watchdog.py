"""Stack dumps of a stalled event loop, to find what held it.

The loop re-arms a timer on every tick. The timer is faulthandler's: its
watchdog is a C thread that needs no interpreter lock, so when the loop
misses its re-arm by more than the threshold, every thread's Python stack
is written out while the stall is still going on. That includes a thread
holding the lock inside a C call (a RocksDB write, a page fault in a big
free), which a sampler written in Python could only see once the call had
returned. One dump per stall: the next tick re-arms.

faulthandler has one such timer per process: run one watchdog per process.
"""

from __future__ import annotations

import asyncio
import faulthandler
import sys
from typing import TextIO


class StallWatchdog:
    """Dump every thread's stack to ``file`` when the running loop has not
    run for ``threshold`` seconds (see the module docstring)."""

    def __init__(self, threshold: float, *, tick: float = 0.1, file: TextIO | None = None) -> None:
        if threshold <= 0 or tick <= 0:
            raise ValueError(f"threshold and tick must be positive, not {threshold}, {tick}")
        self.threshold = threshold
        self.tick = tick
        self.file = file if file is not None else sys.stderr

    async def run(self) -> None:
        """Re-arm until cancelled; the timer goes with it."""
        try:
            while True:
                faulthandler.dump_traceback_later(
                    self.tick + self.threshold, repeat=False, file=self.file
                )
                await asyncio.sleep(self.tick)
        finally:
            faulthandler.cancel_dump_traceback_later()
