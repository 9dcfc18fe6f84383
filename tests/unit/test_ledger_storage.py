"""DbLedgerStorage building blocks: write cache, read-ahead cache, RocksDB
indexes, and SingleDirectoryDbLedgerStorage with its double-buffered,
back-pressured write cache (real files and RocksDB in tmp_path)."""

from __future__ import annotations

import asyncio
import struct
import threading
from array import array
from collections import OrderedDict
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from dlog.bookie.entry_location_index import EntryLocationIndex
from dlog.bookie.ledger_index import LedgerIndex
from dlog.bookie.ledger_storage import SLICE, DbLedgerStorage, SingleDirectoryDbLedgerStorage
from dlog.bookie.read_cache import ReadCache
from dlog.bookie.write_cache import BLOCK, ENTRY_OVERHEAD, WriteCache
from dlog.conf.bookie import BookieConfig
from dlog.errors import NoSuchEntryError
from dlog.sandbox.bookies import bookie_config

URI = "zk+hierarchical://127.0.0.1:2181/ledgers"


def entry(ledger_id: int, entry_id: int, payload: bytes = b"") -> bytes:
    return struct.pack(">qq", ledger_id, entry_id) + payload


def cost(data: bytes) -> int:
    return len(data) + ENTRY_OVERHEAD


# ---------------------------------------------------------------------------
# WriteCache
# ---------------------------------------------------------------------------


def test_write_cache_put_get_last() -> None:
    wc = WriteCache(1 << 20)
    assert wc.get(1, 0) is None
    assert wc.last_entry_id(1) is None
    assert not wc.has_ledger(1)
    assert wc.put(1, 0, b"a")
    assert wc.put(1, 5, b"bb")
    assert wc.put(1, 2, b"ccc")
    assert wc.put(2, 0, b"d")
    assert wc.get(1, 5) == b"bb"
    assert wc.get(1, 3) is None
    assert wc.get(3, 0) is None
    assert wc.last_entry_id(1) == 5
    assert wc.last_entry_id(2) == 0
    assert wc.has_ledger(2)
    assert sorted(wc.entry_ids(1)) == [0, 2, 5]
    assert wc.entry_ids(9) == []
    assert len(wc) == wc.count == 4
    assert wc.size == 7 + 4 * ENTRY_OVERHEAD
    assert list(wc.sorted_entries()) == [
        (1, 0, b"a"),
        (1, 2, b"ccc"),
        (1, 5, b"bb"),
        (2, 0, b"d"),
    ]


def test_write_cache_replace_and_delete_accounting() -> None:
    wc = WriteCache(1 << 20)
    wc.put(1, 0, b"x" * 100)
    wc.put(1, 0, b"y" * 10)
    assert wc.count == 1
    assert wc.size == cost(b"y" * 10)
    assert wc.get(1, 0) == b"y" * 10
    wc.put(2, 0, b"z" * 50)
    wc.put(2, 1, b"z" * 50)
    wc.delete_ledger(2)
    assert wc.count == 1 and wc.size == cost(b"y" * 10)
    assert wc.last_entry_id(2) is None and not wc.has_ledger(2)
    wc.delete_ledger(42)  # unknown: no-op
    wc.clear()
    assert (wc.count, wc.size, list(wc.sorted_entries())) == (0, 0, [])
    assert wc.last_entry_id(1) is None


def test_write_cache_refuses_when_full() -> None:
    data = b"e" * 100
    wc = WriteCache(3 * cost(data))
    for i in range(3):
        assert wc.put(1, i, data)
    assert wc.size == wc.max_bytes
    assert not wc.put(1, 3, data)
    assert not wc.put(2, 0, b"")
    assert wc.count == 3 and wc.size == 3 * cost(data)
    assert wc.get(1, 3) is None and not wc.has_ledger(2)
    assert wc.last_entry_id(1) == 2
    # an empty cache takes one entry even if it is bigger than the limit
    big = WriteCache(10)
    assert big.put(1, 0, b"b" * 1000)
    assert not big.put(1, 1, b"")
    assert big.count == 1


