"""Start ZooKeeper and one bookie, then add and read back entries over the
BookKeeper v3 protocol.

Run it with ``make demo`` (or ``python examples/bookie_roundtrip.py`` in the
venv). Everything runs on loopback in a temporary directory.
"""

from __future__ import annotations

import asyncio
import tempfile
import time
from pathlib import Path

from dlog.ledger.bookie_client import BookieClient
from dlog.ledger.digest import CRC32C, DigestManager
from dlog.sandbox.bookies import BookieProcess
from dlog.sandbox.zookeeper import ZooKeeperServer

ENTRIES = 5000
LEDGER_ID = 1


async def round_trip(address: str) -> None:
    digest = DigestManager(LEDGER_ID, CRC32C, b"demo-password")
    client = BookieClient(address)
    await client.connect()
    payloads = [f"entry {i}: hello from dlog".encode().ljust(1024, b".") for i in range(ENTRIES)]
    length = 0
    bodies = []
    for i, p in enumerate(payloads):
        length += len(p)
        bodies.append(digest.compute(i, i - 1, length, p))
    t0 = time.monotonic()
    responses = await asyncio.gather(
        *(client.add_entry(LEDGER_ID, i, digest.master_key, b) for i, b in enumerate(bodies))
    )
    write_s = time.monotonic() - t0
    assert all(r.status == 0 for r in responses), "an add failed"
    t0 = time.monotonic()
    reads = await asyncio.gather(*(client.read_entry(LEDGER_ID, i) for i in range(ENTRIES)))
    read_s = time.monotonic() - t0
    for i, r in enumerate(reads):
        entry = digest.verify(r.readResponse.body, i)
        assert bytes(entry.payload) == payloads[i], f"entry {i} differs"
    await client.close()
    print(
        f"added {ENTRIES} x 1 KiB entries in {write_s:.2f}s ({ENTRIES / write_s:,.0f} adds/s, fsynced)"
    )
    print(f"read and verified them in {read_s:.2f}s ({ENTRIES / read_s:,.0f} reads/s)")


def main() -> None:
    with (
        tempfile.TemporaryDirectory(prefix="dlog-demo-") as tmp,
        ZooKeeperServer(Path(tmp) / "zk") as zk,
    ):
        print(f"ZooKeeper on {zk.connect_string}")
        uri = f"zk+hierarchical://{zk.connect_string}/ledgers"
        bookie = BookieProcess(Path(tmp) / "bookie", uri).start()
        print(f"bookie {bookie.bookie_id} registered under {uri}")
        try:
            asyncio.run(round_trip(bookie.bookie_id))
        finally:
            bookie.stop()
    print("demo finished: every entry read back intact")


if __name__ == "__main__":
    main()
