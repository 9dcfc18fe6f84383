"""One half of DbLedgerStorage's double-buffered write cache.

Entries wait here, in memory, until the storage flush writes them sorted by
(ledgerId, entryId) into an entry log. The size limit counts an estimate of
Python's per-entry overhead so memory stays bounded, not just payload bytes.

Payloads are copied into **slabs**: anonymous memory maps of
:data:`SLAB_SIZE` bytes, filled in order, as BookKeeper's WriteCache copies
entries into fixed segments of direct memory. A released half keeps its
slabs for the next time it is active. Why not keep each entry's ``bytes``:

* hundreds of thousands of 1 KiB objects, all freed after each flush, put
  hundreds of MB of free memory into the C heap, and protobuf's Python
  runtime calls ``malloc_trim(0)`` every 10,000 message frees (each request
  parsed is one). That call hands every free heap page back to the kernel,
  holding the interpreter lock: 35-50 ms on the event loop, measured, right
  after each checkpoint's flush, and the next half then faults it all back
  in. Slabs are not heap memory, and they stay mapped.
* the flush hands slices of the slabs to ``pwritev``; nothing is copied again.

A ledger's entry positions are kept in blocks of :data:`BLOCK` consecutive
entry ids, one small dict per block, not in one dict per ledger: a dict
that grows to hundreds of thousands of entries is rehashed whole each time
it doubles, holding the interpreter lock for tens of milliseconds.

Readers on other threads copy an entry out with :meth:`get` while the flush
thread may release the half: a copy that overlapped a release is discarded
(a generation check), so a reused slab never leaks another entry's bytes.
"""

from __future__ import annotations

import mmap
import time
from collections.abc import Callable, Iterator

#: Approximate bytes Python spends per cached entry beyond the payload.
ENTRY_OVERHEAD = 120
#: Entry ids per block (a power of two: the block of an id is ``id >> SHIFT``).
SHIFT = 12
BLOCK = 1 << SHIFT
#: Bytes per slab (a half smaller than this uses one slab of its own size).
SLAB_SIZE = 4 << 20
#: Entries bigger than this share of a slab are kept as they came, alone.
BIG_FRACTION = 4

# An entry's position: (slab index << 64) | (offset << 32) | length.
_LOW = (1 << 32) - 1

#: What :meth:`WriteCache.sorted_ledger` hands out: slices of the slabs (or
#: an entry kept whole).
Payload = bytes | memoryview


