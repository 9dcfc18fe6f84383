"""DbLedgerStorage's read-ahead cache: entries read from entry logs, kept
in LRU order within a byte budget, so sequential readers hit memory."""

from __future__ import annotations

import threading
from collections import OrderedDict

from dlog.bookie.write_cache import ENTRY_OVERHEAD


class ReadCache:
    def __init__(self, max_bytes: int) -> None:
        self.max_bytes = max_bytes
        self._entries: OrderedDict[tuple[int, int], bytes] = OrderedDict()
        self._lock = threading.Lock()
        self.size = 0
        self.hits = 0
        self.misses = 0

    def get(self, ledger_id: int, entry_id: int) -> bytes | None:
        key = (ledger_id, entry_id)
        with self._lock:
            data = self._entries.get(key)
            if data is None:
                self.misses += 1
                return None
            self._entries.move_to_end(key)
            self.hits += 1
            return data

    def put(self, ledger_id: int, entry_id: int, data: bytes) -> None:
        if self.max_bytes <= 0:
            return
        key = (ledger_id, entry_id)
        cost = len(data) + ENTRY_OVERHEAD
        if cost > self.max_bytes:
            return
        with self._lock:
            old = self._entries.pop(key, None)
            if old is not None:
                self.size -= len(old) + ENTRY_OVERHEAD
            self._entries[key] = data
            self.size += cost
            while self.size > self.max_bytes:
                _, evicted = self._entries.popitem(last=False)
                self.size -= len(evicted) + ENTRY_OVERHEAD

    def delete_ledger(self, ledger_id: int) -> None:
        with self._lock:
            for key in [k for k in self._entries if k[0] == ledger_id]:
                self.size -= len(self._entries.pop(key)) + ENTRY_OVERHEAD

    def __len__(self) -> int:
        return len(self._entries)
