"""Every garbage collection setting is read: each test here fails when its
setting is ignored (real ZooKeeper, real bookies, the ledger client).

Entry logs with known live fractions: with logSizeLimit = 1 MiB, one log
holds exactly 256 records of 4092 bytes (1024-byte header, 4-byte size
prefix, 32-byte entry header, 4-byte CRC32C digest, 4052-byte payload), so
four ledgers of 64 entries fill one log, and deleting k of them leaves it
(4 - k) / 4 live.
"""

from __future__ import annotations

import asyncio
import dataclasses
import time
from collections.abc import Callable

import pytest

from dlog.bookie.service import BookieService
from dlog.ledger.client import BookKeeper
from dlog.ledger.metadata_store import LedgerMetadataStore
from dlog.ledger.underreplication import mark_underreplicated
from dlog.uri import parse_metadata_service_uri
from dlog.zk import ZooKeeper
from tests.waiting import eventually

PAYLOAD = b"p" * 4052
PER_LEDGER = 64
MIB = 1024 * 1024


async def bookie_with(make_bookie, **settings: object) -> BookieService:  # type: ignore[no-untyped-def]
    base: dict[str, object] = {
        "logSizeLimit": MIB,
        "entryLogPerLedgerEnabled": False,
        "flushInterval": 3600_000,
        "diskCheckInterval": 3600_000,
        "gcWaitTime": 3600_000,
        "minorCompactionInterval": 3600,
        "majorCompactionInterval": 3600,
    }
    return await make_bookie("b0", **{**base, **settings})


async def write_ledger(bk: BookKeeper, entries: int = PER_LEDGER) -> int:
    wh = await bk.create_ledger(1, 1, 1, password=b"pw")
    await asyncio.gather(*(wh.append_nowait(PAYLOAD) for _ in range(entries)))
    await wh.close()
    return wh.ledger_id


async def two_logs(bookie: BookieService, bk: BookKeeper) -> tuple[int, int]:
    """Log A at 0.5 live and log B at 0.75 live (sealed, settled); returns
    their ids."""
    core = bookie.core
    assert core.checkpointer is not None and core.storage is not None
    (sd,) = core.storage.dirs
    first = [await write_ledger(bk) for _ in range(4)]
    await core.checkpointer.checkpoint()
    second = [await write_ledger(bk) for _ in range(4)]
    await core.checkpointer.checkpoint()
    await write_ledger(bk, 1)  # rotates log B: sealed at this flush
    await core.checkpointer.checkpoint()
    settled = sd.settled_logs()
    assert settled is not None and len(settled) >= 2, settled
    log_a, log_b = sorted(settled)[:2]
    assert sd.entry_logger.read_ledgers_map(log_a) == dict.fromkeys(first, PER_LEDGER * 4092)
    assert sd.entry_logger.read_ledgers_map(log_b) == dict.fromkeys(second, PER_LEDGER * 4092)
    for lid in first[:2] + second[:1]:
        await bk.delete_ledger(lid)
    return log_a, log_b


def logs_on_disk(bookie: BookieService) -> set[int]:
    assert bookie.core.storage is not None
    (sd,) = bookie.core.storage.dirs
    return set(sd.entry_logger.log_ids())


def stored(bookie: BookieService) -> set[int]:
    assert bookie.core.storage is not None
    return {lid for d in bookie.core.storage.dirs for lid in d.ledger_index.ledgers()}


async def stays(check: Callable[[], bool], seconds: float, what: str) -> None:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        assert check(), what
        await asyncio.sleep(0.05)


# ---------------------------------------------------------------------------


async def test_gc_wait_time_drops_a_deleted_ledger_unasked(make_bookie, ledgers_uri: str) -> None:
    bookie = await bookie_with(make_bookie, gcWaitTime=300, minorCompactionInterval=0)
    async with BookKeeper(ledgers_uri) as bk:
        keep, drop = await write_ledger(bk, 5), await write_ledger(bk, 5)
        await bk.delete_ledger(drop)
    # No trigger: the collector's own period finds it.
    await eventually(lambda: drop not in stored(bookie), 3, "deleted ledger dropped")
    assert keep in stored(bookie)


async def test_minor_threshold_and_interval(make_bookie, ledgers_uri: str) -> None:
    """Minor compaction every second at 0.6: the 0.5 log is compacted, the
    0.75 one is not (major, at 0.9, would take it, but is an hour away)."""
    bookie = await bookie_with(
        make_bookie,
        gcWaitTime=200,
        minorCompactionThreshold=0.6,
        minorCompactionInterval=1,
        majorCompactionThreshold=0.9,
        majorCompactionInterval=3600,
    )
    gc = bookie.core.gc
    assert gc is not None
    async with BookKeeper(ledgers_uri) as bk:
        log_a, log_b = await two_logs(bookie, bk)
    await eventually(lambda: log_a not in logs_on_disk(bookie), 4, "0.5-live log compacted")
    await stays(lambda: log_b in logs_on_disk(bookie), 1.5, "0.75-live log compacted")
    assert gc.stats.compacted_logs == 1


