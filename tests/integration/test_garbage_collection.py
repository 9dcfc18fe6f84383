"""The bookie's garbage collector against real ZooKeeper, a real bookie and
the ledger client: deleted ledgers' space comes back, live data stays
readable, and doubt (a ZooKeeper error, a ledger newer than the scan) keeps
data. Runs with single and per-ledger entry logs."""

from __future__ import annotations

from pathlib import Path

import pytest

from dlog.bookie.service import BookieService
from dlog.errors import ConnectionLossError
from dlog.ledger.client import BookKeeper

pytestmark = pytest.mark.both_entry_log_modes

ENTRY = b"x" * 3000
ENTRIES = 100  # ~300 KB a ledger


def disk_bytes(bookie: BookieService) -> int:
    assert bookie.core.storage is not None
    return sum(
        p.stat().st_size for d in bookie.core.storage.dirs for p in Path(d.directory).glob("*.log")
    )


def stored_ledgers(bookie: BookieService) -> set[int]:
    assert bookie.core.storage is not None
    return {lid for d in bookie.core.storage.dirs for lid in d.ledger_index.ledgers()}


async def write_ledgers(bk: BookKeeper, n: int) -> list[int]:
    ids = []
    for _ in range(n):
        wh = await bk.create_ledger(1, 1, 1, password=b"pw")
        for _ in range(ENTRIES):
            await wh.append(ENTRY)
        await wh.close()
        ids.append(wh.ledger_id)
    return ids


async def read_all(bk: BookKeeper, lid: int) -> None:
    rh = await bk.open_ledger(lid, b"pw")
    entries = await rh.read(0, ENTRIES - 1)
    assert [e.data for e in entries] == [ENTRY] * ENTRIES
    await rh.close()


async def start(make_bookie) -> BookieService:  # type: ignore[no-untyped-def]
    return await make_bookie(
        "b0", logSizeLimit=1024 * 1024, gcWaitTime=3600_000, flushInterval=3600_000
    )


async def test_deleted_ledgers_give_their_space_back(
    make_bookie, ledgers_uri: str, entry_log_per_ledger: bool
) -> None:
    bookie = await start(make_bookie)
    core = bookie.core
    assert core.gc is not None and core.checkpointer is not None
    async with BookKeeper(ledgers_uri) as bk:
        empty = disk_bytes(bookie)
        ids = await write_ledgers(bk, 8)
        await core.checkpointer.checkpoint()
        await core.checkpointer.checkpoint()  # per-ledger logs rotate at a checkpoint
        full = disk_bytes(bookie)
        assert full - empty > 8 * ENTRIES * len(ENTRY)
        # Kept ledgers share their logs with deleted ones (with one log for
        # all): those logs must be compacted.
        keep = [ids[0], ids[3]]
        drop = [lid for lid in ids if lid not in keep]
        for lid in drop:
            await bk.delete_ledger(lid)
        stats = await core.gc.trigger(force_major=True)
        assert stats.deleted_ledgers == len(drop)
        assert stored_ledgers(bookie) == set(keep)
        after = disk_bytes(bookie)
        live = len(keep) * ENTRIES * len(ENTRY)
        # What is left is the kept ledgers and the log still open (up to 1 MB).
        assert after - empty < live + 1.1 * 1024 * 1024, (empty, full, after)
        if not entry_log_per_ledger:
            assert stats.compacted_logs >= 1 and stats.rewritten_bytes >= live * 0.9
        else:
            # Whole-file reclaim: every deleted ledger had logs of its own.
            assert stats.rewritten_bytes == 0 and stats.compacted_logs == 0
            assert stats.removed_logs >= len(drop)
        for lid in keep:
            await read_all(bk, lid)
    # And after a restart.
    await bookie.stop()
    bookie = await make_bookie(
        "b0", port=bookie.server.port, logSizeLimit=1024 * 1024, gcWaitTime=3600_000
    )
    async with BookKeeper(ledgers_uri) as bk:
        for lid in keep:
            await read_all(bk, lid)


async def test_doubt_keeps_data(make_bookie, ledgers_uri: str) -> None:
    """A ZooKeeper error while checking a ledger keeps it; a ledger created
    while the metadata is being listed is not taken for a deleted one."""
    bookie = await start(make_bookie)
    gc = bookie.core.gc
    assert gc is not None
    async with BookKeeper(ledgers_uri) as bk:
        (old,) = await write_ledgers(bk, 1)
        await bk.delete_ledger(old)
        real_exists = gc.metadata.exists

        async def failing_exists(ledger_id: int) -> bool:
            raise ConnectionLossError("ZooKeeper: connection lost (test)")

        gc.metadata.exists = failing_exists  # type: ignore[method-assign]
        stats = await gc.trigger()
        assert stats.deleted_ledgers == 0 and old in stored_ledgers(bookie)
        gc.metadata.exists = real_exists  # type: ignore[method-assign]

        # The listing starts, then a ledger is created and written to this
        # bookie: the listing does not have it, the snapshot before it
        # neither, so it is no candidate.
        real_list = gc.metadata.list_ledgers
        created: list[int] = []

        async def list_then_create() -> list[int]:
            listed = await real_list()
            created.extend(await write_ledgers(bk, 1))
            return listed

        gc.metadata.list_ledgers = list_then_create  # type: ignore[method-assign]
        stats = await gc.trigger()
        gc.metadata.list_ledgers = real_list  # type: ignore[method-assign]
        assert stats.deleted_ledgers == 1  # the deleted one, now that ZooKeeper answers
        assert stored_ledgers(bookie) == set(created)
        await read_all(bk, created[0])
        assert bookie.core.metrics.gc_deleted_ledgers.labels("deleted")._value.get() == 1
