"""Run a coroutine function every N seconds on the event loop, until stopped.

The checkpoint, the disk monitor and the writer's retention purge all need
this; a failure of one run is logged and the next run still happens.

Two schedules, as Java's ScheduledExecutorService has: a fixed delay
between the end of one run and the start of the next (the default), or a
fixed rate, a run every ``interval`` from the first whatever each one
takes (BookKeeper's SyncThread checkpoints so). A fixed-rate run that
overruns its slot is followed by the next one at once, never by a burst
catching up on the slots it missed, and runs never overlap.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Awaitable, Callable

log = logging.getLogger(__name__)


class PeriodicTask:
    def __init__(
        self,
        interval: float,
        fn: Callable[[], Awaitable[object] | object],
        name: str,
        *,
        run_first: bool = False,
        fixed_rate: bool = False,
        clock: Callable[[], float] | None = None,
        sleep: Callable[[float], Awaitable[object]] = asyncio.sleep,
    ) -> None:
        self.interval = interval
        self.fn = fn
        self.name = name
        self.run_first = run_first
        self.fixed_rate = fixed_rate
        self._clock = clock  # default: the loop's clock (tests pass their own)
        self._sleep = sleep
        self._task: asyncio.Task[None] | None = None

    async def _run(self) -> None:
        now = self._clock or asyncio.get_running_loop().time
        due = now() + (0.0 if self.run_first else self.interval)
        while True:
            delay = due - now()
            if delay > 0:
                await self._sleep(delay)
            try:
                result = self.fn()
                if asyncio.iscoroutine(result) or isinstance(result, asyncio.Future):
                    await result
            except asyncio.CancelledError:
                raise
            except Exception as e:
                log.error("%s failed: %s", self.name, e, exc_info=log.isEnabledFor(logging.DEBUG))
            # Fixed rate: the slot after this run's own, or now if it overran.
            due = max(due + self.interval, now()) if self.fixed_rate else now() + self.interval

    def start(self) -> None:
        if self._task is None:
            self._task = asyncio.get_running_loop().create_task(self._run(), name=self.name)

    async def stop(self) -> None:
        task, self._task = self._task, None
        if task is not None:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task
