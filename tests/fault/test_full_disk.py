"""A real full disk: the bookie's ledger directory on a 64 MB tmpfs, its
journal elsewhere.

Before the fix, a checkpoint flush that failed with ENOSPC dropped its
buffered bytes but kept their size; once space was freed the next flush
"succeeded" with every location off by the failed attempt, and the
checkpoint mark moved past entries that were not stored: acknowledged
entries answered EIO ("entry log 1: short read"), for good.

Needs root (to mount the tmpfs): it fails, not skips, where it cannot.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from dlog.errors import EOK, EREADONLY
from dlog.ledger.bookie_client import BookieClient
from dlog.ledger.digest import CRC32C, DigestManager
from dlog.sandbox.bookies import BookieProcess

pytestmark = pytest.mark.fault

LEDGER = 7
KEY = DigestManager(1, CRC32C, b"pw").master_key
SIZE = 8 * 1024


def body(eid: int) -> bytes:
    payload = (f"{eid}:".encode() * SIZE)[: SIZE - 40]
    return DigestManager(LEDGER, CRC32C, b"pw").compute(eid, eid - 1, eid * SIZE, payload)


@contextlib.contextmanager
def tmpfs(path: Path, size_mb: int) -> Iterator[Path]:
    if os.geteuid() != 0:
        pytest.fail("this test mounts a tmpfs and needs root (run make test as root)")
    path.mkdir(parents=True)
    subprocess.run(
        ["mount", "-t", "tmpfs", "-o", f"size={size_mb}m", "tmpfs", str(path)], check=True
    )
    try:
        yield path
    finally:
        subprocess.run(["umount", "-l", str(path)], check=False)


def fill(fs: Path, leave_free: int) -> Path:
    """Fill the filesystem until ``leave_free`` bytes are left."""
    filler = fs / "filler"
    free = os.statvfs(fs).f_bavail * os.statvfs(fs).f_frsize
    with open(filler, "ab") as f:
        chunk = b"\0" * (1 << 20)
        n = max(0, free - leave_free)
        try:
            while n > 0:
                f.write(chunk[: min(n, len(chunk))])
                n -= min(n, len(chunk))
        except OSError:
            pass  # full already
    return filler


async def add(address: str, first: int, count: int) -> dict[int, int]:
    """Pipelined adds: entry id -> status."""
    client = BookieClient(address)
    await client.connect()
    try:
        eids = list(range(first, first + count))
        responses = await asyncio.gather(
            *(client.add_entry(LEDGER, eid, KEY, body(eid)) for eid in eids)
        )
        return {eid: r.status for eid, r in zip(eids, responses, strict=True)}
    finally:
        await client.close()


async def unreadable(address: str, eids: list[int]) -> list[tuple[int, int]]:
    """(entry, status) of every entry that does not read back intact."""
    client = BookieClient(address)
    await client.connect()
    try:
        bad = []
        for start in range(0, len(eids), 200):
            batch = eids[start : start + 200]
            responses = await asyncio.gather(*(client.read_entry(LEDGER, e) for e in batch))
            for eid, r in zip(batch, responses, strict=True):
                if r.status != EOK or r.readResponse.body != body(eid):
                    bad.append((eid, r.status))
        return bad
    finally:
        await client.close()


def wait_until(what: str, check, timeout: float = 30.0) -> None:  # type: ignore[no-untyped-def]
    deadline = time.monotonic() + timeout
    while not check():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting until {what}")
        time.sleep(0.1)


def test_a_full_ledger_disk_loses_no_acknowledged_entry(tmp_path: Path, ledgers_uri: str) -> None:
    with tmpfs(tmp_path / "ledger-fs", 64) as fs:
        settings = {
            "ledgerDirectories": str(fs / "ledgers"),
            "flushInterval": 1000,
            "diskCheckInterval": 500,
            # The threshold never trips on its own here (the fill leaves the
            # disk ~92% used): only ENOSPC itself can turn the bookie
            # read-only, which must happen at once.
            "diskUsageThreshold": 0.99,
            "diskUsageLwmThreshold": 0.90,
        }
        bookie = BookieProcess(tmp_path / "bookie", ledgers_uri, **settings).start()
        address = bookie.bookie_id
        try:
            first = asyncio.run(add(address, 0, 1000))
            assert set(first.values()) == {EOK}
            ledger_dir = fs / "ledgers" / "current"
            wait_until(
                "the first 1,000 entries are flushed",
                lambda: sum(p.stat().st_size for p in ledger_dir.glob("*.log")) >= 1000 * SIZE,
            )
            filler = fill(fs, 5 << 20)
            second = asyncio.run(add(address, 1000, 850))
            acked = [e for e, s in {**first, **second}.items() if s == EOK]
            assert len(acked) > 1000, "none of the adds after the fill was acknowledged"
            assert set(second.values()) <= {EOK, EREADONLY}
            # The checkpoint's flush hits ENOSPC: read-only at once.
            wait_until(
                "an add is refused as read-only",
                lambda: set(asyncio.run(add(address, 5000, 1)).values()) == {EREADONLY},
            )
            log = bookie.log_tail(400)
            assert "No space left on device" in log
            assert log.count("ledger storage flush failed") <= 3, "no backoff or rate limit"
            bad = asyncio.run(unreadable(address, acked))  # from the write cache meanwhile
            assert not bad, f"{len(bad)} acknowledged entries unreadable: {bad[:5]}"

            filler.unlink()
            wait_until(
                "the bookie is writable again",
                lambda: set(asyncio.run(add(address, 6000, 1)).values()) == {EOK},
            )
            time.sleep(3.0)  # checkpoints (every second) store the cached entries
            bad = asyncio.run(unreadable(address, acked))
            assert not bad, f"{len(bad)} acknowledged entries unreadable: {bad[:5]}"
            bookie.kill()

            # Restart with the ledger disk completely full: it starts,
            # read-only, serves every entry, and stops without a traceback.
            filler = fill(fs, 0)
            again = BookieProcess(
                tmp_path / "bookie", ledgers_uri, port=bookie.port, **settings
            ).start()
            try:
                bad = asyncio.run(unreadable(address, acked))
                assert not bad, f"{len(bad)} acknowledged entries unreadable: {bad[:5]}"
                assert set(asyncio.run(add(address, 7000, 1)).values()) == {EREADONLY}
                assert "cannot open the indexes for writing" in again.log_tail(400)
            finally:
                again.stop()
            assert "Traceback" not in again.log_tail(400), again.log_tail(60)

            # Room again: replay and storage agree; every entry is there.
            filler.unlink()
            last = BookieProcess(
                tmp_path / "bookie", ledgers_uri, port=bookie.port, **settings
            ).start()
            try:
                bad = asyncio.run(unreadable(address, acked))
                assert not bad, f"{len(bad)} acknowledged entries unreadable: {bad[:5]}"
                assert set(asyncio.run(add(address, 8000, 1)).values()) == {EOK}
            finally:
                last.stop()
        finally:
            bookie.kill()
