"""BP-32 write close is advisory: a bookie that never answers it, fails it
or is down at close time neither delays nor fails the client's close."""

from __future__ import annotations

import time
from collections.abc import AsyncIterator

import pytest

from dlog.bookie.service import BookieService
from dlog.conf.bookkeeper import ClientConfig
from dlog.ledger.client import BookKeeper
from dlog.protocol import messages as m
from dlog.protocol.bookkeeper_pb2 import Request
from dlog.sandbox.ports import free_port
from tests.bookie_relay import BookieRelay
from tests.waiting import eventually

#: The close must return well before a write close could time out.
TIMEOUT = 10


class HangsOnWriteClose(BookieRelay):
    """A bookie that takes WRITE_CLOSE and never answers it."""

    def hold(self, request: Request) -> bool:
        return request.header.operation == m.WRITE_CLOSE


@pytest.fixture
async def hanging_bookie(make_bookie) -> AsyncIterator[HangsOnWriteClose]:  # type: ignore[no-untyped-def]
    port = free_port()
    bookie: BookieService = await make_bookie("hangs", bookieId=f"127.0.0.1:{port}")
    assert bookie.server is not None
    relay = HangsOnWriteClose(port, bookie.server.port)
    await relay.start()
    yield relay
    await relay.stop()


async def test_close_does_not_wait_on_hanging_failing_or_dead_bookies(
    make_bookie, hanging_bookie: HangsOnWriteClose, ledgers_uri: str
) -> None:
    healthy = await make_bookie("ok")
    dies = await make_bookie("dies")
    conf = ClientConfig.load(metadataServiceUri=ledgers_uri, addEntryTimeoutSec=TIMEOUT)
    async with BookKeeper(conf=conf) as bk:
        wh = await bk.create_ledger(3, 3, 3, password=b"pw")
        for i in range(5):
            await wh.append(b"%d" % i)
        await dies.stop()  # down at close time

        t0 = time.monotonic()
        await wh.close()
        assert time.monotonic() - t0 < 2.0, "the close waited on a write close"
        assert (await bk.ledger_metadata(wh.ledger_id)).last_entry_id == 4
        await eventually(lambda: len(hanging_bookie.held) == 1)
        assert wh.ledger_id in healthy.core.storage.storage_for(wh.ledger_id).manager.write_closed
        assert bk.write_close_outcomes.values == {}  # still waiting on the hanging one

        # The ledger reads back from the bookies that are up.
        rh = await bk.open_ledger(wh.ledger_id, b"pw")
        assert [e.data for e in await rh.read(0, 4)] == [b"%d" % i for i in range(5)]


class FailsWriteClose(BookieRelay):
    """A bookie that drops the connection on WRITE_CLOSE: the request fails."""

    def forward(self, request: Request) -> bool:
        return request.header.operation != m.WRITE_CLOSE


async def test_a_partial_write_close_is_counted_and_never_raised(
    make_bookie, ledgers_uri: str
) -> None:
    port = free_port()
    failing: BookieService = await make_bookie("fails", bookieId=f"127.0.0.1:{port}")
    assert failing.server is not None
    relay = FailsWriteClose(port, failing.server.port)
    await relay.start()
    bookies = [await make_bookie(f"b{i}") for i in range(2)]
    try:
        async with BookKeeper(ledgers_uri) as bk:
            wh = await bk.create_ledger(3, 3, 2, password=b"pw")
            await wh.append(b"x")
            await wh.close()
            await eventually(lambda: bool(bk.write_close_outcomes.values))
            assert bk.write_close_outcomes.values == {("partial",): 1}
            assert all(
                wh.ledger_id in b.core.storage.storage_for(wh.ledger_id).manager.write_closed
                for b in bookies
            )
            assert (
                wh.ledger_id
                not in failing.core.storage.storage_for(wh.ledger_id).manager.write_closed
            )
    finally:
        await relay.stop()


async def test_a_bookie_down_at_close_time_is_skipped(make_bookie, ledgers_uri: str) -> None:
    bookies = [await make_bookie(f"b{i}") for i in range(3)]
    async with BookKeeper(ledgers_uri) as bk:
        wh = await bk.create_ledger(3, 3, 2, password=b"pw")
        await wh.append(b"x")
        await bookies[2].stop()  # unregistered: nothing to send it to
        t0 = time.monotonic()
        await wh.close()
        assert time.monotonic() - t0 < 2.0
        await eventually(lambda: bool(bk.write_close_outcomes.values))
        assert bk.write_close_outcomes.values == {("success",): 1}
        assert bk.write_close_skipped.get() == 1
