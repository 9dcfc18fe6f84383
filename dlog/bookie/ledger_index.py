"""Ledger index: per-ledger state the bookie must remember (exists, fenced,
master key, explicit LAC) as BookKeeper's ``LedgerData`` records keyed by
8-byte big-endian ledger id.

Updates go to RocksDB without a sync: the journal holds a meta-record for
each of them, and :meth:`flush` syncs them at every checkpoint before the
journal may be deleted.

RocksDB is the record; memory holds only the most recently used
``cache_size`` ledgers. Anyone can make a bookie remember a ledger (a fence
or an add with any key creates it, and the first key wins, as in
BookKeeper), so what that costs in memory must not grow with the number of
ledgers.
"""

from __future__ import annotations

import dataclasses
import struct
import threading
from collections import OrderedDict
from pathlib import Path
from typing import cast

from dlog.bookie import fileio
from dlog.bookie.rocksdb import io_errors, open_db, sync_wal
from dlog.protocol.db_ledger_storage_pb2 import LedgerData

_KEY = struct.Struct(">q")


@dataclasses.dataclass
class LedgerInfo:
    master_key: bytes
    fenced: bool = False
    explicit_lac: bytes | None = None


class LedgerIndex:
    def __init__(self, path: Path, *, read_only: bool = False, cache_size: int = 16384) -> None:
        self.path = path
        self.read_only = read_only
        self._db = open_db(path, read_only=read_only)
        self._lock = threading.Lock()
        self._cache: OrderedDict[int, LedgerInfo] = OrderedDict()
        self._cache_size = cache_size

    @staticmethod
    def _decode(value: bytes) -> LedgerInfo | None:
        data = LedgerData.FromString(value)
        if not data.exists:
            return None
        return LedgerInfo(
            master_key=bytes(data.masterKey),
            fenced=data.fenced,
            explicit_lac=bytes(data.explicitLac) if data.HasField("explicitLac") else None,
        )

    def _remember(self, ledger_id: int, info: LedgerInfo) -> None:
        cache = self._cache
        cache[ledger_id] = info
        cache.move_to_end(ledger_id)
        while len(cache) > self._cache_size:
            cache.popitem(last=False)

    def get(self, ledger_id: int) -> LedgerInfo | None:
        with self._lock:
            info = self._cache.get(ledger_id)
            if info is not None:
                self._cache.move_to_end(ledger_id)
                return info
        with io_errors(f"ledger index {self.path}"):
            value = self._db.get(_KEY.pack(ledger_id))
        if value is None:
            return None
        info = self._decode(value)
        if info is not None:
            with self._lock:
                self._remember(ledger_id, info)
        return info

    def ledgers(self) -> list[int]:
        out = []
        for key, value in self._db.items():
            if self._decode(value) is not None:
                # The database is in raw mode: its keys are bytes (the stubs
                # type them for every mode).
                out.append(_KEY.unpack(cast(bytes, key))[0])
        return sorted(out)

    @property
    def cached(self) -> int:
        """Ledgers held in memory (at most ``cache_size``)."""
        return len(self._cache)

    def _put(self, ledger_id: int, info: LedgerInfo) -> None:
        data = LedgerData(exists=True, fenced=info.fenced, masterKey=info.master_key)
        if info.explicit_lac is not None:
            data.explicitLac = info.explicit_lac
        with self._lock, io_errors(f"ledger index {self.path}"):
            fileio.check("ledger_index.write")
            self._db.put(_KEY.pack(ledger_id), data.SerializeToString())
            self._remember(ledger_id, info)

    def set_master_key(self, ledger_id: int, master_key: bytes) -> LedgerInfo:
        """The ledger's info, created with ``master_key`` if it is new (the
        first key wins)."""
        info = self.get(ledger_id)
        if info is None:
            info = LedgerInfo(master_key=master_key)
        elif not info.master_key:
            info.master_key = master_key
        else:
            return info
        self._put(ledger_id, info)
        return info

    def set_fenced(self, ledger_id: int) -> bool:
        """Mark fenced; True if this call changed it."""
        info = self.get(ledger_id)
        if info is None or info.fenced:
            return False
        info.fenced = True
        self._put(ledger_id, info)
        return True

    def set_explicit_lac(self, ledger_id: int, lac_body: bytes) -> None:
        info = self.get(ledger_id)
        if info is None:
            return
        info.explicit_lac = lac_body
        self._put(ledger_id, info)

    def delete(self, ledger_id: int) -> None:
        with self._lock:
            self._cache.pop(ledger_id, None)
            self._db.delete(_KEY.pack(ledger_id))

    def flush(self) -> None:
        with io_errors(f"ledger index {self.path}"):
            fileio.check("ledger_index.sync")
            sync_wal(self._db, self.path)

    def close(self) -> None:
        self._db.close()
