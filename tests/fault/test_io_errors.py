"""An I/O error at every write and sync of a real bookie process: the
journal, the entry logs, the location and ledger indexes, and the
checkpoint mark. For each failpoint (dlog.bookie.fileio, armed for a few
firings through ``DLOG_FAILPOINTS=<point>=<action>*N``): adds go on while
it fails, the bookie recovers by itself (or, after a journal EIO, stays
read-only until restarted), then is killed and restarted, and every
acknowledged entry must read back intact each time.
"""

from __future__ import annotations

import asyncio
import time
from pathlib import Path

import pytest

from dlog.errors import EOK
from dlog.ledger.bookie_client import BookieClient
from dlog.ledger.digest import CRC32C, DigestManager
from dlog.sandbox.bookies import BookieProcess

pytestmark = pytest.mark.fault

LEDGERS = (11, 12, 13)
KEY = DigestManager(1, CRC32C, b"pw").master_key

POINTS = [
    ("journal.write", "enospc"),
    ("journal.write", "short"),
    ("journal.fsync", "eio"),
    ("entry_log.write", "short"),
    ("entry_log.fsync", "eio"),
    ("index.write", "enospc"),
    ("index.sync", "eio"),
    ("ledger_index.write", "enospc"),
    ("ledger_index.sync", "eio"),
    ("checkpoint.write", "enospc"),
    ("checkpoint.fsync", "eio"),
]
#: Passes to let go by: the journal writes and syncs its first file's
#: header while the bookie starts (failing there stops the start, rightly).
SKIP = {"journal.write": 1, "journal.fsync": 2}


def body(lid: int, eid: int) -> bytes:
    payload = (f"{lid}/{eid};".encode() * 300)[:2000]
    return DigestManager(lid, CRC32C, b"pw").compute(eid, eid - 1, (eid + 1) * 2000, payload)


async def add_round(address: str, first: int, count: int) -> list[tuple[int, int]]:
    """Pipelined adds over all ledgers; the (ledger, entry) acknowledged."""
    client = BookieClient(address)
    await client.connect()
    try:
        keys = [(lid, eid) for eid in range(first, first + count) for lid in LEDGERS]
        responses = await asyncio.gather(
            *(client.add_entry(lid, eid, KEY, body(lid, eid)) for lid, eid in keys)
        )
        return [k for k, r in zip(keys, responses, strict=True) if r.status == EOK]
    finally:
        await client.close()


async def unreadable(address: str, keys: list[tuple[int, int]]) -> list[tuple[int, int, int]]:
    client = BookieClient(address)
    await client.connect()
    try:
        bad = []
        for start in range(0, len(keys), 300):
            batch = keys[start : start + 300]
            responses = await asyncio.gather(*(client.read_entry(lid, eid) for lid, eid in batch))
            for (lid, eid), r in zip(batch, responses, strict=True):
                if r.status != EOK or r.readResponse.body != body(lid, eid):
                    bad.append((lid, eid, r.status))
        return bad
    finally:
        await client.close()


def check(address: str, acked: list[tuple[int, int]], when: str) -> None:
    bad = asyncio.run(unreadable(address, acked))
    assert not bad, f"{when}: {len(bad)} of {len(acked)} acknowledged entries unreadable: {bad[:5]}"


@pytest.mark.parametrize(("point", "action"), POINTS, ids=[f"{p}={a}" for p, a in POINTS])
def test_an_io_error_loses_no_acknowledged_entry(
    tmp_path: Path, ledgers_uri: str, point: str, action: str
) -> None:
    settings = {"flushInterval": 200, "diskCheckInterval": 200}
    bookie = BookieProcess(
        tmp_path / "bookie",
        ledgers_uri,
        env={"DLOG_FAILPOINTS": f"{point}={action}+{SKIP.get(point, 0)}*2"},
        **settings,
    ).start()
    address = bookie.bookie_id
    acked: list[tuple[int, int]] = []
    try:
        # Rounds of adds while the failpoint fires, then until it is spent
        # and the bookie takes adds again (a journal EIO never does).
        eid = 0
        recovered = False
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline:
            ok = asyncio.run(add_round(address, eid, 100))
            acked += ok
            eid += 100
            fired = f"failpoint {point}: {action}" in bookie.log_tail(2000)
            if fired and len(ok) == 100 * len(LEDGERS):
                recovered = True
                break
            time.sleep(0.2)
        assert f"failpoint {point}: {action}" in bookie.log_tail(2000), "it never fired"
        permanent = point == "journal.fsync" and action == "eio"
        assert recovered or permanent, "the bookie did not recover from a passing error"
        time.sleep(0.6)  # checkpoints store the rest
        check(address, acked, "before the restart")
        bookie.kill()
        again = BookieProcess(tmp_path / "bookie", ledgers_uri, port=bookie.port, **settings)
        again.start()
        try:
            check(address, acked, "after kill -9 and replay")
            acked += asyncio.run(add_round(address, eid, 50))
            assert len(acked) >= 50 * len(LEDGERS)
        finally:
            again.stop()
        assert "Traceback" not in again.log_tail(2000)
    finally:
        bookie.kill()
