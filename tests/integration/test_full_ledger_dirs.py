"""A bookie with several ledger directories, one of which fills up: its
new entry logs go to the disks that have room, the bookie stays writable,
and it turns read-only only when every ledger directory is full."""

from __future__ import annotations

from pathlib import Path

from dlog.bookie.service import BookieService
from dlog.ledger.client import BookKeeper

ENTRY = b"y" * 2000


def logs_under(root: Path) -> set[Path]:
    """Entry logs (not RocksDB's own .log files, in the index directories)."""
    return {
        p
        for p in root.rglob("*.log")
        if p.parent.name == "current" or p.parent.name.startswith("overflow-")
    }


def fill_usage(bookie: BookieService, full: set[Path]) -> None:
    """Make the disk monitor see the directories under ``full`` as full."""
    disk = bookie.core.disk
    assert disk is not None

    def usage(d: Path) -> float:
        return 0.99 if any(d.is_relative_to(f) for f in full) else 0.10

    disk._usage = usage
    disk.check()


async def test_a_full_directory_sends_new_logs_to_the_others(
    make_bookie, ledgers_uri: str, tmp_path: Path
) -> None:
    a, b = tmp_path / "disk-a", tmp_path / "disk-b"
    settings = {"ledgerDirectories": f"{a},{b}", "logSizeLimit": 1024 * 1024}
    bookie = await make_bookie("b0", **settings)
    core = bookie.core
    assert core.storage is not None and core.checkpointer is not None
    async with BookKeeper(ledgers_uri) as bk:
        handles = [await bk.create_ledger(1, 1, 1, password=b"pw") for _ in range(4)]
        assert {h.ledger_id % 2 for h in handles} == {0, 1}, "ledgers on both directories"
        for h in handles:
            for _ in range(20):
                await h.append(ENTRY)
        await core.checkpointer.checkpoint()
        on_a_before = logs_under(a)
        assert on_a_before

        fill_usage(bookie, {a})
        assert not core.read_only  # b has room
        for h in handles:
            for _ in range(20):
                await h.append(ENTRY)
        await core.checkpointer.checkpoint()
        assert logs_under(a) == on_a_before, "a new entry log was created on the full disk"
        overflow = [p for p in logs_under(b) if p.parent.name.startswith("overflow-")]
        assert overflow, "the full directory's storage wrote no log to the other disk"
        ids = [h.ledger_id for h in handles]
        for h in handles:
            await h.close()
        for lid in ids:
            rh = await bk.open_ledger(lid, b"pw")
            assert [e.data for e in await rh.read(0, 39)] == [ENTRY] * 40
            await rh.close()

        fill_usage(bookie, {a, b})
        assert core.read_only  # every ledger directory full
        fill_usage(bookie, set())
        assert not core.read_only

    # The logs on the other disk are found again after a restart.
    port = bookie.server.port
    await bookie.stop()
    await make_bookie("b0", port=port, **settings)
    async with BookKeeper(ledgers_uri) as bk:
        for lid in ids:
            rh = await bk.open_ledger(lid, b"pw")
            assert [e.data for e in await rh.read(0, 39)] == [ENTRY] * 40
            await rh.close()
