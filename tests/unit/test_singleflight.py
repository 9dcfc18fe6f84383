"""SingleFlight: one call per key, shared by every caller that asks meanwhile."""

from __future__ import annotations

import asyncio

import pytest

from dlog.singleflight import SingleFlight


async def test_callers_share_one_call_and_its_result() -> None:
    flight: SingleFlight[int] = SingleFlight()
    calls = 0
    release = asyncio.Event()

    async def load() -> int:
        nonlocal calls
        calls += 1
        await release.wait()
        return 7

    tasks = [asyncio.create_task(flight.run("k", load)) for _ in range(3)]
    await asyncio.sleep(0)
    release.set()
    assert await asyncio.gather(*tasks) == [7, 7, 7]
    assert calls == 1


async def test_callers_share_the_error() -> None:
    flight: SingleFlight[int] = SingleFlight()
    release = asyncio.Event()

    async def load() -> int:
        await release.wait()
        raise KeyError("gone")

    tasks = [asyncio.create_task(flight.run("k", load)) for _ in range(2)]
    await asyncio.sleep(0)
    release.set()
    results = await asyncio.gather(*tasks, return_exceptions=True)
    assert all(isinstance(r, KeyError) for r in results)


async def test_a_cancelled_first_caller_does_not_cancel_the_others() -> None:
    """The call runs in the first caller's task; cancelling that caller (a
    read that no longer needs its answer) must not cancel the callers that
    joined it: one of them runs the call again."""
    flight: SingleFlight[int] = SingleFlight()
    calls = 0
    release = asyncio.Event()

    async def load() -> int:
        nonlocal calls
        calls += 1
        await release.wait()
        return calls

    first = asyncio.create_task(flight.run("k", load))
    await asyncio.sleep(0)
    others = [asyncio.create_task(flight.run("k", load)) for _ in range(2)]
    await asyncio.sleep(0)
    first.cancel()
    for _ in range(100):  # until one of the others has started it again
        if calls == 2 or all(t.done() for t in others):
            break
        await asyncio.sleep(0)
    await asyncio.sleep(0)
    release.set()
    assert await asyncio.gather(*others) == [2, 2]
    assert first.cancelled()
    assert calls == 2


async def test_a_cancelled_waiter_is_cancelled_and_the_call_goes_on() -> None:
    flight: SingleFlight[int] = SingleFlight()
    release = asyncio.Event()

    async def load() -> int:
        await release.wait()
        return 1

    first = asyncio.create_task(flight.run("k", load))
    await asyncio.sleep(0)
    waiter = asyncio.create_task(flight.run("k", load))
    await asyncio.sleep(0)
    waiter.cancel()
    with pytest.raises(asyncio.CancelledError):
        await waiter
    release.set()
    assert await first == 1


async def test_callers_cancelled_together_all_end_cancelled() -> None:
    """When the first caller and a waiter are cancelled at once, the waiter
    must not take its cancellation for the first caller's and start over."""
    flight: SingleFlight[int] = SingleFlight()
    calls = 0

    async def load() -> int:
        nonlocal calls
        calls += 1
        await asyncio.Event().wait()
        return 1

    first = asyncio.create_task(flight.run("k", load))
    await asyncio.sleep(0)
    waiter = asyncio.create_task(flight.run("k", load))
    await asyncio.sleep(0)
    first.cancel()
    waiter.cancel()
    await asyncio.wait([first, waiter], timeout=1.0)
    assert first.cancelled() and waiter.cancelled()
    assert calls == 1
