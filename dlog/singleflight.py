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
        its result (or exception) is shared."""
        pending = self._inflight.get(key)
        if pending is not None:
            return await asyncio.shield(pending)
        fut: asyncio.Future[T] = asyncio.get_running_loop().create_future()
        self._inflight[key] = fut
        try:
            result = await fn()
            fut.set_result(result)
            return result
        except BaseException as e:
            fut.set_exception(e)
            fut.exception()  # retrieved: the other waiters re-raise it themselves
            raise
        finally:
            del self._inflight[key]
