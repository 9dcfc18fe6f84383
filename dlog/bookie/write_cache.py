"""One half of DbLedgerStorage's double-buffered write cache.

Entries wait here, in memory, until the storage flush writes them sorted by
(ledgerId, entryId) into an entry log. The size limit counts an estimate of
Python's per-entry overhead so memory stays bounded, not just payload bytes.

A ledger's entries are kept in blocks of :data:`BLOCK` consecutive entry
ids, one small dict per block, not in one dict per ledger: a dict that
grows to hundreds of thousands of entries (a default-sized cache holds
about a million 1 KiB entries) is rehashed whole each time it doubles,
holding the interpreter lock for tens of milliseconds, and every add
waiting on the event loop meanwhile waits too. A block's dict stays small.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator

#: Approximate bytes Python spends per cached entry beyond the payload.
ENTRY_OVERHEAD = 120
#: Entry ids per block (a power of two: the block of an id is ``id >> SHIFT``).
SHIFT = 12
BLOCK = 1 << SHIFT


class WriteCache:
    __slots__ = ("_ledgers", "_last", "max_bytes", "size", "count")

    def __init__(self, max_bytes: int) -> None:
        self.max_bytes = max_bytes
        #: ledger id -> block number -> entry id -> data
        self._ledgers: dict[int, dict[int, dict[int, bytes]]] = {}
        self._last: dict[int, int] = {}
        self.size = 0
        self.count = 0

    def put(self, ledger_id: int, entry_id: int, data: bytes) -> bool:
        """Cache an entry; False when it does not fit (the caller swaps halves)."""
        cost = len(data) + ENTRY_OVERHEAD
        blocks = self._ledgers.get(ledger_id)
        block = blocks.get(entry_id >> SHIFT) if blocks is not None else None
        old = block.get(entry_id) if block is not None else None
        freed = len(old) + ENTRY_OVERHEAD if old is not None else 0
        if self.size - freed + cost > self.max_bytes and self.count:
            return False
        if block is None:
            if blocks is None:
                blocks = self._ledgers[ledger_id] = {}
            block = blocks[entry_id >> SHIFT] = {}
        if old is not None:
            self.size -= freed
            self.count -= 1
        block[entry_id] = data
        self.size += cost
        self.count += 1
        if entry_id > self._last.get(ledger_id, -1):
            self._last[ledger_id] = entry_id
        return True

    def get(self, ledger_id: int, entry_id: int) -> bytes | None:
        blocks = self._ledgers.get(ledger_id)
        if blocks is None:
            return None
        block = blocks.get(entry_id >> SHIFT)
        return block.get(entry_id) if block is not None else None

    def last_entry_id(self, ledger_id: int) -> int | None:
        return self._last.get(ledger_id)

    def has_ledger(self, ledger_id: int) -> bool:
        return ledger_id in self._ledgers

    def entry_ids(self, ledger_id: int) -> list[int]:
        blocks = self._ledgers.get(ledger_id)
        if not blocks:
            return []
        return [eid for block in blocks.values() for eid in block]

    def delete_ledger(self, ledger_id: int) -> None:
        blocks = self._ledgers.pop(ledger_id, None)
        self._last.pop(ledger_id, None)
        if blocks:
            for block in blocks.values():
                self.size -= sum(len(d) + ENTRY_OVERHEAD for d in block.values())
                self.count -= len(block)

    def ledger_ids(self) -> list[int]:
        return sorted(self._ledgers)

    def sorted_blocks(self, ledger_id: int) -> Iterator[tuple[list[int], list[bytes]]]:
        """A ledger's entry ids in order and their data, a block at a time,
        for a batched flush that pauses between them: sorting a ledger of
        60,000 entries at once held the interpreter lock for 4 ms."""
        blocks = self._ledgers.get(ledger_id) or {}
        for b in sorted(blocks):
            block = blocks[b]
            keys = sorted(block)
            yield keys, [block[e] for e in keys]

    def sorted_ledger(self, ledger_id: int) -> tuple[list[int], list[bytes]]:
        """A ledger's entry ids in order and their data."""
        ids: list[int] = []
        datas: list[bytes] = []
        for keys, block_datas in self.sorted_blocks(ledger_id):
            ids += keys
            datas += block_datas
        return ids, datas

    def release(self, chunk: int = 4096, pause: Callable[[], None] = lambda: time.sleep(0)) -> None:
        """Empty the cache a block at a time, with ``pause()`` after each
        ``chunk`` entries: dropping hundreds of thousands of entries at once
        would hold the GIL (and stall the loop) for long."""
        freed = 0
        for blocks in list(self._ledgers.values()):
            for b in list(blocks):
                freed += len(blocks.pop(b))
                if freed >= chunk:
                    pause()
                    freed = 0
        self.clear()

    def sorted_entries(self) -> Iterator[tuple[int, int, bytes]]:
        """Entries ordered by (ledgerId, entryId), for a sequential flush."""
        for lid in sorted(self._ledgers):
            eids, datas = self.sorted_ledger(lid)
            yield from ((lid, eid, data) for eid, data in zip(eids, datas, strict=True))

    def clear(self) -> None:
        self._ledgers = {}
        self._last = {}
        self.size = 0
        self.count = 0

    def __len__(self) -> int:
        return self.count
