"""AutoRecovery as a service: one auditor among candidates, takeover,
the bookie hosting it (autoRecoveryDaemonEnabled), and the
``dlog autorecovery`` command."""

from __future__ import annotations

import asyncio
import os
import signal
import sys

import pytest
from prometheus_client import CollectorRegistry, generate_latest

from dlog.autorecovery.election import current_auditor
from dlog.autorecovery.service import AutoRecovery
from dlog.conf.bookie import BookieConfig
from dlog.sandbox.ports import free_port
from dlog.zk import ZooKeeper
from tests.metrics import assert_documented, scrape
from tests.waiting import eventually

pytestmark = pytest.mark.asyncio

QUIET = {
    "auditorPeriodicCheckInterval": 0,
    "auditorPeriodicOrphanedLedgerCheckInterval": 0,
}


def ledgers_root(uri: str) -> str:
    return "/" + uri.split("/", 3)[3]


async def test_one_auditor_and_takeover(make_bookie, ledgers_uri, zk: ZooKeeper) -> None:  # type: ignore[no-untyped-def]
    for i in range(3):
        await make_bookie(f"b{i}")
    conf = BookieConfig.load(None, {"metadataServiceUri": ledgers_uri, **QUIET})
    first = AutoRecovery(conf, candidate_id="ar-1")
    second = AutoRecovery(conf, candidate_id="ar-2")
    await first.start()
    await first.wait_elected(15)
    await second.start()
    try:
        await asyncio.sleep(1.0)
        assert first.is_auditor and not second.is_auditor
        assert await current_auditor(zk, ledgers_root(ledgers_uri)) == "ar-1"
        await first.stop()
        assert not first.is_auditor
        await second.wait_elected(15)
        assert second.is_auditor
        assert await current_auditor(zk, ledgers_root(ledgers_uri)) == "ar-2"
    finally:
        await first.stop()
        await second.stop()


async def test_a_stopped_autorecovery_frees_its_metric_names(make_bookie, ledgers_uri) -> None:  # type: ignore[no-untyped-def]
    """Stop, then a new AutoRecovery on the same endpoint's registry (as a
    process restarting the service would): it exports the documented set,
    with no name left taken by the first."""
    await make_bookie("b0")
    conf = BookieConfig.load(None, {"metadataServiceUri": ledgers_uri, **QUIET})
    registry = CollectorRegistry()
    for candidate in ("ar-1", "ar-2"):
        service = AutoRecovery(conf, candidate_id=candidate, registry=registry)
        await service.start()
        try:
            text = generate_latest(registry).decode()
            assert_documented(text, "AutoRecovery", "Ledger client", "Re-replication")
        finally:
            await service.stop()
    assert generate_latest(registry) == b""


async def test_a_bookie_with_auto_recovery_enabled_runs_it(bookie_cluster, ledgers_uri, zk) -> None:  # type: ignore[no-untyped-def]
    cluster = await asyncio.to_thread(bookie_cluster, 2, autoRecoveryDaemonEnabled=True, **QUIET)
    root = ledgers_root(ledgers_uri)

    async def elected() -> bool:
        return await current_auditor(zk, root) is not None

    await eventually(elected, 30)
    first = await current_auditor(zk, root)
    assert first is not None
    # the auditor's bookie stops: the other bookie's AutoRecovery takes over
    victim = next(b for b in cluster.bookies if f"{b.address}:{b.port}" == first)
    await asyncio.to_thread(victim.stop)

    async def other() -> bool:
        now = await current_auditor(zk, root)
        return now is not None and now != first

    await eventually(other, 30)


async def test_the_autorecovery_command_stops_on_sigterm(
    make_bookie, ledgers_uri, zk, tmp_path
) -> None:  # type: ignore[no-untyped-def]
    await make_bookie("b0")
    metrics_port = free_port()
    proc = await asyncio.create_subprocess_exec(
        *[
            sys.executable,
            "-m",
            "dlog",
            "autorecovery",
            "--id",
            "cli-ar",
            "--set",
            f"metadataServiceUri={ledgers_uri}",
            "--set",
            "auditorPeriodicCheckInterval=0",
            # Not BookKeeper's 8000: another test's process may hold it.
            "--set",
            "prometheusStatsHttpAddress=127.0.0.1",
            "--set",
            f"prometheusStatsHttpPort={metrics_port}",
        ],
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.STDOUT,
        env={**os.environ, "DLOG_LOG_LEVEL": "INFO"},
    )
    try:
        root = ledgers_root(ledgers_uri)

        async def elected() -> bool:
            return await current_auditor(zk, root) == "cli-ar"

        await eventually(elected, 30)
        metrics = await asyncio.to_thread(scrape, metrics_port)
        assert "auditor_lost_bookies_total" in metrics
        assert_documented(metrics, "AutoRecovery", "Ledger client", "Re-replication")
        proc.send_signal(signal.SIGTERM)
        out, _ = await asyncio.wait_for(proc.communicate(), 30)
        assert proc.returncode == 0, out.decode()
        assert b"AutoRecovery stopped" in out
        assert await current_auditor(zk, root) is None
    finally:
        if proc.returncode is None:
            proc.kill()
            await proc.wait()


async def test_a_failed_start_leaves_nothing_to_stop() -> None:
    """ZooKeeper unreachable at start: start() raises its error and stop()
    (which ``dlog autorecovery`` always calls) has nothing to undo, so the
    command reports the ZooKeeper error, not an AttributeError of its
    cleanup (a short chaos run's AutoRecovery died that way while
    ZooKeeper restarted)."""
    from dlog.errors import ZooKeeperError

    uri = f"zk+hierarchical://127.0.0.1:{free_port()}/ledgers"
    conf = BookieConfig.load(None, {"metadataServiceUri": uri, "zkTimeout": 1000, **QUIET})
    service = AutoRecovery(conf, candidate_id="ar-x")
    with pytest.raises(ZooKeeperError, match="could not connect to ZooKeeper"):
        await service.start()
    await service.stop()
    assert not service.is_auditor
