"""One half of DbLedgerStorage's double-buffered write cache.

Entries wait here, in memory, until the storage flush writes them sorted by
(ledgerId, entryId) into an entry log. The size limit counts an estimate of
Python's per-entry overhead so memory stays bounded, not just payload bytes.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator

#: Approximate bytes Python spends per cached entry beyond the payload.
ENTRY_OVERHEAD = 120


class WriteCache:
    __slots__ = ("_ledgers", "_last", "max_bytes", "size", "count")

    def __init__(self, max_bytes: int) -> None:
        self.max_bytes = max_bytes
        self._ledgers: dict[int, dict[int, bytes]] = {}
        self._last: dict[int, int] = {}
        self.size = 0
        self.count = 0

    def put(self, ledger_id: int, entry_id: int, data: bytes) -> bool:
        """Cache an entry; False when it does not fit (the caller swaps halves)."""
        cost = len(data) + ENTRY_OVERHEAD
        entries = self._ledgers.get(ledger_id)
        old = entries.get(entry_id) if entries is not None else None
        freed = len(old) + ENTRY_OVERHEAD if old is not None else 0
        if self.size - freed + cost > self.max_bytes and self.count:
            return False
        if entries is None:
            entries = self._ledgers[ledger_id] = {}
        if old is not None:
            self.size -= len(old) + ENTRY_OVERHEAD
            self.count -= 1
        entries[entry_id] = data
        self.size += cost
        self.count += 1
        if entry_id > self._last.get(ledger_id, -1):
            self._last[ledger_id] = entry_id
        return True

    def get(self, ledger_id: int, entry_id: int) -> bytes | None:
        entries = self._ledgers.get(ledger_id)
        return entries.get(entry_id) if entries is not None else None

    def last_entry_id(self, ledger_id: int) -> int | None:
        return self._last.get(ledger_id)

    def has_ledger(self, ledger_id: int) -> bool:
        return ledger_id in self._ledgers

    def entry_ids(self, ledger_id: int) -> list[int]:
        entries = self._ledgers.get(ledger_id)
        return list(entries) if entries else []

    def delete_ledger(self, ledger_id: int) -> None:
        entries = self._ledgers.pop(ledger_id, None)
        self._last.pop(ledger_id, None)
        if entries:
            self.size -= sum(len(d) + ENTRY_OVERHEAD for d in entries.values())
            self.count -= len(entries)

    def ledger_ids(self) -> list[int]:
        return sorted(self._ledgers)

    def sorted_ledger(self, ledger_id: int) -> tuple[list[int], list[bytes]]:
        """A ledger's entry ids in order and their data, for a batched flush."""
        entries = self._ledgers.get(ledger_id) or {}
        ids = sorted(entries)
        return ids, [entries[e] for e in ids]

    def release(self, chunk: int = 4096, pause: Callable[[], None] = lambda: time.sleep(0)) -> None:
        """Empty the cache a piece at a time, with ``pause()`` between
        pieces: dropping hundreds of thousands of entries at once would hold
        the GIL (and stall the loop) for long."""
        for entries in list(self._ledgers.values()):
            keys = list(entries)
            for i in range(0, len(keys), chunk):
                for k in keys[i : i + chunk]:
                    del entries[k]
                pause()
        self.clear()

    def sorted_entries(self) -> Iterator[tuple[int, int, bytes]]:
        """Entries ordered by (ledgerId, entryId), for a sequential flush."""
        for lid in sorted(self._ledgers):
            entries = self._ledgers[lid]
            for eid in sorted(entries):
                yield lid, eid, entries[eid]

    def clear(self) -> None:
        self._ledgers = {}
        self._last = {}
        self.size = 0
        self.count = 0

    def __len__(self) -> int:
        return self.count
