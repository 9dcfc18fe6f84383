"""The chaos suite's short mode, inside ``make test``: about two minutes of
the whole workload (direct and proxy writers, tailing readers, consumers of
both stores, a migrating subscriber, retention, a Spark query) while every
kind of fault is injected at least once; then recovery, the checker's
verdict and the runner's own checks. ``make chaos`` is the long run.

Needs root (the small ledger disk is a tmpfs), as tests/fault/test_full_disk.py.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

from tests.chaos.faults import FAULTS

pytestmark = [pytest.mark.integration, pytest.mark.fault]

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.timeout(900)
def test_short_chaos_run_passes_with_every_fault_injected(tmp_path: Path) -> None:
    directory = tmp_path / "chaos"
    run = subprocess.Popen(
        [sys.executable, "-m", "tests.chaos.run", "--short", "--dir", str(directory)],
        cwd=ROOT,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        env=dict(os.environ, PYTHONUNBUFFERED="1"),
        start_new_session=True,
    )
    try:
        out, _ = run.communicate(timeout=780)
    except subprocess.TimeoutExpired:
        out = _stop(run) + "\n(the run had not ended after 780 s)"
    finally:
        _kill_what_is_left(run, directory)
    if run.returncode != 0:
        # Keep what the run left (pytest rotates its temporary directories).
        kept = Path(tempfile.gettempdir()) / f"dlog-chaos-failed-{os.getpid()}"
        shutil.copytree(directory, kept, dirs_exist_ok=True, ignore_dangling_symlinks=True)
        pytest.fail(f"the chaos run failed; its directory is kept in {kept}\n{out[-6000:]}")
    report = json.loads((directory / "report.json").read_text())
    assert report["passed"] is True
    assert set(report["faults"]) == {f.name for f in FAULTS}, report["faults"]
    invariants = report["checker"]["invariants"]
    for name, r in invariants.items():
        assert r["violation_count"] == 0, (name, r["violations"])
        assert r["checked"] > 0, f"{name} checked nothing"
    ops = report["checker"]["ops"]
    for f in ("write", "read", "commit", "position", "migrate", "truncate", "open"):
        assert ops[f]["ok"] > 0, (f, ops)
    assert f"seed {report['seed']}" in out
    for check in ("progress after healing", "spark caught up", "frame fuzz"):
        assert report["checks"][check]["ok"], report["checks"][check]


def _stop(run: subprocess.Popen[str]) -> str:
    """SIGTERM a run that overran (it stops its cluster) and return all it
    printed, from the start: the phases it got through say where it stuck."""
    with contextlib.suppress(ProcessLookupError):
        os.killpg(run.pid, signal.SIGTERM)
    try:
        out, _ = run.communicate(timeout=60)
    except subprocess.TimeoutExpired:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(run.pid, signal.SIGKILL)
        out, _ = run.communicate()
    return out


def _kill_what_is_left(run: subprocess.Popen[str], directory: Path) -> None:
    """A run cut short (a timeout) must not leave its cluster running or its
    tmpfs mounted."""
    with contextlib.suppress(ProcessLookupError):
        os.killpg(run.pid, signal.SIGKILL)
    for mount in Path("/proc/mounts").read_text().splitlines():
        target = mount.split()[1]
        if target.startswith(str(directory)):
            subprocess.run(["umount", "-l", target], check=False)
