"""Background tasks an object starts and must not lose.

asyncio keeps only weak references to tasks: one nobody holds can be
garbage collected mid-flight, and one nobody awaits hides its exception.
Every component that starts work in the background (a writer's segment
rolls, a subscription's LAC publishing, a bookie's deferred replies, the
bookie watcher's refreshes) owns a :class:`BackgroundTasks`, which holds
them until done and cancels whatever is left when its owner closes.
"""

from __future__ import annotations

import asyncio
from collections.abc import Coroutine
from typing import Any, TypeVar

T = TypeVar("T")

__all__ = ["BackgroundTasks"]


class BackgroundTasks:
    """A set of running tasks, held until they finish."""

    __slots__ = ("_closed", "_loop", "_tasks")

    def __init__(self, loop: asyncio.AbstractEventLoop | None = None) -> None:
        self._tasks: set[asyncio.Task[Any]] = set()
        self._loop = loop
        self._closed = False

    def spawn(self, coro: Coroutine[Any, Any, T]) -> asyncio.Task[T] | None:
        """Run ``coro`` in the background. After :meth:`cancel_all` (the
        owner is closing) the coroutine is closed unrun and None returned."""
        if self._closed:
            coro.close()
            return None
        loop = self._loop
        if loop is None:
            loop = self._loop = asyncio.get_running_loop()
        task = loop.create_task(coro)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)
        return task

    def cancel_all(self, *, close: bool = True) -> list[asyncio.Task[Any]]:
        """Cancel every running task (and, with ``close``, refuse new ones);
        returns them, for an owner that wants to wait for them. The task
        calling this is spared: an owner closing itself from one of its own
        tasks (a bookie stopping itself) must get to the end of its close."""
        self._closed = self._closed or close
        current = asyncio.current_task()
        tasks = [t for t in self._tasks if t is not current]
        for t in tasks:
            t.cancel()
        return tasks
