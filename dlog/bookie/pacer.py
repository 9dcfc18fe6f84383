"""Pacing of a background write-cache flush, so a checkpoint does not halve
the event loop's capacity while it runs.

The flush thread and the event loop share one interpreter lock. A flush
does a few microseconds of Python per entry (sorting, locations, index
keys); run flat out, a checkpoint's hundreds of thousands of entries take
about half of the lock for a second or more, and a loop that was half busy
serving adds then falls behind: every add in that second waits. Paced, the
flush sleeps after each slice of its work long enough that its share of
CPU time stays under ``dbStorage_flushMaxCpuPercent``, so the same work is
spread over a few seconds of a checkpoint interval instead.

Pacing yields to urgency: it stops while the active half of the write
cache is over half full (adds would soon have to wait for this flush), and
for the flush at shutdown.
"""

from __future__ import annotations

import time
from collections.abc import Callable

#: Longest single pause: a slice that took long (a slow disk) is not
#: followed by an equally long sleep.
MAX_PAUSE = 0.05


class FlushPacer:
    """Called between slices of a flush; sleeps to keep its CPU share."""

    def __init__(
        self,
        max_cpu_percent: int,
        *,
        urgent: Callable[[], bool] = lambda: False,
        cpu_clock: Callable[[], float] = time.thread_time,
        sleep: Callable[[float], None] = time.sleep,
    ) -> None:
        if not 1 <= max_cpu_percent <= 100:
            raise ValueError(f"max_cpu_percent must be 1..100, not {max_cpu_percent}")
        self.max_cpu_percent = max_cpu_percent
        self._urgent = urgent
        self._cpu = cpu_clock
        self._sleep = sleep
        self._mark = 0.0
        #: Seconds slept so far (by every flush), for metrics and tests.
        self.slept = 0.0

    def start(self) -> None:
        """A flush begins: its CPU time counts from here (call on its thread)."""
        self._mark = self._cpu()

    def pause(self) -> None:
        """Between two slices: sleep in proportion to the CPU the last one
        used, or just offer the lock to the loop when pacing is off."""
        used = self._cpu() - self._mark
        if self.max_cpu_percent < 100 and used > 0 and not self._urgent():
            delay = min(MAX_PAUSE, used * (100 - self.max_cpu_percent) / self.max_cpu_percent)
            self._sleep(delay)
            self.slept += delay
        else:
            self._sleep(0)
        self._mark = self._cpu()
