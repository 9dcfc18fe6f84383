"""The chaos run's report of re-replication: AutoRecovery's counters, read
from its metrics endpoint and added up over the processes a run kills."""

from __future__ import annotations

import subprocess
import sys
from collections import Counter
from pathlib import Path

from prometheus_client import CollectorRegistry, generate_latest, start_http_server
from prometheus_client import Counter as PromCounter

from dlog.sandbox.ports import free_port
from tests.chaos.cluster import ChaosCluster
from tests.metrics import counters


def registry() -> tuple[CollectorRegistry, PromCounter, PromCounter]:
    reg = CollectorRegistry()
    entries = PromCounter("replication_worker_entries_copied", "Entries copied.", registry=reg)
    fragments = PromCounter("replication_worker_fragments", "Fragments.", ["outcome"], registry=reg)
    PromCounter("bookie_other", "Not re-replication.", registry=reg).inc(7)
    return reg, entries, fragments


def test_counters_reads_one_prefix_by_series_without_created() -> None:
    reg, entries, fragments = registry()
    entries.inc(41)
    fragments.labels("replicated").inc(3)
    fragments.labels("failed").inc()
    assert counters(generate_latest(reg).decode(), "replication_worker_") == {
        "replication_worker_entries_copied_total": 41,
        "replication_worker_fragments_total{outcome=failed}": 1,
        "replication_worker_fragments_total{outcome=replicated}": 3,
    }


def test_a_killed_autorecovery_keeps_its_count_in_the_report(tmp_path: Path) -> None:
    """The chaos run kills AutoRecovery and starts another, whose counters
    start at zero: what the killed one did is read before the kill."""
    reg, entries, fragments = registry()
    port = free_port()
    servers = [start_http_server(port, addr="127.0.0.1", registry=reg)]
    cluster = ChaosCluster.__new__(ChaosCluster)
    cluster.auditor = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    cluster.auditor_stats_port = port
    cluster.replication_banked = Counter()
    try:
        entries.inc(10)
        fragments.labels("replicated").inc(2)
        assert cluster.replication_counters() == {
            "replication_worker_entries_copied_total": 10,
            "replication_worker_fragments_total{outcome=replicated}": 2,
        }
        cluster.kill_auditor()
        # The endpoint still answers (it stands for the dead process's): a
        # dead AutoRecovery is not read again, so nothing counts twice.
        assert cluster.replication_counters() == {
            "replication_worker_entries_copied_total": 10,
            "replication_worker_fragments_total{outcome=replicated}": 2,
        }
        # The next process, on an endpoint of its own, counts from zero;
        # the report adds both.
        reg2, entries2, _ = registry()
        servers.append(start_http_server(port2 := free_port(), addr="127.0.0.1", registry=reg2))
        cluster.auditor = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
        cluster.auditor_stats_port = port2
        entries2.inc(5)
        assert cluster.replication_counters() == {
            "replication_worker_entries_copied_total": 15,
            "replication_worker_fragments_total{outcome=replicated}": 2,
        }
    finally:
        cluster.kill_auditor()
        for server, thread in servers:
            server.shutdown()
            thread.join(5)
