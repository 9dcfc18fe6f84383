"""Ledger index: per-ledger state the bookie must remember (exists, fenced,
master key, explicit LAC) as BookKeeper's ``LedgerData`` records keyed by
8-byte big-endian ledger id.

Updates go to RocksDB without a sync: the journal holds a meta-record for
each of them, and :meth:`flush` syncs them at every checkpoint before the
journal may be deleted.
"""

from __future__ import annotations

import dataclasses
import struct
import threading
from pathlib import Path

from dlog.bookie import fileio
from dlog.bookie.rocksdb import io_errors, open_db
from dlog.protocol.db_ledger_storage_pb2 import LedgerData

_KEY = struct.Struct(">q")


@dataclasses.dataclass
class LedgerInfo:
    master_key: bytes
    fenced: bool = False
    explicit_lac: bytes | None = None


class LedgerIndex:
    def __init__(self, path: Path) -> None:
        self.path = path
        self._db = open_db(path)
        self._lock = threading.Lock()
        self._cache: dict[int, LedgerInfo] = {}
        for key, value in self._db.items():
            (lid,) = _KEY.unpack(key)
            data = LedgerData.FromString(value)
            if data.exists:
                self._cache[lid] = LedgerInfo(
                    master_key=bytes(data.masterKey),
                    fenced=data.fenced,
                    explicit_lac=bytes(data.explicitLac) if data.HasField("explicitLac") else None,
                )

    def get(self, ledger_id: int) -> LedgerInfo | None:
        return self._cache.get(ledger_id)

    def ledgers(self) -> list[int]:
        return sorted(self._cache)

    def _put(self, ledger_id: int, info: LedgerInfo) -> None:
        data = LedgerData(exists=True, fenced=info.fenced, masterKey=info.master_key)
        if info.explicit_lac is not None:
            data.explicitLac = info.explicit_lac
        with self._lock:
            self._cache[ledger_id] = info
            self._db.put(_KEY.pack(ledger_id), data.SerializeToString())

    def set_master_key(self, ledger_id: int, master_key: bytes) -> LedgerInfo:
        info = self._cache.get(ledger_id)
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
        info = self._cache.get(ledger_id)
        if info is None or info.fenced:
            return False
        info.fenced = True
        self._put(ledger_id, info)
        return True

    def set_explicit_lac(self, ledger_id: int, lac_body: bytes) -> None:
        info = self._cache.get(ledger_id)
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
            self._db.flush_wal(True)

    def close(self) -> None:
        self._db.close()