@settings(max_examples=200, deadline=None)
@given(
    ops=st.lists(
        st.tuples(
            st.integers(min_value=0, max_value=5),
            st.integers(min_value=0, max_value=20),
            st.binary(max_size=30),
        ),
        max_size=80,
    )
)
def test_write_cache_sorted_entries_property(ops: list[tuple[int, int, bytes]]) -> None:
    wc = WriteCache(1 << 30)
    model: dict[tuple[int, int], bytes] = {}
    for lid, eid, data in ops:
        assert wc.put(lid, eid, data)
        model[(lid, eid)] = data
    out = list(wc.sorted_entries())
    keys = [(lid, eid) for lid, eid, _ in out]
    assert keys == sorted(model)
    assert {(lid, eid): d for lid, eid, d in out} == model
    assert wc.count == len(model)
    assert wc.size == sum(cost(d) for d in model.values())
    for lid in {k[0] for k in model}:
        assert wc.last_entry_id(lid) == max(e for k_l, e in model if k_l == lid)


@settings(max_examples=200, deadline=None)
@given(
    limit=st.integers(min_value=0, max_value=2000),
    ops=st.lists(
        st.tuples(st.integers(0, 3), st.integers(0, 10), st.binary(max_size=300)), max_size=40
    ),
)
def test_write_cache_never_exceeds_limit_once_non_empty(
    limit: int, ops: list[tuple[int, int, bytes]]
) -> None:
    wc = WriteCache(limit)
    for lid, eid, data in ops:
        before = (wc.count, wc.size)
        ok = wc.put(lid, eid, data)
        if not ok:
            assert (wc.count, wc.size) == before
        assert wc.size <= limit or wc.count == 1
        assert wc.size == sum(cost(d) for _, _, d in wc.sorted_entries())


# ---------------------------------------------------------------------------
# ReadCache
# ---------------------------------------------------------------------------


def test_read_cache_lru_eviction_within_budget() -> None:
    data = b"r" * 80  # cost 200
    rc = ReadCache(3 * cost(data))
    for i in range(3):
        rc.put(1, i, data)
    assert len(rc) == 3 and rc.size == 600
    assert rc.get(1, 0) == data  # 0 is now most recently used
    rc.put(1, 3, data)  # evicts 1 (least recently used)
    assert rc.get(1, 1) is None
    assert rc.get(1, 0) == data
    assert rc.get(1, 2) == data
    assert rc.get(1, 3) == data
    assert rc.size <= rc.max_bytes
    assert rc.hits == 4 and rc.misses == 1
    # a larger entry evicts as many as needed
    # LRU order is now 0, 2, 3. A 300-byte entry needs two 200-byte slots freed.
    rc.put(2, 0, b"R" * 180)
    assert rc.size == 500 <= rc.max_bytes
    assert len(rc) == 2
    assert rc.get(1, 0) is None and rc.get(1, 2) is None
    assert rc.get(1, 3) == data
    assert rc.get(2, 0) == b"R" * 180


def test_read_cache_limits_and_delete() -> None:
    rc = ReadCache(500)
    rc.put(1, 0, b"x" * 1000)  # bigger than the whole cache: not cached
    assert rc.get(1, 0) is None and rc.size == 0
    rc.put(1, 0, b"a")
    rc.put(1, 0, b"bb")  # replace
    assert rc.size == cost(b"bb") and len(rc) == 1
    rc.put(2, 0, b"c")
    rc.delete_ledger(1)
    assert rc.get(1, 0) is None
    assert rc.size == cost(b"c")
    off = ReadCache(0)
    off.put(1, 0, b"x")
    assert off.get(1, 0) is None and len(off) == 0


