"""Waiting, in a test, for something that happens in the background.

One helper for every test that polls: a check that is a plain function or
a coroutine function, and a failure that names what never happened.
"""

from __future__ import annotations

import asyncio
import inspect
import time
from collections.abc import Awaitable, Callable


async def eventually(
    check: Callable[[], bool | Awaitable[bool]],
    timeout: float = 20.0,
    what: str = "the condition",
    *,
    interval: float = 0.05,
) -> None:
    """Return once ``check()`` (awaited if it returns an awaitable) is
    true; fail the test if it is still false after ``timeout`` seconds.
    The timeout only bounds a failing test: a passing one returns as soon
    as the check holds."""
    deadline = time.monotonic() + timeout
    while True:
        ok = check()
        if inspect.isawaitable(ok):
            ok = await ok
        if ok:
            return
        assert time.monotonic() < deadline, f"not within {timeout} s: {what}"
        await asyncio.sleep(interval)
