"""A failed flush never loses an entry: ENOSPC, EIO or a short write at any
write or sync of the entry logs and indexes (failpoints in
dlog.bookie.fileio) leaves every entry readable, the retry idempotent, and
a later storage on the same directory reads all of them back.

Before the savepoint/rollback, a failed entry-log write dropped its buffer
but kept the logical size, and every location after it pointed past the
data ("entry log 1: short read").
"""

from __future__ import annotations

import asyncio
import errno
import struct
import time
from pathlib import Path
from typing import Any

import pytest

from dlog import failpoints
from dlog.bookie.ledger_storage import SingleDirectoryDbLedgerStorage
from dlog.conf.bookie import BookieConfig
from dlog.sandbox.bookies import bookie_config

URI = "zk+hierarchical://127.0.0.1:2181/ledgers"
KiB = 1024

#: (failpoint, action): every write and sync a flush does.
POINTS = [
    ("entry_log.write", "enospc"),
    ("entry_log.write", "eio"),
    ("entry_log.write", "short"),
    ("entry_log.fsync", "eio"),
    ("entry_log.fsync", "enospc"),
    ("entry_log.writeback", "eio"),
    ("index.write", "enospc"),
    ("index.sync", "eio"),
    ("ledger_index.sync", "enospc"),
]


@pytest.fixture(autouse=True)
def _no_failpoints():
    failpoints.configure("")
    yield
    failpoints.configure("")


def entry(ledger_id: int, entry_id: int, size: int = 8 * KiB) -> bytes:
    head = struct.pack(">qq", ledger_id, entry_id)
    return head + bytes([(ledger_id * 31 + entry_id) % 251]) * (size - len(head))


def conf(tmp_path: Path, **overrides: Any) -> BookieConfig:
    settings: dict[str, Any] = {
        "logSizeLimit": 1024 * 1024,  # rotations inside a flush
        "dbStorage_writeCacheMaxSizeMb": 16,
        **overrides,
    }
    return bookie_config(tmp_path, port=3181, metadata_service_uri=URI, **settings)


def storage(tmp_path: Path, c: BookieConfig) -> SingleDirectoryDbLedgerStorage:
    d = tmp_path / "ledgers" / "current"
    d.mkdir(parents=True, exist_ok=True)
    return SingleDirectoryDbLedgerStorage(
        d, c, write_cache_bytes=c.write_cache_bytes, read_cache_bytes=c.read_cache_bytes
    )


def add(s: SingleDirectoryDbLedgerStorage, written: dict[tuple[int, int], bytes], n: int) -> None:
    for i in range(n):
        lid = 1 + i % 3
        eid = sum(1 for k in written if k[0] == lid)
        data = entry(lid, eid)
        s.ledger_index.set_master_key(lid, b"k")
        assert s.try_add(lid, eid, data)
        written[(lid, eid)] = data


def check_all(s: SingleDirectoryDbLedgerStorage, written: dict[tuple[int, int], bytes]) -> None:
    for (lid, eid), data in written.items():
        assert s.get_entry(lid, eid) == data, (lid, eid)


def stored_once(s: SingleDirectoryDbLedgerStorage) -> None:
    """The failed attempt was rolled back: every entry is in the logs once."""
    seen = [
        (lid, eid)
        for log_id in s.entry_logger.log_ids()
        for lid, eid, _, _ in s.entry_logger.scan(log_id)
    ]
    dups = len(seen) - len(set(seen))
    assert not dups, f"{dups} entries stored twice: the failed flush was not rolled back"


