"""Journal file format (dlog.bookie.journal_format) and the group-committing
Journal (dlog.bookie.journal), on real files in tmp_path."""

from __future__ import annotations

import asyncio
import errno
import os
import signal
import struct
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from dlog import failpoints
from dlog.bookie import journal_format as jf
from dlog.bookie.journal import Journal
from dlog.conf.bookie import BookieConfig
from dlog.errors import EIO, EOK, CorruptedFileError
from dlog.sandbox.bookies import bookie_config

URI = "zk+hierarchical://127.0.0.1:2181/ledgers"


def record(ledger_id: int, entry_id: int, payload: bytes = b"") -> bytes:
    return struct.pack(">qq", ledger_id, entry_id) + payload


def write_journal(path: Path, records: list[bytes], tail: bytes = b"") -> list[int]:
    """A journal file written by hand: header, framed records, ``tail``.
    Returns the offset after each record."""
    data = bytearray(jf.header_bytes())
    ends = []
    for r in records:
        data += struct.pack(">i", len(r)) + r
        ends.append(len(data))
    data += tail
    path.write_bytes(bytes(data))
    return ends


# ---------------------------------------------------------------------------
# journal_format: header, padding, meta records, marks
# ---------------------------------------------------------------------------


def test_header_layout(tmp_path: Path) -> None:
    h = jf.header_bytes()
    assert len(h) == jf.HEADER_SIZE == 512
    assert h[:4] == b"BKLG"
    assert struct.unpack(">i", h[4:8])[0] == jf.VERSION == 6
    assert h[8:] == bytes(504)
    assert jf.check_header(h, tmp_path) == 512


def test_check_header_old_versions_and_errors(tmp_path: Path) -> None:
    # Before V5 there was no 512-byte padding: records start at 8.
    assert jf.check_header(b"BKLG" + struct.pack(">i", 4), tmp_path) == 8
    assert jf.check_header(b"BKLG" + struct.pack(">i", 5) + bytes(504), tmp_path) == 512
    for bad in (
        b"",
        b"BKL",
        b"BKLO" + struct.pack(">i", 6),
        b"BKLG" + struct.pack(">i", 0),
        b"BKLG" + struct.pack(">i", 7),
        b"BKLG" + struct.pack(">i", -1),
    ):
        with pytest.raises(CorruptedFileError):
            jf.check_header(bad, tmp_path)


def test_journal_file_names_and_listing(tmp_path: Path) -> None:
    assert jf.journal_file_name(255) == "ff.txn"
    for name in ("1.txn", "a.txn", "ff.txn", "2.log", "junk.txn", "lastMark", "10.txn.tmp"):
        (tmp_path / name).write_bytes(b"")
    assert jf.list_journal_ids(tmp_path) == [1, 10, 255]
    assert jf.list_journal_ids(tmp_path / "missing") == []


@settings(max_examples=500, deadline=None)
@given(
    position=st.integers(min_value=0, max_value=1 << 34),
    alignment=st.sampled_from([512, 1024, 4096, 8192]),
)
def test_padding_record_aligns_every_position(position: int, alignment: int) -> None:
    pad = jf.padding_record(position, alignment)
    assert (position + len(pad)) % alignment == 0
    if position % alignment == 0:
        assert pad == b""
        return
    # A padding record needs its 8-byte head; it never overshoots by a whole block.
    assert 8 <= len(pad) < alignment + 8
    mask, n = struct.unpack(">ii", pad[:8])
    assert mask == jf.PADDING_MASK == -0x100
    assert n == len(pad) - 8
    assert pad[8:] == bytes(n)


@settings(max_examples=100, deadline=None)
@given(
    payloads=st.lists(st.binary(min_size=0, max_size=700), min_size=1, max_size=6),
    alignment=st.sampled_from([512, 1024]),
)
def test_scan_skips_padding_between_groups(
    tmp_path_factory: pytest.TempPathFactory, payloads: list[bytes], alignment: int
) -> None:
    path = tmp_path_factory.mktemp("pad") / "1.txn"
    data = bytearray(jf.header_bytes())
    records = [record(7, i, p) for i, p in enumerate(payloads)]
    for r in records:  # one group per record, each padded like the journal does
        data += jf.frame_record(r)
        data += jf.padding_record(len(data), alignment)
        assert len(data) % alignment == 0
    data += bytes(alignment)
    path.write_bytes(bytes(data))
    assert [r for _, r in jf.scan_journal(path)] == records


