"""Entry logs in BookKeeper's layout (dlog.bookie.entry_log) and the entry
log managers (dlog.bookie.entry_log_manager), on real files in tmp_path."""

from __future__ import annotations

import os
import struct
import tempfile
from pathlib import Path

import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from dlog.bookie import entry_log as el
from dlog.bookie.entry_log import (
    WRITE_THRESHOLD,
    EntryLogFile,
    EntryLogger,
    location,
    split_location,
)
from dlog.bookie.entry_log_manager import (
    EntryLogManagerForEntryLogPerLedger,
    SingleActiveEntryLogManager,
    create_entry_log_manager,
)
from dlog.errors import CorruptedFileError


def entry(ledger_id: int, entry_id: int, payload: bytes = b"") -> bytes:
    return struct.pack(">qq", ledger_id, entry_id) + payload


def parse_header_by_hand(data: bytes) -> tuple[bytes, int, int, int]:
    """formats.md section 5: magic BKLO, int version, long ledgersMapOffset,
    int ledgersCount, all big-endian, in a 1024-byte header."""
    magic = data[0:4]
    version = int.from_bytes(data[4:8], "big", signed=True)
    map_offset = int.from_bytes(data[8:16], "big", signed=True)
    count = int.from_bytes(data[16:20], "big", signed=True)
    return magic, version, map_offset, count


def parse_records_by_hand(data: bytes, start: int, end: int) -> list[tuple[int, bytes]]:
    """(offset after the size field, record bytes) for size-prefixed records."""
    out = []
    pos = start
    while pos + 4 <= end:
        n = int.from_bytes(data[pos : pos + 4], "big", signed=True)
        if n <= 0:
            break
        out.append((pos + 4, data[pos + 4 : pos + 4 + n]))
        pos += 4 + n
    return out


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


# ---------------------------------------------------------------------------
# locations and headers
# ---------------------------------------------------------------------------


def test_location_packing() -> None:
    assert location(1, 1024) == (1 << 32) | 1024
    assert split_location(location(0xABC, 0xFFFFFFFF)) == (0xABC, 0xFFFFFFFF)
    assert split_location(location(7, 0)) == (7, 0)
    assert el.log_file_name(255) == "ff.log"


def test_header_bytes_and_parse(tmp_path: Path) -> None:
    h = el.header_bytes(4096, 3)
    assert len(h) == el.HEADER_SIZE == 1024
    assert parse_header_by_hand(h) == (b"BKLO", 1, 4096, 3)
    assert h[20:] == bytes(1004)
    assert el.parse_header(h, tmp_path) == (4096, 3)
    with pytest.raises(CorruptedFileError):
        el.parse_header(b"BKLO", tmp_path)
    with pytest.raises(CorruptedFileError):
        el.parse_header(b"BKLG" + h[4:], tmp_path)
    with pytest.raises(CorruptedFileError):
        el.parse_header(b"BKLO" + struct.pack(">i", 2) + h[8:], tmp_path)


# ---------------------------------------------------------------------------
# EntryLogFile layout
# ---------------------------------------------------------------------------


def test_add_flush_seal_produce_bookkeeper_layout(tmp_path: Path) -> None:
    f = EntryLogFile(tmp_path, 5)
    assert f.path == tmp_path / "5.log"
    added = [
        (1, entry(1, 0, b"alpha")),
        (2, entry(2, 0, b"b" * 100)),
        (1, entry(1, 1, b"gamma!")),
        (3, entry(3, 7, b"")),
    ]
    locs = [f.add(lid, data) for lid, data in added]
    f.flush()

    data = (tmp_path / "5.log").read_bytes()
    assert parse_header_by_hand(data) == (b"BKLO", 1, 0, 0)  # not sealed yet
    records = parse_records_by_hand(data, 1024, len(data))
    assert [r for _, r in records] == [d for _, d in added]
    # location = (logId << 32) | offset just past the size field
    assert locs == [location(5, off) for off, _ in records]
    assert locs[0] == (5 << 32) | 1028
    assert f.size == len(data)

    f.seal()
    assert f.sealed
    data = (tmp_path / "5.log").read_bytes()
    magic, version, map_offset, count = parse_header_by_hand(data)
    assert (magic, version, count) == (b"BKLO", 1, 3)
    assert map_offset == 1024 + sum(4 + len(d) for _, d in added)
    assert f.size == len(data)
    # ledgers map record, by hand: size, ledgerId=-1, entryId=-2, count, (lid, size)...
    n = int.from_bytes(data[map_offset : map_offset + 4], "big")
    body = data[map_offset + 4 : map_offset + 4 + n]
    lid, eid, items = struct.unpack(">qqi", body[:20])
    assert (lid, eid, items) == (-1, -2, 3)
    pairs = [struct.unpack(">qq", body[20 + 16 * i : 36 + 16 * i]) for i in range(items)]
    expected_sizes = {1: 0, 2: 0, 3: 0}
    for l_id, d in added:
        expected_sizes[l_id] += len(d) + 4
    assert dict(pairs) == expected_sizes
    assert map_offset + 4 + n == len(data)
    f.seal()  # idempotent