class WriteCache:
    __slots__ = (
        "_ledgers",
        "_last",
        "_slabs",
        "_views",
        "_fill",
        "_current",
        "_spare",
        "_slab_size",
        "_used",
        "_generation",
        "max_bytes",
        "size",
        "count",
    )

    def __init__(self, max_bytes: int) -> None:
        self.max_bytes = max_bytes
        #: ledger id -> block number -> entry id -> position
        self._ledgers: dict[int, dict[int, dict[int, int]]] = {}
        self._last: dict[int, int] = {}
        #: This half's slabs in use (an entry too big to share one is its own).
        self._slabs: list[mmap.mmap | bytes] = []
        self._views: list[memoryview] = []
        self._current = -1  # index of the slab entries are being copied into
        self._fill = 0  # bytes used in it
        self._spare: list[mmap.mmap] = []  # slabs kept from earlier use
        self._slab_size = max(4096, min(SLAB_SIZE, max_bytes))
        self._used = 0  # slab bytes used (or skipped) since the last clear
        self._generation = 0
        self.size = 0
        self.count = 0

    def put(self, ledger_id: int, entry_id: int, data: bytes) -> bool:
        """Cache an entry; False when it does not fit (the caller swaps halves)."""
        n = len(data)
        cost = n + ENTRY_OVERHEAD
        blocks = self._ledgers.get(ledger_id)
        block = blocks.get(entry_id >> SHIFT) if blocks is not None else None
        old = block.get(entry_id) if block is not None else None
        freed = (old & _LOW) + ENTRY_OVERHEAD if old is not None else 0
        # A replaced or deleted entry's bytes stay in its slab until the
        # half is released: ``_used`` bounds the memory, ``size`` the entries.
        if self.count and (
            self.size - freed + cost > self.max_bytes or self._used + n > self.max_bytes
        ):
            return False
        position = self._store(data, n)
        if block is None:
            if blocks is None:
                blocks = self._ledgers[ledger_id] = {}
            block = blocks[entry_id >> SHIFT] = {}
        if old is not None:
            self.size -= freed
            self.count -= 1
        block[entry_id] = position
        self.size += cost
        self.count += 1
        if entry_id > self._last.get(ledger_id, -1):
            self._last[ledger_id] = entry_id
        return True

    def _store(self, data: bytes, n: int) -> int:
        """Copy ``data`` into a slab; its position."""
        self._used += n
        size = self._slab_size
        if n * BIG_FRACTION > size:
            # Kept as it came: copying it would only move a big allocation.
            self._slabs.append(data)
            self._views.append(memoryview(data))
            return ((len(self._slabs) - 1) << 64) | n
        fill = self._fill
        index = self._current
        if index < 0 or fill + n > size:
            if index >= 0:
                self._used += size - fill  # the rest of a full slab stays unused
            slab = self._spare.pop() if self._spare else mmap.mmap(-1, size)
            self._slabs.append(slab)
            self._views.append(memoryview(slab))
            index = self._current = len(self._slabs) - 1
            fill = 0
        self._views[index][fill : fill + n] = data
        self._fill = fill + n
        return (index << 64) | (fill << 32) | n

    def _view(self, position: int) -> memoryview:
        offset = (position >> 32) & _LOW
        return self._views[position >> 64][offset : offset + (position & _LOW)]

    def get(self, ledger_id: int, entry_id: int) -> bytes | None:
        """A copy of the entry (safe from any thread; see the module doc)."""
        generation = self._generation
        blocks = self._ledgers.get(ledger_id)
        if blocks is None:
            return None
        block = blocks.get(entry_id >> SHIFT)
        position = block.get(entry_id) if block is not None else None
        if position is None:
            return None
        try:
            data = bytes(self._view(position))
        except IndexError:  # released meanwhile (the slab list is new)
            return None
        return data if generation == self._generation else None

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
                self.size -= sum((p & _LOW) + ENTRY_OVERHEAD for p in block.values())
                self.count -= len(block)

    def ledger_ids(self) -> list[int]:
        return sorted(self._ledgers)

    def sorted_ledger(self, ledger_id: int) -> tuple[list[int], list[int]]:
        """A ledger's entry ids in order and their positions, for a batched
        flush that takes :meth:`payloads` a slice at a time."""
        blocks = self._ledgers.get(ledger_id) or {}
        ids: list[int] = []
        positions: list[int] = []
        for b in sorted(blocks):
            block = blocks[b]
            keys = sorted(block)
            ids += keys
            positions += [block[e] for e in keys]
        return ids, positions

    def payloads(self, positions: list[int]) -> list[Payload]:
        """Views of the slabs at ``positions``, valid until :meth:`release`
        (made a slice at a time: a view per entry of a whole ledger at once
        would be a long burst of work under the interpreter lock)."""
        views = self._views
        return [
            views[p >> 64][(p >> 32) & _LOW : ((p >> 32) & _LOW) + (p & _LOW)] for p in positions
        ]

    def release(self, chunk: int = 4096, pause: Callable[[], None] = lambda: time.sleep(0)) -> None:
        """Empty the cache a block at a time, with ``pause()`` after each
        ``chunk`` entries (dropping hundreds of thousands of positions at
        once would hold the GIL, and stall the loop, for long). The slabs
        are kept for the next time this half is active."""
        self._generation += 1  # before any slab can be reused: see get()
        freed = 0
        for blocks in list(self._ledgers.values()):
            for b in list(blocks):
                freed += len(blocks.pop(b))
                if freed >= chunk:
                    pause()
                    freed = 0
        self.clear()

    def sorted_entries(self) -> Iterator[tuple[int, int, bytes]]:
        """Entries ordered by (ledgerId, entryId), copied out."""
        for lid in sorted(self._ledgers):
            eids, positions = self.sorted_ledger(lid)
            datas = self.payloads(positions)
            yield from ((lid, eid, bytes(data)) for eid, data in zip(eids, datas, strict=True))

    def clear(self) -> None:
        self._generation += 1
        self._ledgers = {}
        self._last = {}
        self._spare += [s for s in self._slabs if isinstance(s, mmap.mmap)]
        self._slabs = []
        self._views = []
        self._current = -1
        self._fill = 0
        self._used = 0
        self.size = 0
        self.count = 0

    def __len__(self) -> int:
        return self.count
