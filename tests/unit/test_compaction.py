"""Compaction and whole-log removal on a real ledger storage (files and
RocksDB), including a crash at every step: no live entry is lost and no
index entry points at a removed file."""

from __future__ import annotations

import os
import struct
from pathlib import Path
from typing import Any

import pytest

from dlog import failpoints
from dlog.bookie.compactor import FAILPOINTS, Compactor, Throttle
from dlog.bookie.entry_log import COMPACTING_SUFFIX, split_location
from dlog.bookie.entry_log_metadata import EntryLogMetadata, compaction_candidates
from dlog.bookie.ledger_storage import SingleDirectoryDbLedgerStorage
from dlog.conf.bookie import BookieConfig
from dlog.errors import NoSuchEntryError
from dlog.sandbox.bookies import bookie_config

URI = "zk+hierarchical://127.0.0.1:2181/ledgers"
PAYLOAD = 2000


def entry(ledger_id: int, entry_id: int) -> bytes:
    return struct.pack(">qq", ledger_id, entry_id) + bytes([ledger_id % 251]) * PAYLOAD


def conf(tmp_path: Path, **overrides: Any) -> BookieConfig:
    return bookie_config(tmp_path, port=3181, metadata_service_uri=URI, **overrides)


def open_storage(tmp_path: Path, c: BookieConfig) -> SingleDirectoryDbLedgerStorage:
    d = tmp_path / "ledgers" / "current"
    d.mkdir(parents=True, exist_ok=True)
    return SingleDirectoryDbLedgerStorage(
        d, c, write_cache_bytes=c.write_cache_bytes, read_cache_bytes=c.read_cache_bytes
    )


def compactor(sd: SingleDirectoryDbLedgerStorage, rate: int = 10**9) -> Compactor:
    return Compactor(
        sd.entry_logger, sd.locations, sd.on_storage_thread, Throttle(rate, by_bytes=False)
    )


async def fill(sd: SingleDirectoryDbLedgerStorage, ledgers: range, entries: int) -> None:
    """Entries of several ledgers, interleaved into shared logs, flushed and
    the logs sealed (a close rotates nothing, so roll by a checkpoint)."""
    for lid in ledgers:
        sd.ledger_index.set_master_key(lid, b"k")
    for eid in range(entries):
        for lid in ledgers:
            assert sd.try_add(lid, eid, entry(lid, eid)) or await sd.add_wait(
                lid, eid, entry(lid, eid)
            )
        if eid % 50 == 49:
            await sd.flush()
    await sd.flush()


def metas(sd: SingleDirectoryDbLedgerStorage) -> list[EntryLogMetadata]:
    settled = sd.settled_logs()
    assert settled is not None
    out = []
    for log_id in settled:
        ledgers = sd.entry_logger.read_ledgers_map(log_id)
        assert ledgers is not None
        out.append(EntryLogMetadata.from_ledgers(log_id, ledgers))
    return out


def check_readable(sd: SingleDirectoryDbLedgerStorage, ledgers: range, entries: int) -> None:
    for lid in ledgers:
        for eid in range(entries):
            assert sd.get_entry(lid, eid) == entry(lid, eid), (lid, eid)


def check_no_dangling(sd: SingleDirectoryDbLedgerStorage, ledgers: range, entries: int) -> None:
    logs = set(sd.entry_logger.log_ids())
    for lid in ledgers:
        for eid in range(entries):
            loc = sd.locations.get(lid, eid)
            if loc is not None:
                assert split_location(loc)[0] in logs, (lid, eid, hex(loc))


def test_metadata_and_candidates() -> None:
    m = EntryLogMetadata.from_ledgers(7, {1: 600, 2: 300, 3: 100})
    assert (m.total, m.remaining, m.usage) == (1000, 1000, 1.0)
    assert m.drop_dead(lambda lid: lid != 1) == 600
    assert m.usage == pytest.approx(0.4) and not m.empty
    other = EntryLogMetadata.from_ledgers(8, {4: 100})
    other.drop_dead(lambda lid: False)
    assert other.empty and other.usage == 0.0
    third = EntryLogMetadata.from_ledgers(9, {5: 10, 6: 90})
    third.drop_dead(lambda lid: lid == 5)
    assert [c.log_id for c in compaction_candidates([m, other, third], 0.5)] == [9, 7]
    assert compaction_candidates([m, third], 0.0) == []  # 0 disables compaction
    assert compaction_candidates([m, third], 0.05) == []


async def test_compaction_moves_live_entries_and_frees_the_log(tmp_path: Path) -> None:
    c = conf(tmp_path, logSizeLimit=1024 * 1024)
    sd = open_storage(tmp_path, c)
    await fill(sd, range(1, 5), 200)  # ~1.6 MB: two logs or more
    await sd.checkpoint()
    sd.manager.close()  # seal what is open: every log settled
    live = range(1, 2)
    for lid in (2, 3, 4):
        sd.delete_ledger(lid)
    live_ids = set(sd.ledger_index.ledgers())
    assert live_ids == {1}
    before = {p.name for p in sd.directory.glob("*.log")}
    ms = metas(sd)
    assert ms
    for m in ms:
        m.drop_dead(live_ids.__contains__)
    cands = compaction_candidates(ms, 0.8)
    assert cands, [m.usage for m in ms]
    comp = compactor(sd)
    rewritten = 0
    for m in cands:
        result = comp.compact(m, live_ids.__contains__)
        rewritten += result.rewritten_bytes
        assert result.freed_bytes > 0
    after = {p.name for p in sd.directory.glob("*.log")}
    assert not (before - after) ^ {f"{m.log_id:x}.log" for m in cands}
    assert 0 < rewritten < 200 * (PAYLOAD + 20) * 1.01
    check_readable(sd, live, 200)
    check_no_dangling(sd, range(1, 5), 200)
    for lid in (2, 3):
        with pytest.raises(NoSuchEntryError):
            sd.get_entry(lid, 5)
    await sd.close()
    again = open_storage(tmp_path, c)  # and after a restart
    check_readable(again, live, 200)
    await again.close()


