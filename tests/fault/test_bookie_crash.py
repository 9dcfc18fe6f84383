"""kill -9 a real bookie process and check that every acknowledged entry
survives, wherever the kill lands: before any checkpoint, in the middle of
a storage flush, between flush and lastMark, or after a checkpoint."""

from __future__ import annotations

import asyncio
import signal
import time
from pathlib import Path

import pytest

from dlog.errors import EOK
from dlog.ledger.bookie_client import BookieClient
from dlog.ledger.digest import CRC32C, DigestManager
from dlog.sandbox.bookies import BookieProcess
from dlog.zk import ZooKeeper

pytestmark = pytest.mark.fault

LEDGERS = (101, 102, 103, 104)
TOTAL = 10_000
KEY = DigestManager(1, CRC32C, b"pw").master_key


def body(lid: int, eid: int) -> bytes:
    payload = (f"{lid}:{eid}:".encode() * 64)[:1000]
    return DigestManager(lid, CRC32C, b"pw").compute(eid, eid - 1, (eid + 1) * 1000, payload)


async def write(address: str, start: int, count: int) -> None:
    """Pipelined adds; returns only when every one was acknowledged EOK."""
    client = BookieClient(address)
    await client.connect()
    try:
        for base in range(start, start + count, 500):
            futs = []
            for i in range(base, min(base + 500, start + count)):
                lid = LEDGERS[i % len(LEDGERS)]
                eid = i // len(LEDGERS)
                futs.append(client.add_entry(lid, eid, KEY, body(lid, eid)))
            statuses = {r.status for r in await asyncio.gather(*futs)}
            assert statuses == {EOK}
    finally:
        await client.close()