@settings(max_examples=200, deadline=None)
@given(
    budget=st.integers(min_value=0, max_value=1500),
    ops=st.lists(
        st.tuples(
            st.sampled_from(["put", "get"]),
            st.integers(0, 2),
            st.integers(0, 6),
            st.integers(0, 400),
        ),
        max_size=60,
    ),
)
def test_read_cache_matches_lru_model(budget: int, ops: list[tuple[str, int, int, int]]) -> None:
    rc = ReadCache(budget)
    model: OrderedDict[tuple[int, int], bytes] = OrderedDict()
    for op, lid, eid, n in ops:
        key = (lid, eid)
        if op == "put":
            data = bytes([eid]) * n
            if budget > 0 and cost(data) <= budget:
                model.pop(key, None)
                model[key] = data
                while sum(cost(d) for d in model.values()) > budget:
                    model.popitem(last=False)
            rc.put(lid, eid, data)
        else:
            expected = model.get(key)
            if expected is not None:
                model.move_to_end(key)
            assert rc.get(lid, eid) == expected
        assert rc.size == sum(cost(d) for d in model.values()) <= max(budget, 0)
        assert len(rc) == len(model)


# ---------------------------------------------------------------------------
# RocksDB indexes
# ---------------------------------------------------------------------------


def test_entry_location_index(tmp_path: Path) -> None:
    idx = EntryLocationIndex(tmp_path / "locations")
    assert idx.get(1, 0) is None
    assert idx.last_entry(1) is None
    assert idx.entry_ids(1) == []
    idx.add_batch([(1, e, (1 << 32) | (1024 + e)) for e in (0, 1, 2, 10, 300)])
    idx.add_batch([(2, 0, 7), (0, 5, 8), (3, 2**62, 9)])
    assert idx.get(1, 10) == (1 << 32) | 1034
    assert idx.get(1, 3) is None
    assert idx.last_entry(1) == (300, (1 << 32) | 1324)
    assert idx.last_entry(0) == (5, 8)
    assert idx.last_entry(3) == (2**62, 9)
    assert idx.last_entry(4) is None  # after the last ledger
    assert idx.last_entry(-1) is None
    assert idx.entry_ids(1) == [0, 1, 2, 10, 300]  # in entry order (big-endian keys)
    assert idx.entry_ids(2) == [0]
    idx.add_batch([(1, 300, 42)])  # overwrite
    assert idx.get(1, 300) == 42
    idx.delete_ledger(1)
    assert idx.entry_ids(1) == [] and idx.last_entry(1) is None
    assert idx.get(2, 0) == 7 and idx.get(0, 5) == 8
    idx.add_batch([(5, 1, 1 << 40)])
    idx.close()

    idx = EntryLocationIndex(tmp_path / "locations")
    assert idx.entry_ids(1) == []
    assert idx.get(5, 1) == 1 << 40
    assert idx.last_entry(2) == (0, 7)
    assert idx.last_entry(3) == (2**62, 9)
    idx.close()


def test_entry_location_index_large_ids_order(tmp_path: Path) -> None:
    idx = EntryLocationIndex(tmp_path / "loc")
    ids = [0, 255, 256, 65535, 65536, 2**31, 2**32 + 1]
    idx.add_batch([(7, e, e + 1) for e in reversed(ids)])
    idx.add_batch([(8, 0, 0), (6, 2**40, 0)])
    assert idx.entry_ids(7) == ids
    assert idx.last_entry(7) == (2**32 + 1, 2**32 + 2)
    idx.close()


def test_entry_location_index_runs_write_every_entry_across_chunks(tmp_path: Path) -> None:
    """The flush hands the index one run of arrays per ledger slice; every
    entry lands, whatever the chunking, with pauses between chunks."""
    idx = EntryLocationIndex(tmp_path / "loc")
    pauses = []
    runs = [
        (3, array("q", range(0, 10)), array("q", range(100, 110))),
        (1, array("q", [5, 6, 7]), array("q", [1 << 33, (1 << 33) + 9, (1 << 33) + 18])),
        (3, array("q", range(10, 13)), array("q", range(110, 113))),
    ]
    idx.add_runs(runs, chunk=4, pause=lambda: pauses.append(1))
    assert idx.entry_ids(3) == list(range(13))
    assert [idx.get(3, e) for e in range(13)] == list(range(100, 113))
    assert idx.get(1, 6) == (1 << 33) + 9
    assert len(pauses) == 4  # 16 entries in chunks of 4
    with pytest.raises(ValueError, match="ledger 9: 2 entry ids but 1 locations"):
        idx.add_runs([(9, array("q", [0, 1]), array("q", [5]))])
    idx.close()