@pytest.mark.parametrize("point", FAILPOINTS)
async def test_a_crash_at_any_step_of_compaction_loses_nothing(tmp_path: Path, point: str) -> None:
    c = conf(tmp_path, logSizeLimit=1024 * 1024)
    sd = open_storage(tmp_path, c)
    await fill(sd, range(1, 4), 150)
    sd.manager.close()
    sd.delete_ledger(2)
    live_ids = set(sd.ledger_index.ledgers())
    (target,) = [m for m in metas(sd) if m.log_id == min(sd.settled_logs() or [])]
    target.drop_dead(live_ids.__contains__)
    failpoints.configure(f"{point}=raise")
    try:
        with pytest.raises(failpoints.FailpointError):
            compactor(sd).compact(target, live_ids.__contains__)
    finally:
        failpoints.configure("")
    await sd.close()  # the process dies here; what is on disk stays
    sd = open_storage(tmp_path, c)
    compactor(sd).recover()
    names = os.listdir(sd.directory)
    assert not [n for n in names if n.endswith(COMPACTING_SUFFIX) or n.startswith("compaction.")]
    check_readable(sd, range(1, 2), 150)
    check_readable(sd, range(3, 4), 150)
    check_no_dangling(sd, range(1, 4), 150)
    # A compaction after recovery still works and frees the old log if it remained.
    ms = [m for m in metas(sd) if m.log_id == target.log_id]
    for m in ms:
        m.drop_dead(live_ids.__contains__)
        compactor(sd).compact(m, live_ids.__contains__)
    assert target.log_id not in sd.entry_logger.log_ids()
    check_readable(sd, range(1, 2), 150)
    check_readable(sd, range(3, 4), 150)
    await sd.close()


def test_throttle_sleeps_to_the_rate() -> None:
    now = [0.0]
    slept: list[float] = []

    def sleep(s: float) -> None:
        slept.append(s)
        now[0] += s

    t = Throttle(100, by_bytes=False, clock=lambda: now[0], sleep=sleep)
    t.acquire(50, 10**6)
    assert slept == [pytest.approx(0.5)]
    b = Throttle(1000, by_bytes=True, clock=lambda: now[0], sleep=sleep)
    b.acquire(1, 2000)
    assert slept[-1] == pytest.approx(2.0)


async def test_an_entry_stored_again_since_is_not_copied(tmp_path: Path) -> None:
    """Liveness is the index's: a copy the index no longer points at (the
    entry was written again into a later log) is garbage, not rewritten."""
    c = conf(tmp_path, logSizeLimit=1024 * 1024)
    sd = open_storage(tmp_path, c)
    await fill(sd, range(1, 3), 100)
    sd.manager.close()  # sealed: what comes next goes to a new log
    first = set(sd.entry_logger.log_ids())
    for eid in range(100):  # ledger 1 again (a recovery writing what it read)
        assert sd.try_add(1, eid, entry(1, eid)) or await sd.add_wait(1, eid, entry(1, eid))
    await sd.flush()
    sd.manager.close()
    assert all(split_location(sd.locations.get(1, e) or 0)[0] not in first for e in range(100))
    sd.delete_ledger(2)
    live_ids = set(sd.ledger_index.ledgers())
    rewritten = 0
    for m in metas(sd):
        if m.log_id in first:
            m.drop_dead(live_ids.__contains__)
            rewritten += compactor(sd).compact(m, live_ids.__contains__).rewritten_bytes
    assert rewritten == 0
    check_readable(sd, range(1, 2), 100)
    await sd.close()


async def test_a_deleted_ledgers_cached_entries_are_not_written_out(tmp_path: Path) -> None:
    c = conf(tmp_path)
    sd = open_storage(tmp_path, c)
    for lid in (1, 2):
        sd.ledger_index.set_master_key(lid, b"k")
        for eid in range(10):
            assert sd.try_add(lid, eid, entry(lid, eid))
    sd.delete_ledger(2)  # still in the write cache
    await sd.flush()
    assert sd.locations.entry_ids(2) == [] and sd.locations.entry_ids(1) == list(range(10))
    assert not sd._deleted  # forgotten once its half is flushed
    await sd.close()


async def test_a_read_that_looked_up_the_old_location_still_finds_the_entry(
    tmp_path: Path,
) -> None:
    """A read races a compaction: it took the location from the index just
    before the index moved and the old log went. It reads the new copy."""
    c = conf(tmp_path, logSizeLimit=1024 * 1024)
    sd = open_storage(tmp_path, c)
    await fill(sd, range(1, 3), 100)
    sd.manager.close()
    sd.delete_ledger(2)
    stale = sd.locations.get(1, 7)
    live_ids = set(sd.ledger_index.ledgers())
    for m in metas(sd):
        m.drop_dead(live_ids.__contains__)
        if split_location(stale or 0)[0] == m.log_id:
            compactor(sd).compact(m, live_ids.__contains__)
    assert stale is not None and split_location(stale)[0] not in sd.entry_logger.log_ids()
    real_get = sd.locations.get
    answers = iter([stale])

    def racing_get(ledger_id: int, entry_id: int) -> int | None:
        return next(answers, None) or real_get(ledger_id, entry_id)

    sd.locations.get = racing_get  # type: ignore[method-assign]
    sd.read_ahead = 0
    assert sd.get_entry(1, 7) == entry(1, 7)
    del sd.locations.get
    await sd.close()
