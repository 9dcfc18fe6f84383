"""WRITE_CLOSE (BP-32, operation 100) goes only to bookies that advertise it.

A BookKeeper bookie cannot decode operation 100: its decoder falls back to
the pre-v3 one and closes the channel, failing every request in flight on
the pooled connection. Here a real dlog bookie plays such a bookie: its
registration says nothing of write close (empty data, as BookKeeper before
4.12 writes, or a BookieServiceInfoFormat without dlog's property), and it
sits behind a proxy that, like upstream's decoder, closes the connection on
operation 100.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable

import pytest

from dlog.bookie.service import BookieService
from dlog.conf.bookkeeper import ClientConfig
from dlog.ledger.client import BookKeeper
from dlog.protocol import bookie_service_info as bsi
from dlog.protocol import messages as m
from dlog.protocol.bookkeeper_pb2 import Request
from dlog.sandbox.ports import free_port
from dlog.zk import ZooKeeper
from tests.bookie_relay import BookieRelay
from tests.waiting import eventually

WRITE_CLOSE_LABEL = m.OP_NAMES[m.WRITE_CLOSE].lower()


def write_closes_received(bookie: BookieService) -> float:
    """WRITE_CLOSE requests the bookie's request processor counted, any status."""
    return sum(
        value
        for labels, value in bookie.metrics.requests.values.items()
        if labels[0] == WRITE_CLOSE_LABEL
    )


class ClosesOnWriteClose(BookieRelay):
    """A relay in front of a bookie that behaves as upstream's decoder does
    with operation 100: it closes the connection (both ways)."""

    def __init__(self, port: int, target_port: int) -> None:
        super().__init__(port, target_port)
        self.write_closes_seen = 0
        self.connections_dropped = 0

    def forward(self, request: Request) -> bool:
        if request.header.operation != m.WRITE_CLOSE:
            return True
        self.write_closes_seen += 1
        self.connections_dropped += 1
        return False


@pytest.fixture
async def legacy_bookie(
    make_bookie: Callable[..., object],
) -> AsyncIterator[tuple[BookieService, ClosesOnWriteClose]]:
    """A bookie registered as ``127.0.0.1:<proxy port>``: clients reach it
    only through the proxy."""
    proxy_port = free_port()
    bookie: BookieService = await make_bookie("legacy", bookieId=f"127.0.0.1:{proxy_port}")  # type: ignore[misc]
    assert bookie.server is not None
    proxy = ClosesOnWriteClose(proxy_port, bookie.server.port)
    await proxy.start()
    yield bookie, proxy
    await proxy.stop()


def registration(zk_root: str, bookie_id: str) -> str:
    return f"{zk_root}/ledgers/available/{bookie_id}"


async def test_a_bookie_registered_without_data_is_never_sent_write_close(
    make_bookie, legacy_bookie, zk: ZooKeeper, zk_root: str, ledgers_uri: str
) -> None:
    dlog_bookies = [await make_bookie("b0"), await make_bookie("b1")]
    legacy, proxy = legacy_bookie
    # As BookKeeper before 4.12 registers: no data.
    await zk.set(registration(zk_root, legacy.bookie_id), b"")

    async with BookKeeper(ledgers_uri) as bk:
        wh = await bk.create_ledger(3, 3, 2, password=b"pw")
        assert legacy.bookie_id in wh.ensemble
        for i in range(10):
            await wh.append(b"%d" % i)
        conn = bk.pool.connected(legacy.bookie_id)
        assert conn is not None
        await wh.close()
        # Reads in flight on the pooled connection while the hints go out.
        reads = [asyncio.ensure_future(conn.read_entry(wh.ledger_id, e)) for e in range(10)]
        await eventually(lambda: bk.write_close_outcomes.get(("success",)) == 1)
        assert [r.status for r in await asyncio.gather(*reads)] == [m.pb.EOK] * 10

        assert bk.write_close_skipped.get() == 1
        assert proxy.write_closes_seen == 0 and proxy.connections_dropped == 0
        assert write_closes_received(legacy) == 0
        assert legacy.metrics.write_close.values == {}
        assert [write_closes_received(b) for b in dlog_bookies] == [1, 1]
        # The same connection still serves.
        assert bk.pool.connected(legacy.bookie_id) is conn
        assert (await conn.read_entry(wh.ledger_id, 9)).status == m.pb.EOK