def test_meta_records_parse() -> None:
    key = bytes(range(20))
    r = jf.ledger_key_record(12, key)
    assert jf.parse_ids(r) == (12, jf.METAENTRY_ID_LEDGER_KEY) == (12, -0x1000)
    assert jf.parse_meta_payload(r) == key
    assert len(r) == 16 + 4 + 20

    assert jf.parse_ids(jf.fence_record(13)) == (13, -0x2000)
    assert len(jf.fence_record(13)) == 16
    assert jf.parse_ids(jf.force_ledger_record(14)) == (14, -0x4000)

    lac = b"lac-body-bytes"
    r = jf.explicit_lac_record(15, lac)
    assert jf.parse_ids(r) == (15, jf.METAENTRY_ID_LEDGER_EXPLICITLAC) == (15, -0x8000)
    assert jf.parse_meta_payload(r) == lac
    assert jf.parse_meta_payload(jf.ledger_key_record(1, b"")) == b""
    # big-endian layout, as BookKeeper writes it
    assert r[:8] == (15).to_bytes(8, "big")
    assert r[8:16] == (-0x8000).to_bytes(8, "big", signed=True)


def test_meta_record_errors() -> None:
    with pytest.raises(CorruptedFileError):
        jf.parse_ids(b"\0" * 15)
    good = jf.ledger_key_record(1, b"k" * 10)
    with pytest.raises(CorruptedFileError):
        jf.parse_meta_payload(good[:19])
    with pytest.raises(CorruptedFileError):
        jf.parse_meta_payload(good[:-1])  # claims 10 bytes, has 9
    bad = good[:16] + struct.pack(">i", -1) + good[20:]
    with pytest.raises(CorruptedFileError):
        jf.parse_meta_payload(bad)


@settings(max_examples=200, deadline=None)
@given(
    a=st.tuples(st.integers(0, 2**63 - 1), st.integers(0, 2**63 - 1)),
    b=st.tuples(st.integers(0, 2**63 - 1), st.integers(0, 2**63 - 1)),
)
def test_logmark_bytes_and_order(a: tuple[int, int], b: tuple[int, int]) -> None:
    ma, mb = jf.LogMark(*a), jf.LogMark(*b)
    data = ma.to_bytes()
    assert len(data) == 16
    assert data == struct.pack(">qq", *a)
    assert jf.LogMark.from_bytes(data) == ma
    assert (ma < mb) == (a < b)
    assert (ma == mb) == (a == b)
    assert max(ma, mb) == jf.LogMark(*max(a, b))


def test_logmark_defaults_and_bad_bytes() -> None:
    assert jf.LogMark() == jf.LogMark(0, 0)
    assert jf.LogMark(1, 0) > jf.LogMark(0, 10**9)
    assert jf.LogMark(2, 5) < jf.LogMark(2, 6)
    for bad in (b"", b"\0" * 15, b"\0" * 17):
        with pytest.raises(CorruptedFileError):
            jf.LogMark.from_bytes(bad)


# ---------------------------------------------------------------------------
# scan_journal
# ---------------------------------------------------------------------------


def test_scan_yields_records_with_end_offsets_and_stops_at_zeros(tmp_path: Path) -> None:
    recs = [record(1, i, bytes([i]) * (i * 10)) for i in range(6)]
    path = tmp_path / "1.txn"
    ends = write_journal(path, recs, tail=bytes(8192))
    out = list(jf.scan_journal(path))
    assert [r for _, r in out] == recs
    assert [o for o, _ in out] == ends
    # start from the middle: only later records
    assert [r for _, r in jf.scan_journal(path, ends[2])] == recs[3:]
    assert list(jf.scan_journal(path, ends[-1])) == []
    # a start offset inside the header is clamped to the first record
    assert [r for _, r in jf.scan_journal(path, 3)] == recs


def test_scan_data_after_zero_length_is_ignored(tmp_path: Path) -> None:
    recs = [record(1, 0, b"a"), record(1, 1, b"b")]
    path = tmp_path / "1.txn"
    write_journal(path, recs, tail=b"\0\0\0\0" + jf.frame_record(record(1, 2, b"late")))
    assert [r for _, r in jf.scan_journal(path)] == recs


def test_scan_header_only_and_bad_header(tmp_path: Path) -> None:
    path = tmp_path / "1.txn"
    path.write_bytes(jf.header_bytes())
    assert list(jf.scan_journal(path)) == []
    path.write_bytes(b"XXXX" + bytes(508))
    with pytest.raises(CorruptedFileError):
        list(jf.scan_journal(path))


