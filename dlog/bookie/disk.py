"""Disk usage of the bookie's directories, and the full/writable decision.

A directory whose disk is used above ``diskUsageThreshold`` is full; it is
writable again only below ``diskUsageLwmThreshold``, so the bookie does not
flap. Above ``diskUsageWarnThreshold`` a warning is logged (once per
crossing). The bookie turns read-only while any directory it writes to is
full; a write that fails with ENOSPC marks its directory full at once
(:meth:`DiskMonitor.mark_full`), and it stays full until below the
low-water mark.
"""

from __future__ import annotations

import logging
import os
import shutil
from collections.abc import Callable
from pathlib import Path

from dlog.periodic import PeriodicTask

log = logging.getLogger(__name__)


def usage_fraction(path: Path) -> float:
    u = shutil.disk_usage(path)
    return (u.total - u.free) / u.total if u.total else 1.0


class DiskMonitor:
    def __init__(
        self,
        dirs: list[Path],
        *,
        threshold: float,
        lwm_threshold: float,
        interval_ms: int,
        warn_threshold: float = 1.0,
        on_change: Callable[[set[Path]], None],
        usage: Callable[[Path], float] = usage_fraction,
    ) -> None:
        self.dirs = dirs
        self.threshold = threshold
        self.lwm = lwm_threshold
        self.warn = warn_threshold
        self.warned: set[Path] = set()
        self.interval = interval_ms / 1000.0
        self.full: set[Path] = set()
        self._on_change = on_change
        self._usage = usage
        self._periodic = PeriodicTask(self.interval, self.check, "disk check")

    def check(self) -> set[Path]:
        """Re-evaluate every directory; calls on_change when the set changes."""
        before = set(self.full)
        for d in self.dirs:
            try:
                used = self._usage(d)
            except OSError as e:
                log.error("cannot stat %s: %s; treating it as full", d, e)
                self.full.add(d)
                continue
            if used > self.warn and d not in self.warned and d not in self.full:
                self.warned.add(d)
                log.warning(
                    "%s is %.1f%% used, above diskUsageWarnThreshold %.1f%%",
                    d,
                    used * 100,
                    self.warn * 100,
                )
            elif used <= self.warn:
                self.warned.discard(d)
            if d in self.full:
                if used < self.lwm:
                    log.info("%s is writable again (%.1f%% used)", d, used * 100)
                    self.full.discard(d)
            elif used > self.threshold:
                log.warning(
                    "%s is full: %.1f%% used, above diskUsageThreshold %.1f%%",
                    d,
                    used * 100,
                    self.threshold * 100,
                )
                self.full.add(d)
        if self.full != before:
            self._on_change(set(self.full))
        return self.full

    def mark_full(self, d: Path) -> None:
        """A write failed with ENOSPC: treat the directory as full now."""
        if d not in self.full:
            self.full.add(d)
            self._on_change(set(self.full))

    def start(self) -> None:
        self._periodic.start()

    async def stop(self) -> None:
        await self._periodic.stop()

    def capacity(self) -> tuple[int, int]:
        """(total, free) bytes over the distinct filesystems of the dirs."""
        seen: set[int] = set()
        total = free = 0
        for d in self.dirs:
            try:
                dev = os.stat(d).st_dev
                if dev in seen:
                    continue
                seen.add(dev)
                u = shutil.disk_usage(d)
            except OSError:
                continue
            total += u.total
            free += u.free
        return total, free
