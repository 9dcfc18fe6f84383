"""Stack dumps of a stalled event loop, to find what held it.

The loop stamps a heartbeat on every tick; a watchdog thread of its own
checks it. When the loop is later than the threshold past a tick it was
due, every other thread's Python stack is logged (one WARNING per stall;
the next tick re-arms), taken with ``sys._current_frames()``.

Why not faulthandler's ``dump_traceback_later``, which needs no
interpreter lock and so could show a thread while it holds the lock in a
C call: its watchdog walks the other threads' frames while they run, and
that crashes the interpreter now and then (a frame being pushed or a
thread exiting under it; CPython issues 116008, 131580, 140815). A bookie
crashed that way in ``bench/bookie_add.py`` with a 5 ms threshold, and a
stress test (``tests/fault/test_stall_watchdog_stress.py``) crashed it in
most 4-second runs. A diagnostic must not take the bookie down, so this
one reads frames only while holding the lock, as ``sys._current_frames``
does. The cost: a stall that is one C call holding the lock (a long
RocksDB write) is seen only as it ends; the thread that made it then
still runs the Python right after the call for up to a switch interval,
so its stack still names the caller.
"""

from __future__ import annotations

import asyncio
import logging
import sys
import threading
import time
from types import FrameType

log = logging.getLogger(__name__)

#: Every dump starts with this, so a log can be searched for dumps.
HEADER = "event loop stalled"


def format_stacks(late: float, threshold: float, skip: int | None = None) -> str:
    """Every thread's stack but ``skip``'s (by ident), innermost frame
    first, as faulthandler lays them out: ``Thread 0x...`` then a
    ``File "...", line N in name`` line per frame."""
    names = {t.ident: t.name for t in threading.enumerate()}
    lines = [
        f"{HEADER}: {late * 1000:.0f} ms past its tick (threshold {threshold * 1000:.0f} ms); "
        "the stacks of its threads, most recent call first:"
    ]
    for ident, frame in sys._current_frames().items():
        if ident == skip:
            continue
        lines.append(f"Thread 0x{ident:016x} ({names.get(ident, 'unknown')}):")
        # Names and line numbers only: no source lines read from disk while
        # the dump holds the interpreter lock.
        f: FrameType | None = frame
        while f is not None:
            code = f.f_code
            lines.append(f'  File "{code.co_filename}", line {f.f_lineno} in {code.co_name}')
            f = f.f_back
    return "\n".join(lines)


class StallWatchdog:
    """Log every thread's stack when the running loop has been more than
    ``threshold`` seconds late for a tick (see the module docstring)."""

    def __init__(self, threshold: float, *, tick: float = 0.1) -> None:
        if threshold <= 0 or tick <= 0:
            raise ValueError(f"threshold and tick must be positive, not {threshold}, {tick}")
        self.threshold = threshold
        self.tick = tick
        #: Stalls dumped so far.
        self.dumps = 0
        self._due = 0.0  # when the loop's next tick is due (monotonic)
        self._stop = threading.Event()

    async def run(self) -> None:
        """Tick until cancelled; the watchdog thread stops with it."""
        self._due = time.monotonic() + self.tick
        self._stop.clear()
        thread = threading.Thread(target=self._watch, name="dlog-stall-watchdog", daemon=True)
        thread.start()
        try:
            while True:
                await asyncio.sleep(self.tick)
                self._due = time.monotonic() + self.tick
        finally:
            self._stop.set()

    def _watch(self) -> None:
        dumped_for = None  # the tick whose stall was dumped
        while not self._stop.is_set():
            due = self._due
            now = time.monotonic()
            if now < due + self.threshold:
                self._stop.wait(due + self.threshold - now)
                continue
            if due != dumped_for and not self._stop.is_set():
                dumped_for = due
                self.dumps += 1
                log.warning("%s", format_stacks(now - due, self.threshold, threading.get_ident()))
            # Until the loop ticks again: one dump per stall.
            self._stop.wait(min(self.tick, self.threshold))