def test_ledger_index(tmp_path: Path) -> None:
    li = LedgerIndex(tmp_path / "ledgers")
    assert li.get(1) is None
    assert li.ledgers() == []
    info = li.set_master_key(1, b"k1")
    assert info.master_key == b"k1" and not info.fenced and info.explicit_lac is None
    # the first master key sticks
    assert li.set_master_key(1, b"other").master_key == b"k1"
    li.set_master_key(3, b"k3")
    li.set_master_key(2, b"")
    assert li.set_master_key(2, b"k2").master_key == b"k2"  # an empty key may be filled
    assert li.set_fenced(1) is True
    assert li.set_fenced(1) is False
    assert li.set_fenced(99) is False  # unknown ledger
    li.set_explicit_lac(3, b"lac-3")
    li.set_explicit_lac(98, b"ignored")
    assert li.get(98) is None
    assert li.ledgers() == [1, 2, 3]
    li.set_master_key(4, b"k4")
    li.delete(4)
    assert li.get(4) is None
    li.flush()
    li.close()

    li = LedgerIndex(tmp_path / "ledgers")
    assert li.ledgers() == [1, 2, 3]
    one, two, three = li.get(1), li.get(2), li.get(3)
    assert one is not None and (one.master_key, one.fenced, one.explicit_lac) == (b"k1", True, None)
    assert two is not None and (two.master_key, two.fenced) == (b"k2", False)
    assert three is not None and three.explicit_lac == b"lac-3" and not three.fenced
    li.close()


# ---------------------------------------------------------------------------
# SingleDirectoryDbLedgerStorage
# ---------------------------------------------------------------------------


def sconf(tmp_path: Path, **overrides: Any) -> BookieConfig:
    return bookie_config(tmp_path, port=3181, metadata_service_uri=URI, **overrides)


def make_storage(tmp_path: Path, conf: BookieConfig) -> SingleDirectoryDbLedgerStorage:
    d = tmp_path / "ledgers" / "current"
    d.mkdir(parents=True, exist_ok=True)
    return SingleDirectoryDbLedgerStorage(
        d, conf, write_cache_bytes=conf.write_cache_bytes, read_cache_bytes=conf.read_cache_bytes
    )


async def test_add_flush_and_read_back_from_disk(tmp_path: Path) -> None:
    conf = sconf(tmp_path)
    st_ = make_storage(tmp_path, conf)
    expected = {}
    for lid in (3, 1, 2):
        st_.ledger_index.set_master_key(lid, b"key-%d" % lid)
        for eid in range(20):
            data = entry(lid, eid, b"payload-%d-%d" % (lid, eid) * (eid + 1))
            assert st_.try_add(lid, eid, data)
            expected[(lid, eid)] = data
    assert st_.write_cache_count == 60
    # served from the write cache before any flush
    assert st_.get_entry(2, 7) == expected[(2, 7)]
    assert st_.cached_entry(2, 7) == expected[(2, 7)]
    assert st_.last_entry_id(1) == 19
    await st_.flush()
    assert st_.write_cache_count == 0 and st_.write_cache_size == 0
    assert st_.flushes == 1
    assert st_.last_flush_bytes == sum(len(d) for d in expected.values())
    assert st_.cached_entry(2, 7) is None
    assert st_.get_entry(2, 7) == expected[(2, 7)]  # now from the entry log
    await st_.close()

    # A fresh storage on the same directory: nothing cached, all from disk.
    st2 = make_storage(tmp_path, conf)
    try:
        assert st2.write_cache_count == 0 and len(st2.read_cache) == 0
        for lid in (1, 2, 3):
            info = st2.ledger_info(lid)
            assert info is not None and info.master_key == b"key-%d" % lid
        for (lid, eid), data in expected.items():
            assert st2.get_entry(lid, eid) == data
        # entries were written sorted by (ledger, entry)
        log_ids = st2.entry_logger.log_ids()
        scanned = [
            (lid, eid) for log_id in log_ids for lid, eid, _, _ in st2.entry_logger.scan(log_id)
        ]
        assert scanned == sorted(expected)
        assert st2.locations.entry_ids(2) == list(range(20))
    finally:
        await st2.close()


