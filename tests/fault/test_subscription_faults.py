"""kill -9 a consumer right after acknowledged commits, 20 times: after
each restart its position is exactly the last acknowledged commit."""

from __future__ import annotations

import random
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.fault

SCRIPT = str(Path(__file__).with_name("subscription_committer.py"))


def test_kill_9_after_acknowledged_commits_20_times(
    bookie_cluster, zk_server, zk_root: str, ledgers_uri: str
) -> None:
    bookie_cluster(3)
    uri = f"distributedlog://{zk_server.connect_string}{zk_root}/ns"
    rng = random.Random(20)
    last_acked = 0  # NonInclusiveLowerBound is (1, 0, -1)
    for round_ in range(20):
        count = rng.randint(1, 15)
        proc = subprocess.Popen(
            [sys.executable, SCRIPT, uri, ledgers_uri, str(count)],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        try:
            line = proc.stdout.readline()
            assert line.startswith("START"), line + proc.stderr.read()
            start = int(line.split()[1])
            # The position after a kill -9 is the last acknowledged commit.
            assert start == last_acked, (
                f"round {round_}: restarted at {start}, last acknowledged {last_acked}"
            )
            for _ in range(count):
                line = proc.stdout.readline()
                assert line.startswith("ACK"), line + proc.stderr.read()
                last_acked = int(line.split()[1])
            assert proc.stdout.readline().startswith("IDLE")
        finally:
            proc.kill()
            proc.wait()