def test_scan_torn_tail_at_every_offset(tmp_path: Path) -> None:
    recs = [record(3, i, os.urandom(40 + i)) for i in range(4)]
    full = tmp_path / "full.txn"
    ends = write_journal(full, recs)
    data = full.read_bytes()
    last_start = ends[-2]
    torn = tmp_path / "torn.txn"
    for cut in range(last_start, len(data)):
        torn.write_bytes(data[:cut])
        out = list(jf.scan_journal(torn))
        assert [r for _, r in out] == recs[:-1], cut
    torn.write_bytes(data)
    assert [r for _, r in jf.scan_journal(torn)] == recs


def test_scan_torn_padding_record(tmp_path: Path) -> None:
    recs = [record(3, 0, b"x" * 30)]
    data = bytearray(jf.header_bytes())
    data += jf.frame_record(recs[0])
    pad = jf.padding_record(len(data), 512)
    full = bytes(data + pad)
    path = tmp_path / "p.txn"
    for cut in range(len(data), len(full) + 1):
        path.write_bytes(full[:cut])
        assert [r for _, r in jf.scan_journal(path)] == recs


@pytest.mark.parametrize(
    "length",
    [0x7FFFFFFF, jf.MAX_RECORD_SIZE + 1, -1, -0x101, -(2**31), 5000],
)
def test_scan_stops_at_garbage_length(tmp_path: Path, length: int) -> None:
    recs = [record(1, 0, b"first"), record(1, 1, b"second")]
    path = tmp_path / "g.txn"
    write_journal(path, recs, tail=struct.pack(">i", length) + b"garbage" * 10)
    assert [r for _, r in jf.scan_journal(path)] == recs


def test_scan_stops_at_garbage_padding_length(tmp_path: Path) -> None:
    recs = [record(1, 0, b"first")]
    path = tmp_path / "g.txn"
    write_journal(path, recs, tail=struct.pack(">ii", jf.PADDING_MASK, -8) + bytes(100))
    assert [r for _, r in jf.scan_journal(path)] == recs
    write_journal(path, recs, tail=struct.pack(">ii", jf.PADDING_MASK, 1 << 30) + bytes(100))
    assert [r for _, r in jf.scan_journal(path)] == recs


# ---------------------------------------------------------------------------
# lastMark
# ---------------------------------------------------------------------------


def test_last_mark_max_across_dirs_and_corrupt_ignored(tmp_path: Path) -> None:
    dirs = [tmp_path / f"d{i}" for i in range(4)]
    for d in dirs:
        d.mkdir()
    assert jf.read_last_mark(dirs) == jf.LogMark()
    (dirs[0] / "lastMark").write_bytes(jf.LogMark(3, 4096).to_bytes())
    (dirs[1] / "lastMark").write_bytes(jf.LogMark(5, 512).to_bytes())
    (dirs[2] / "lastMark").write_bytes(b"corrupt, wrong length")
    # dirs[3] has none
    assert jf.read_last_mark(dirs) == jf.LogMark(5, 512)
    # a corrupt file holding a huge value is not believed
    (dirs[2] / "lastMark").write_bytes(jf.LogMark(99, 0).to_bytes()[:-1])
    assert jf.read_last_mark(dirs) == jf.LogMark(5, 512)
    assert jf.read_last_mark([tmp_path / "missing"]) == jf.LogMark()


def test_write_last_mark_replaces_in_every_dir(tmp_path: Path) -> None:
    dirs = [tmp_path / f"d{i}" for i in range(3)]
    for d in dirs:
        d.mkdir()
    jf.write_last_mark(dirs, jf.LogMark(2, 1024))
    jf.write_last_mark(dirs, jf.LogMark(3, 512))
    for d in dirs:
        assert (d / "lastMark").read_bytes() == struct.pack(">qq", 3, 512)
        assert sorted(os.listdir(d)) == ["lastMark"]
    assert jf.read_last_mark(dirs) == jf.LogMark(3, 512)
    jf.write_last_mark(dirs, jf.LogMark(4, 0), name="otherMark")
    assert jf.read_last_mark(dirs, name="otherMark") == jf.LogMark(4, 0)
    assert jf.read_last_mark(dirs) == jf.LogMark(3, 512)


# ---------------------------------------------------------------------------
# Journal
# ---------------------------------------------------------------------------


