"""An asyncio event loop in a background thread, for the sync facades.

dlog is asyncio first. Scripts, REPLs and Spark executors want plain
calls, so each sync object submits its async twin's coroutines to a loop
running in a daemon thread (as kazoo runs its I/O off the caller's thread).

A loop thread belongs to the process that started it: a child made by
``fork`` inherits the Python object but not the thread, so
:func:`default_loop_thread` starts a new one in the child (it checks the
pid), and calls through an inherited one fail at once instead of hanging.
"""

from __future__ import annotations

import asyncio
import atexit
import concurrent.futures
import os
import threading
from collections.abc import Coroutine
from typing import Any, TypeVar

T = TypeVar("T")

_pid = os.getpid()


def current_pid() -> int:
    """``os.getpid()`` without the system call (refreshed in a forked
    child), for checks made once per record."""
    return _pid


class LoopThread:
    def __init__(self, name: str = "dlog-loop") -> None:
        self._ready = threading.Event()
        self._loop: asyncio.AbstractEventLoop | None = None
        #: The process this thread runs in.
        self.pid = os.getpid()
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

    def check_caller(self, owner: str = "this dlog event loop thread") -> None:
        """RuntimeError for a call that could only hang: from a process
        forked after this thread started (the thread is not there), or from
        the loop thread itself (it would wait on itself). ``owner`` names
        what the caller used, for the message."""
        if self.pid != _pid:
            raise RuntimeError(
                f"{owner} belongs to process {self.pid}, not to this process "
                f"({os.getpid()}): objects opened before a fork cannot be used in "
                "the child; open them again in the child"
            )
        if threading.current_thread() is self._thread:
            raise RuntimeError("a sync dlog call was made from inside its own event loop thread")

    def submit(
        self, coro: Coroutine[Any, Any, T], owner: str = "this dlog event loop thread"
    ) -> concurrent.futures.Future[T]:
        """Start ``coro`` on the loop; its outcome as a concurrent future
        (cancelling the future cancels the coroutine)."""
        try:
            self.check_caller(owner)
        except BaseException:
            coro.close()
            raise
        return asyncio.run_coroutine_threadsafe(coro, self.loop)

    def run(
        self,
        coro: Coroutine[Any, Any, T],
        timeout: float | None = None,
        owner: str = "this dlog event loop thread",
    ) -> T:
        """Run ``coro`` on the loop and wait for its result (or exception).

        If the wait ends early (``timeout``, KeyboardInterrupt), the coroutine
        is cancelled rather than left running unobserved."""
        return wait(self.submit(coro, owner), timeout)

    def stop(self) -> None:
        if self.pid != _pid:
            return  # inherited through fork: the thread is not in this process
        if self._loop is not None and self._thread.is_alive():
            self._loop.call_soon_threadsafe(self._loop.stop)
            self._thread.join(5)


def wait(fut: concurrent.futures.Future[T], timeout: float | None = None) -> T:
    """``fut.result(timeout)``, cancelling ``fut`` if the wait ends early
    (timeout, KeyboardInterrupt) rather than leaving it running unobserved."""
    try:
        return fut.result(timeout)
    except BaseException:
        if not fut.done():
            fut.cancel()
        raise


_default: LoopThread | None = None
_default_lock = threading.Lock()
#: Loop threads inherited through fork, kept referenced so that their loops
#: (which the child must never touch) are not finalized in the child.
_inherited: list[LoopThread] = []


def default_loop_thread() -> LoopThread:
    """The process-wide loop thread the sync facades share by default (a
    new one in a child process, even one forked after the parent made its own)."""
    global _default
    with _default_lock:
        if _default is None or _default.pid != _pid:
            if _default is not None:
                _inherited.append(_default)
            _default = LoopThread()
            atexit.register(_default.stop)
        return _default


def _after_fork_in_child() -> None:
    # Another thread may have held the lock at the moment of the fork.
    global _default_lock, _pid
    _default_lock = threading.Lock()
    _pid = os.getpid()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_after_fork_in_child)
