"""An unreachable ZooKeeper is reported within zkConnectionTimeoutSeconds,
naming the key: 5 s by default on the command line (--conf and --set change
it), the session timeout for library users who leave it unset."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from dlog.conf.dlog import DLogConfig
from dlog.errors import ZooKeeperError
from dlog.namespace import Namespace
from dlog.sandbox.ports import free_port


@pytest.fixture
def dead_uri() -> str:
    """A namespace URI whose ZooKeeper port nobody listens on."""
    return f"distributedlog://127.0.0.1:{free_port()}/ns"


def dlog(*args: str) -> tuple[subprocess.CompletedProcess[str], float]:
    env = {k: v for k, v in os.environ.items() if k != "DLOG_URI"}
    env["COLUMNS"] = "200"
    start = time.monotonic()
    r = subprocess.run(
        [sys.executable, "-m", "dlog", *args],
        capture_output=True,
        text=True,
        timeout=60,
        env=env,
        stdin=subprocess.DEVNULL,
    )
    return r, time.monotonic() - start


def startup() -> float:
    """What starting the CLI and loading a command costs on this machine now
    (seconds under a loaded test run, a fraction of one when idle): the
    upper bounds below are on the wait itself."""
    r, took = dlog("stream", "list", "--help")
    assert r.returncode == 0, r.stderr
    return took


def one_error(r: subprocess.CompletedProcess[str]) -> str:
    assert r.returncode == 1, r.stderr
    assert r.stderr.count("\n") == 1, r.stderr
    return r.stderr.strip()


def test_the_cli_gives_up_within_5_s_naming_the_setting(dead_uri: str) -> None:
    hosts = dead_uri.split("/")[2]
    r, took = dlog("subscriptions", "list", "events", "--uri", dead_uri)
    assert one_error(r) == (
        f"error: could not connect to ZooKeeper at {hosts} within 5 s (zkConnectionTimeoutSeconds)"
    )
    assert 5 <= took < 7 + startup(), took


def test_set_and_conf_change_the_cli_timeout(dead_uri: str, tmp_path: Path) -> None:
    r, took = dlog("stream", "list", "--uri", dead_uri, "--set", "zkConnectionTimeoutSeconds=1")
    assert "within 1 s (zkConnectionTimeoutSeconds)" in one_error(r)
    # Below the default's 5 s, whatever starting the process took.
    assert 1 <= took < 3 + startup(), took
    conf = tmp_path / "dlog.conf"
    conf.write_text("zkConnectionTimeoutSeconds=2\n")
    r, took = dlog("stream", "list", "--uri", dead_uri, "--conf", str(conf))
    assert "within 2 s (zkConnectionTimeoutSeconds)" in one_error(r)
    assert 2 <= took < 4 + startup(), took


async def test_library_users_wait_their_session_timeout(dead_uri: str) -> None:
    conf = DLogConfig.load(zkSessionTimeoutSeconds=2)
    start = time.monotonic()
    with pytest.raises(ZooKeeperError) as e:
        await Namespace.open(dead_uri, conf, bind=True)
    took = time.monotonic() - start
    assert "within 2 s (zkConnectionTimeoutSeconds)" in str(e.value)
    assert 2 <= took < 4, took
