"""``eventLoopStallDumpThresholdMs``: a bookie whose event loop is held
(here by a failpoint that never returns, on the loop) writes every
thread's stack to its log while it is held, naming what holds it, and
lives on."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import pytest

from dlog.sandbox.bookies import BookieProcess
from dlog.stall_watchdog import HEADER

pytestmark = [pytest.mark.integration, pytest.mark.fault]


def _held_bookie(tmp_path: Path, ledgers_uri: str, **settings: Any) -> BookieProcess:
    fp_dir = tmp_path / "failpoints"
    env = {"DLOG_FAILPOINTS": "bookie.gauges=pause", "DLOG_FAILPOINT_DIR": str(fp_dir)}
    bookie = BookieProcess(tmp_path / "bookie", ledgers_uri, env=env, **settings)
    bookie.start(wait=False)
    deadline = time.monotonic() + 60
    while not (fp_dir / "bookie.gauges").exists():
        assert bookie.process is not None and bookie.process.poll() is None, bookie.log_tail()
        assert time.monotonic() < deadline, f"the loop never got held\n{bookie.log_tail()}"
        time.sleep(0.05)
    return bookie


def test_a_held_loop_has_its_stacks_in_the_log(tmp_path: Path, ledgers_uri: str) -> None:
    bookie = _held_bookie(tmp_path, ledgers_uri, eventLoopStallDumpThresholdMs=300)
    try:
        deadline = time.monotonic() + 30
        while HEADER not in bookie.log_path.read_text():
            assert time.monotonic() < deadline, bookie.log_tail()
            time.sleep(0.1)
        log = bookie.log_path.read_text()  # one record per dump
        assert "in gauges" in log, log[-3000:]
        assert "failpoints.py" in log
        assert log.count(HEADER) == 1  # one stall, one dump
        assert bookie.process is not None and bookie.process.poll() is None
    finally:
        bookie.kill()


def test_no_dump_unless_asked(tmp_path: Path, ledgers_uri: str) -> None:
    bookie = _held_bookie(tmp_path, ledgers_uri)
    try:
        time.sleep(2.0)  # held for far longer than any threshold
        assert HEADER not in bookie.log_path.read_text()
    finally:
        bookie.kill()
