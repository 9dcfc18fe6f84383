"""The ledger client against real bookies and ZooKeeper."""

from __future__ import annotations

import asyncio

import pytest

from dlog.errors import (
    IncorrectParameterError,
    LedgerClosedError,
    LedgerFencedError,
    NoSuchLedgerError,
    NotEnoughBookiesError,
    UnauthorizedAccessError,
)
from dlog.ledger.client import BookKeeper
from dlog.ledger.metadata import CloseReason, LedgerCloseContext, LedgerCreateContext, LedgerState

#: Representative of the suite: runs with entry log per ledger off and on.
pytestmark = pytest.mark.both_entry_log_modes


async def start_bookies(make_bookie, n: int) -> list:  # type: ignore[no-untyped-def]
    return [await make_bookie(f"b{i}") for i in range(n)]


async def test_write_close_open_read(make_bookie, ledgers_uri: str) -> None:
    await start_bookies(make_bookie, 3)
    async with BookKeeper(ledgers_uri) as bk:
        wh = await bk.create_ledger(3, 2, 2, password=b"pw")
        ids = await asyncio.gather(*(wh.append_nowait(f"e{i}".encode()) for i in range(1000)))
        assert ids == list(range(1000))
        assert wh.last_add_confirmed == 999
        assert wh.length == sum(len(f"e{i}") for i in range(1000))
        await wh.close()
        with pytest.raises(LedgerClosedError):
            await wh.append(b"late")
        rh = await bk.open_ledger(wh.ledger_id, b"pw")
        assert rh.is_closed and rh.last_add_confirmed == 999 and rh.length == wh.length
        entries = await rh.read(0, 999)
        assert [e.data for e in entries] == [f"e{i}".encode() for i in range(1000)]
        md = rh.metadata
        assert md.state == LedgerState.CLOSED and md.format_version == 3
        with pytest.raises(UnauthorizedAccessError):
            await bk.open_ledger(wh.ledger_id, b"wrong")
        with pytest.raises(IncorrectParameterError):
            await rh.read(0, 1000)
        assert wh.ledger_id in await bk.list_ledgers()
        await bk.delete_ledger(wh.ledger_id)
        with pytest.raises(NoSuchLedgerError):
            await bk.open_ledger(wh.ledger_id, b"pw")


async def test_contexts_make_a_v4_ledger(make_bookie, ledgers_uri: str) -> None:
    await start_bookies(make_bookie, 3)
    async with BookKeeper(ledgers_uri) as bk:
        ctx = LedgerCreateContext(part_of_data_set="stream-a", expected_max_entries=10)
        wh = await bk.create_ledger(password=b"x", create_context=ctx)
        await wh.append(b"a")
        await wh.close(LedgerCloseContext.max_entries_reached(expect_delete_after=123456))
        md = await bk.ledger_metadata(wh.ledger_id)
        assert md.format_version == 4
        assert md.create_context.part_of_data_set == "stream-a"
        assert md.close_context.reason == CloseReason.MAX_ENTRY_COUNT_REACHED
        assert md.seal_time is not None


async def test_not_enough_bookies_names_the_numbers(make_bookie, ledgers_uri: str) -> None:
    await start_bookies(make_bookie, 2)
    async with BookKeeper(ledgers_uri) as bk:
        with pytest.raises(NotEnoughBookiesError, match="needed 3, found 2"):
            await bk.create_ledger(3, 2, 2)
        with pytest.raises(IncorrectParameterError):
            await bk.create_ledger(2, 3, 2)


async def test_recovery_fences_the_old_writer(make_bookie, ledgers_uri: str) -> None:
    await start_bookies(make_bookie, 3)
    async with BookKeeper(ledgers_uri) as writer_bk, BookKeeper(ledgers_uri) as reader_bk:
        wh = await writer_bk.create_ledger(password=b"pw")
        for i in range(50):
            await wh.append(b"x%d" % i)
        # A tailing reader (no recovery) sees the LAC.
        tail = await reader_bk.open_ledger(wh.ledger_id, b"pw", recovery=False)
        assert not tail.is_closed
        assert await tail.read_last_add_confirmed() >= 48
        # Recovery from another client closes the ledger at >= every acked entry.
        rh = await reader_bk.open_ledger(wh.ledger_id, b"pw", recovery=True)
        assert rh.is_closed and rh.last_add_confirmed == 49
        with pytest.raises(LedgerFencedError):
            await wh.append(b"after fence")
        entries = await rh.read(0, 49)
        assert entries[-1].data == b"x49"
        # The old writer's close does not fail: its entries are all there.
        await wh.close()
        # The tailing reader learns about the close from the metadata watch.
        for _ in range(50):
            if tail.is_closed:
                break
            await asyncio.sleep(0.05)
        assert tail.is_closed and tail.last_add_confirmed == 49


