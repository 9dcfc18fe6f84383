"""One concurrent computation per key: later callers await the first.

Used where loading something is expensive and must happen once even when
many tasks ask at the same moment (taking ownership of a subscription,
connecting to a bookie).
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Hashable
from typing import Generic, TypeVar

T = TypeVar("T")


class SingleFlight(Generic[T]):
    def __init__(self) -> None:
        self._inflight: dict[Hashable, asyncio.Future[T]] = {}

    async def run(self, key: Hashable, fn: Callable[[], Awaitable[T]]) -> T:
        """``await fn()``, unless a call for ``key`` is already running: then
        its result (or exception) is shared.

        The call runs in the task of the caller that started it. If that
        caller is cancelled, the others are not: the first of them to notice
        starts the call again, and the rest wait for that one."""
        while True:
            pending = self._inflight.get(key)
            if pending is None:
                break
            try:
                return await asyncio.shield(pending)
            except asyncio.CancelledError:
                task = asyncio.current_task()
                if pending.cancelled() and task is not None and not task.cancelling():
                    continue  # the caller running it was cancelled, not this one
                raise
        fut: asyncio.Future[T] = asyncio.get_running_loop().create_future()
        self._inflight[key] = fut
        try:
            result = await fn()
            fut.set_result(result)
            return result
        except asyncio.CancelledError:
            fut.cancel()
            raise
        except BaseException as e:
            fut.set_exception(e)
            fut.exception()  # retrieved: the other waiters re-raise it themselves
            raise
        finally:
            del self._inflight[key]
