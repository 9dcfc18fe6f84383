"""A connect cancelled in the very loop pass its attempt ends stays cancelled.

Python 3.11's ``asyncio.wait_for`` returned the finished attempt's result (or
raised its error) instead: the cancellation was lost. A writer's best-effort
LAC send to a bookie killed -9 then kept retrying after ``asyncio.run`` had
cancelled it, and died at shutdown with a traceback on stderr.

The attempt is a future the test ends itself, so the race is exact: the
attempt fails (or succeeds) and the task is cancelled before either wakes.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import Any

import pytest

from dlog.ledger.bookie_client import BookieClient, BookieClientPool
from dlog.proxy.client import _Connection as ProxyConnection


def _park_connects(monkeypatch: pytest.MonkeyPatch) -> asyncio.Future[Any]:
    """Make the running loop's connects wait on one future the test ends."""
    loop = asyncio.get_running_loop()
    attempt: asyncio.Future[Any] = loop.create_future()

    async def create_connection(*args: object, **kwargs: object) -> Any:
        return await attempt

    monkeypatch.setattr(loop, "create_connection", create_connection)
    return attempt


async def _until_parked(attempt: asyncio.Future[Any]) -> None:
    for _ in range(20):  # a few passes: through any wrapper task, onto the attempt
        await asyncio.sleep(0)
    assert not attempt.done()


CONNECTS: dict[str, Callable[[], Awaitable[object]]] = {
    "bookie client": lambda: BookieClient("127.0.0.1:3181", connect_timeout=5).connect(),
    "bookie pool": lambda: BookieClientPool().get("127.0.0.1:3181"),
    "proxy": lambda: ProxyConnection("127.0.0.1:8000", connect_timeout=5)._connect(),
}


@pytest.mark.parametrize("what", sorted(CONNECTS))
async def test_a_connect_cancelled_as_its_attempt_fails_stays_cancelled(
    monkeypatch: pytest.MonkeyPatch, what: str
) -> None:
    attempt = _park_connects(monkeypatch)
    task = asyncio.ensure_future(CONNECTS[what]())
    await _until_parked(attempt)
    attempt.set_exception(ConnectionRefusedError(111, "Connection refused"))
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task


async def test_a_bookie_connect_cancelled_as_its_attempt_succeeds_stays_cancelled(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    attempt = _park_connects(monkeypatch)
    client = BookieClient("127.0.0.1:3181", connect_timeout=5)
    task = asyncio.ensure_future(client.connect())
    await _until_parked(attempt)
    attempt.set_result((object(), object()))
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert not client.connected
