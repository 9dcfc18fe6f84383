"""Ledger state created by strangers costs bounded memory.

A fencing read (or an add) for a ledger the bookie has never seen creates
that ledger with whatever key came first, as in BookKeeper. 100,000 such
fences used to add 116 MB of RSS (a Python object per ledger, kept
forever); the ledger index in RocksDB is the record now, and memory holds
only the ledgers used lately.
"""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from dlog.errors import EOK, EUA
from dlog.ledger.bookie_client import BookieClient
from dlog.sandbox.bookies import BookieProcess

pytestmark = pytest.mark.fault

FENCES = 100_000


def rss_mb(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    raise AssertionError("no VmRSS")


async def fence_many(address: str, first: int, count: int) -> set[int]:
    client = BookieClient(address)
    await client.connect()
    try:
        statuses: set[int] = set()
        for start in range(first, first + count, 2000):
            ids = range(start, min(start + 2000, first + count))
            responses = await asyncio.gather(
                *(client.read_entry(lid, 0, fence=True, master_key=b"key-%d" % lid) for lid in ids)
            )
            statuses |= {r.status for r in responses}
        return statuses
    finally:
        await client.close()


async def fence_status(address: str, lid: int, key: bytes) -> int:
    client = BookieClient(address)
    await client.connect()
    try:
        return (await client.read_entry(lid, 0, fence=True, master_key=key)).status
    finally:
        await client.close()


def test_many_unknown_ledger_fences_cost_bounded_memory(tmp_path: Path, ledgers_uri: str) -> None:
    bookie = BookieProcess(tmp_path / "bookie", ledgers_uri).start()
    address = bookie.bookie_id
    assert bookie.pid is not None
    try:
        asyncio.run(fence_many(address, 1_000_000, 20_000))  # warm up: caches, pools
        before = rss_mb(bookie.pid)
        statuses = asyncio.run(fence_many(address, 2_000_000, FENCES))
        grown = rss_mb(bookie.pid) - before
        # A fenced unknown ledger has no entry 0: each answer is a "no entry".
        assert EOK not in statuses or len(statuses) > 1, statuses
        assert grown < 40, f"{FENCES} unknown-ledger fences grew RSS by {grown:.0f} MB"
        # The first key still wins, for a ledger long out of memory too.
        assert asyncio.run(fence_status(address, 2_000_000, b"another key")) == EUA
        assert asyncio.run(fence_status(address, 2_000_000, b"key-2000000")) != EUA
    finally:
        bookie.stop()
    # And after a restart.
    again = BookieProcess(tmp_path / "bookie", ledgers_uri, port=bookie.port).start()
    try:
        assert asyncio.run(fence_status(address, 2_000_001, b"another key")) == EUA
    finally:
        again.stop()