async def test_long_poll_lac(make_bookie, ledgers_uri: str) -> None:
    await start_bookies(make_bookie, 3)
    async with BookKeeper(ledgers_uri) as bk:
        wh = await bk.create_ledger(password=b"pw")
        await wh.append(b"a")
        await wh.append(b"b")
        rh = await bk.open_ledger(wh.ledger_id, b"pw", recovery=False)
        lac = await rh.read_last_add_confirmed()
        assert lac == 0
        poll = asyncio.ensure_future(rh.read_lac_long_poll(lac, 5.0))
        await asyncio.sleep(0.1)
        assert not poll.done()
        await wh.append(b"c")
        assert await asyncio.wait_for(poll, 5) == 1
        assert (await rh.read(1, 1))[0].data == b"b"
        # Explicit LAC lets a reader see the last entry without a next one.
        await wh.write_lac()
        assert await rh.read_lac_long_poll(1, 2.0) == 2
        assert (await rh.read(2, 2))[0].data == b"c"
        assert await rh.read_lac_long_poll(2, 0.3) == 2  # times out unchanged


async def test_ensemble_change_when_a_bookie_dies(make_bookie, ledgers_uri: str) -> None:
    bookies = await start_bookies(make_bookie, 4)
    async with BookKeeper(ledgers_uri) as bk:
        wh = await bk.create_ledger(3, 2, 2, password=b"pw")
        first = [wh.append_nowait(b"a%d" % i) for i in range(300)]
        await asyncio.gather(*first)
        tail = await bk.open_ledger(wh.ledger_id, b"pw", recovery=False)
        victim = next(b for b in bookies if b.bookie_id == wh.ensemble[1])
        more = [wh.append_nowait(b"b%d" % i) for i in range(300)]
        await victim.stop()
        more += [wh.append_nowait(b"c%d" % i) for i in range(300)]
        ids = await asyncio.gather(*more)
        assert ids == list(range(300, 900))
        assert victim.bookie_id not in wh.ensemble
        md = await bk.ledger_metadata(wh.ledger_id)
        assert len(md.ensembles) >= 2
        assert md.ensembles[-1][0] <= 300 + 1 + 300  # the change starts at LAC + 1
        # A reader's metadata watch saw the ensemble change.
        for _ in range(50):
            if len(tail.metadata.ensembles) >= 2:
                break
            await asyncio.sleep(0.05)
        assert tail.metadata.ensembles == md.ensembles
        await wh.close()
        rh = await bk.open_ledger(wh.ledger_id, b"pw")
        data = [e.data for e in await rh.read(0, 899)]
        expected = (
            [b"a%d" % i for i in range(300)]
            + [b"b%d" % i for i in range(300)]
            + [b"c%d" % i for i in range(300)]
        )
        assert data == expected


async def test_reads_skip_a_corrupt_replica(make_bookie, ledgers_uri: str) -> None:
    from dlog.bookie.entry_log import split_location
    from dlog.errors import DigestMismatchError

    bookies = await start_bookies(make_bookie, 3)
    async with BookKeeper(ledgers_uri) as bk:
        wh = await bk.create_ledger(3, 3, 2, password=b"pw")
        for i in range(10):
            await wh.append(b"payload-%d" % i)
        await wh.close()
        for b in bookies:
            await b.core.checkpointer.checkpoint()

        def corrupt(bookie, entry_id: int) -> None:  # type: ignore[no-untyped-def]
            storage = bookie.core.storage.storage_for(wh.ledger_id)
            storage.read_cache = type(storage.read_cache)(0)
            log_id, offset = split_location(storage.locations.get(wh.ledger_id, entry_id))
            path = storage.entry_logger.path_of(log_id)
            with open(path, "r+b") as f:
                f.seek(offset + 40)  # inside the payload (32-byte header + 4-byte CRC32C)
                byte = f.read(1)
                f.seek(offset + 40)  # inside the payload (32-byte header + 4-byte CRC32C)
                f.write(bytes([byte[0] ^ 0xFF]))

        rh = await bk.open_ledger(wh.ledger_id, b"pw")
        corrupt(bookies[0], 4)
        corrupt(bookies[1], 4)
        # The corruption is real: those replicas now fail their digest.
        for b in bookies[:2]:
            conn = await bk.pool.get(b.bookie_id)
            body = (await conn.read_entry(wh.ledger_id, 4)).readResponse.body
            with pytest.raises(DigestMismatchError):
                rh.digest.verify(body, 4)
        assert (await rh.read(4, 4))[0].data == b"payload-4"
        corrupt(bookies[2], 4)
        with pytest.raises(DigestMismatchError):
            await rh.read(4, 4)
        assert (await rh.read(5, 5))[0].data == b"payload-5"


async def test_two_clients_race_to_recover(make_bookie, ledgers_uri: str) -> None:
    await start_bookies(make_bookie, 3)
    async with (
        BookKeeper(ledgers_uri) as w,
        BookKeeper(ledgers_uri) as r1,
        BookKeeper(ledgers_uri) as r2,
    ):
        wh = await w.create_ledger(password=b"pw")
        await asyncio.gather(*(wh.append_nowait(b"%d" % i) for i in range(200)))
        h1, h2 = await asyncio.gather(
            r1.open_ledger(wh.ledger_id, b"pw"), r2.open_ledger(wh.ledger_id, b"pw")
        )
        assert h1.last_add_confirmed == h2.last_add_confirmed == 199
        assert [h1.recovered_by_me, h2.recovered_by_me].count(True) == 1
        assert (await w.ledger_metadata(wh.ledger_id)).last_entry_id == 199


