"""The chaos cluster: the sandbox's ZooKeeper, bookies and write proxies,
plus an AutoRecovery process (auditor and replication worker), with one
bookie's ledger directory on a size-capped tmpfs so that its disk can fill.

Mounting the tmpfs needs root (as tests/fault/test_full_disk.py does); the
run fails, it does not quietly skip the full-disk fault, where it can't.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path
from typing import Any

from dlog.sandbox.cluster import Sandbox
from dlog.sandbox.ports import free_port
from tests.metrics import counters, scrape

__all__ = ["ChaosCluster"]


class ChaosCluster:
    def __init__(
        self,
        directory: Path,
        *,
        bookies: int,
        proxies: int,
        bookie_settings: dict[str, Any],
        dlog_settings: dict[str, Any],
        disk_mb: int,
    ) -> None:
        self.directory = directory
        self.bookie_settings = bookie_settings
        self.dlog_settings = dlog_settings
        self.disk_mb = disk_mb
        self.sandbox = Sandbox(
            directory, bookies=bookies, proxies=proxies, bookie_settings=bookie_settings
        )
        self.auditor: subprocess.Popen[bytes] | None = None
        self.auditor_starts = 0
        self.auditor_stats_port = 0
        #: Re-replication counters of AutoRecovery processes gone (a process's
        #: counters start at zero: each is read before it is stopped or killed).
        self.replication_banked: Counter[str] = Counter()
        self.mounted: Path | None = None

    # -- lifecycle -----------------------------------------------------------------
    @property
    def small_disk_bookie(self) -> int:
        """The bookie whose ledger directory is the small tmpfs (the last)."""
        return len(self.sandbox.bookies) - 1

    def ledger_dir(self, index: int) -> Path:
        return self.sandbox.bookies[index].directory / "ledgers"

    def journal_dir(self, index: int) -> Path:
        return self.sandbox.bookies[index].directory / "journal"

    def start(self) -> None:
        self.directory.mkdir(parents=True, exist_ok=True)
        small = self.ledger_dir(self.small_disk_bookie)
        small.mkdir(parents=True, exist_ok=True)
        subprocess.run(
            ["mount", "-t", "tmpfs", "-o", f"size={self.disk_mb}m", "tmpfs", str(small)],
            check=True,
            capture_output=True,
        )
        self.mounted = small
        for i in range(len(self.sandbox.proxies)):
            d = self.directory / f"proxy-{i}"
            d.mkdir(parents=True, exist_ok=True)
            (d / "dlog.conf").write_text(
                "# chaos run settings\n"
                + "".join(f"{k}={_conf_value(v)}\n" for k, v in self.dlog_settings.items())
            )
        self.sandbox.start()
        self.start_auditor()

    def stop(self) -> None:
        try:
            self.stop_auditor()
            with contextlib.suppress(Exception):
                self.sandbox.stop()
        finally:
            if self.mounted is not None:
                subprocess.run(["umount", "-l", str(self.mounted)], check=False)
                self.mounted = None

    # -- AutoRecovery -------------------------------------------------------------
    def start_auditor(self) -> None:
        conf = self.directory / "autorecovery.conf"
        self.auditor_stats_port = free_port()
        values = {
            "metadataServiceUri": self.sandbox.metadata_service_uri,
            "zkTimeout": self.bookie_settings.get("zkTimeout", 4000),
            **{
                k: v
                for k, v in self.bookie_settings.items()
                if k.startswith(("auditor", "rw", "lockReleaseOfFailedLedger"))
            },
            "lostBookieRecoveryDelay": 0,
            # Its own port: BookKeeper's 8000 may be taken by another process
            # on the host, and an AutoRecovery that cannot bind it exits.
            "prometheusStatsHttpAddress": "127.0.0.1",
            "prometheusStatsHttpPort": self.auditor_stats_port,
        }
        conf.write_text("".join(f"{k}={_conf_value(v)}\n" for k, v in values.items()))
        self.auditor_starts += 1
        with open(self.directory / "autorecovery.log", "ab") as out:
            self.auditor = subprocess.Popen(
                [
                    sys.executable,
                    "-m",
                    "dlog",
                    "autorecovery",
                    "--conf",
                    str(conf),
                    "--id",
                    f"chaos-autorecovery-{self.auditor_starts}",
                ],
                stdin=subprocess.DEVNULL,
                stdout=out,
                stderr=subprocess.STDOUT,
            )

    def _auditor_replication(self) -> Counter[str]:
        """The running AutoRecovery's ``replication_worker_*`` counters
        (empty if it is down or does not answer)."""
        if self.auditor is None or self.auditor.poll() is not None:
            return Counter()
        try:
            return counters(scrape(self.auditor_stats_port, timeout=5), "replication_worker_")
        except OSError:
            return Counter()

    def replication_counters(self) -> dict[str, int]:
        """Re-replication done in the run by every AutoRecovery so far."""
        return dict(sorted((self.replication_banked + self._auditor_replication()).items()))

    def kill_auditor(self) -> None:
        self.replication_banked += self._auditor_replication()
        if self.auditor is not None and self.auditor.poll() is None:
            self.auditor.kill()
            self.auditor.wait()

    def stop_auditor(self) -> None:
        self.replication_banked += self._auditor_replication()
        if self.auditor is not None and self.auditor.poll() is None:
            self.auditor.terminate()
            try:
                self.auditor.wait(30)
            except subprocess.TimeoutExpired:
                self.auditor.kill()
                self.auditor.wait()

    # -- processes -----------------------------------------------------------------
    def bookie_pid(self, index: int) -> int | None:
        b = self.sandbox.bookies[index]
        return b.pid if b.alive() else None

    def proxy_pid(self, index: int) -> int | None:
        p = self.sandbox.proxies[index]
        return p.pid if p.alive() else None

    def kill(self, name: str) -> None:
        self.sandbox.kill(name)

    def start_bookie(self, index: int) -> None:
        self.sandbox.start_bookie(index, timeout=120)

    def start_proxy(self, index: int) -> None:
        self.sandbox.start_proxy(index, timeout=60)

    def start_zookeeper(self) -> None:
        self.sandbox.start_zookeeper(timeout=60)

    def everything_running(self) -> list[str]:
        """Names of the cluster's processes that are not running."""
        down = [p.name for p in self.sandbox.status() if not p.alive]
        if self.auditor is None or self.auditor.poll() is not None:
            down.append("autorecovery")
        return down


def _conf_value(v: Any) -> str:
    if isinstance(v, bool):
        return "true" if v else "false"
    return str(v)


def pause(pid: int) -> None:
    with contextlib.suppress(ProcessLookupError):
        os.kill(pid, signal.SIGSTOP)


def resume(pid: int) -> None:
    with contextlib.suppress(ProcessLookupError):
        os.kill(pid, signal.SIGCONT)


def wait_until(predicate: Any, timeout: float, step: float = 0.5) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return True
        time.sleep(step)
    return bool(predicate())
