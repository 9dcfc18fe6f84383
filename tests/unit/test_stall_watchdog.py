"""The event-loop stall watchdog: a blocked loop gets every thread's stack
written out while it is blocked; a loop that runs, or a watchdog that was
stopped, writes nothing."""

from __future__ import annotations

import asyncio
import time
from pathlib import Path

import pytest

from dlog.stall_watchdog import StallWatchdog


def hold_the_loop(seconds: float) -> None:
    time.sleep(seconds)


def test_a_blocked_loop_has_its_stacks_dumped_and_a_running_one_not(tmp_path: Path) -> None:
    path = tmp_path / "dump"
    with open(path, "w") as f:

        async def main() -> tuple[str, str]:
            # A threshold far above any scheduling hiccup of a loaded machine,
            # and a running loop watched for longer than it (re-armed, so
            # nothing is written).
            task = asyncio.create_task(StallWatchdog(1.5, tick=0.02, file=f).run())
            await asyncio.sleep(2.0)
            running = path.read_text()
            hold_the_loop(2.5)
            await asyncio.sleep(0)
            blocked = path.read_text()
            task.cancel()
            await asyncio.gather(task, return_exceptions=True)
            return running, blocked

        running, blocked = asyncio.run(main())
    assert running == ""
    assert "Timeout" in blocked
    assert "hold_the_loop" in blocked


def test_a_stopped_watchdog_dumps_nothing(tmp_path: Path) -> None:
    path = tmp_path / "dump"
    with open(path, "w") as f:

        async def main() -> None:
            task = asyncio.create_task(StallWatchdog(0.2, tick=0.02, file=f).run())
            await asyncio.sleep(0.1)
            task.cancel()
            await asyncio.gather(task, return_exceptions=True)
            hold_the_loop(0.6)

        asyncio.run(main())
    assert path.read_text() == ""


def test_a_threshold_must_be_positive() -> None:
    with pytest.raises(ValueError, match="positive"):
        StallWatchdog(0)