async def test_close_and_recovery_send_advisory_write_close(make_bookie, ledgers_uri: str) -> None:
    bookies = await start_bookies(make_bookie, 3)

    def known_write_closes() -> float:
        return sum(b.metrics.write_close.get(("true",)) for b in bookies)

    async with BookKeeper(ledgers_uri) as bk:
        wh = await bk.create_ledger(3, 3, 2, password=b"pw")
        await wh.append(b"x")
        await wh.close()
        for _ in range(50):
            if known_write_closes() == 3:
                break
            await asyncio.sleep(0.02)
        assert known_write_closes() == 3
        assert bk.write_close_outcomes.get(("success",)) == 1
        # The bookies recorded the ledger as write-closed for their entry-log manager.
        assert all(
            wh.ledger_id in b.core.storage.storage_for(wh.ledger_id).manager.write_closed
            for b in bookies
        )

        wh2 = await bk.create_ledger(3, 3, 2, password=b"pw")
        await wh2.append(b"y")
        await bk.open_ledger(wh2.ledger_id, b"pw", recovery=True)  # recovery sends it too
        for _ in range(50):
            if bk.write_close_outcomes.get(("success",)) == 2:
                break
            await asyncio.sleep(0.02)
        assert bk.write_close_outcomes.get(("success",)) == 2


async def test_znode_bytes_decode_with_an_independent_decoder(
    make_bookie, ledgers_uri: str, zk
) -> None:
    """The bytes in ZooKeeper are BookKeeper's format: a decoder written from
    the field numbers alone (tests/unit/test_ledger_metadata.py) reads them."""
    from dlog.ledger.layout import ledger_path
    from tests.unit.test_ledger_metadata import _decode, _fields

    await start_bookies(make_bookie, 3)
    async with BookKeeper(ledgers_uri) as bk:
        plain = await bk.create_ledger(3, 2, 2, password=b"pw")
        await plain.append(b"x")
        await plain.close()
        ctx = await bk.create_ledger(
            3, 3, 2, password=b"pw", create_context=LedgerCreateContext(part_of_data_set="s")
        )
        await ctx.close(LedgerCloseContext.no_more_data())
        root = bk.uri.ledgers_root
        v3_bytes, _ = await zk.get(ledger_path(root, plain.ledger_id))
        v4_bytes, _ = await zk.get(ledger_path(root, ctx.ledger_id))
    version, fields = _decode(v3_bytes)
    f = dict((n, v) for n, v in fields if n != 6)
    assert (
        version == 3
        and f[1] == 2
        and f[2] == 3
        and f[9] == 2
        and f[5] == 3
        and f[4] == 0
        and f[7] == 3
    )
    seg = _fields(next(v for n, v in fields if n == 6))
    assert sorted(v.decode() for n, v in seg if n == 1) == sorted(plain.ensemble)
    version, fields = _decode(v4_bytes)
    extra = {n: v for n, v in fields if n >= 100}
    assert version == 4 and dict(_fields(extra[100]))[3] == b"s"
    assert dict(_fields(extra[101]))[1] == CloseReason.NO_MORE_DATA.value and 102 in extra


async def test_entries_reach_a_replica_whose_connection_comes_up_after_close(
    make_bookie, ledgers_uri: str, monkeypatch: pytest.MonkeyPatch
) -> None:  # type: ignore[no-untyped-def]
    """W=3, A=2 and one bookie slow to connect: every entry completes on the
    other two and the writer closes at once. The third copies still go out
    once the connection is up, as BookKeeper's queued sends do, so the
    ledger is not left one replica short for the auditor to repair."""
    bookies = await start_bookies(make_bookie, 3)
    slow = bookies[2]
    async with BookKeeper(ledgers_uri) as bk:
        pool = bk.pool
        connect = pool._connect

        async def slow_connect(address: str):  # type: ignore[no-untyped-def]
            if address == slow.bookie_id:
                await asyncio.sleep(0.5)
            return await connect(address)

        monkeypatch.setattr(pool, "_connect", slow_connect)
        wh = await bk.create_ledger(3, 3, 2, password=b"pw")
        await asyncio.gather(*(wh.append_nowait(f"e{i}".encode()) for i in range(50)))
        await wh.close()
        assert pool.connected(slow.bookie_id) is None  # closed before the third copies left

        async def held() -> list[int]:
            statuses = [(await slow.core.read_entry(wh.ledger_id, i))[0] for i in range(50)]
            return [i for i, status in enumerate(statuses) if status == 0]

        deadline = asyncio.get_running_loop().time() + 10
        while len(have := await held()) < 50:
            assert asyncio.get_running_loop().time() < deadline, f"the slow bookie holds {have}"
            await asyncio.sleep(0.1)