async def verify(address: str, count: int) -> None:
    client = BookieClient(address)
    await client.connect()
    try:
        for base in range(0, count, 500):
            keys = [
                (LEDGERS[i % len(LEDGERS)], i // len(LEDGERS))
                for i in range(base, min(base + 500, count))
            ]
            responses = await asyncio.gather(*(client.read_entry(lid, eid) for lid, eid in keys))
            for (lid, eid), r in zip(keys, responses, strict=True):
                assert r.status == EOK, f"ledger {lid} entry {eid}: status {r.status}"
                assert r.readResponse.body == body(lid, eid), f"ledger {lid} entry {eid} corrupted"
    finally:
        await client.close()


def wait_for(path: Path, timeout: float = 60.0) -> None:
    deadline = time.monotonic() + timeout
    while not path.exists():
        if time.monotonic() > deadline:
            raise AssertionError(f"failpoint {path.name} was never reached")
        time.sleep(0.05)


@pytest.mark.parametrize(
    "failpoint",
    [
        None,
        "ledger_storage.flush.mid_entry_logs",
        "ledger_storage.flush.before_index",
        "checkpoint.before_last_mark",
    ],
)
def test_kill_9_keeps_every_acknowledged_entry(
    tmp_path: Path, ledgers_uri: str, failpoint: str | None
) -> None:
    fp_dir = tmp_path / "failpoints"
    env = (
        {"DLOG_FAILPOINTS": f"{failpoint}=pause", "DLOG_FAILPOINT_DIR": str(fp_dir)}
        if failpoint
        else {}
    )
    # With a failpoint, the first checkpoint (after the adds) stops at it.
    interval = 3000 if failpoint else 600000
    bookie = BookieProcess(
        tmp_path / "bookie", ledgers_uri, env=env, flushInterval=interval
    ).start()
    address = bookie.bookie_id
    asyncio.run(write(address, 0, TOTAL))
    if failpoint:
        wait_for(fp_dir / failpoint)
    bookie.kill()

    again = BookieProcess(
        tmp_path / "bookie", ledgers_uri, port=bookie.port, flushInterval=interval
    ).start()
    try:
        asyncio.run(verify(address, TOTAL))
        assert "replayed" in again.log_tail(200)
    finally:
        again.stop()


def test_kill_9_after_a_checkpoint_and_more_adds(tmp_path: Path, ledgers_uri: str) -> None:
    bookie = BookieProcess(tmp_path / "bookie", ledgers_uri, flushInterval=300).start()
    address = bookie.bookie_id
    asyncio.run(write(address, 0, TOTAL // 2))
    ledger_dir = tmp_path / "bookie" / "ledgers" / "current"
    deadline = time.monotonic() + 30
    while not (ledger_dir / "lastMark").exists() or not list(ledger_dir.glob("*.log")):
        assert time.monotonic() < deadline, "no checkpoint happened"
        time.sleep(0.1)
    time.sleep(1.0)  # let a checkpoint cover the first half
    asyncio.run(write(address, TOTAL // 2, TOTAL // 2))
    bookie.kill()
    again = BookieProcess(
        tmp_path / "bookie", ledgers_uri, port=bookie.port, flushInterval=300
    ).start()
    try:
        asyncio.run(verify(address, TOTAL))
    finally:
        again.stop()


def test_sigterm_is_graceful(tmp_path: Path, ledgers_uri: str, zk_server, zk_root: str) -> None:
    bookie = BookieProcess(tmp_path / "bookie", ledgers_uri).start()
    address = bookie.bookie_id
    asyncio.run(write(address, 0, 2000))

    async def registered() -> bool:
        zk = ZooKeeper(zk_server.connect_string)
        await zk.start()
        try:
            return await zk.exists(f"{zk_root}/ledgers/available/{address}") is not None
        finally:
            await zk.stop()

    assert asyncio.run(registered())
    assert bookie.stop() == 0
    # Unregistered at once (not after the session times out).
    assert not asyncio.run(registered())
    # The final checkpoint covered everything: nothing to replay.
    again = BookieProcess(tmp_path / "bookie", ledgers_uri, port=bookie.port).start()
    try:
        assert "replayed 0 journal records" in again.log_tail(200)
        asyncio.run(verify(address, 2000))
    finally:
        again.stop()


def test_sigterm_stops_a_bookie_whose_zookeeper_is_gone(tmp_path: Path) -> None:
    """SIGTERM with ZooKeeper unreachable: unregistering cannot succeed (the
    operation waits for a reconnection that never comes), so it is given up
    after zkTimeout and the bookie still shuts down, checkpoint and all.
    Before, the bookie never exited."""
    from dlog.sandbox.zookeeper import ZooKeeperServer

    zk = ZooKeeperServer(tmp_path / "zk")
    zk.start()
    try:
        bookie = BookieProcess(
            tmp_path / "b", f"zk+hierarchical://{zk.connect_string}/ledgers", zkTimeout=4000
        ).start()
    finally:
        zk.stop()
    assert bookie.process is not None
    bookie.process.terminate()
    try:
        code = bookie.process.wait(timeout=60)
    finally:
        bookie.kill()
    log = bookie.log_path.read_text()
    assert code == 0, log[-2000:]
    assert "could not unregister from ZooKeeper" in log
    assert f"bookie {bookie.bookie_id} stopped" in log, log[-2000:]


def test_restart_after_kill_9_returns_once_the_new_process_is_registered(
    tmp_path: Path, ledgers_uri: str, zk_server, zk_root: str
) -> None:
    """A killed bookie's registration outlives it until its session expires;
    ``restart`` must not take that stale node for the new process's, or a
    test (or ``dlog sandbox``) goes on with the bookie still unregistered."""
    bookie = BookieProcess(tmp_path / "bookie", ledgers_uri).start()
    path = f"{zk_root}/ledgers/available/{bookie.bookie_id}"

    async def stat():  # type: ignore[no-untyped-def]
        zk = ZooKeeper(zk_server.connect_string)
        await zk.start()
        try:
            return await zk.exists(path)
        finally:
            await zk.stop()

    try:
        bookie.wait_registered()
        old = asyncio.run(stat())
        assert old is not None
        bookie.kill()
        bookie.restart()
        new = asyncio.run(stat())
        assert new is not None, "restart returned with the bookie unregistered"
        assert new.czxid != old.czxid, "restart returned while the killed process's node stood"
        assert new.ephemeralOwner != old.ephemeralOwner
    finally:
        bookie.stop()


def catches_sigterm(pid: int) -> bool:
    """Whether the process has a handler for SIGTERM (SigCgt in /proc)."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("SigCgt:"):
            return bool(int(line.split()[1], 16) & (1 << (signal.SIGTERM - 1)))
    return False


def test_sigterm_during_start_up_stops_the_bookie_at_once(tmp_path: Path) -> None:
    """A bookie still starting (here: ZooKeeper out of reach, so it waits up
    to its 15 s connect timeout) stops on SIGTERM at once and cleanly, not
    once start-up is over. Before, the signal was only seen after start-up."""
    from dlog.sandbox.ports import free_port

    bookie = BookieProcess(
        tmp_path / "b", f"zk+hierarchical://127.0.0.1:{free_port()}/ledgers"
    ).start(wait=False)
    assert bookie.process is not None
    try:
        deadline = time.monotonic() + 30
        while not catches_sigterm(bookie.process.pid):  # its handler is in place
            assert bookie.process.poll() is None, bookie.log_tail()
            assert time.monotonic() < deadline, "the bookie never got to start-up"
            time.sleep(0.05)
        time.sleep(0.5)  # well into start-up: connecting to ZooKeeper
        bookie.process.terminate()
        code = bookie.process.wait(timeout=8)
        assert code == 0, bookie.log_tail()
        assert "shutting down (signal) during start-up" in bookie.log_tail()
    finally:
        bookie.kill()
