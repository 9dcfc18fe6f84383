"""A process that stalls its event loop for a few milliseconds over and
over under a stall watchdog with a threshold below that, while other
threads start, push frames and exit: the conditions in which a watchdog
that reads running threads' frames without the interpreter lock (as
faulthandler's ``dump_traceback_later`` does) crashes the interpreter.

    python stall_watchdog_stress.py SECONDS

Prints ``survived N dumps`` and exits 0 if it lives through SECONDS.
"""

from __future__ import annotations

import asyncio
import logging
import sys
import threading
import time

from dlog.stall_watchdog import StallWatchdog


def recurse(depth: int) -> int:
    return 1 if depth == 0 else recurse(depth - 1) + recurse(depth - 1)


def churn(stop: threading.Event) -> None:
    while not stop.is_set():
        t = threading.Thread(target=recurse, args=(6,))
        t.start()
        t.join()


async def main(seconds: float) -> int:
    watchdog = StallWatchdog(0.0005, tick=0.001)
    task = asyncio.create_task(watchdog.run())
    stop = threading.Event()
    threads = [threading.Thread(target=churn, args=(stop,)) for _ in range(4)]
    for t in threads:
        t.start()
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        for _ in range(300):
            recurse(8)  # the loop's thread pushes and pops frames as it is dumped
        await asyncio.sleep(0)
    stop.set()
    for t in threads:
        t.join()
    task.cancel()
    await asyncio.gather(task, return_exceptions=True)
    return watchdog.dumps


if __name__ == "__main__":
    # The stacks are still read for every dump (the message is built before
    # it is logged); only the writing is skipped.
    quiet = logging.getLogger("dlog.stall_watchdog")
    quiet.propagate = False
    quiet.addHandler(logging.NullHandler())
    n = asyncio.run(main(float(sys.argv[1])))
    print(f"survived {n} dumps", flush=True)
