"""``dlog admin`` as a user runs it, against real ``dlog bookie`` and
``dlog autorecovery`` processes (uvloop, their own event loops)."""

from __future__ import annotations

import signal
import subprocess
import sys
import time
from collections.abc import Callable

from dlog.sandbox.ports import free_port
from tests.cli import cli_env, dlog, error_line, ok
from tests.metrics import assert_documented, scrape


def admin(port: int, *args: str) -> subprocess.CompletedProcess[str]:
    return dlog("admin", "--target", f"127.0.0.1:{port}", *args)


def until(probe: Callable[[], bool], timeout: float = 20.0) -> None:
    deadline = time.monotonic() + timeout
    while not probe():
        assert time.monotonic() < deadline, "condition not reached in time"
        time.sleep(0.2)


def test_admin_commands_against_a_bookie_process_with_autorecovery(bookie_cluster) -> None:  # type: ignore[no-untyped-def]
    port, metrics_port = free_port(), free_port()
    cluster = bookie_cluster(
        1,
        grpcServerEnabled=True,
        grpcServerAddress="127.0.0.1",
        grpcServerPort=port,
        enableStatistics=True,
        prometheusStatsHttpAddress="127.0.0.1",
        prometheusStatsHttpPort=metrics_port,
        autoRecoveryDaemonEnabled=True,
        auditorPeriodicBookieCheckInterval=0,
        auditorPeriodicCheckInterval=0,
    )
    bookie_id = cluster[0].bookie_id

    assert ok(admin(port, "health")).strip() == "SERVING"
    until(lambda: admin(port, "health", "dlog.autorecovery").returncode == 0)
    assert ok(admin(port, "health", "dlog.bookie")).strip() == "SERVING"

    info = ok(admin(port, "bookie-info"))
    assert bookie_id in info and "writable" in info and "ledger" in info and "journal" in info
    assert bookie_id in ok(admin(port, "bookies"))
    until(lambda: f"{bookie_id} (auditor)" in ok(admin(port, "auditor")))
    assert "0 under-replicated ledger(s)" in ok(admin(port, "underreplicated"))
    assert "collection finished" in ok(admin(port, "gc", "--wait"))
    assert "NOT_FOUND" in error_line(admin(port, "ledger", "123456"))
    assert "dlog proxy" in error_line(admin(port, "streams"))
    # One endpoint: the bookie's metrics and its AutoRecovery's.
    tables = ("Bookie", "AutoRecovery", "Ledger client", "Re-replication")
    assert_documented(scrape(metrics_port), *tables)

    cluster[0].stop()
    assert "unavailable" in error_line(admin(port, "health"))


def test_autorecovery_command_serves_health_and_admin_on_grpc_port(
    bookie_cluster, ledgers_uri: str
) -> None:  # type: ignore[no-untyped-def]
    """`dlog autorecovery --grpc-port` (grpcServerEnabled is off in its conf)."""
    bookie_cluster(1)
    port = free_port()
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "dlog",
            "autorecovery",
            "--id",
            "cli-ar",
            "--grpc-port",
            str(port),
            "--set",
            f"metadataServiceUri={ledgers_uri}",
            "--set",
            "grpcServerAddress=127.0.0.1",
            "--set",
            "auditorPeriodicCheckInterval=0",
            # Not BookKeeper's 8000: another test's process may hold it.
            "--set",
            f"prometheusStatsHttpPort={free_port()}",
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        env=cli_env({"DLOG_LOG_LEVEL": "INFO"}),
    )
    try:
        until(lambda: admin(port, "health").returncode == 0)
        assert ok(admin(port, "health", "dlog.autorecovery")).strip() == "SERVING"
        until(lambda: "cli-ar (auditor)" in ok(admin(port, "auditor")))
        assert "a bookie" in error_line(admin(port, "bookie-info"))
        proc.send_signal(signal.SIGTERM)
        out, _ = proc.communicate(timeout=30)
        assert proc.returncode == 0, out
    finally:
        if proc.returncode is None:
            proc.kill()
            proc.wait()
