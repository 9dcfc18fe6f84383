"""The subscription examples, run as a user runs them (subprocesses) against
one sandbox (ZooKeeper and 3 bookie processes) started for the module."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from dlog.dlsn import DLSN
from dlog.sandbox.cluster import Sandbox

pytestmark = pytest.mark.integration

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"


def run(example: str, *args: str, timeout: float = 60) -> str:
    r = subprocess.run(
        [sys.executable, str(EXAMPLES / example), *args],
        capture_output=True,
        text=True,
        timeout=timeout,
        stdin=subprocess.DEVNULL,
    )
    assert r.returncode == 0, f"exit {r.returncode}\nstdout:\n{r.stdout}\nstderr:\n{r.stderr}"
    return r.stdout


def parse_dlsn(text: str) -> DLSN:
    return DLSN(*map(int, text.split("/")))


_RECORD = re.compile(r"^record (\S+) txid=(\d+) payload=record-(\d+)$")
_COMMITTED = re.compile(r"^committed (\S+) ")


def records_of(lines: list[str]) -> list[tuple[DLSN, int]]:
    out = []
    for line in lines:
        m = _RECORD.match(line)
        if m:
            assert m.group(2) == m.group(3), line
            out.append((parse_dlsn(m.group(1)), int(m.group(2))))
    return out


def commits_of(lines: list[str]) -> list[DLSN]:
    return [parse_dlsn(m.group(1)) for line in lines if (m := _COMMITTED.match(line))]


def resumed_after(lines: list[str]) -> DLSN | None:
    for line in lines:
        if line.startswith("resuming after "):
            return parse_dlsn(line.split()[2])
        if "starts at the beginning" in line:
            return None
    raise AssertionError(f"no start line in {lines[:3]}")


def test_at_least_once_consumer_resumes_after_kill_9(sandbox: Sandbox) -> None:
    uri = sandbox.namespace_uri
    total, every = 300, 10
    common = ["--uri", uri, "--stream", "alo", "--commit-every", str(every), "--print-records"]
    proc = subprocess.Popen(
        [
            sys.executable,
            str(EXAMPLES / "at_least_once_consumer.py"),
            *common,
            "--produce",
            str(total),
            "--work-ms",
            "2",
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    first: list[str] = []
    try:
        assert proc.stdout is not None
        seen = 0
        for line in proc.stdout:
            first.append(line.rstrip("\n"))
            seen += line.startswith("record ")
            if seen >= 137:
                break  # mid-way between two commits
        else:
            pytest.fail(f"the consumer ended early:\n{first}\n{proc.stderr.read()}")  # type: ignore[union-attr]
        os.kill(proc.pid, signal.SIGKILL)
        rest, _ = proc.communicate(timeout=10)
        first += rest.splitlines()
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert proc.returncode == -signal.SIGKILL
    assert first[0].startswith(f"produced {total} records")
    run1 = records_of(first)
    commits1 = commits_of(first)
    assert len(run1) >= 137 and commits1, first
    assert not any("done:" in line for line in first)
    last_commit = commits1[-1]

    second = run("at_least_once_consumer.py", *common, "--idle-exit", "1.5").splitlines()
    start = resumed_after(second)
    run2 = records_of(second)
    # It resumed from its last commit: the one printed, or one made just
    # before the kill that it had no time to print.
    assert start is not None and start >= last_commit
    assert start in [d for d, _ in run1]
    assert [d for d, _ in run2] == sorted(d for d, _ in run2)
    assert run2[0][0] > start and all(d > start for d, _ in run2)
    assert run2[0][1] == next(t for d, t in run1 if d == start) + 1
    # Everything was processed; duplicates are only records after the last commit.
    txids1, txids2 = [t for _, t in run1], [t for _, t in run2]
    assert sorted(set(txids1) | set(txids2)) == list(range(min(txids1), min(txids1) + total))
    duplicates = [(d, t) for d, t in run1 if t in set(txids2)]
    assert all(d > last_commit for d, _ in duplicates), (last_commit, duplicates)
    assert len(duplicates) <= every
    assert len(set(txids2)) == len(txids2)
    assert second[-1].startswith(f"done: {len(run2)} processed")
    final = parse_dlsn(second[-1].split()[-1])
    assert final == run2[-1][0]

    # A third run finds nothing new: a graceful stop committed everything.
    third = run("at_least_once_consumer.py", *common, "--idle-exit", "0.5").splitlines()
    assert resumed_after(third) == final
    assert records_of(third) == []
    assert third[-1] == f"done: 0 processed, 0 commits, last committed {second[-1].split()[-1]}"


def _fan_out_rows(out: str) -> dict[str, tuple[int, DLSN, str]]:
    rows = {}
    for line in out.splitlines():
        parts = line.split()
        if parts and parts[0] in ("analytics", "billing", "audit"):
            rows[parts[0]] = (int(parts[1]), parse_dlsn(parts[4]), " ".join(parts[5:]))
    return rows


def test_fan_out(sandbox: Sandbox) -> None:
    uri = sandbox.namespace_uri
    common = ["--uri", uri, "--stream", "fan"]
    out = run("fan_out.py", *common, "--produce", "400", "--seconds", "0.5", "--audit-ms", "5")
    assert "produced 400 records" in out
    last = parse_dlsn(re.search(r"last DLSN (\S+),", out).group(1))  # type: ignore[union-attr]
    first_rows = _fan_out_rows(out)
    assert set(first_rows) == {"analytics", "billing", "audit"}
    for name, (processed, position, _) in first_rows.items():
        assert f"  {name}: {position}" in out  # get_last_commit_positions()
        assert processed > 0 and position <= last
    # audit works 5 ms per record: it cannot have read 400 in half a second.
    assert first_rows["audit"][0] < 400 and "lagging" in first_rows["audit"][2]

    out = run("fan_out.py", *common, "--seconds", "30")
    rows = _fan_out_rows(out)
    for name, (processed, position, state) in rows.items():
        assert position == last and state == "at the end", out
        # Each record reached each subscriber once over both (graceful) runs.
        assert first_rows[name][0] + processed == 400, (name, first_rows[name], processed)


def test_commit_every_record(sandbox: Sandbox) -> None:
    out = run("commit_every_record.py", "--uri", sandbox.namespace_uri, "--records", "150")
    lines = {line.split()[0]: line for line in out.splitlines() if "commits in" in line}
    assert set(lines) == {"zk", "log-segment"}, out
    for store, line in lines.items():
        m = re.match(
            rf"{store}\s+150 commits in \S+ s: (\d+) commits/s, \S+ ms each; ZooKeeper writes: (\d+)",
            line,
        )
        assert m, line
        assert int(m.group(1)) > 0
        writes = int(m.group(2))
        if store == "zk":
            assert writes >= 150, line  # one ZooKeeper write per commit
        else:
            assert writes <= 2, line  # none: commits are ledger appends
    assert "log-segment / zk commits/s:" in out
