"""A writer process for fault tests: creates a ledger, appends forever and
prints ``ACK <entry id>`` for every acknowledged entry (in order)."""

from __future__ import annotations

import asyncio
import sys

from dlog.ledger.client import BookKeeper


async def main(uri: str, outstanding: int) -> None:
    async with BookKeeper(uri) as bk:
        wh = await bk.create_ledger(3, 2, 2, password=b"pw")
        print(f"LEDGER {wh.ledger_id}", flush=True)
        sem = asyncio.Semaphore(outstanding)
        i = 0

        def done(fut: asyncio.Future[int]) -> None:
            sem.release()
            if not fut.cancelled() and fut.exception() is None:
                sys.stdout.write(f"ACK {fut.result()}\n")
                sys.stdout.flush()

        while True:
            await sem.acquire()
            wh.append_nowait(b"entry-%08d" % i).add_done_callback(done)
            i += 1


if __name__ == "__main__":
    asyncio.run(main(sys.argv[1], int(sys.argv[2]) if len(sys.argv) > 2 else 100))