async def test_a_flush_indexes_every_slice_of_a_long_ledger(tmp_path: Path) -> None:
    """A ledger with more cached entries than one flush slice is written and
    indexed slice by slice: each entry is found at its own location."""
    conf = sconf(tmp_path)
    st_ = make_storage(tmp_path, conf)
    n = 2 * SLICE + 7
    try:
        st_.ledger_index.set_master_key(4, b"k")
        for eid in range(n):
            assert st_.try_add(4, eid, entry(4, eid, b"%d" % eid))
        await st_.flush()
        assert st_.write_cache_count == 0
        assert st_.locations.entry_ids(4) == list(range(n))
        for eid in (0, SLICE - 1, SLICE, 2 * SLICE, n - 1):
            assert st_.get_entry(4, eid) == entry(4, eid, b"%d" % eid)
    finally:
        await st_.close()


async def test_a_flush_sorts_a_long_ledger_a_block_at_a_time_between_pauses(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The flush pauses (for the loop's turn) between sorting one block of a
    ledger and the next: sorting a whole long ledger at once held the
    interpreter lock for milliseconds."""
    conf = sconf(tmp_path)
    st_ = make_storage(tmp_path, conf)
    n = 3 * BLOCK
    events: list[str] = []
    try:
        st_.ledger_index.set_master_key(5, b"k")
        for eid in range(n):
            assert st_.try_add(5, eid, entry(5, eid))
        sorted_blocks = WriteCache.sorted_blocks

        def recorded(cache: WriteCache, lid: int) -> Iterator[tuple[list[int], list[bytes]]]:
            for block in sorted_blocks(cache, lid):
                events.append("sort")
                yield block

        monkeypatch.setattr(WriteCache, "sorted_blocks", recorded)
        pause = st_.pacer.pause

        def recorded_pause() -> None:
            events.append("pause")
            pause()

        st_.pacer.pause = recorded_pause  # type: ignore[method-assign]
        await st_.flush()
        assert events.count("sort") == 3
        first = events.index("sort")
        second = events.index("sort", first + 1)
        assert "pause" in events[first:second]
        assert st_.locations.entry_ids(5) == list(range(n))
    finally:
        await st_.close()


async def test_entry_minus_one_returns_last_entry(tmp_path: Path) -> None:
    conf = sconf(tmp_path)
    st_ = make_storage(tmp_path, conf)
    try:
        with pytest.raises(NoSuchEntryError):
            st_.get_entry(5, -1)
        for eid in range(4):
            assert st_.try_add(5, eid, entry(5, eid, b"v%d" % eid))
        assert st_.get_entry(5, -1) == entry(5, 3, b"v3")  # from the write cache
        await st_.flush()
        assert st_.get_entry(5, -1) == entry(5, 3, b"v3")  # from the index
        assert st_.try_add(5, 4, entry(5, 4, b"v4"))
        assert st_.get_entry(5, -1) == entry(5, 4, b"v4")  # cache beats the index
        with pytest.raises(NoSuchEntryError):
            st_.get_entry(5, 99)
        with pytest.raises(NoSuchEntryError):
            st_.get_entry(6, 0)
        await st_.flush()
    finally:
        await st_.close()
    st2 = make_storage(tmp_path, conf)
    try:
        assert st2.get_entry(5, -1) == entry(5, 4, b"v4")
        assert st2.last_entry_id(5) == 4
        assert st2.last_entry_id(6) is None
    finally:
        await st2.close()


async def test_read_ahead_fills_read_cache(tmp_path: Path) -> None:
    conf = sconf(tmp_path, dbStorage_readAheadCacheBatchSize=5)
    st_ = make_storage(tmp_path, conf)
    for eid in range(20):
        st_.try_add(1, eid, entry(1, eid, b"x" * 10))
    st_.try_add(2, 0, entry(2, 0))
    await st_.flush()
    await st_.close()
    st2 = make_storage(tmp_path, conf)
    try:
        assert st2.get_entry(1, 3) == entry(1, 3, b"x" * 10)
        assert len(st2.read_cache) == 5
        for eid in range(4, 9):
            assert st2.cached_entry(1, eid) == entry(1, eid, b"x" * 10)
        assert st2.cached_entry(1, 9) is None
        # read-ahead stops at the ledger boundary
        st2.get_entry(1, 18)
        assert st2.cached_entry(1, 19) is not None
        assert st2.cached_entry(2, 0) is None
    finally:
        await st2.close()


class SlowFlush:
    """Wraps a storage's _flush_frozen so a test decides when it may run."""

    def __init__(self, storage: SingleDirectoryDbLedgerStorage) -> None:
        self.release = threading.Event()
        self.started = threading.Event()
        self.calls = 0
        real = storage._flush_frozen

        def slow() -> None:
            self.calls += 1
            self.started.set()
            assert self.release.wait(30), "test never released the flush"
            real()

        storage._flush_frozen = slow  # type: ignore[method-assign]


BIG = 200 * 1024


async def test_back_pressure_try_add_and_add_wait(tmp_path: Path) -> None:
    conf = sconf(tmp_path, dbStorage_writeCacheMaxSizeMb=1)
    st_ = make_storage(tmp_path, conf)
    slow = SlowFlush(st_)
    try:
        data = {i: entry(1, i, bytes([i]) * BIG) for i in range(6)}
        assert st_.try_add(1, 0, data[0])
        assert st_.try_add(1, 1, data[1])
        # The half is full: the halves swap and a flush starts.
        assert st_.try_add(1, 2, data[2])
        assert st_.try_add(1, 3, data[3])
        assert await asyncio.to_thread(slow.started.wait, 5)
        # Both halves are busy: no room until the flush ends.
        assert not st_.try_add(1, 4, data[4])
        assert st_.write_cache_count == 4
        waiter = asyncio.create_task(st_.add_wait(1, 4, data[4]))
        for _ in range(5):
            await asyncio.sleep(0)
        assert not waiter.done()
        assert st_.throttled_adds == 1
        # Entries of both halves are readable meanwhile.
        assert st_.get_entry(1, 0) == data[0]
        assert st_.get_entry(1, 3) == data[3]
        slow.release.set()
        assert await asyncio.wait_for(waiter, 5.0) is True
        assert st_.rejected_adds == 0
        assert st_.get_entry(1, 4) == data[4]
        await st_.flush()
        for i in range(5):
            assert st_.get_entry(1, i) == data[i]
    finally:
        slow.release.set()
        await st_.close()


async def test_add_wait_gives_up_after_max_throttle(tmp_path: Path) -> None:
    conf = sconf(tmp_path, dbStorage_writeCacheMaxSizeMb=1, dbStorage_maxThrottleTimeMs=50)
    st_ = make_storage(tmp_path, conf)
    slow = SlowFlush(st_)
    try:
        for i in range(4):
            assert st_.try_add(1, i, entry(1, i, b"z" * BIG))
        assert await asyncio.to_thread(slow.started.wait, 5)
        # The flush never finishes (until the test ends): ETOOMANYREQUESTS.
        ok = await asyncio.wait_for(st_.add_wait(1, 4, entry(1, 4, b"z" * BIG)), 5.0)
        assert ok is False
        assert st_.rejected_adds == 1 and st_.throttled_adds == 1
        assert st_.get_entry(1, 3) == entry(1, 3, b"z" * BIG)
        with pytest.raises(NoSuchEntryError):
            st_.get_entry(1, 4)
        assert st_.write_cache_size <= conf.write_cache_bytes
    finally:
        slow.release.set()
        await st_.flush()
        await st_.close()


async def test_write_cache_memory_stays_bounded(tmp_path: Path) -> None:
    conf = sconf(tmp_path, dbStorage_writeCacheMaxSizeMb=1)
    st_ = make_storage(tmp_path, conf)
    limit = conf.write_cache_bytes
    assert limit == 1024 * 1024
    try:
        n = 150
        sizes = [BIG // 4, BIG, 1000, BIG // 2]
        for i in range(n):
            lid = 1 + i % 3
            data = entry(lid, i, b"m" * sizes[i % len(sizes)])
            if not st_.try_add(lid, i, data):
                assert await st_.add_wait(lid, i, data)
            assert st_.write_cache_size <= limit, (i, st_.write_cache_size)
        assert st_.flushes > 5
        await st_.flush()
        assert st_.write_cache_size == 0
        for i in range(0, n, 7):
            lid = 1 + i % 3
            assert st_.get_entry(lid, i) == entry(lid, i, b"m" * sizes[i % len(sizes)])
    finally:
        await st_.close()


async def test_flush_with_nothing_cached(tmp_path: Path) -> None:
    st_ = make_storage(tmp_path, sconf(tmp_path))
    try:
        await st_.flush()
        await st_.checkpoint()
        assert st_.write_cache_count == 0
        assert st_.failed is None
    finally:
        await st_.close()


async def test_entry_log_per_ledger_storage_checkpoint(tmp_path: Path) -> None:
    conf = sconf(tmp_path, entryLogPerLedgerEnabled=True)
    st_ = make_storage(tmp_path, conf)
    try:
        for lid in (1, 2):
            for eid in range(3):
                st_.try_add(lid, eid, entry(lid, eid, b"e"))
        st_.manager.write_close(1)
        await st_.checkpoint()
        logs = st_.entry_logger.log_ids()
        assert len(logs) == 2
        maps = [st_.entry_logger.read_ledgers_map(x) for x in logs]
        sealed = [m for m in maps if m is not None]
        assert sealed == [{1: 3 * (17 + 4)}]
        assert st_.get_entry(1, 2) == entry(1, 2, b"e")
        assert st_.get_entry(2, 2) == entry(2, 2, b"e")
    finally:
        await st_.close()


async def test_db_ledger_storage_spreads_ledgers_over_dirs(tmp_path: Path) -> None:
    conf = sconf(tmp_path)
    dirs = [tmp_path / "l0", tmp_path / "l1"]
    for d in dirs:
        d.mkdir()
    db = DbLedgerStorage(conf, dirs)
    try:
        for lid in range(4):
            db.set_master_key(lid, b"k")
            assert db.try_add(lid, 0, entry(lid, 0, b"d"))
        assert db.storage_for(0) is db.storage_for(2) is db.dirs[0]
        assert db.storage_for(1) is db.dirs[1]
        assert db.ledgers() == [0, 1, 2, 3]
        await db.flush()
        for lid in range(4):
            assert db.get_entry(lid, 0) == entry(lid, 0, b"d")
            assert db.last_entry_id(lid) == 0
        assert db.dirs[0].locations.entry_ids(1) == []
        assert db.dirs[1].locations.entry_ids(1) == [0]
        assert db.set_fenced(3) is True
        info = db.ledger_info(3)
        assert info is not None and info.fenced
        assert db.write_cache_size == 0
        assert db.failed is None
    finally:
        await db.close()
