"""PeriodicTask's two schedules, on a virtual clock: a fixed delay after
each run, or a fixed rate (the checkpoint's, as BookKeeper's SyncThread)."""

from __future__ import annotations

import asyncio

import pytest

from dlog.bookie.checkpoint import Checkpointer
from dlog.periodic import PeriodicTask


class VirtualTime:
    """A clock that only moves when the task sleeps or a run takes time."""

    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now

    async def sleep(self, seconds: float) -> None:
        self.now += seconds
        await asyncio.sleep(0)


async def run_starts(durations: list[float], **kwargs: object) -> list[float]:
    """When each run started, for runs taking ``durations`` seconds each."""
    clock = VirtualTime()
    starts: list[float] = []
    finished = asyncio.Event()

    async def work() -> None:
        starts.append(clock.now)
        clock.now += durations[len(starts) - 1]
        if len(starts) == len(durations):
            finished.set()
            await asyncio.Event().wait()  # hold here until stopped

    task = PeriodicTask(10.0, work, "test", clock=clock, sleep=clock.sleep, **kwargs)  # type: ignore[arg-type]
    task.start()
    await asyncio.wait_for(finished.wait(), 5)
    await task.stop()
    return starts


async def test_fixed_delay_waits_an_interval_after_each_run() -> None:
    assert await run_starts([3.0, 0.5, 12.0, 1.0]) == [10.0, 23.0, 33.5, 55.5]


async def test_fixed_rate_keeps_slots_whatever_a_run_takes() -> None:
    assert await run_starts([3.0, 0.5, 1.0], fixed_rate=True) == [10.0, 20.0, 30.0]


async def test_fixed_rate_overrun_runs_next_at_once_without_a_burst() -> None:
    # The second run overruns two slots (30, 40): the third starts when it
    # ends, and the fourth a whole interval later, not at once to catch up.
    starts = await run_starts([1.0, 25.0, 1.0, 1.0], fixed_rate=True)
    assert starts == [10.0, 20.0, 45.0, 55.0]


async def test_run_first_starts_at_once() -> None:
    assert await run_starts([1.0, 1.0], run_first=True, fixed_rate=True) == [0.0, 10.0]


async def test_a_failing_run_keeps_the_schedule() -> None:
    clock = VirtualTime()
    starts: list[float] = []
    done = asyncio.Event()

    def boom() -> None:
        starts.append(clock.now)
        clock.now += 2.0
        if len(starts) == 3:
            done.set()
        raise RuntimeError("boom")

    task = PeriodicTask(5.0, boom, "boom", fixed_rate=True, clock=clock, sleep=clock.sleep)
    task.start()
    await asyncio.wait_for(done.wait(), 5)
    await task.stop()
    assert len(starts) >= 3
    assert starts == [5.0 * (i + 1) for i in range(len(starts))]


@pytest.mark.parametrize("interval_ms", [10_000, 60_000])
def test_checkpoint_runs_at_a_fixed_rate(interval_ms: int) -> None:
    cp = Checkpointer([], None, [], interval_ms)  # type: ignore[arg-type]
    assert cp._periodic.fixed_rate
    assert cp._periodic.interval == interval_ms / 1000
