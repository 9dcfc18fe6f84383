"""``numReadWorkerThreads``: reads of entries no longer cached go to a pool
of that many threads, however many reads arrive at once."""

from __future__ import annotations

import asyncio
import threading
import time

from dlog.errors import EOK
from tests.integration.test_bookie_server import KEY, connect, entry

LEDGER = 31
ENTRIES = 32
CLIENTS = 4


async def test_reads_from_disk_use_at_most_num_read_worker_threads(make_bookie) -> None:
    bookie = await make_bookie("b0", numReadWorkerThreads=2)
    clients = [await connect(bookie) for _ in range(CLIENTS)]
    try:
        for e in range(ENTRIES):
            assert (await clients[0].add_entry(LEDGER, e, KEY, entry(LEDGER, e))).status == EOK
        # Flushed to the entry logs, so the reads below miss the write cache
        # (twice: the half written to first is released by the second).
        for _ in range(2):
            await bookie.core.checkpointer.checkpoint()
        storage = bookie.core.storage
        assert storage.cached_entry(LEDGER, 0) is None

        # Each read from storage takes 20 ms here, so reads arriving together
        # overlap as far as the pool lets them.
        lock = threading.Lock()
        running = [0]
        most = [0]
        threads: set[str] = set()
        get_entry = storage.get_entry

        def slow_get_entry(ledger_id: int, entry_id: int) -> bytes:
            with lock:
                running[0] += 1
                most[0] = max(most[0], running[0])
                threads.add(threading.current_thread().name)
            try:
                time.sleep(0.02)
                return get_entry(ledger_id, entry_id)
            finally:
                with lock:
                    running[0] -= 1

        storage.get_entry = slow_get_entry
        answers = await asyncio.gather(
            *(c.read_entry(LEDGER, e) for c in clients for e in range(ENTRIES))
        )
        assert [a.status for a in answers] == [EOK] * (CLIENTS * ENTRIES)
        # With the setting ignored, the default (8) would run 8 at once.
        assert most[0] == 2
        assert len(threads) == 2 and all(t.startswith("bookie-read") for t in threads)
    finally:
        for c in clients:
            await c.close()