async def test_major_threshold_and_interval(make_bookie, ledgers_uri: str) -> None:
    """Major compaction every second at 0.8 takes both logs; minor (0.2)
    would take neither."""
    bookie = await bookie_with(
        make_bookie,
        gcWaitTime=200,
        minorCompactionThreshold=0.2,
        minorCompactionInterval=1,
        majorCompactionThreshold=0.8,
        majorCompactionInterval=1,
    )
    gc = bookie.core.gc
    assert gc is not None
    async with BookKeeper(ledgers_uri) as bk:
        log_a, log_b = await two_logs(bookie, bk)
    # The collector's thread removes a compacted log's file before it counts
    # the compaction: wait for both, then check that nothing else was taken.
    await eventually(
        lambda: not {log_a, log_b} & logs_on_disk(bookie) and gc.stats.compacted_logs >= 2,
        4,
        "both logs compacted by major",
    )
    assert gc.stats.compacted_logs == 2


@pytest.mark.parametrize(
    "settings",
    [
        # The other rate set so that using it instead would be fast.
        {"compactionRateByEntries": 300, "compactionRateByBytes": 100_000_000},
        {
            "isThrottleByBytes": True,
            "compactionRateByBytes": 300_000,
            "compactionRateByEntries": 100_000,
        },
    ],
    ids=["by-entries", "by-bytes"],
)
async def test_compaction_rate(make_bookie, ledgers_uri: str, settings: dict[str, object]) -> None:
    """~756 live entries of ~1 KB are rewritten in batches of 256: at 300
    entries/s (or 300 KB/s) the second batch waits until ~1.7 s, where the
    defaults (1000/s, 1 MB/s) or the other rate take ~0.5 s or less."""
    bookie = await bookie_with(make_bookie, **settings)
    gc, core = bookie.core.gc, bookie.core
    assert gc is not None and core.checkpointer is not None
    async with BookKeeper(ledgers_uri) as bk:
        ids = []
        for _ in range(5):  # 1250 records of 1040 bytes: the 1 MiB log rotates
            wh = await bk.create_ledger(1, 1, 1, password=b"pw")
            await asyncio.gather(*(wh.append_nowait(b"q" * 1000) for _ in range(250)))
            await wh.close()
            ids.append(wh.ledger_id)
        await core.checkpointer.checkpoint()
        await bk.delete_ledger(ids[0])
    t0 = time.monotonic()
    stats = await gc.trigger(force_major=True)
    took = time.monotonic() - t0
    assert stats.compacted_logs == 1 and stats.rewritten_entries > 512, stats
    assert took >= 1.3, f"compaction took {took:.2f} s"


async def test_overreplicated_ledger_is_dropped(
    make_bookie, ledgers_uri: str, zk: ZooKeeper
) -> None:
    bookie = await bookie_with(
        make_bookie, gcWaitTime=200, gcOverreplicatedLedgerWaitTime=500, minorCompactionInterval=0
    )
    store = LedgerMetadataStore(zk, parse_metadata_service_uri(ledgers_uri).ledgers_root)
    async with BookKeeper(ledgers_uri) as bk:
        moved, stays_here = await write_ledger(bk, 5), await write_ledger(bk, 5)
        marked = await write_ledger(bk, 5)
    root = parse_metadata_service_uri(ledgers_uri).ledgers_root
    for lid in (moved, marked):
        md, version = await store.read(lid)
        assert md.ensembles == ((0, (bookie.bookie_id,)),)
        # Re-replication moved it elsewhere: this bookie's copy is surplus.
        await store.write(dataclasses.replace(md, ensembles=((0, ("127.0.0.1:1",)),)), version)
    # ... unless the ledger is marked under-replicated: its copy here may be
    # the one re-replication reads.
    await mark_underreplicated(zk, root, marked, ["127.0.0.1:1"])
    await eventually(lambda: moved not in stored(bookie), 4, "over-replicated ledger dropped")
    assert stays_here in stored(bookie) and marked in stored(bookie)
    gc = bookie.core.gc
    assert gc is not None
    # Counted once the drop has returned to the loop, a moment after the
    # index no longer lists the ledger.
    await eventually(lambda: gc.stats.overreplicated_ledgers >= 1, 4, "drop counted")
    assert gc.stats.overreplicated_ledgers == 1 and gc.stats.deleted_ledgers == 0


async def full_disks(bookie: BookieService) -> None:
    assert bookie.core.disk is not None
    for d in bookie.core.ledger_dirs:
        bookie.core.disk.mark_full(d)


async def test_no_space_forces_compaction_when_allowed(make_bookie, ledgers_uri: str) -> None:
    bookie = await bookie_with(make_bookie, isForceGCAllowWhenNoSpace=True)
    async with BookKeeper(ledgers_uri) as bk:
        log_a, log_b = await two_logs(bookie, bk)
    await full_disks(bookie)
    # No trigger, gcWaitTime an hour: every ledger directory full runs it.
    await eventually(
        lambda: not {log_a, log_b} & logs_on_disk(bookie), 4, "compaction forced by no space"
    )


async def test_no_space_suspends_compaction_when_not_allowed(make_bookie, ledgers_uri: str) -> None:
    bookie = await bookie_with(make_bookie, isForceGCAllowWhenNoSpace=False)
    gc, disk = bookie.core.gc, bookie.core.disk
    assert gc is not None and disk is not None
    async with BookKeeper(ledgers_uri) as bk:
        log_a, log_b = await two_logs(bookie, bk)
    await full_disks(bookie)
    stats = await gc.trigger(force_major=True)
    assert stats.deleted_ledgers == 3  # dropping ledgers writes next to nothing
    assert stats.compacted_logs == 0 and {log_a, log_b} <= logs_on_disk(bookie)
    disk.check()  # the disks have room after all
    stats = await gc.trigger(force_major=True)
    assert stats.compacted_logs == 2