@pytest.mark.parametrize("log_size", [1, 64], ids=["rotating", "one-log"])
@pytest.mark.parametrize("per_ledger", [False, True], ids=["single-log", "log-per-ledger"])
@pytest.mark.parametrize(("point", "action"), POINTS, ids=[f"{p}={a}" for p, a in POINTS])
async def test_a_failed_flush_loses_nothing(
    tmp_path: Path, point: str, action: str, per_ledger: bool, log_size: int
) -> None:
    c = conf(tmp_path, entryLogPerLedgerEnabled=per_ledger, logSizeLimit=log_size << 20)
    s = storage(tmp_path, c)
    errors: list[OSError] = []
    s.on_io_error = lambda d, e: errors.append(e)
    written: dict[tuple[int, int], bytes] = {}
    try:
        add(s, written, 200)  # 1.6 MB: fills a log and rotates
        await s.flush()
        add(s, written, 300)
        failpoints.configure(f"{point}={action}")
        with pytest.raises(OSError) as raised:
            await s.flush()
        assert raised.value.errno == (errno.EIO if action == "eio" else errno.ENOSPC)
        assert errors and errors[-1] is raised.value  # reported, for the read-only switch
        check_all(s, written)  # still served from the write cache
        # More adds while the failed half waits: the next flush takes both.
        add(s, written, 50)
        failpoints.configure("")
        await s.flush()
        assert s.write_cache_count == 0 and s.failed is None
        check_all(s, written)  # from the entry logs now
        stored_once(s)
        add(s, written, 100)  # and the logs go on at the right offsets
        await s.checkpoint()
        check_all(s, written)
    finally:
        failpoints.configure("")
        await s.close()
    again = storage(tmp_path, c)
    try:
        check_all(again, written)
    finally:
        await again.close()


async def test_a_flush_that_keeps_failing_is_retried_with_backoff(tmp_path: Path) -> None:
    """Adds waiting for room do not re-run the failing flush in a tight
    loop (it ran ~2,600 times a second, logging each time)."""
    c = conf(tmp_path, dbStorage_writeCacheMaxSizeMb=2, dbStorage_maxThrottleTimeMs=1500)
    s = storage(tmp_path, c)
    written: dict[tuple[int, int], bytes] = {}
    try:
        failpoints.configure("entry_log.write=enospc")
        attempts = 0
        original = s._flush_frozen

        def counting() -> None:
            nonlocal attempts
            attempts += 1
            original()

        s._flush_frozen = counting  # type: ignore[method-assign]
        s.ledger_index.set_master_key(1, b"k")
        eid = 0
        t0 = time.monotonic()
        waiters = []
        while time.monotonic() - t0 < 1.2:
            data = entry(1, eid)
            if s.try_add(1, eid, data):
                written[(1, eid)] = data
            else:
                waiters.append(asyncio.ensure_future(s.add_wait(1, eid, data)))
                await asyncio.sleep(0.01)
            eid += 1
        results = await asyncio.gather(*waiters)
        assert attempts <= 6, f"{attempts} flush attempts in 1.2 s: no backoff"
        assert not any(results)  # they gave up after dbStorage_maxThrottleTimeMs
        failpoints.configure("")
        await s.flush()
        check_all(s, written)
    finally:
        failpoints.configure("")
        await s.close()


async def test_a_failed_index_write_is_retried_without_rewriting_the_logs(tmp_path: Path) -> None:
    c = conf(tmp_path)
    s = storage(tmp_path, c)
    written: dict[tuple[int, int], bytes] = {}
    try:
        add(s, written, 100)
        failpoints.configure("index.write=enospc")
        with pytest.raises(OSError):
            await s.flush()
        size = sum(p.stat().st_size for p in s.directory.glob("*.log"))
        failpoints.configure("")
        await s.flush()
        assert sum(p.stat().st_size for p in s.directory.glob("*.log")) == size
        check_all(s, written)
    finally:
        await s.close()


def test_disk_monitor_thresholds(caplog: pytest.LogCaptureFixture) -> None:
    """Full above diskUsageThreshold, writable again only below
    diskUsageLwmThreshold; a warning above diskUsageWarnThreshold; ENOSPC
    marks a directory full at once, until below the low-water mark."""
    from dlog.bookie.disk import DiskMonitor

    d = Path("/ledgers")
    used = {d: 0.5}
    changes: list[set[Path]] = []
    mon = DiskMonitor(
        [d],
        threshold=0.95,
        lwm_threshold=0.90,
        warn_threshold=0.85,
        interval_ms=1000,
        on_change=changes.append,
        usage=lambda p: used[p],
    )
    assert mon.check() == set()
    used[d] = 0.87
    with caplog.at_level("WARNING"):
        assert mon.check() == set()
    assert "diskUsageWarnThreshold" in caplog.text
    used[d] = 0.96
    assert mon.check() == {d} and changes == [{d}]
    used[d] = 0.92  # below the threshold, above the low-water mark: still full
    assert mon.check() == {d}
    used[d] = 0.89
    assert mon.check() == set() and changes == [{d}, set()]
    mon.mark_full(d)  # a write failed with ENOSPC at 89%
    assert mon.full == {d} and changes[-1] == {d}
    used[d] = 0.5
    assert mon.check() == set()