def test_empty_log_flush_and_seal(tmp_path: Path) -> None:
    f = EntryLogFile(tmp_path, 1)
    f.flush()
    assert (tmp_path / "1.log").stat().st_size == 1024
    f.seal()
    data = (tmp_path / "1.log").read_bytes()
    assert parse_header_by_hand(data) == (b"BKLO", 1, 1024, 0)
    logger = EntryLogger([tmp_path])
    assert logger.read_ledgers_map(1) == {}
    assert list(logger.scan(1)) == []


def test_large_buffered_writes_go_to_disk_before_flush(tmp_path: Path) -> None:
    f = EntryLogFile(tmp_path, 1)
    for i in range(3):
        f.add(1, entry(1, i, b"x" * (WRITE_THRESHOLD // 2 + 1)))
    # Past WRITE_THRESHOLD of buffer the data is handed to the OS without a flush.
    assert (tmp_path / "1.log").stat().st_size > 1024
    f.flush()
    assert (tmp_path / "1.log").stat().st_size == f.size
    f.close_unsealed()


def test_writeback_is_started_per_write_and_bounded_behind(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Every write starts its own writeback, and no more than
    WRITEBACK_WINDOW written bytes are ever left without having been waited
    for: a flush does not leave its whole size dirty for the final fdatasync
    (which would queue journal fsyncs behind it)."""
    calls: list[tuple[int, int, bool]] = []
    real = el.fileio.writeback

    def spy(fd: int, offset: int, nbytes: int, point: str, *, wait: bool = False) -> bool:
        calls.append((offset, nbytes, wait))
        return real(fd, offset, nbytes, point, wait=wait)

    monkeypatch.setattr(el.fileio, "writeback", spy)
    f = EntryLogFile(tmp_path, 1)
    chunk = entry(1, 0, b"x" * (1 << 20))
    for i in range(40):  # 40 MiB: ten writes of WRITE_THRESHOLD
        f.add(1, entry(1, i, chunk[16:]))
        waited = max((o + n for o, n, w in calls if w), default=el.HEADER_SIZE)
        written = (tmp_path / "1.log").stat().st_size
        assert written - waited <= el.WRITEBACK_WINDOW
    started = [(o, n) for o, n, w in calls if not w]
    assert len(started) >= 9
    # the started ranges are the writes, back to back from the header on
    pos = el.HEADER_SIZE
    for o, n in started:
        assert o == pos
        pos += n
    assert any(w for _, _, w in calls)
    f.flush()
    f.close_unsealed()


def test_writeback_failure_fails_the_write(tmp_path: Path) -> None:
    """An I/O error starting writeback is the flush's error (it rolls back),
    not something to ignore."""
    from dlog import failpoints

    f = EntryLogFile(tmp_path, 1)
    failpoints.configure("entry_log.writeback=eio")
    try:
        with pytest.raises(OSError):
            for i in range(8):
                f.add(1, entry(1, i, b"x" * (1 << 20)))
    finally:
        failpoints.configure("")
    f.close_unsealed()


def test_can_fit(tmp_path: Path) -> None:
    f = EntryLogFile(tmp_path, 1)
    assert f.can_fit(100, 1024 + 104)
    assert not f.can_fit(101, 1024 + 104)
    f.add(1, entry(1, 0, b"x" * 84))  # 100 bytes
    assert f.size == 1128
    assert not f.can_fit(0, 1128 + 3)
    assert f.can_fit(0, 1128 + 4)
    # offsets must fit 32 bits whatever the configured limit
    assert f.can_fit(10, 1 << 40)
    f.size = el.MAX_LOG_SIZE - 13
    assert f.can_fit(9, 1 << 40)
    assert not f.can_fit(10, 1 << 40)
    f.close_unsealed()


# ---------------------------------------------------------------------------
# EntryLogger: reads, scans, maps, ids
# ---------------------------------------------------------------------------


def _logger_with_entries(
    tmp_path: Path, plan: list[tuple[int, int]], seal: bool = True
) -> tuple[EntryLogger, EntryLogFile, dict[tuple[int, int], int], dict[tuple[int, int], bytes]]:
    logger = EntryLogger([tmp_path])
    f = logger.create_log()
    locs: dict[tuple[int, int], int] = {}
    datas: dict[tuple[int, int], bytes] = {}
    for lid, eid in plan:
        d = entry(lid, eid, os.urandom(10 + (eid % 30)))
        locs[(lid, eid)] = f.add(lid, d)
        datas[(lid, eid)] = d
    if seal:
        f.seal()
    else:
        f.flush()
    return logger, f, locs, datas


def test_read_entry_and_id_checks(tmp_path: Path) -> None:
    plan = [(1, i) for i in range(5)] + [(2, i) for i in range(3)]
    logger, f, locs, datas = _logger_with_entries(tmp_path, plan)
    for key, loc in locs.items():
        assert logger.read_entry(loc, *key) == datas[key]
    with pytest.raises(CorruptedFileError):
        logger.read_entry(locs[(1, 0)], 1, 1)  # wrong entry
    with pytest.raises(CorruptedFileError):
        logger.read_entry(locs[(1, 0)], 2, 0)  # wrong ledger
    with pytest.raises(CorruptedFileError):
        logger.read_entry(locs[(1, 2)] + 3, 1, 2)  # corrupted location
    with pytest.raises(CorruptedFileError):
        logger.read_entry(locs[(2, 2)] + 10_000, 2, 2)  # past the end
    with pytest.raises(FileNotFoundError):
        logger.read_entry(location(f.log_id + 1, 1028), 1, 0)
    logger.close()


def test_read_entry_detects_corrupted_bytes(tmp_path: Path) -> None:
    logger, f, locs, datas = _logger_with_entries(tmp_path, [(4, 0), (4, 1)])
    _, off = split_location(locs[(4, 1)])
    with open(f.path, "r+b") as fh:
        fh.seek(off + 8)  # inside the entry id
        fh.write(b"\xff")
    with pytest.raises(CorruptedFileError):
        logger.read_entry(locs[(4, 1)], 4, 1)
    assert logger.read_entry(locs[(4, 0)], 4, 0) == datas[(4, 0)]
    logger.close()


def test_read_following_stops_at_other_ledger(tmp_path: Path) -> None:
    plan = [(1, i) for i in range(6)] + [(2, 0), (2, 1)] + [(1, 6)]
    logger, _, locs, datas = _logger_with_entries(tmp_path, plan)
    got = logger.read_following(locs[(1, 1)], 1, 100)
    assert [e for e, _, _ in got] == [2, 3, 4, 5]
    for eid, loc, d in got:
        assert loc == locs[(1, eid)]
        assert d == datas[(1, eid)]
    assert [e for e, _, _ in logger.read_following(locs[(1, 1)], 1, 2)] == [2, 3]
    assert logger.read_following(locs[(1, 1)], 1, 0) == []
    assert [e for e, _, _ in logger.read_following(locs[(2, 0)], 2, 10)] == [1]
    # The last entry before the ledgers map: nothing follows for that ledger.
    assert logger.read_following(locs[(1, 6)], 1, 10) == []
    # max_bytes bounds the read-ahead
    small = logger.read_following(locs[(1, 0)], 1, 100, max_bytes=120)
    assert 1 <= len(small) < 5
    logger.close()


def test_scan_yields_every_entry(tmp_path: Path) -> None:
    plan = [(3, 0), (1, 0), (3, 1), (2, 5), (1, 1)]
    for seal in (True, False):
        d = tmp_path / str(seal)
        d.mkdir()
        logger, f, locs, datas = _logger_with_entries(d, plan, seal=seal)
        scanned = list(logger.scan(f.log_id))
        assert [(lid, eid) for lid, eid, _, _ in scanned] == plan
        for lid, eid, loc, size in scanned:
            assert loc == locs[(lid, eid)]
            assert size == len(datas[(lid, eid)])
        logger.close()


def test_read_ledgers_map_sealed_and_unsealed(tmp_path: Path) -> None:
    logger = EntryLogger([tmp_path])
    a = logger.create_log()
    b = logger.create_log()
    sizes: dict[int, int] = {}
    for i in range(30):
        lid = i % 4
        d = entry(lid, i, b"q" * i)
        a.add(lid, d)
        b.add(lid, d)
        sizes[lid] = sizes.get(lid, 0) + len(d) + 4
    a.seal()
    b.flush()
    assert logger.read_ledgers_map(a.log_id) == sizes
    assert logger.read_ledgers_map(b.log_id) is None
    assert logger.log_ids() == [a.log_id, b.log_id]
    b.seal()
    assert logger.read_ledgers_map(b.log_id) == sizes


def test_read_ledgers_map_detects_corruption(tmp_path: Path) -> None:
    logger = EntryLogger([tmp_path])
    f = logger.create_log()
    f.add(1, entry(1, 0))
    f.add(2, entry(2, 0))
    f.seal()
    data = bytearray(f.path.read_bytes())
    _, _, map_offset, _ = parse_header_by_hand(bytes(data))
    # claim three ledgers while the map holds two
    data[16:20] = (3).to_bytes(4, "big")
    f.path.write_bytes(bytes(data))
    with pytest.raises(CorruptedFileError):
        logger.read_ledgers_map(f.log_id)
    data[16:20] = (2).to_bytes(4, "big")
    data[map_offset + 4 + 8 : map_offset + 4 + 16] = (5).to_bytes(8, "big")  # entryId != -2
    f.path.write_bytes(bytes(data))
    with pytest.raises(CorruptedFileError):
        logger.read_ledgers_map(f.log_id)


def test_more_than_10000_ledgers_make_several_map_batches(tmp_path: Path) -> None:
    logger = EntryLogger([tmp_path])
    f = logger.create_log()
    n = 23_456
    for lid in range(n):
        f.add(lid, entry(lid, 0))
    f.seal()
    data = f.path.read_bytes()
    _, _, map_offset, count = parse_header_by_hand(data)
    assert count == n
    batches = []
    pos = map_offset
    while pos < len(data):
        size = int.from_bytes(data[pos : pos + 4], "big")
        lid, eid, items = struct.unpack_from(">qqi", data, pos + 4)
        assert (lid, eid) == (-1, -2)
        assert size == 20 + 16 * items
        batches.append(items)
        pos += 4 + size
    assert pos == len(data)
    assert batches == [10_000, 10_000, 3_456]
    ledgers_map = logger.read_ledgers_map(f.log_id)
    assert ledgers_map is not None and len(ledgers_map) == n
    assert all(v == 20 for v in ledgers_map.values())
    assert sorted(ledgers_map) == list(range(n))
    # scan stops at the map: only the entries come back
    assert sum(1 for _ in logger.scan(f.log_id)) == n


def test_ledgers_map_records_batches() -> None:
    assert el.ledgers_map_records({}) == b""
    one = el.ledgers_map_records({9: 100})
    assert one == struct.pack(">iqqiqq", 36, -1, -2, 1, 9, 100)


def test_logger_ids_increase_across_restarts(tmp_path: Path) -> None:
    logger = EntryLogger([tmp_path])
    assert logger.last_log_id == 0
    ids = [logger.create_log().log_id for _ in range(3)]
    assert ids == [1, 2, 3]
    assert (tmp_path / "lastId").read_text().strip() == "3"
    # restart: continue after lastId
    logger2 = EntryLogger([tmp_path])
    assert logger2.last_log_id == 3
    assert logger2.create_log().log_id == 4
    # lastId is authoritative even if the newest log file was deleted (GC)
    os.unlink(tmp_path / "4.log")
    assert EntryLogger([tmp_path]).create_log().log_id == 5
    # and log files are authoritative if lastId is lost
    os.unlink(tmp_path / "lastId")
    assert EntryLogger([tmp_path]).create_log().log_id == 6
    assert (tmp_path / "lastId").read_text().strip() == "6"


def test_logger_ids_are_hex_and_spread_over_dirs(tmp_path: Path) -> None:
    dirs = [tmp_path / "a", tmp_path / "b"]
    for d in dirs:
        d.mkdir()
    logger = EntryLogger(dirs)
    files = [logger.create_log() for _ in range(17)]
    assert files[-1].path.name == "11.log"
    assert {f.directory for f in files} == set(dirs)
    for f in files:
        f.seal()
    assert EntryLogger(dirs).create_log().log_id == 18
    assert logger.path_of(16) == files[15].path
    with pytest.raises(FileNotFoundError):
        logger.path_of(99)


def test_logger_needs_a_directory() -> None:
    with pytest.raises(ValueError):
        EntryLogger([])


# ---------------------------------------------------------------------------
# SingleActiveEntryLogManager
# ---------------------------------------------------------------------------


# A flush hands each ledger's entries over in batches. Each batch must land
# exactly as the same entries added one at a time would: same locations,
# same bytes, the same syncs (flushEntrylogBytes), the same log rotations.
# Payloads of a few sizes (entries of 20, 40 or 100 bytes with their 4-byte
# size prefix), so that entries often end exactly at a log's limit or at
# flushEntrylogBytes, or of any size.
_sizes = st.one_of(
    st.sampled_from([0, 20, 80]).flatmap(lambda n: st.lists(st.just(n), min_size=1, max_size=60)),
    st.lists(st.sampled_from([0, 20, 80]), min_size=1, max_size=60),
    st.lists(st.integers(0, 600), min_size=1, max_size=60),
)


_cuts = st.lists(st.integers(1, 60), max_size=6)


def _batches(entries: list[bytes], cuts: list[int]) -> list[list[bytes]]:
    """``entries`` split at ``cuts`` (those past the end ignored)."""
    n = len(entries)
    ends = sorted({c for c in cuts if c < n} | {n})
    return [entries[a:b] for a, b in zip([0, *ends], ends, strict=False)]


def _record_syncs(monkeypatch: pytest.MonkeyPatch) -> dict[int, list[int]]:
    """Each file's size at each of its fdatasyncs, by descriptor."""
    syncs: dict[int, list[int]] = {}
    real = el.fileio.fdatasync

    def fdatasync(fd: int, point: str) -> None:
        syncs.setdefault(fd, []).append(os.fstat(fd).st_size)
        real(fd, point)

    monkeypatch.setattr(el.fileio, "fdatasync", fdatasync)
    return syncs


@settings(
    max_examples=100, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(sizes=_sizes, every=st.sampled_from([0, 1, 300, 400, 2000, 9000]), cuts=_cuts)
@example(sizes=[0] * 16, every=300, cuts=[])  # the 15th entry ends at flushEntrylogBytes
def test_a_batch_lands_as_its_entries_one_at_a_time(
    monkeypatch: pytest.MonkeyPatch, sizes: list[int], every: int, cuts: list[int]
) -> None:
    entries = [entry(7, i, bytes([i % 251]) * n) for i, n in enumerate(sizes)]
    batches = _batches(entries, cuts)
    syncs = _record_syncs(monkeypatch)
    with tempfile.TemporaryDirectory() as d:
        one = EntryLogFile(Path(d), 1, flush_every_bytes=every)
        batched = EntryLogFile(Path(d), 2, flush_every_bytes=every)
        expected = [one.add(7, e) for e in entries]
        got = [loc for b in batches for loc in batched.add_batch(7, b)]
        assert [split_location(x)[1] for x in got] == [split_location(x)[1] for x in expected]
        assert {split_location(x)[0] for x in got} == {2}
        assert syncs.get(batched._fd) == syncs.get(one._fd)  # the same syncs, at the same bytes
        one.flush()
        batched.flush()
        assert batched.path.read_bytes() == one.path.read_bytes()
        one.close_unsealed()
        batched.close_unsealed()


@settings(max_examples=60, deadline=None)
@given(
    sizes=_sizes,
    room=st.one_of(st.sampled_from([1024 + 200, 1024 + 400]), st.integers(1100, 4000)),
    per_ledger=st.booleans(),
    cuts=_cuts,
)
@example(sizes=[80] * 12, room=1024 + 400, per_ledger=False, cuts=[])  # 4 entries fill a log
def test_a_manager_splits_a_batch_across_logs_as_one_at_a_time(
    sizes: list[int], room: int, per_ledger: bool, cuts: list[int]
) -> None:
    entries = [entry(3, i, b"m" * n) for i, n in enumerate(sizes)]
    batches = _batches(entries, cuts)
    with tempfile.TemporaryDirectory() as a, tempfile.TemporaryDirectory() as b:
        one = create_entry_log_manager(
            EntryLogger([Path(a)]), log_size_limit=room, per_ledger=per_ledger
        )
        batched = create_entry_log_manager(
            EntryLogger([Path(b)]), log_size_limit=room, per_ledger=per_ledger
        )
        expected = [one.add_entry(3, e) for e in entries]
        got = [loc for batch in batches for loc in batched.add_entries(3, batch)]
        assert got == expected
        one.close()
        batched.close()


def test_single_active_rotates_at_size_limit(tmp_path: Path) -> None:
    logger = EntryLogger([tmp_path])
    limit = 1024 + 10 * 104
    mgr = create_entry_log_manager(logger, log_size_limit=limit)
    assert isinstance(mgr, SingleActiveEntryLogManager)
    assert mgr.least_unflushed_log_id == 1  # nothing written yet
    locs = []
    for i in range(25):
        locs.append(mgr.add_entry(i % 3, entry(i % 3, i, b"x" * 84)))  # 104 bytes framed
    log_ids = sorted({split_location(loc)[0] for loc in locs})
    assert log_ids == [1, 2, 3]
    # 10 entries per log
    assert [split_location(loc)[0] for loc in locs] == [1] * 10 + [2] * 10 + [3] * 5
    assert mgr.least_unflushed_log_id == 1
    assert [f.log_id for f in mgr.active_logs()] == [3]
    mgr.flush()
    # rotated logs are sealed and durable: GC may consider them
    assert mgr.least_unflushed_log_id == 3
    for lid in (1, 2):
        m = logger.read_ledgers_map(lid)
        assert m is not None and sum(m.values()) == 10 * 104
    assert logger.read_ledgers_map(3) is None
    for i, loc in enumerate(locs):
        assert logger.read_entry(loc, i % 3, i) == entry(i % 3, i, b"x" * 84)
    mgr.close()
    assert logger.read_ledgers_map(3) is not None
    assert mgr.active_logs() == []


def test_single_active_write_close_only_clears_at_checkpoint(tmp_path: Path) -> None:
    logger = EntryLogger([tmp_path])
    mgr = SingleActiveEntryLogManager(logger, 1 << 20)
    mgr.add_entry(1, entry(1, 0))
    mgr.write_close(1)
    assert mgr.write_closed == {1}
    mgr.flush()
    mgr.checkpoint()
    assert mgr.write_closed == set()
    # the shared log is not rotated for a write-closed ledger
    assert split_location(mgr.add_entry(2, entry(2, 0)))[0] == 1
    mgr.close()


def test_oversize_entry_gets_its_own_log(tmp_path: Path) -> None:
    logger = EntryLogger([tmp_path])
    mgr = SingleActiveEntryLogManager(logger, 2048)
    small = mgr.add_entry(1, entry(1, 0, b"a"))
    big = mgr.add_entry(1, entry(1, 1, b"b" * 5000))
    after = mgr.add_entry(1, entry(1, 2, b"c"))
    ids = [split_location(x)[0] for x in (small, big, after)]
    assert ids[0] < ids[1] < ids[2]
    mgr.flush()
    assert logger.read_entry(big, 1, 1) == entry(1, 1, b"b" * 5000)
    mgr.close()


# ---------------------------------------------------------------------------
# EntryLogManagerForEntryLogPerLedger
# ---------------------------------------------------------------------------


def _log_of(loc: int) -> int:
    return split_location(loc)[0]


def test_per_ledger_gives_each_ledger_its_own_log(tmp_path: Path) -> None:
    logger = EntryLogger([tmp_path])
    mgr = create_entry_log_manager(logger, log_size_limit=1 << 20, per_ledger=True)
    assert isinstance(mgr, EntryLogManagerForEntryLogPerLedger)
    locs: dict[tuple[int, int], int] = {}
    for eid in range(5):
        for lid in (10, 20, 30):
            locs[(lid, eid)] = mgr.add_entry(lid, entry(lid, eid, b"p" * eid))
    by_ledger = {lid: {_log_of(locs[(lid, e)]) for e in range(5)} for lid in (10, 20, 30)}
    assert all(len(v) == 1 for v in by_ledger.values())
    assert len({next(iter(v)) for v in by_ledger.values()}) == 3
    mgr.flush()
    for (lid, eid), loc in locs.items():
        assert logger.read_entry(loc, lid, eid) == entry(lid, eid, b"p" * eid)
    # Each log holds only its ledger.
    for lid, (log_id,) in by_ledger.items():
        assert {x[0] for x in logger.scan(log_id)} == {lid}
    mgr.close()
    for lid, (log_id,) in by_ledger.items():
        assert logger.read_ledgers_map(log_id) == {lid: sum(16 + e + 4 for e in range(5))}


def test_per_ledger_evicts_least_recently_written(tmp_path: Path) -> None:
    logger = EntryLogger([tmp_path])
    mgr = EntryLogManagerForEntryLogPerLedger(logger, 1 << 20, max_active_logs=2)
    la = _log_of(mgr.add_entry(1, entry(1, 0)))
    lb = _log_of(mgr.add_entry(2, entry(2, 0)))
    assert _log_of(mgr.add_entry(1, entry(1, 1))) == la  # ledger 1 is now most recent
    lc = _log_of(mgr.add_entry(3, entry(3, 0)))  # evicts ledger 2's log
    assert len(mgr.active_logs()) == 2
    assert {f.log_id for f in mgr.active_logs()} == {la, lc}
    assert logger.read_ledgers_map(lb) is None  # rotated, sealed at the next flush
    mgr.flush()
    assert logger.read_ledgers_map(lb) == {2: 20}
    assert logger.read_ledgers_map(la) is None
    assert mgr.least_unflushed_log_id == la
    # ledger 2 comes back: a new log, and ledger 1 (least recently written) goes
    lb2 = _log_of(mgr.add_entry(2, entry(2, 1)))
    assert lb2 not in (la, lb, lc)
    assert {f.log_id for f in mgr.active_logs()} == {lc, lb2}
    mgr.flush()
    assert logger.read_ledgers_map(la) == {1: 40}
    assert mgr.least_unflushed_log_id == lc
    mgr.close()


def test_per_ledger_rotates_full_log(tmp_path: Path) -> None:
    logger = EntryLogger([tmp_path])
    mgr = EntryLogManagerForEntryLogPerLedger(logger, 1024 + 3 * 40)
    logs = [_log_of(mgr.add_entry(1, entry(1, i, b"z" * 20))) for i in range(7)]  # 40 framed
    assert logs == [logs[0]] * 3 + [logs[3]] * 3 + [logs[6]]
    mgr.flush()
    assert logger.read_ledgers_map(logs[0]) == {1: 120}
    assert logger.read_ledgers_map(logs[3]) == {1: 120}
    mgr.close()


def test_per_ledger_checkpoint_rotates_write_closed_and_expired(tmp_path: Path) -> None:
    logger = EntryLogger([tmp_path])
    clock = Clock()
    mgr = EntryLogManagerForEntryLogPerLedger(
        logger, 1 << 20, max_active_logs=100, expiry_seconds=300, clock=clock
    )
    log_of = {lid: _log_of(mgr.add_entry(lid, entry(lid, 0, b"v"))) for lid in (1, 2, 3, 4)}
    clock.now += 200
    mgr.add_entry(3, entry(3, 1, b"v"))  # ledger 3 stays fresh
    mgr.add_entry(4, entry(4, 1, b"v"))
    mgr.write_close(4)
    clock.now += 150  # ledgers 1, 2 idle for 350 s; 3, 4 for 150 s
    mgr.flush()
    mgr.checkpoint()
    active = {f.log_id for f in mgr.active_logs()}
    assert active == {log_of[3]}
    assert mgr.write_closed == set()
    # rotated at checkpoint: sealed with correct maps
    assert logger.read_ledgers_map(log_of[1]) == {1: 21}
    assert logger.read_ledgers_map(log_of[2]) == {2: 21}
    assert logger.read_ledgers_map(log_of[4]) == {4: 42}
    assert logger.read_ledgers_map(log_of[3]) is None
    # nothing else expires yet
    mgr.checkpoint()
    assert {f.log_id for f in mgr.active_logs()} == {log_of[3]}
    clock.now += 300
    mgr.checkpoint()
    assert mgr.active_logs() == []
    assert logger.read_ledgers_map(log_of[3]) == {3: 42}
    # a ledger written again after rotation gets a fresh log
    new = _log_of(mgr.add_entry(1, entry(1, 1)))
    assert new > max(log_of.values())
    mgr.close()


def test_per_ledger_write_close_of_unknown_ledger_is_harmless(tmp_path: Path) -> None:
    logger = EntryLogger([tmp_path])
    mgr = EntryLogManagerForEntryLogPerLedger(logger, 1 << 20, clock=Clock())
    mgr.add_entry(1, entry(1, 0))
    mgr.write_close(99)
    mgr.flush()
    mgr.checkpoint()
    assert len(mgr.active_logs()) == 1
    assert mgr.write_closed == set()
    mgr.close()


def test_write_close_never_waits_for_a_flush(tmp_path: Path) -> None:
    """The event loop's write-close hint must not block behind the manager's
    lock, which a flush holds across an fsync; the hint still counts."""
    import threading

    from dlog.bookie.entry_log_manager import create_entry_log_manager

    d = tmp_path / "wc"
    d.mkdir()
    mgr = create_entry_log_manager(EntryLogger([d]), log_size_limit=1 << 20, per_ledger=True)
    mgr.add_entry(7, struct.pack(">qq", 7, 0) + b"x")
    held, release = threading.Event(), threading.Event()

    def flush_holding_the_lock() -> None:
        with mgr._lock:
            held.set()
            release.wait(5)

    t = threading.Thread(target=flush_holding_the_lock)
    t.start()
    held.wait(5)
    done = threading.Event()
    threading.Thread(target=lambda: (mgr.write_close(7), done.set())).start()
    try:
        assert done.wait(1), "write_close waited for the flush's lock"
    finally:
        release.set()
        t.join()
    mgr.flush()
    mgr.checkpoint()
    assert mgr.active_logs() == []  # the hint rotated ledger 7's log
    mgr.close()


def test_a_corrupted_size_is_caught_before_reading(tmp_path: Path) -> None:
    """The size field before an entry is read from disk: a corrupted one (up
    to 2 GiB) must be judged against the file before a buffer that large is
    allocated for the read."""
    import tracemalloc

    logger, f, locs, datas = _logger_with_entries(tmp_path, [(4, 0), (4, 1)])
    _, off = split_location(locs[(4, 1)])
    with open(f.path, "r+b") as fh:
        fh.seek(off - 4)
        fh.write(struct.pack(">i", 0x7FFF_FFF0))
    tracemalloc.start()
    try:
        with pytest.raises(CorruptedFileError, match="past the end"):
            logger.read_entry(locs[(4, 1)], 4, 1)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert peak < 16 * 2**20
    assert logger.read_entry(locs[(4, 0)], 4, 0) == datas[(4, 0)]
    logger.close()
