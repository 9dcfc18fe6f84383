"""Entry location index: (ledgerId, entryId) -> location in an entry log.

Keys are 16 bytes big-endian (ledgerId, entryId) so a ledger's entries are
contiguous and ordered, as in BookKeeper's EntryLocationIndex; values are
the 8-byte location ``(logId << 32) | offset``.
"""

from __future__ import annotations

import struct
import time
from collections.abc import Callable, Iterable, Sequence
from pathlib import Path

from rocksdict import WriteBatch, WriteOptions

from dlog.bookie import fileio
from dlog.bookie.rocksdb import io_errors, open_db, sync_wal

_KEY = struct.Struct(">qq")
_VALUE = struct.Struct(">q")
_MAX_ENTRY = (1 << 63) - 1
#: Locations per RocksDB write: a write holds the GIL throughout, about
#: 1 µs per location (4,096 took 3-5 ms, longer than a turn of the loop's
#: that a flush's slice should fit in; see dlog.bookie.pacer).
CHUNK = 512


class EntryLocationIndex:
    def __init__(self, path: Path, *, read_only: bool = False) -> None:
        self.path = path
        self.read_only = read_only
        self._db = open_db(path, read_only=read_only)
        self._nosync = WriteOptions()

    def get(self, ledger_id: int, entry_id: int) -> int | None:
        value = self._db.get(_KEY.pack(ledger_id, entry_id))
        return _VALUE.unpack(value)[0] if value is not None else None

    def last_entry(self, ledger_id: int) -> tuple[int, int] | None:
        """(entryId, location) of the highest entry stored for the ledger."""
        it = self._db.iter()
        it.seek_for_prev(_KEY.pack(ledger_id, _MAX_ENTRY))
        if not it.valid():
            return None
        lid, eid = _KEY.unpack(it.key())
        if lid != ledger_id:
            return None
        return eid, _VALUE.unpack(it.value())[0]

    def entry_ids(self, ledger_id: int) -> list[int]:
        out = []
        it = self._db.iter()
        it.seek(_KEY.pack(ledger_id, 0))
        while it.valid():
            lid, eid = _KEY.unpack(it.key())
            if lid != ledger_id:
                break
            out.append(eid)
            it.next()
        return out

    def add_batch(
        self,
        items: Iterable[tuple[int, int, int]],
        chunk: int = CHUNK,
        pause: Callable[[], None] = lambda: time.sleep(0),
    ) -> None:
        """Write ``(ledger, entry, location)`` triples durably (see :meth:`add_runs`)."""
        self.add_runs(((lid, (eid,), (loc,)) for lid, eid, loc in items), chunk, pause)

    def add_runs(
        self,
        runs: Iterable[tuple[int, Sequence[int], Sequence[int]]],
        chunk: int = CHUNK,
        pause: Callable[[], None] = lambda: time.sleep(0),
    ) -> None:
        """Write locations durably (before the checkpoint that lets the
        journal forget these entries): each run is a ledger id, its entry
        ids and their locations (the flush keeps them as compact arrays, not
        a tuple per entry, which would be freed in one GIL-holding sweep).

        Written in chunks, with ``pause()`` between them: RocksDB holds the
        GIL for a whole write, and one write of a full cache would stall the
        event loop (:data:`CHUNK`). The WAL is synced once at the end, which covers every
        chunk."""
        key, value = _KEY.pack, _VALUE.pack
        wb = WriteBatch(raw_mode=True)
        n = 0
        with io_errors(f"location index {self.path}"):
            for lid, eids, locations in runs:
                if len(eids) != len(locations):
                    raise ValueError(
                        f"ledger {lid}: {len(eids)} entry ids but {len(locations)} locations"
                    )
                for eid, loc in zip(eids, locations):  # noqa: B905 - lengths checked above
                    wb.put(key(lid, eid), value(loc))
                    n += 1
                    if n == chunk:
                        fileio.check("index.write")
                        self._db.write(wb, self._nosync)
                        wb = WriteBatch(raw_mode=True)
                        n = 0
                        pause()
            if n:
                fileio.check("index.write")
                self._db.write(wb, self._nosync)
            fileio.check("index.sync")
            sync_wal(self._db, self.path)

    def delete_ledger(self, ledger_id: int) -> None:
        with io_errors(f"location index {self.path}"):
            self._db.delete_range(_KEY.pack(ledger_id, 0), _KEY.pack(ledger_id, _MAX_ENTRY))

    def sync(self) -> None:
        """Make every write so far durable (sync the WAL)."""
        with io_errors(f"location index {self.path}"):
            sync_wal(self._db, self.path)

    def close(self) -> None:
        self._db.close()