def jconf(tmp_path: Path, **overrides: Any) -> BookieConfig:
    # BookKeeper's grouping (the sandbox turns flush-when-empty on): tests
    # that want it on say so.
    values: dict[str, Any] = {"journalPreAllocSizeMB": 1, "journalFlushWhenQueueEmpty": False}
    values.update(overrides)
    return bookie_config(tmp_path, port=3181, metadata_service_uri=URI, **values)


def jdir(tmp_path: Path) -> Path:
    d = tmp_path / "journal"
    d.mkdir(exist_ok=True)
    return d


class Collector:
    """Callbacks that record their statuses and resolve futures."""

    def __init__(self) -> None:
        self.loop = asyncio.get_running_loop()
        self.statuses: list[int] = []
        self.futures: list[asyncio.Future[int]] = []

    def callback(self) -> Any:
        fut: asyncio.Future[int] = self.loop.create_future()
        self.futures.append(fut)

        def cb(status: int) -> None:
            self.statuses.append(status)
            assert not fut.done(), "callback called twice"
            fut.set_result(status)

        return cb

    async def wait(self, timeout: float = 10.0) -> list[int]:
        return list(await asyncio.wait_for(asyncio.gather(*self.futures), timeout))


def all_records(directory: Path) -> list[bytes]:
    out = []
    for jid in jf.list_journal_ids(directory):
        out += [r for _, r in jf.scan_journal(directory / jf.journal_file_name(jid))]
    return out


async def test_records_durable_after_callback(tmp_path: Path) -> None:
    d = jdir(tmp_path)
    j = Journal(d, jconf(tmp_path))
    await j.start()
    try:
        c = Collector()
        recs = [record(1, i, os.urandom(i % 50)) for i in range(50)]
        for r in recs:
            j.log(r, c.callback())
        assert await c.wait() == [EOK] * 50
        # Read back while the journal is still open: everything acknowledged is there.
        assert all_records(d) == recs
        assert j.pending_records == 0
        assert j.stats.records == j.stats.records_synced == 50
        assert j.last_synced_mark.journal_id == j.current_journal_id == 1
        assert j.last_synced_mark.offset % 512 == 0
        assert j.last_synced_mark.offset > jf.HEADER_SIZE
    finally:
        await j.close()
    assert all_records(d) == recs


async def test_log_without_callback_and_wait_synced(tmp_path: Path) -> None:
    d = jdir(tmp_path)
    j = Journal(d, jconf(tmp_path, journalMaxGroupWaitMSec=5000))
    await j.start()
    try:
        for i in range(10):
            j.log(record(2, i))
        assert j.pending_records == 10
        await asyncio.wait_for(j.wait_synced(), 2.0)
        assert j.pending_records == 0
        assert [jf.parse_ids(r) for r in all_records(d)] == [(2, i) for i in range(10)]
        await j.wait_synced()  # nothing pending: returns at once
    finally:
        await j.close()


async def test_group_commit_shares_fsyncs(tmp_path: Path) -> None:
    d = jdir(tmp_path)
    j = Journal(d, jconf(tmp_path))
    await j.start()
    try:
        c = Collector()
        n = 2000
        for i in range(n):
            j.log(record(9, i, b"x" * 100), c.callback())
            if i % 100 == 99:
                await asyncio.sleep(0)
        assert await c.wait() == [EOK] * n
        assert j.stats.records_synced == n
        assert 1 <= j.stats.fsyncs <= n // 10, j.stats
        assert j.stats.groups <= n // 10
        assert len(all_records(d)) == n
    finally:
        await j.close()


async def test_no_group_handed_over_before_timer(tmp_path: Path) -> None:
    d = jdir(tmp_path)
    j = Journal(d, jconf(tmp_path, journalMaxGroupWaitMSec=5000))
    await j.start()
    try:
        for i in range(20):
            j.log(record(1, i))
        await asyncio.sleep(0)
        await asyncio.sleep(0)
        # Below every threshold and without flush-when-empty: still grouping.
        assert j.stats.groups == 0
        assert j.pending_records == 20
    finally:
        await j.close()
    assert len(all_records(d)) == 20


