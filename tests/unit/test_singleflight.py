"""SingleFlight: one call per key, shared by every caller that asks meanwhile."""

from __future__ import annotations

import asyncio

import pytest

from dlog.singleflight import SingleFlight


class Gated:
    """A call that counts its runs and ends when released: with the run's
    number, or with ``error``; ``release`` None never ends."""

    def __init__(self, error: BaseException | None = None, *, gated: bool = True) -> None:
        self.calls = 0
        self.error = error
        self.release: asyncio.Event | None = asyncio.Event() if gated else None

    async def __call__(self) -> int:
        self.calls += 1
        n = self.calls
        await (self.release or asyncio.Event()).wait()
        if self.error is not None:
            raise self.error
        return n


async def test_callers_share_one_call_and_its_result() -> None:
    flight: SingleFlight[int] = SingleFlight()
    load = Gated()
    tasks = [asyncio.create_task(flight.run("k", load)) for _ in range(3)]
    await asyncio.sleep(0)
    assert load.release is not None
    load.release.set()
    assert await asyncio.gather(*tasks) == [1, 1, 1]
    assert load.calls == 1


async def test_callers_share_the_error() -> None:
    flight: SingleFlight[int] = SingleFlight()
    load = Gated(KeyError("gone"))
    tasks = [asyncio.create_task(flight.run("k", load)) for _ in range(2)]
    await asyncio.sleep(0)
    assert load.release is not None
    load.release.set()
    results = await asyncio.gather(*tasks, return_exceptions=True)
    assert all(isinstance(r, KeyError) for r in results)


async def test_a_cancelled_first_caller_does_not_cancel_the_others() -> None:
    """The call runs in the first caller's task; cancelling that caller (a
    read that no longer needs its answer) must not cancel the callers that
    joined it: one of them runs the call again."""
    flight: SingleFlight[int] = SingleFlight()
    load = Gated()
    first = asyncio.create_task(flight.run("k", load))
    await asyncio.sleep(0)
    others = [asyncio.create_task(flight.run("k", load)) for _ in range(2)]
    await asyncio.sleep(0)
    first.cancel()
    for _ in range(100):  # until one of the others has started it again
        if load.calls == 2 or all(t.done() for t in others):
            break
        await asyncio.sleep(0)
    await asyncio.sleep(0)
    assert load.release is not None
    load.release.set()
    assert await asyncio.gather(*others) == [2, 2]
    assert first.cancelled()
    assert load.calls == 2


async def test_a_cancelled_waiter_is_cancelled_and_the_call_goes_on() -> None:
    flight: SingleFlight[int] = SingleFlight()
    load = Gated()
    first = asyncio.create_task(flight.run("k", load))
    await asyncio.sleep(0)
    waiter = asyncio.create_task(flight.run("k", load))
    await asyncio.sleep(0)
    waiter.cancel()
    with pytest.raises(asyncio.CancelledError):
        await waiter
    assert load.release is not None
    load.release.set()
    assert await first == 1


async def test_callers_cancelled_together_all_end_cancelled() -> None:
    """When the first caller and a waiter are cancelled at once, the waiter
    must not take its cancellation for the first caller's and start over."""
    flight: SingleFlight[int] = SingleFlight()
    load = Gated(gated=False)
    first = asyncio.create_task(flight.run("k", load))
    await asyncio.sleep(0)
    waiter = asyncio.create_task(flight.run("k", load))
    await asyncio.sleep(0)
    first.cancel()
    waiter.cancel()
    await asyncio.wait([first, waiter], timeout=1.0)
    assert first.cancelled() and waiter.cancelled()
    assert load.calls == 1
