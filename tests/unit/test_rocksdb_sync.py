"""The indexes' WAL sync (dlog.bookie.rocksdb.sync_wal): every write-ahead
log file and the directory are fsynced by Python, which releases the
interpreter lock, rather than by RocksDB under it."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from dlog.bookie import rocksdb
from dlog.bookie.entry_location_index import EntryLocationIndex
from dlog.bookie.ledger_index import LedgerIndex


@pytest.fixture
def synced(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """Paths fsynced or fdatasynced from now on."""
    paths: list[str] = []
    real_fsync, real_fdatasync = os.fsync, os.fdatasync

    def record(real):  # type: ignore[no-untyped-def]
        def sync(fd: int) -> None:
            paths.append(os.readlink(f"/proc/self/fd/{fd}"))
            real(fd)

        return sync

    monkeypatch.setattr(os, "fsync", record(real_fsync))
    monkeypatch.setattr(os, "fdatasync", record(real_fdatasync))
    return paths


def wal_files(path: Path) -> set[str]:
    return {str(p.resolve()) for p in path.iterdir() if p.suffix == ".log" and p.stem.isdigit()}


def test_sync_wal_syncs_every_wal_file_and_the_directory(tmp_path: Path, synced: list[str]) -> None:
    db = rocksdb.open_db(tmp_path / "db")
    try:
        db[b"k"] = b"v"
        wals = wal_files(tmp_path / "db")
        assert wals, "RocksDB keeps a write-ahead log"
        rocksdb.sync_wal(db, tmp_path / "db")
        assert wals <= set(synced)
        assert str((tmp_path / "db").resolve()) in synced
        # The info log and other files are not the WAL's business.
        assert not any(p.endswith("/LOG") or "MANIFEST" in p for p in synced)
    finally:
        db.close()


def test_location_index_syncs_its_wal(tmp_path: Path, synced: list[str]) -> None:
    index = EntryLocationIndex(tmp_path / "locations")
    try:
        index.add_runs([(7, [0, 1, 2], [10, 20, 30])])
        assert wal_files(tmp_path / "locations") <= set(synced)
        synced.clear()
        index.sync()
        assert wal_files(tmp_path / "locations") <= set(synced)
        assert index.get(7, 2) == 30
    finally:
        index.close()


def test_ledger_index_flush_syncs_its_wal(tmp_path: Path, synced: list[str]) -> None:
    index = LedgerIndex(tmp_path / "ledgers")
    try:
        index.set_master_key(3, b"key")
        index.flush()
        assert wal_files(tmp_path / "ledgers") <= set(synced)
        assert str((tmp_path / "ledgers").resolve()) in synced
    finally:
        index.close()
