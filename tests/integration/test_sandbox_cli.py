"""`dlog sandbox` as a developer runs it: start detached processes from one
command, use the namespace, restart a bookie, check status, stop, all from
separate ``python -m dlog`` processes."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from dlog.conf.dlog import DLogConfig
from dlog.namespace import Namespace
from dlog.record import LogRecord
from tests.cli import running

pytestmark = pytest.mark.integration


def dlog(*args: str, timeout: float = 120) -> subprocess.CompletedProcess[str]:
    env = dict(os.environ, COLUMNS="200")
    return subprocess.run(
        [sys.executable, "-m", "dlog", *args],
        capture_output=True,
        text=True,
        timeout=timeout,
        env=env,
        stdin=subprocess.DEVNULL,
    )


def ok(r: subprocess.CompletedProcess[str]) -> str:
    assert r.returncode == 0, f"exit {r.returncode}\nstdout:\n{r.stdout}\nstderr:\n{r.stderr}"
    return r.stdout


def all_pids(state: dict) -> list[int]:
    pids = [state["zookeeper"]["pid"], *(b["pid"] for b in state["bookies"])]
    return [p for p in pids if p]


async def write_and_read(uri: str, stream: str, payload: bytes) -> None:
    ns = await Namespace.open(uri, DLogConfig.load(overrides={"zkSessionTimeoutSeconds": 5}))
    try:
        lm = await ns.open_log(stream)
        writer = await lm.open_writer()
        try:
            txid = 1 if not await lm.store.get_segments(stream) else writer.last_txid + 1
            dlsn = await writer.write(LogRecord(txid, payload))
        finally:
            await writer.close()
        reader = await lm.open_reader(from_dlsn=dlsn)
        try:
            record = await reader.read_next(timeout=20)
        finally:
            await reader.close()
        assert record is not None and record.payload == payload and record.dlsn == dlsn
    finally:
        await ns.close()


def test_sandbox_start_restart_status_stop(tmp_path: Path) -> None:
    d = tmp_path / "sb"
    state_file = d / "sandbox.json"
    seen_pids: set[int] = set()
    try:
        out = ok(dlog("sandbox", "start", "--dir", str(d), "--bookies", "3"))
        uri = out.splitlines()[-1]
        assert uri.startswith("distributedlog://127.0.0.1:") and uri.endswith("/messaging"), out

        state = json.loads(state_file.read_text())
        seen_pids.update(all_pids(state))
        zk = state["zookeeper"]
        assert state["namespace_uri"] == uri == f"distributedlog://{zk['address']}/messaging"
        assert state["metadata_service_uri"] == f"zk+hierarchical://{zk['address']}/ledgers"
        assert len(state["bookies"]) == 3
        assert [b["index"] for b in state["bookies"]] == [0, 1, 2]
        for b in state["bookies"]:
            assert b["id"] == f"127.0.0.1:{b['port']}"
            assert Path(b["journal_dir"]).is_dir() and Path(b["ledgers_dir"]).is_dir()
            assert Path(b["dir"]).parent == d
        assert len({b["port"] for b in state["bookies"]}) == 3
        # The processes outlived the command that started them.
        assert all(running(p) for p in all_pids(state)), state

        # The URI works right away: default settings (3 bookies per segment).
        asyncio.run(write_and_read(uri, "events", b"first"))

        # A second start in the same directory is refused.
        r = dlog("sandbox", "start", "--dir", str(d))
        assert r.returncode != 0 and "already running" in r.stderr, r.stderr

        old = state["bookies"][1]
        out = ok(dlog("sandbox", "restart-bookie", "--dir", str(d), "1"))
        assert f"bookie 1 ({old['id']}) restarted" in out, out
        state = json.loads(state_file.read_text())
        seen_pids.update(all_pids(state))
        new = state["bookies"][1]
        assert (new["id"], new["port"], new["dir"]) == (old["id"], old["port"], old["dir"])
        assert new["pid"] != old["pid"] and running(new["pid"]) and not running(old["pid"])
        # All three bookies are needed for a segment: the restarted one serves.
        asyncio.run(write_and_read(uri, "events", b"after restart"))

        r = dlog("sandbox", "restart-bookie", "--dir", str(d), "7")
        assert r.returncode != 0 and "no bookie 7" in r.stderr, r.stderr

        out = ok(dlog("sandbox", "status", "--dir", str(d)))
        assert "all processes alive" in out, out
        for name, p in [("zookeeper", zk["pid"])] + [
            (f"bookie-{b['index']}", b["pid"]) for b in state["bookies"]
        ]:
            row = next(line for line in out.splitlines() if f" {name} " in line)
            assert str(p) in row and "alive" in row and "listening" in row, row

        out = ok(dlog("sandbox", "stop", "--dir", str(d)))
        assert "stopped" in out, out
        assert not any(running(p) for p in seen_pids), [p for p in seen_pids if running(p)]
        # Bookies stopped gracefully (SIGTERM), before ZooKeeper.
        for b in state["bookies"]:
            assert "shutting down (signal)" in Path(b["log"]).read_text()

        # stop is idempotent; status reports the stopped processes.
        out = ok(dlog("sandbox", "stop", "--dir", str(d)))
        assert "nothing to stop" in out, out
        r = dlog("sandbox", "status", "--dir", str(d))
        assert r.returncode == 1 and "sandbox stopped" in r.stdout, r.stdout
        assert r.stdout.count("stopped") >= 4
        # Data and state stay.
        assert state_file.exists() and (d / "bookie-0" / "ledgers").is_dir()

        r = dlog("sandbox", "stop", "--dir", str(tmp_path / "nothing-here"))
        assert r.returncode != 0 and "no sandbox" in r.stderr, r.stderr
    finally:
        if state_file.exists():
            dlog("sandbox", "stop", "--dir", str(d), timeout=60)
        for p in seen_pids:  # whatever stop could not stop
            if running(p):
                os.kill(p, signal.SIGKILL)


def test_stale_state_file_is_handled(tmp_path: Path) -> None:
    """A sandbox.json whose pids are dead (or reused by other processes)
    means nothing runs: stop says so and kills nothing."""
    d = tmp_path / "stale"
    d.mkdir()
    other = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        state = {
            "version": 1,
            "directory": str(d),
            "host": "127.0.0.1",
            "detached": True,
            "namespace_uri": "distributedlog://127.0.0.1:1/messaging",
            "metadata_service_uri": "zk+hierarchical://127.0.0.1:1/ledgers",
            "namespace_path": "/messaging",
            "ledgers_root": "/ledgers",
            # A live pid that is not this sandbox's ZooKeeper.
            "zookeeper": {"address": "127.0.0.1:1", "port": 1, "pid": other.pid},
            "bookie_settings": {},
            "bookies": [{"index": 0, "id": "127.0.0.1:2", "port": 2, "pid": 2**22 + 12345}],
        }
        (d / "sandbox.json").write_text(json.dumps(state))
        r = dlog("sandbox", "status", "--dir", str(d))
        assert r.returncode == 1 and "sandbox stopped" in r.stdout, r.stdout
        out = ok(dlog("sandbox", "stop", "--dir", str(d)))
        assert "nothing to stop" in out, out
        assert other.poll() is None, "stop killed a process that is not the sandbox's"
        assert json.loads((d / "sandbox.json").read_text())["zookeeper"]["pid"] is None

        (d / "sandbox.json").write_text("{not json")
        r = dlog("sandbox", "stop", "--dir", str(d))
        assert r.returncode == 1 and "cannot read sandbox state" in r.stderr, r.stderr
        assert "Traceback" not in r.stderr
    finally:
        other.kill()
        other.wait()
