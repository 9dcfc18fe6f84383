"""ENOSPC in the middle of a flush: the retry writes to new entry logs on
another ledger disk, not to the full one, and nothing is lost or doubled."""

from __future__ import annotations

import struct
from pathlib import Path

import pytest

from dlog import failpoints
from dlog.bookie.entry_log import split_location
from dlog.bookie.ledger_storage import SingleDirectoryDbLedgerStorage
from dlog.sandbox.bookies import bookie_config

URI = "zk+hierarchical://127.0.0.1:2181/ledgers"


def entry(lid: int, eid: int) -> bytes:
    return struct.pack(">qq", lid, eid) + b"z" * 4000


async def test_enospc_moves_the_retry_to_another_disk(tmp_path: Path) -> None:
    own, other = tmp_path / "a" / "current", tmp_path / "b" / "current"
    own.mkdir(parents=True)
    other.mkdir(parents=True)
    full: set[Path] = set()
    c = bookie_config(tmp_path, port=3181, metadata_service_uri=URI)
    s = SingleDirectoryDbLedgerStorage(
        own,
        c,
        write_cache_bytes=c.write_cache_bytes,
        read_cache_bytes=c.read_cache_bytes,
        overflow_dirs=[other / "overflow-a"],
        full_dirs=lambda: full,
    )
    s.on_io_error = lambda d, e: full.add(d)  # what the bookie's disk monitor does
    try:
        s.ledger_index.set_master_key(1, b"k")
        for eid in range(50):
            assert s.try_add(1, eid, entry(1, eid))
        await s.flush()
        for eid in range(50, 100):
            assert s.try_add(1, eid, entry(1, eid))
        failpoints.configure("entry_log.fsync=enospc*1")
        with pytest.raises(OSError):
            await s.flush()
        failpoints.configure("")
        await s.flush()
        dirs = {
            s.entry_logger.directory_of(split_location(s.locations.get(1, e) or 0)[0])
            for e in range(50, 100)
        }
        assert dirs == {other / "overflow-a"}
        for eid in range(100):
            assert s.get_entry(1, eid) == entry(1, eid)
        seen = [
            (lid, e) for i in s.entry_logger.log_ids() for lid, e, _, _ in s.entry_logger.scan(i)
        ]
        assert len(seen) == len(set(seen)) == 100
    finally:
        failpoints.configure("")
        await s.close()
