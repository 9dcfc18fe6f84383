"""A real bookie answers as upstream's v3 request processors do.

Facts (apache/bookkeeper, bookkeeper-server/.../proto/):

* GetListOfEntriesOfLedgerProcessorV3: EOK with the entries serialized as
  AvailabilityOfEntriesOfLedger; ENOLEDGER, no bytes, for an unknown ledger.
* ReadLacProcessorV3: status ENOENTRY whenever neither the explicit LAC nor
  the last entry is found, an unknown ledger included; ledgerId echoed.
* ReadEntryProcessorV3: the response's entryId is the request's, so a read
  of entry -1 answers -1 (the entry itself is the last one).
"""

from __future__ import annotations

import struct

from dlog.errors import ENOENTRY, ENOLEDGER, EOK, NoSuchLedgerError
from dlog.ledger.bookie_client import BookieClient
from dlog.ledger.digest import CRC32C, DigestManager
from dlog.protocol import messages as m

KEY = DigestManager(1, CRC32C, b"pw").master_key


def entry(ledger_id: int, entry_id: int) -> bytes:
    payload = f"entry-{ledger_id}-{entry_id}".encode()
    return DigestManager(ledger_id, CRC32C, b"pw").compute(
        entry_id, entry_id - 1, (entry_id + 1) * len(payload), payload
    )


async def connect(make_bookie) -> tuple[object, BookieClient]:  # type: ignore[no-untyped-def]
    bookie = await make_bookie()
    client = BookieClient(f"127.0.0.1:{bookie.server.port}")
    await client.connect()
    return bookie, client


async def test_list_of_entries_of_ledger(make_bookie) -> None:  # type: ignore[no-untyped-def]
    bookie, c = await connect(make_bookie)
    try:
        for eid in (0, 1, 2, 5, 6, 9):
            assert (await c.add_entry(31, eid, KEY, entry(31, eid))).status == EOK
        resp = await c.send(m.list_of_entries_request(0, 31))
        assert resp.status == EOK
        r = resp.getListOfEntriesOfLedgerResponse
        assert r.status == EOK and r.ledgerId == 31
        # Upstream's bytes: header (version 0, 3 groups), then one 24-byte
        # group per run of consecutive ids: (start, start, size, period 0).
        groups = [(0, 0, 3, 0), (5, 5, 2, 0), (9, 9, 1, 0)]
        expected = struct.pack(">ii", 0, 3) + b"\0" * 56
        expected += b"".join(struct.pack(">qqii", *g) for g in groups)
        assert r.availabilityOfEntriesOfLedger == expected
        # Entries flushed to the entry logs are listed too, with new ones
        # still in the write cache.
        await bookie.core.checkpointer.checkpoint()  # type: ignore[attr-defined]
        assert (await c.add_entry(31, 3, KEY, entry(31, 3))).status == EOK
        assert await c.entries_of_ledger(31) == [0, 1, 2, 3, 5, 6, 9]

        resp = await c.send(m.list_of_entries_request(0, 32))
        assert resp.status == ENOLEDGER
        r = resp.getListOfEntriesOfLedgerResponse
        assert r.status == ENOLEDGER and r.ledgerId == 32
        assert not r.HasField("availabilityOfEntriesOfLedger")
        try:
            await c.entries_of_ledger(32)
        except NoSuchLedgerError:
            pass
        else:
            raise AssertionError("ENOLEDGER must raise NoSuchLedgerError")
    finally:
        await c.close()


async def test_read_lac_of_unknown_ledger_is_enoentry(make_bookie) -> None:  # type: ignore[no-untyped-def]
    _, c = await connect(make_bookie)
    try:
        resp = await c.read_lac(41)
        assert resp.status == ENOENTRY
        r = resp.readLacResponse
        assert r.status == ENOENTRY and r.ledgerId == 41
        assert not r.HasField("lacBody") and not r.HasField("lastEntryBody")
        # A known ledger still answers with its last entry.
        assert (await c.add_entry(41, 0, KEY, entry(41, 0))).status == EOK
        resp = await c.read_lac(41)
        assert resp.status == EOK and resp.readLacResponse.lastEntryBody == entry(41, 0)
    finally:
        await c.close()


async def test_read_of_entry_minus_one_echoes_minus_one(make_bookie) -> None:  # type: ignore[no-untyped-def]
    bookie, c = await connect(make_bookie)
    try:
        for eid in range(3):
            assert (await c.add_entry(51, eid, KEY, entry(51, eid))).status == EOK
        r = await c.read_entry(51, m.LAST_ADD_CONFIRMED)
        assert r.status == EOK and r.readResponse.entryId == -1
        assert r.readResponse.body == entry(51, 2)
        # From the entry logs, and as a fence read, the same.
        await bookie.core.checkpointer.checkpoint()  # type: ignore[attr-defined]
        r = await c.read_entry(51, m.LAST_ADD_CONFIRMED)
        assert r.status == EOK and r.readResponse.entryId == -1
        r = await c.read_entry(51, m.LAST_ADD_CONFIRMED, fence=True, master_key=KEY)
        assert r.status == EOK and r.readResponse.entryId == -1
        assert r.readResponse.body == entry(51, 2)
        # Not found: the request's ids come back.
        r = await c.read_entry(52, m.LAST_ADD_CONFIRMED)
        assert r.status == ENOLEDGER and r.readResponse.entryId == -1
        assert r.readResponse.ledgerId == 52
    finally:
        await c.close()


async def test_piggyback_long_poll_with_entry_minus_one(make_bookie) -> None:  # type: ignore[no-untyped-def]
    # Upstream's ReadLastConfirmedAndEntryOp sends entryId -1 with
    # ENTRY_PIGGYBACK; LongPollReadEntryProcessorV3 answers with entry
    # previousLAC + 1 and that id, or entryId -1 and no body when the LAC
    # has not passed previousLAC.
    _, c = await connect(make_bookie)
    try:
        for eid in range(3):
            assert (await c.add_entry(61, eid, KEY, entry(61, eid))).status == EOK
        r = await c.read_entry(
            61, m.LAST_ADD_CONFIRMED, previous_lac=0, long_poll_timeout_ms=100, piggyback=True
        )
        assert r.status == EOK and r.readResponse.maxLAC == 1
        assert r.readResponse.entryId == 1 and r.readResponse.body == entry(61, 1)
        r = await c.read_entry(
            61, m.LAST_ADD_CONFIRMED, previous_lac=1, long_poll_timeout_ms=100, piggyback=True
        )
        assert r.status == EOK and r.readResponse.maxLAC == 1
        assert r.readResponse.entryId == -1 and not r.readResponse.HasField("body")
    finally:
        await c.close()
