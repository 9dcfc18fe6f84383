"""`dlog bookie` and `dlog shell initnewcluster` as an operator runs them."""

from __future__ import annotations

import asyncio
import subprocess
import sys
from pathlib import Path

from dlog.sandbox.bookies import BookieProcess
from dlog.sandbox.ports import free_port
from dlog.zk import ZooKeeper
from tests.metrics import assert_documented, scrape


def dlog(*args: str, timeout: float = 60) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "dlog", *args], capture_output=True, text=True, timeout=timeout
    )


def test_bad_configuration_is_refused_with_the_key_named(tmp_path: Path) -> None:
    conf = tmp_path / "bookie.conf"
    conf.write_text("bookiePort=3181\njournalMaxGroupWaitMsec=5\n")  # wrong case: unknown key
    r = dlog("bookie", "--conf", str(conf))
    assert r.returncode == 2
    assert "journalMaxGroupWaitMsec" in r.stderr and "unknown" in r.stderr
    r = dlog("bookie", "--conf", str(conf.with_name("missing.conf")))
    assert r.returncode == 2 and "cannot read" in r.stderr
    conf.write_text("bookiePort=3181\n")
    r = dlog("bookie", "--conf", str(conf), "--set", "diskUsageThreshold=1.5")
    assert r.returncode == 2 and "diskUsageThreshold" in r.stderr


def test_initnewcluster_creates_the_layout(zk_server, zk_root: str) -> None:
    uri = f"zk+hierarchical://{zk_server.connect_string}{zk_root}/ledgers"
    r = dlog("shell", "initnewcluster", "--service-uri", uri)
    assert r.returncode == 0, r.stderr
    r2 = dlog("shell", "initnewcluster", "--service-uri", uri)  # idempotent
    assert r2.returncode == 0, r2.stderr

    async def children() -> set[str]:
        zk = ZooKeeper(zk_server.connect_string)
        await zk.start()
        try:
            return set(await zk.get_children(f"{zk_root}/ledgers"))
        finally:
            await zk.stop()

    assert {"available", "cookies", "LAYOUT", "INSTANCEID", "idgen"} <= asyncio.run(children())
    bad = dlog("shell", "initnewcluster", "--service-uri", "http://nope/ledgers")
    assert bad.returncode != 0 and "scheme" in bad.stderr


def test_metrics_endpoint(tmp_path: Path, ledgers_uri: str) -> None:
    port = free_port()
    bookie = BookieProcess(
        tmp_path / "b",
        ledgers_uri,
        enableStatistics=True,
        prometheusStatsHttpPort=port,
        prometheusStatsHttpAddress="127.0.0.1",
    ).start()
    try:
        text = scrape(port)
    finally:
        bookie.stop()
    for name in (
        "bookie_add_entry_latency_seconds_bucket",
        "bookie_journal_add_latency_seconds_count",
        "bookie_journal_queue_size",
        "bookie_write_cache_size_bytes",
        "bookie_ledger_storage_flush_latency_seconds_count",
        "bookie_journal_queue_latency_seconds_count",
        "bookie_journal_callback_latency_seconds_count",
        # timed from the bookie process's start (dlog.bookie.main.serve)
        'bookie_python_gc_pause_seconds_count{generation="2"}',
        "bookie_read_only",
    ):
        assert name in text, name
    assert_documented(text, "Bookie")
