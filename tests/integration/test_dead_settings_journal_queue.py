"""``journalQueueSize`` (issue 14): when that many records wait for the
journal, the bookie stops reading client sockets until the journal drains.
A real in-process bookie whose journal writer is held, a raw socket."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from dlog import failpoints
from dlog.errors import EOK
from dlog.ledger.digest import CRC32C, DigestManager
from dlog.protocol import messages as m
from dlog.protocol.frame import FrameDecoder, encode_frame

KEY = DigestManager(1, CRC32C, b"pw").master_key
QUEUE = 50
ADDS = 2000
PAYLOAD = b"q" * 1000


def add_frame(txn: int, lid: int, eid: int) -> bytes:
    dm = DigestManager(lid, CRC32C, b"pw")
    body = dm.compute(eid, eid - 1, (eid + 1) * len(PAYLOAD), PAYLOAD)
    return encode_frame(m.encode_add_request(txn, lid, eid, KEY, body, False))


def hold_journals(marker_dir: Path) -> Callable[[], None]:
    """Hold the journal's writer in its next write until the returned
    function is called: records pile up in the journal queue as behind a
    slow disk."""
    failpoints.configure("journal.write=hold*1")
    marker = marker_dir / "journal.write"

    def release() -> None:
        failpoints.configure("")
        marker.unlink(missing_ok=True)

    return release


async def test_full_journal_queue_stops_reading_requests(
    make_bookie: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("DLOG_FAILPOINT_DIR", str(tmp_path / "failpoints"))
    bookie = await make_bookie(journalQueueSize=QUEUE, journalMaxGroupWaitMSec=1)
    release = hold_journals(tmp_path / "failpoints")
    try:
        pressure = asyncio.Event()

        def on_pressure(on: bool) -> None:
            if on:
                pressure.set()

        bookie.core.add_pressure_listener(on_pressure)
        reader, writer = await asyncio.open_connection("127.0.0.1", bookie.server.port)
        writer.write(b"".join(add_frame(i, 30, i) for i in range(ADDS)))  # ~2 MB at once
        await asyncio.wait_for(pressure.wait(), 5)
        await asyncio.sleep(0.5)  # time to read everything, were reading not stopped
        pending = bookie.core.journal_pending()
        # Over the limit by at most what one socket read held (<= 256 KiB of
        # ~1 KiB requests), nowhere near the 2000 sent.
        assert QUEUE < pending < QUEUE + 300, pending
        conns = list(bookie.server.connections)
        assert conns and all("journal" in c._paused_for for c in conns)
        await asyncio.sleep(0.3)
        assert bookie.core.journal_pending() == pending  # still not reading
    finally:
        release()
    # The journal drains: reading resumes and every add is answered.
    dec = FrameDecoder()
    answers: list[m.Response] = []
    while len(answers) < ADDS:
        data = await asyncio.wait_for(reader.read(1 << 16), 20)
        assert data, f"connection closed after {len(answers)} answers"
        answers += [m.Response.FromString(bytes(p)) for p in dec.feed(data)]
    assert {a.status for a in answers} == {EOK}
    assert sorted(a.header.txnId for a in answers) == list(range(ADDS))
    assert bookie.core.journal_pending() == 0
    assert not any(c._paused_for for c in bookie.server.connections)
    writer.close()
