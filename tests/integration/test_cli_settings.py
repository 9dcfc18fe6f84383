"""Every command that has settings takes --conf and --set, and refuses a bad
value by naming the key, before it starts or connects to anything."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest


def dlog(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "dlog", *args], capture_output=True, text=True, timeout=60
    )


@pytest.mark.parametrize(
    "command",
    [
        ["shell", "listbookies", "--service-uri", "zk+hierarchical://127.0.0.1:1/ledgers"],
        ["shell", "initnewcluster", "--service-uri", "zk+hierarchical://127.0.0.1:1/ledgers"],
        ["stream", "list", "--uri", "distributedlog://127.0.0.1:1/ns"],
        ["subscriptions", "list", "s", "--uri", "distributedlog://127.0.0.1:1/ns"],
        ["bookie"],
    ],
    ids=lambda c: " ".join(c[:2]),
)
def test_bad_set_names_the_key(command: list[str]) -> None:
    key = {"shell": "addEntryTimeoutSec", "bookie": "journalMaxGroupWaitMSec"}.get(
        command[0], "bkc.addEntryTimeoutSec"
    )
    r = dlog(*command, "--set", f"{key}=soon")
    assert r.returncode == 2, r.stderr
    assert key.split(".")[-1] in r.stderr and "integer" in r.stderr


def test_sandbox_takes_bookie_settings(tmp_path: Path) -> None:
    r = dlog(
        "sandbox", "start", "--dir", str(tmp_path / "sb"), "--set", "journalMaxGroupWaitMSec=later"
    )
    assert r.returncode == 2 and "journalMaxGroupWaitMSec" in r.stderr
    assert not (tmp_path / "sb" / "sandbox.json").exists()  # nothing was started
    conf = tmp_path / "bookie.conf"
    conf.write_text("diskUsageThreshold=2.0\n")
    r = dlog("sandbox", "run", "--conf", str(conf))
    assert r.returncode == 2 and "diskUsageThreshold" in r.stderr


def test_conf_check_reports_every_bad_key_one_a_line(tmp_path: Path) -> None:
    conf = tmp_path / "dlog.conf"
    conf.write_text("zkSessionTimeoutSeconds=thirty\nwriterOutputBuferSize=1\nbkcEnsembleSize=3\n")
    r = dlog(
        "conf",
        "check",
        "dlog",
        "--conf",
        str(conf),
        "--set",
        "bkc.nope=1",
        "--set",
        "lockTimeoutSeconds=-1",
    )
    assert r.returncode == 2, r.stderr
    assert r.stdout == ""
    assert r.stderr.splitlines() == [
        f"error: zkSessionTimeoutSeconds: expected an integer, got 'thirty' (in {conf})",
        f"error: writerOutputBuferSize: unknown setting (in {conf})",
        "error: lockTimeoutSeconds: must be at least 0, got -1 (in --set)",
        "error: bkc.nope: unknown setting (in --set)",
    ]


def test_a_bad_set_says_set_not_defaults() -> None:
    r = dlog(
        "subscriptions",
        "list",
        "s",
        "--uri",
        "distributedlog://127.0.0.1:1/ns",
        "--set",
        "noSuchKey=1",
    )
    assert r.returncode == 2
    assert r.stderr.splitlines() == ["error: noSuchKey: unknown setting (in --set)"]
