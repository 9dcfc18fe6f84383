"""Run a coroutine function every N seconds on the event loop, until stopped.

The checkpoint, the disk monitor and the writer's retention purge all need
this; a failure of one run is logged and the next run still happens.
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
    ) -> None:
        self.interval = interval
        self.fn = fn
        self.name = name
        self.run_first = run_first
        self._task: asyncio.Task[None] | None = None

    async def _run(self) -> None:
        if not self.run_first:
            await asyncio.sleep(self.interval)
        while True:
            try:
                result = self.fn()
                if asyncio.iscoroutine(result) or isinstance(result, asyncio.Future):
                    await result
            except asyncio.CancelledError:
                raise
            except Exception as e:
                log.error("%s failed: %s", self.name, e, exc_info=log.isEnabledFor(logging.DEBUG))
            await asyncio.sleep(self.interval)

    def start(self) -> None:
        if self._task is None:
            self._task = asyncio.get_running_loop().create_task(self._run(), name=self.name)

    async def stop(self) -> None:
        task, self._task = self._task, None
        if task is not None:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task
