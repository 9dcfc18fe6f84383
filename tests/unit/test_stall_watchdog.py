"""The event-loop stall watchdog: a blocked loop gets every thread's stack
logged while it is blocked, once per stall; a loop that runs, or a watchdog
that was stopped, logs nothing."""

from __future__ import annotations

import asyncio
import logging
import threading
import time

import pytest

from dlog.stall_watchdog import HEADER, StallWatchdog


def hold_the_loop(seconds: float) -> None:
    time.sleep(seconds)


def spin_beside(stop: threading.Event) -> None:
    stop.wait()


def dumps(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [r.getMessage() for r in caplog.records if r.name == "dlog.stall_watchdog"]


def test_a_blocked_loop_has_its_stacks_logged_once_and_a_running_one_not(
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.WARNING, logger="dlog.stall_watchdog")

    async def main() -> tuple[list[str], list[str], int]:
        # A threshold far above any scheduling hiccup of a loaded machine,
        # and a running loop watched for longer than it (re-armed, so
        # nothing is logged).
        watchdog = StallWatchdog(1.5, tick=0.02)
        task = asyncio.create_task(watchdog.run())
        stop = threading.Event()
        beside = threading.Thread(target=spin_beside, args=(stop,), name="the-other-thread")
        beside.start()
        try:
            await asyncio.sleep(2.0)
            running = dumps(caplog)
            hold_the_loop(4.0)  # over two thresholds: still one dump
            await asyncio.sleep(0)
            blocked = dumps(caplog)
        finally:
            stop.set()
            beside.join()
            task.cancel()
            await asyncio.gather(task, return_exceptions=True)
        return running, blocked, watchdog.dumps

    running, blocked, count = asyncio.run(main())
    assert running == []
    assert len(blocked) == 1 and count == 1, blocked
    assert blocked[0].startswith(HEADER)
    assert "in hold_the_loop" in blocked[0]  # the loop's own stack, innermost first
    assert "(the-other-thread)" in blocked[0] and "in spin_beside" in blocked[0]
    assert "dlog-stall-watchdog" not in blocked[0]  # not its own


def test_each_stall_is_logged(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.WARNING, logger="dlog.stall_watchdog")

    async def main() -> int:
        watchdog = StallWatchdog(0.3, tick=0.02)
        task = asyncio.create_task(watchdog.run())
        await asyncio.sleep(0.1)
        for _ in range(2):
            hold_the_loop(1.0)
            await asyncio.sleep(0.2)  # ticks again in between
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)
        return watchdog.dumps

    assert asyncio.run(main()) == 2
    assert len(dumps(caplog)) == 2


def test_a_stopped_watchdog_logs_nothing(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.WARNING, logger="dlog.stall_watchdog")

    async def main() -> None:
        task = asyncio.create_task(StallWatchdog(0.2, tick=0.02).run())
        await asyncio.sleep(0.1)
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)
        hold_the_loop(0.6)

    asyncio.run(main())
    assert dumps(caplog) == []
    assert not any(t.name == "dlog-stall-watchdog" for t in threading.enumerate())


def test_a_threshold_must_be_positive() -> None:
    with pytest.raises(ValueError, match="positive"):
        StallWatchdog(0)