async def test_registration_changes_are_followed(
    make_bookie, zk: ZooKeeper, zk_root: str, ledgers_uri: str
) -> None:
    """A BookieServiceInfoFormat without dlog's property (as a BookKeeper
    >= 4.12 bookie writes) stops the hints; republishing it resumes them."""
    bookies = [await make_bookie(f"b{i}") for i in range(3)]
    target = bookies[2]
    path = registration(zk_root, target.bookie_id)
    published = bsi.decode((await zk.get(path))[0])
    assert published.supports_write_close  # dlog bookies advertise it
    assert [e.protocol for e in published.endpoints] == [bsi.BOOKIE_RPC_PROTOCOL]
    assert published.endpoints[0].port == target.server.port
    upstream_like = bsi.BookieServiceInfo(published.endpoints, {})

    async with BookKeeper(ledgers_uri) as bk:
        assert (await bk.watcher.service_info(target.bookie_id)).supports_write_close
        await zk.set(path, bsi.encode(upstream_like))

        async def advertised() -> bool:
            info = await bk.watcher.service_info(target.bookie_id)
            return info is not None and info.supports_write_close

        for _ in range(250):
            if not await advertised():
                break
            await asyncio.sleep(0.02)
        assert not await advertised()

        wh = await bk.create_ledger(3, 3, 2, password=b"pw")
        await wh.append(b"x")
        await wh.close()
        await eventually(lambda: bk.write_close_outcomes.get(("success",)) == 1)
        assert bk.write_close_skipped.get() == 1
        assert write_closes_received(target) == 0
        assert [write_closes_received(b) for b in bookies[:2]] == [1, 1]

        await zk.set(path, bsi.encode(published))
        for _ in range(250):
            if await advertised():
                break
            await asyncio.sleep(0.02)
        wh2 = await bk.create_ledger(3, 3, 2, password=b"pw")
        await wh2.append(b"y")
        await wh2.close()
        await eventually(lambda: bk.write_close_outcomes.get(("success",)) == 2)
        assert bk.write_close_skipped.get() == 1
        assert [write_closes_received(b) for b in bookies] == [2, 2, 1]


async def test_advisory_write_close_disabled_sends_none(make_bookie, ledgers_uri: str) -> None:
    """``advisoryWriteCloseEnabled=false`` (for clusters whose bookies must
    never see operation 100): closing a ledger sends no WRITE_CLOSE. A
    second client with the default closes its own ledger afterwards, as a
    witness: once each bookie counted the witness's hint, it is the only
    one they ever got."""
    bookies = [await make_bookie(f"b{i}") for i in range(3)]
    off = ClientConfig.load(metadataServiceUri=ledgers_uri, advisoryWriteCloseEnabled=False)
    async with BookKeeper(conf=off) as bk, BookKeeper(ledgers_uri) as witness:
        wh = await bk.create_ledger(3, 3, 2, password=b"pw")
        for i in range(5):
            await wh.append(b"%d" % i)
        await wh.close()

        other = await witness.create_ledger(3, 3, 2, password=b"pw")
        await other.append(b"w")
        await other.close()
        await eventually(lambda: witness.write_close_outcomes.get(("success",)) == 1)
        await eventually(lambda: all(write_closes_received(b) >= 1 for b in bookies))
        assert [write_closes_received(b) for b in bookies] == [1, 1, 1]
        assert bk.write_close_outcomes.values == {} and bk.write_close_skipped.get() == 0
        # The ledger itself closed normally.
        rh = await bk.open_ledger(wh.ledger_id, b"pw")
        assert rh.is_closed and rh.last_add_confirmed == 4


async def test_read_only_bookie_keeps_its_advertisement(make_bookie, ledgers_uri: str) -> None:
    """A bookie that moves under ``available/readonly`` is still known to
    understand write close (a recovered ledger's ensemble may hold it)."""
    bookies = [await make_bookie(f"b{i}") for i in range(3)]
    async with BookKeeper(ledgers_uri) as bk:
        await bookies[0].registration.set_read_only(True)
        await eventually(lambda: bookies[0].bookie_id in bk.readonly_bookies())
        await eventually(lambda: bookies[0].bookie_id not in bk.writable_bookies())
        info = await bk.watcher.service_info(bookies[0].bookie_id)
        assert info is not None and info.supports_write_close
