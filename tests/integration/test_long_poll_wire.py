"""The long-poll LAC read on the wire is upstream's.

BookKeeper's client (ReadLastConfirmedAndEntryOp) sends entryId -1 with
previousLAC and the piggyback flag, and BookKeeper's bookie
(LongPollReadEntryProcessorV3) answers any other entryId there with EBADREQ,
so a reader sending anything else cannot tail on a Java bookie. A relay
between the client and a real dlog bookie decodes every frame both ways so
the test sees exactly what the client asked and what came back.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable

import pytest

from dlog.bookie.service import BookieService
from dlog.errors import ENOLEDGER
from dlog.ledger.client import BookKeeper
from dlog.protocol import messages as m
from dlog.protocol.bookkeeper_pb2 import Request
from dlog.sandbox.ports import free_port
from tests.bookie_relay import BookieRelay


class RecordingRelay(BookieRelay):
    """A relay that passes everything on, unchanged."""

    def reads(self) -> list[Request]:
        return [r for r in self.requests if r.header.operation == m.READ_ENTRY]

    def long_polls(self) -> list[Request]:
        return [r for r in self.reads() if r.readRequest.HasField("previousLAC")]


@pytest.fixture
async def relayed_bookie(
    make_bookie: Callable[..., object],
) -> AsyncIterator[RecordingRelay]:
    """One bookie registered as ``127.0.0.1:<relay port>``: clients reach
    it only through the relay."""
    relay_port = free_port()
    bookie: BookieService = await make_bookie("relayed", bookieId=f"127.0.0.1:{relay_port}")  # type: ignore[misc]
    assert bookie.server is not None
    relay = RecordingRelay(relay_port, bookie.server.port)
    await relay.start()
    yield relay
    await relay.stop()


async def test_long_poll_sends_upstream_request_and_keeps_the_returned_entry(
    relayed_bookie: RecordingRelay, ledgers_uri: str
) -> None:
    relay = relayed_bookie
    async with BookKeeper(ledgers_uri) as bk:
        wh = await bk.create_ledger(1, 1, 1, password=b"pw")
        await wh.append(b"a")
        await wh.append(b"b")
        rh = await bk.open_ledger(wh.ledger_id, b"pw", recovery=False)
        assert await rh.read_last_add_confirmed() == 0
        poll = asyncio.ensure_future(rh.read_lac_long_poll(0, 5.0))
        await asyncio.sleep(0.1)
        assert not poll.done()
        await wh.append(b"c")
        assert await asyncio.wait_for(poll, 5) == 1

        (req,) = relay.long_polls()
        rr = req.readRequest
        assert rr.entryId == m.LAST_ADD_CONFIRMED == -1
        assert rr.previousLAC == 0
        assert rr.flag == m.ENTRY_PIGGYBACK
        assert rr.timeOut == 5000
        # The bookie named the entry it piggybacked (previousLAC + 1) ...
        resp = relay.responses[req.header.txnId].readResponse
        assert resp.entryId == 1 and resp.HasField("body") and resp.maxLAC == 1
        # ... and the client kept it under that id: reading it costs no request.
        reads_before = len(relay.reads())
        assert [e.data for e in await rh.read(1, 1)] == [b"b"]
        assert len(relay.reads()) == reads_before

        # A poll that times out: EOK, LAC unchanged, no entry (entryId -1).
        assert await rh.read_lac_long_poll(1, 0.3) == 1
        req = relay.long_polls()[-1]
        assert req.readRequest.entryId == -1 and req.readRequest.previousLAC == 1
        resp = relay.responses[req.header.txnId].readResponse
        assert not resp.HasField("body") and resp.entryId == -1 and resp.maxLAC == 1
        await wh.close()


async def test_a_long_poll_asks_again_a_bookie_that_does_not_know_the_ledger_yet(
    relayed_bookie: RecordingRelay, ledgers_uri: str
) -> None:
    """A reader's first poll of a segment just begun reaches a bookie before
    the ledger's first entry: it answers at once (ENOLEDGER), not waiting.
    The poll asks it again until the timeout, and returns when the LAC
    moves; it does not give up on the bookie at the first answer."""
    relay = relayed_bookie
    async with BookKeeper(ledgers_uri) as bk:
        wh = await bk.create_ledger(1, 1, 1, password=b"pw")
        rh = await bk.open_ledger(wh.ledger_id, b"pw", recovery=False)
        poll = asyncio.ensure_future(rh.read_lac_long_poll(-1, 5.0))
        await asyncio.sleep(0.3)
        assert not poll.done()
        refused = [
            r for r in relay.long_polls() if relay.responses[r.header.txnId].status == ENOLEDGER
        ]
        assert 2 <= len(refused) <= 20  # asked again, backing off (1 ms doubling to 50 ms)
        await wh.append(b"a")
        await wh.append(b"b")  # carries the LAC of entry 0
        assert await asyncio.wait_for(poll, 5) >= 0
        await wh.close()