async def test_entries_threshold_triggers_groups(tmp_path: Path) -> None:
    d = jdir(tmp_path)
    conf = jconf(tmp_path, journalMaxGroupWaitMSec=5000, journalBufferedEntriesThreshold=10)
    j = Journal(d, conf)
    await j.start()
    try:
        c = Collector()
        for i in range(100):
            j.log(record(1, i), c.callback())
        assert j.stats.groups == 10
        # Every group was handed over: completion does not wait for the 5 s timer.
        assert await c.wait(timeout=2.0) == [EOK] * 100
        j.log(record(1, 100), c.callback())
        assert j.stats.groups == 10  # a lone record waits for its group
    finally:
        await j.close()
    assert c.statuses == [EOK] * 101


async def test_bytes_threshold_triggers_groups(tmp_path: Path) -> None:
    d = jdir(tmp_path)
    conf = jconf(tmp_path, journalMaxGroupWaitMSec=5000, journalBufferedWritesThreshold=4096)
    j = Journal(d, conf)
    await j.start()
    try:
        c = Collector()
        for i in range(40):
            j.log(record(1, i, b"p" * (1020 - 16)), c.callback())  # 1024 bytes framed
        assert j.stats.groups == 10
        assert await c.wait(timeout=2.0) == [EOK] * 40
    finally:
        await j.close()
    assert len(all_records(d)) == 40


async def test_flush_when_queue_empty_does_not_wait_for_timer(tmp_path: Path) -> None:
    d = jdir(tmp_path)
    conf = jconf(tmp_path, journalMaxGroupWaitMSec=5000, journalFlushWhenQueueEmpty=True)
    j = Journal(d, conf)
    await j.start()
    try:
        c = Collector()
        for i in range(5):
            j.log(record(1, i), c.callback())
        assert j.stats.groups == 0  # handed over once this burst is done
        assert await c.wait(timeout=2.0) == [EOK] * 5
        assert j.stats.groups == 1
        c2 = Collector()
        j.log(record(1, 5), c2.callback())
        assert await c2.wait(timeout=2.0) == [EOK]
        assert j.stats.groups == 2
    finally:
        await j.close()


async def test_zero_max_wait_flushes_each_record(tmp_path: Path) -> None:
    d = jdir(tmp_path)
    j = Journal(d, jconf(tmp_path, journalMaxGroupWaitMSec=0))
    await j.start()
    try:
        c = Collector()
        for i in range(7):
            j.log(record(1, i), c.callback())
        assert j.stats.groups == 7
        assert await c.wait() == [EOK] * 7
    finally:
        await j.close()


async def _log_all(j: Journal, recs: list[bytes]) -> None:
    c = Collector()
    for r in recs:
        j.log(r, c.callback())
    assert await c.wait() == [EOK] * len(recs)


async def test_rolling_and_replay(tmp_path: Path) -> None:
    d = jdir(tmp_path)
    conf = jconf(tmp_path, journalMaxSizeMB=1)
    recs = [record(5, i, os.urandom(64 * 1024)) for i in range(56)]  # ~3.5 MiB
    j = Journal(d, conf)
    await j.start()
    try:
        half = len(recs) // 2
        await _log_all(j, recs[:half])
        mid = j.last_synced_mark
        await _log_all(j, recs[half:])
        assert j.stats.rolls >= 2
    finally:
        await j.close()
    ids = jf.list_journal_ids(d)
    assert len(ids) >= 3
    assert ids == list(range(1, len(ids) + 1))
    assert j.stats.rolls == len(ids) - 1
    for jid in ids:
        size = (d / jf.journal_file_name(jid)).stat().st_size
        assert size <= 2 * 1024 * 1024  # rolled near 1 MiB (plus preallocation)

    j2 = Journal(d, conf)
    assert list(j2.replay_records(jf.LogMark())) == recs
    assert j2.last_synced_mark.journal_id == ids[-1]

    j3 = Journal(d, conf)
    assert list(j3.replay_records(mid)) == recs[half:]
    end = j3.last_synced_mark
    assert end > mid

    j4 = Journal(d, conf)
    assert list(j4.replay_records(end)) == []


async def test_restart_opens_new_file_and_replays_everything(tmp_path: Path) -> None:
    d = jdir(tmp_path)
    conf = jconf(tmp_path)
    first = [record(1, i, b"a") for i in range(5)]
    second = [record(1, i, b"b") for i in range(5, 9)]
    j = Journal(d, conf)
    await j.start()
    await _log_all(j, first)
    await j.close()
    j = Journal(d, conf)
    assert list(j.replay_records(jf.LogMark())) == first
    await j.start()
    assert j.current_journal_id == 2
    assert j.last_synced_mark >= jf.LogMark(2, jf.HEADER_SIZE)
    await _log_all(j, second)
    await j.close()
    assert list(Journal(d, conf).replay_records(jf.LogMark())) == first + second
    assert list(Journal(d, conf).replay_records(jf.LogMark(2, 0))) == second


