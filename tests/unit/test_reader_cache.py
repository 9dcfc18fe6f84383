"""The reader's read-ahead cache: whole entries handed over, bounded in
records, the end or error kept behind the last record."""

from __future__ import annotations

import asyncio

from dlog.dlsn import DLSN
from dlog.errors import LogReadError
from dlog.reader import _END, _ReadAhead
from dlog.record import LogRecordWithDLSN


def records(entry: int, n: int) -> list[LogRecordWithDLSN]:
    return [
        LogRecordWithDLSN(entry * 100 + i, b"x", 0, DLSN(1, entry, i), i + 1, i) for i in range(n)
    ]


def txids(rs: list[LogRecordWithDLSN]) -> list[int]:
    return [r.txid for r in rs]


async def test_a_whole_entry_is_handed_over_as_it_is() -> None:
    cache = _ReadAhead(100)
    entry = records(1, 5)
    await cache.put(entry)
    out, last = cache.take(10)
    assert out is entry and last is None
    assert cache.records == 0 and cache.empty()


async def test_takes_split_entries_and_join_them_in_order() -> None:
    cache = _ReadAhead(100)
    await cache.put(records(1, 5))
    await cache.put(records(2, 3))
    out, _ = cache.take(2)
    assert txids(out) == [100, 101]
    out, _ = cache.take(4)
    assert txids(out) == [102, 103, 104, 200]
    assert cache.records == 2
    out, _ = cache.take(10)
    assert txids(out) == [201, 202]
    assert cache.records == 0 and cache.empty()


async def test_the_end_stays_behind_the_last_record() -> None:
    cache = _ReadAhead(100)
    await cache.put(records(1, 2))
    await cache.put_last(_END)
    out, last = cache.take(10)
    assert txids(out) == [100, 101] and last is None
    for _ in range(2):  # every later read sees it
        out, last = cache.take(10)
        assert out == [] and last is _END
    assert not cache.empty()


async def test_an_error_comes_after_the_records_before_it() -> None:
    cache = _ReadAhead(100)
    error = LogReadError("boom")
    await cache.put(records(1, 1))
    await cache.put_last(error)
    assert txids(cache.take(1)[0]) == [100]
    assert cache.take(1) == ([], error)


async def test_read_ahead_waits_while_the_cache_holds_its_bound_in_records() -> None:
    cache = _ReadAhead(4)
    await cache.put(records(1, 3))
    await cache.put(records(2, 3))  # 3 < 4: goes in, the bound is passed by less than an entry
    put = asyncio.ensure_future(cache.put(records(3, 1)))
    await asyncio.sleep(0)
    await asyncio.sleep(0)
    assert not put.done()
    cache.take(1)  # 5 left: still full
    await asyncio.sleep(0)
    assert not put.done()
    cache.take(2)  # 3 left: room
    await asyncio.wait_for(put, 5)
    assert cache.records == 4


async def test_concurrent_readers_are_all_woken_and_a_timeout_does_not_lose_the_wakeup() -> None:
    cache = _ReadAhead(10)
    assert not await cache.wait(0.01)  # timed out: the shared waiter is not cancelled
    waiters = [asyncio.ensure_future(cache.wait(None)) for _ in range(2)]
    await asyncio.sleep(0)
    await cache.put(records(1, 1))
    assert await asyncio.wait_for(asyncio.gather(*waiters), 5) == [True, True]
    assert await cache.wait(None)  # something cached: at once
