"""kill -9 a log writer in the middle of a stream: a new writer takes over
and a reader sees every acknowledged record exactly once, in order. A
writer that stalls past its ZooKeeper session reports why it can no longer
write."""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from dlog.conf.dlog import DLogConfig
from dlog.namespace import Namespace
from dlog.record import LogRecord

pytestmark = pytest.mark.fault


def test_kill_9_the_writer_process(
    bookie_cluster, zk_server, zk_root: str, ledgers_uri: str
) -> None:
    bookie_cluster(3)
    uri = f"distributedlog://{zk_server.connect_string}{zk_root}/ns"
    proc = subprocess.Popen(
        [
            sys.executable,
            str(Path(__file__).with_name("log_writer.py")),
            uri,
            ledgers_uri,
            "events",
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    acked: list[int] = []
    try:
        line = proc.stdout.readline()
        assert line.startswith("READY"), line + proc.stderr.read()
        deadline = time.monotonic() + 60
        while len(acked) < 5000 and time.monotonic() < deadline:
            line = proc.stdout.readline()
            if line.startswith("ACK "):
                acked.append(int(line.split()[1]))
        proc.kill()
        for line in proc.stdout:
            if line.startswith("ACK "):
                acked.append(int(line.split()[1]))
    finally:
        proc.kill()
        proc.wait()
    assert len(acked) >= 5000

    async def take_over() -> None:
        conf = DLogConfig.load(
            overrides={
                "bkc.metadataServiceUri": ledgers_uri,
                "ensemble-size": 3,
                "write-quorum-size": 2,
                "ack-quorum-size": 2,
                "lockTimeoutSeconds": 30,  # the dead writer's session must expire first
            }
        )
        async with await Namespace.open(uri, conf, bind=True) as ns:
            log = await ns.open_log("events")
            writer = await log.open_writer()
            start = writer.last_txid + 1
            assert start > max(acked)  # nothing acknowledged was lost by recovery
            await writer.write_bulk(
                [LogRecord(t, b"payload-%d" % t) for t in range(start, start + 100)]
            )
            await writer.close()
            reader = await log.open_reader()
            got: list[int] = []
            while True:
                batch = await reader.read_bulk(5000, timeout=5)
                if not batch:
                    break
                for r in batch:
                    assert r.payload == b"payload-%d" % r.txid
                got.extend(r.txid for r in batch)
            await reader.close()
            assert got == sorted(set(got)), "duplicates or out of order"
            assert set(acked) <= set(got), "an acknowledged record is missing"
            # Every txid the dead writer made durable (acknowledged or not yet),
            # then the new writer's: no holes, no repeats.
            assert got == list(range(start + 100))

    asyncio.run(take_over())


@pytest.mark.parametrize("taken_over", [True, False], ids=["taken-over", "session-expired"])
def test_a_writer_stalled_past_its_session_reports_the_real_cause(
    bookie_cluster, zk_server, zk_root: str, ledgers_uri: str, taken_over: bool
) -> None:
    """Issue 10: a writer that stalls (a GC pause, SIGSTOP) just after sending
    a write comes back with that add's timers overdue; the timeouts look like
    failed bookies, and with 3 bookies there is no replacement. The writer
    must still report what really happened: its ledger was fenced by the
    new writer (WriteFencedError) or its session and lock are gone
    (LockingError), never "not enough bookies: needed 3, found 2 writable"."""
    bookie_cluster(3)
    uri = f"distributedlog://{zk_server.connect_string}{zk_root}/ns"
    proc = subprocess.Popen(
        [
            sys.executable,
            str(Path(__file__).with_name("paused_log_writer.py")),
            uri,
            ledgers_uri,
            "events",
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        line = proc.stdout.readline()
        assert line.startswith("READY"), line + proc.stderr.read()
        _, status = os.waitpid(proc.pid, os.WUNTRACED)
        assert os.WIFSTOPPED(status), proc.stderr.read()

        async def while_stalled() -> None:
            conf = DLogConfig.load(
                overrides={
                    "bkc.metadataServiceUri": ledgers_uri,
                    "ensemble-size": 3,
                    "write-quorum-size": 2,
                    "ack-quorum-size": 2,
                    "lockTimeoutSeconds": 30,  # the stalled writer's session must expire first
                }
            )
            async with await Namespace.open(uri, conf, bind=True) as ns:
                log = await ns.open_log("events")
                if taken_over:
                    # Takes the lock once the session expired, fences and
                    # closes the stalled writer's segment, writes on.
                    writer = await log.open_writer()
                    await writer.write(LogRecord(writer.last_txid + 1, b"new owner"))
                    await writer.close()
                    return
                lock = ns.store.paths("events").lock
                deadline = time.monotonic() + 30
                while await ns.zk.get_children(lock):
                    assert time.monotonic() < deadline, "the stalled writer's session never expired"
                    await asyncio.sleep(0.1)

        asyncio.run(while_stalled())
        os.kill(proc.pid, signal.SIGCONT)
        out, err = proc.communicate(timeout=60)
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.kill(proc.pid, signal.SIGCONT)
        proc.kill()
        proc.wait()
    outcomes = out.splitlines()
    assert len(outcomes) == 2, out + err
    expected = ("LockingError", "WriteFencedError") if taken_over else ("LockingError",)
    for outcome in outcomes:  # the stalled write, then a write after it
        word, cls, code, _ = outcome.split(" ", 3)
        assert word == "FAILED" and cls in expected and code == "504", outcome + "\n" + err
        assert "not enough bookies" not in outcome, outcome