async def test_gc_keeps_max_backups(tmp_path: Path) -> None:
    d = jdir(tmp_path)
    conf = jconf(tmp_path, journalMaxBackups=2)
    for i in range(8):
        j = Journal(d, conf)
        await j.start()
        await _log_all(j, [record(1, i)])
        await j.close()
    assert jf.list_journal_ids(d) == list(range(1, 9))
    j = Journal(d, conf)
    # Checkpoint inside journal 3: only 1 and 2 are older; both are backups.
    assert j.gc(jf.LogMark(3, 1024)) == []
    assert jf.list_journal_ids(d) == list(range(1, 9))
    # Checkpoint inside journal 8: 1..7 are older, keep the newest 2 of them.
    assert j.gc(jf.LogMark(8, 512)) == [1, 2, 3, 4, 5]
    assert jf.list_journal_ids(d) == [6, 7, 8]
    # Replay from the checkpoint still works.
    assert list(j.replay_records(jf.LogMark(8, 0))) == [record(1, 7)]


async def test_gc_with_zero_backups(tmp_path: Path) -> None:
    d = jdir(tmp_path)
    conf = jconf(tmp_path, journalMaxBackups=0)
    for i in range(3):
        j = Journal(d, conf)
        await j.start()
        await _log_all(j, [record(1, i)])
        await j.close()
    assert Journal(d, conf).gc(jf.LogMark(3, 0)) == [1, 2]
    assert jf.list_journal_ids(d) == [3]


#: How many times each journal failpoint passes before the test's first
#: record is synced: opening the file writes its header (one write), syncs
#: it and its directory (two syncs) and preallocates (one allocation); the
#: first record then takes one write and one sync.
FIRST_RECORD_PASSES = {"journal.write": 2, "journal.fsync": 3, "journal.allocate": 1}


