"""An asyncio event loop in a background thread, for the sync facades.

dlog is asyncio first. Scripts, REPLs and Spark executors want plain
calls, so each sync object submits its async twin's coroutines to a loop
running in a daemon thread (as kazoo runs its I/O off the caller's thread).
"""

from __future__ import annotations

import asyncio
import atexit
import threading
from collections.abc import Coroutine
from typing import Any, TypeVar

T = TypeVar("T")


class LoopThread:
    def __init__(self, name: str = "dlog-loop") -> None:
        self._ready = threading.Event()
        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread = threading.Thread(target=self._run, name=name, daemon=True)
        self._thread.start()
        self._ready.wait()

    def _run(self) -> None:
        try:
            import uvloop

            loop: asyncio.AbstractEventLoop = uvloop.new_event_loop()
        except ImportError:
            loop = asyncio.new_event_loop()
        asyncio.set_event_loop(loop)
        self._loop = loop
        self._ready.set()
        loop.run_forever()
        loop.run_until_complete(loop.shutdown_asyncgens())
        loop.close()

    @property
    def loop(self) -> asyncio.AbstractEventLoop:
        assert self._loop is not None
        return self._loop

    def run(self, coro: Coroutine[Any, Any, T], timeout: float | None = None) -> T:
        """Run ``coro`` on the loop and wait for its result (or exception)."""
        if threading.current_thread() is self._thread:
            raise RuntimeError("a sync dlog call was made from inside its own event loop thread")
        return asyncio.run_coroutine_threadsafe(coro, self.loop).result(timeout)

    def stop(self) -> None:
        if self._loop is not None and self._thread.is_alive():
            self._loop.call_soon_threadsafe(self._loop.stop)
            self._thread.join(5)


_default: LoopThread | None = None
_default_lock = threading.Lock()


def default_loop_thread() -> LoopThread:
    """The process-wide loop thread the sync facades share by default."""
    global _default
    with _default_lock:
        if _default is None:
            _default = LoopThread()
            atexit.register(_default.stop)
        return _default