@pytest.fixture
def journal_failpoints(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Any:
    """Arm failpoints in the journal's writer process (it gets the ones
    armed here when it starts), and disarm them after the test."""
    monkeypatch.setenv("DLOG_FAILPOINT_DIR", str(tmp_path / "failpoints"))
    yield failpoints.configure
    failpoints.configure("")


@pytest.mark.parametrize("point", ["journal.write", "journal.fsync", "journal.allocate"])
async def test_io_failure_reports_eio_and_never_eok_after(
    tmp_path: Path, journal_failpoints: Any, point: str
) -> None:
    d = jdir(tmp_path)
    errors: list[OSError] = []
    # Fails once, after the first record: the disk then "recovers".
    journal_failpoints(f"{point}=enospc+{FIRST_RECORD_PASSES[point]}*1")
    # One group for the three big records below: one batch, which fails whole.
    conf = jconf(tmp_path, journalBufferedWritesThreshold=4 * 1024 * 1024)
    j = Journal(d, conf, on_error=errors.append)
    await j.start()
    try:
        await _log_all(j, [record(1, 0, b"before")])
        c = Collector()
        # Big enough to need more preallocated space (1 MiB steps).
        for i in range(1, 4):
            j.log(record(1, i, b"z" * 600 * 1024), c.callback())
        assert await c.wait() == [EIO] * 3
        assert j.failed is not None and j.failed.errno == errno.ENOSPC
        assert f"failpoint {point}" in str(j.failed)
        assert errors == [j.failed]
        # Once failed, the journal never acknowledges again, though the disk
        # works again, until it is resumed.
        c2 = Collector()
        for i in range(4, 10):
            j.log(record(1, i), c2.callback())
        await j.wait_synced()
        assert await c2.wait() == [EIO] * 6
        assert EOK not in c.statuses + c2.statuses
    finally:
        await j.close()
    assert jf.parse_ids(all_records(d)[0]) == (1, 0)


async def test_failpoints_armed_after_start_reach_the_writer(
    tmp_path: Path, journal_failpoints: Any
) -> None:
    """Failpoints a test arms once the writer process runs go to it over
    the request pipe, ahead of the groups logged after them."""
    d = jdir(tmp_path)
    j = Journal(d, jconf(tmp_path))
    await j.start()
    try:
        await _log_all(j, [record(1, 0, b"before")])
        journal_failpoints("journal.write=eio")
        c = Collector()
        j.log(record(1, 1, b"after"), c.callback())
        assert await c.wait() == [EIO]
        assert j.failed is not None and "failpoint journal.write" in str(j.failed)
    finally:
        await j.close()


async def test_groups_queued_behind_a_failed_write_never_succeed(
    tmp_path: Path, journal_failpoints: Any
) -> None:
    """A group already handed to the journal's writer when an earlier
    group's sync fails must get EIO too, even if the disk works again by
    then."""
    d = jdir(tmp_path)
    held = tmp_path / "failpoints" / "journal.write"
    # Group A's write holds (the test lets it go); then its sync fails, once.
    passes = FIRST_RECORD_PASSES
    journal_failpoints(
        f"journal.write=hold+{passes['journal.write']}*1,"
        f"journal.fsync=eio+{passes['journal.fsync']}*1"
    )
    j = Journal(d, jconf(tmp_path, journalMaxGroupWaitMSec=0))
    await j.start()
    try:
        await _log_all(j, [record(1, 0)])
        c = Collector()
        j.log(record(1, 1), c.callback())  # group A: its write holds, then its sync fails
        for _ in range(1000):
            if held.exists():
                break
            await asyncio.sleep(0.01)
        assert held.exists(), "the writer never reached group A's write"
        j.log(record(1, 2), c.callback())  # group B: handed over while A is in flight
        assert j.stats.groups == 3
        await asyncio.sleep(0.05)  # B is in the pipe (nothing answers it before A)
        assert c.statuses == []
        held.unlink()
        assert await c.wait() == [EIO, EIO]
        assert j.stats.fsyncs == 1  # A's failed sync is not counted; B was never synced
    finally:
        held.unlink(missing_ok=True)
        await j.close()
    assert [jf.parse_ids(r) for r in all_records(d)] == [(1, 0), (1, 1)]


async def test_resume_after_enospc_starts_a_new_file(
    tmp_path: Path, journal_failpoints: Any
) -> None:
    """After ENOSPC, :meth:`Journal.resume` makes the writer take records
    again, in a new file (the failed one may end in a partial group)."""
    d = jdir(tmp_path)
    journal_failpoints(f"journal.write=enospc+{FIRST_RECORD_PASSES['journal.write']}*1")
    j = Journal(d, jconf(tmp_path))
    await j.start()
    try:
        await _log_all(j, [record(1, 0)])
        c = Collector()
        j.log(record(1, 1), c.callback())
        assert await c.wait() == [EIO]
        assert j.failed is not None
        assert j.resume()
        assert j.failed is None
        await _log_all(j, [record(1, 2)])
        assert j.current_journal_id == 2
        assert j.last_synced_mark.journal_id == 2
    finally:
        await j.close()
    assert [jf.parse_ids(r) for r in all_records(d)] == [(1, 0), (1, 2)]


async def test_a_writer_that_dies_fails_the_journal(tmp_path: Path) -> None:
    """kill -9 of the writer process: what it had not answered gets EIO,
    the journal reports the failure and takes no more records (a restart
    replays what was synced), and close() still returns."""
    d = jdir(tmp_path)
    errors: list[OSError] = []
    j = Journal(d, jconf(tmp_path, journalMaxGroupWaitMSec=5000), on_error=errors.append)
    await j.start()
    try:
        await _log_all(j, [record(1, 0)])
        c = Collector()
        j.log(record(1, 1), c.callback())  # grouping: not handed over yet
        assert j._proc is not None
        os.kill(j._proc.pid, signal.SIGKILL)
        for _ in range(1000):
            if j.failed is not None:
                break
            await asyncio.sleep(0.01)
        # The group still grouping when the writer died is handed over now,
        # to nobody: it fails at once.
        await asyncio.wait_for(j.wait_synced(), 5)
        assert await c.wait() == [EIO]
        assert j.failed is not None and j.failed.errno == errno.EIO
        assert "exited" in str(j.failed)
        assert errors == [j.failed]
        assert not j.resume()
        c2 = Collector()
        j.log(record(1, 2), c2.callback())
        assert await c2.wait() == [EIO]
    finally:
        await asyncio.wait_for(j.close(), 10)
    assert [jf.parse_ids(r) for r in all_records(d)] == [(1, 0)]


async def test_the_writer_exits_when_the_bookie_goes_away(tmp_path: Path) -> None:
    """The writer lives no longer than its request pipe: a bookie killed
    with kill -9 leaves no writer behind, appending to a journal that the
    next bookie replays."""
    d = jdir(tmp_path)
    j = Journal(d, jconf(tmp_path))
    await j.start()
    proc = j._proc
    assert proc is not None
    await _log_all(j, [record(1, 0)])
    assert j._req is not None
    j._req.abort()  # as the bookie's death closes its end
    await asyncio.wait_for(proc.wait(), 10)
    await j.close()
    assert [jf.parse_ids(r) for r in all_records(d)] == [(1, 0)]


@pytest.mark.parametrize(
    ("tail", "damaged"),
    [
        (b"", False),
        (bytes(64), False),  # the preallocated, never written end
        (struct.pack(">i", -1) + b"garbage", True),
        (struct.pack(">i", 5000) + b"short", True),
        (struct.pack(">ii", jf.PADDING_MASK, -8) + bytes(100), True),
    ],
)
def test_replay_says_where_it_stopped_short(
    tmp_path: Path, caplog: pytest.LogCaptureFixture, tail: bytes, damaged: bool
) -> None:
    """Replay goes on after a damaged record length (the auditor has the
    replicas copied back), but never quietly: the operator is told which
    journal and offset, and that the records after it are not replayed."""
    d = jdir(tmp_path)
    recs = [record(1, 0, b"first"), record(1, 1, b"second")]
    ends = write_journal(d / jf.journal_file_name(1), recs, tail=tail)
    with caplog.at_level("ERROR", logger="dlog.bookie.journal"):
        assert list(Journal(d, jconf(tmp_path)).replay_records(jf.LogMark())) == recs
    errors = [r.getMessage() for r in caplog.records if r.levelname == "ERROR"]
    if damaged:
        assert len(errors) == 1 and f"replay stopped at offset {ends[-1]}" in errors[0], errors
    else:
        assert errors == []


@pytest.mark.parametrize(
    "bad",
    [
        # a ledger key whose payload length says 84 in a 40-byte record
        jf.ledger_key_record(1, b"k" * 20)[:16] + struct.pack(">i", 84) + b"k" * 20,
        jf.explicit_lac_record(1, b"lac")[:16] + struct.pack(">i", -3) + b"lac",
        b"short",  # no room for its ids
    ],
)
def test_replay_stops_a_file_at_a_damaged_record_and_goes_on_with_the_next(
    tmp_path: Path, caplog: pytest.LogCaptureFixture, bad: bytes
) -> None:
    """Flipped bytes inside a record that frames well (a meta-record's own
    length) end that file's replay as a damaged length does, with the same
    error, instead of stopping the bookie from starting; the next journal
    file is replayed."""
    d = jdir(tmp_path)
    first = [jf.ledger_key_record(1, b"key"), record(1, 0, b"a")]
    ends = write_journal(d / jf.journal_file_name(1), [*first, bad, record(1, 1, b"lost")])
    second = [record(1, 2, b"next file")]
    write_journal(d / jf.journal_file_name(2), second)
    with caplog.at_level("ERROR", logger="dlog.bookie.journal"):
        assert list(Journal(d, jconf(tmp_path)).replay_records(jf.LogMark())) == first + second
    errors = [r.getMessage() for r in caplog.records if r.levelname == "ERROR"]
    assert len(errors) == 1 and f"replay stopped at offset {ends[1]}" in errors[0], errors


def test_replay_of_an_empty_journal_reports_nothing(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    d = jdir(tmp_path)
    write_journal(d / jf.journal_file_name(1), [], tail=bytes(64))
    with caplog.at_level("ERROR", logger="dlog.bookie.journal"):
        assert list(Journal(d, jconf(tmp_path)).replay_records(jf.LogMark())) == []
    assert not [r for r in caplog.records if r.levelname == "ERROR"]


async def test_the_writer_outlives_signals_to_the_process_group(tmp_path: Path) -> None:
    """Ctrl-C or a service manager's SIGTERM reaches the writer too: it
    keeps writing until the bookie, shutting down, closes the journal."""
    d = jdir(tmp_path)
    j = Journal(d, jconf(tmp_path))
    await j.start()
    try:
        assert j._proc is not None
        for sig in (signal.SIGINT, signal.SIGTERM):
            os.kill(j._proc.pid, sig)
        await asyncio.sleep(0.2)
        await _log_all(j, [record(1, 0)])
        assert j.failed is None
    finally:
        await j.close()
    assert [jf.parse_ids(r) for r in all_records(d)] == [(1, 0)]
