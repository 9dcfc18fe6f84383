"""Bookie settings that no test used to hold to their meaning (issue 14):
``journalSyncData``, ``journalWriteBufferSizeKB`` and ``flushEntrylogBytes``.
Each test fails when the setting is ignored. Syncs are counted by wrapping
:mod:`dlog.bookie.fileio` (every bookie fsync goes through it), on real
files in tmp_path."""

from __future__ import annotations

import asyncio
import os
import struct
import threading
from pathlib import Path
from typing import Any

import pytest

from dlog import failpoints
from dlog.bookie import fileio
from dlog.bookie import journal_format as jf
from dlog.bookie.entry_log import EntryLogFile
from dlog.bookie.journal import Journal
from dlog.bookie.journal_file import FileSettings, JournalFile
from dlog.bookie.ledger_storage import SingleDirectoryDbLedgerStorage
from dlog.conf.bookie import BookieConfig
from dlog.errors import EOK
from dlog.sandbox.bookies import bookie_config

URI = "zk+hierarchical://127.0.0.1:2181/ledgers"
KIB = 1024


def conf(tmp_path: Path, **overrides: Any) -> BookieConfig:
    values: dict[str, Any] = {"journalPreAllocSizeMB": 1, "journalFlushWhenQueueEmpty": False}
    values.update(overrides)
    return bookie_config(tmp_path, port=3181, metadata_service_uri=URI, **values)


def record(ledger_id: int, entry_id: int, payload: bytes = b"") -> bytes:
    return struct.pack(">qq", ledger_id, entry_id) + payload


class Events:
    """What the bookie did, in order: ("sync", point) for every fsync and
    fdatasync, ("write", point, bytes) for every write, ("ack", n) for
    journal callbacks."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        self.items: list[tuple[Any, ...]] = []
        self._lock = threading.Lock()
        real_fdatasync, real_fsync, real_pwritev = fileio.fdatasync, fileio.fsync, fileio.pwritev

        def fdatasync(fd: int, point: str) -> None:
            real_fdatasync(fd, point)
            self.add("sync", point)

        def fsync(fd: int, point: str) -> None:
            real_fsync(fd, point)
            self.add("sync", point)

        def pwritev(fd: int, parts: Any, offset: int, point: str) -> int:
            n = real_pwritev(fd, parts, offset, point)
            self.add("write", point, n)
            return n

        monkeypatch.setattr(fileio, "fdatasync", fdatasync)
        monkeypatch.setattr(fileio, "fsync", fsync)
        monkeypatch.setattr(fileio, "pwritev", pwritev)

    def add(self, *item: Any) -> None:
        with self._lock:
            self.items.append(item)

    def syncs(self, point: str) -> int:
        return sum(1 for e in self.items if e[:2] == ("sync", point))

    def writes(self, point: str) -> list[int]:
        return [e[2] for e in self.items if e[:2] == ("write", point)]


async def log_and_wait(j: Journal, records: list[bytes]) -> list[int]:
    """Journal ``records`` in one group; the writer's fsync count each
    callback saw (the answer that completes a record carries it)."""
    loop = asyncio.get_running_loop()
    futures = []
    seen: list[int] = []
    for r in records:
        fut: asyncio.Future[int] = loop.create_future()

        def cb(status: int, fut: asyncio.Future[int] = fut) -> None:
            seen.append(j.stats.fsyncs)
            fut.set_result(status)

        futures.append(fut)
        j.log(r, cb)
    await j.wait_synced()
    assert await asyncio.gather(*futures) == [EOK] * len(records)
    return seen


def journal_file(tmp_path: Path, **overrides: Any) -> JournalFile:
    """The file side of a journal with these settings, in this process (the
    bookie runs it in its writer process), so a test sees its every call."""
    jfile = JournalFile(tmp_path, FileSettings.from_conf(conf(tmp_path, **overrides)))
    jfile.open_next()
    return jfile


# ---------------------------------------------------------------------------
# journalSyncData
# ---------------------------------------------------------------------------


async def test_journal_sync_data_syncs_before_every_acknowledgement(tmp_path: Path) -> None:
    j = Journal(tmp_path, conf(tmp_path, journalSyncData=True, journalMaxGroupWaitMSec=5000))
    await j.start()
    try:
        for batch in range(3):
            seen = await log_and_wait(j, [record(1, batch * 10 + i) for i in range(10)])
            # Every record was acknowledged after its group's sync.
            assert seen == [batch + 1] * 10
        assert j.stats.fsyncs == 3
    finally:
        await j.close()


def test_journal_file_writes_then_syncs_a_batch(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    jfile = journal_file(tmp_path, journalSyncData=True)
    events = Events(monkeypatch)
    try:
        for batch in range(3):
            before = len(events.items)
            parts = [jf.frame_record(record(1, batch * 10 + i)) for i in range(10)]
            jfile.write_batch([(10, parts)])
            kinds = [e[0] for e in events.items[before:]]
            assert kinds == ["write", "sync"], events.items[before:]
        assert events.syncs("journal.fsync") == jfile.stats.fsyncs == 3
    finally:
        jfile.close()


async def test_journal_without_sync_data_acknowledges_without_syncing(tmp_path: Path) -> None:
    j = Journal(tmp_path, conf(tmp_path, journalSyncData=False, journalMaxGroupWaitMSec=5000))
    await j.start()  # opening a journal file syncs its header: not an add's sync
    try:
        for batch in range(3):
            seen = await log_and_wait(j, [record(1, batch * 10 + i) for i in range(10)])
            assert seen == [0] * 10
        assert j.stats.fsyncs == 0
        assert j.stats.writes >= 3  # written all the same
    finally:
        await j.close()
    scanned = [r for _, r in jf.scan_journal(tmp_path / jf.journal_file_name(1))]
    assert scanned == [record(1, i) for i in range(30)]


def test_journal_file_without_sync_data_never_syncs_a_batch(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    jfile = journal_file(tmp_path, journalSyncData=False)
    events = Events(monkeypatch)
    try:
        jfile.write_batch([(1, [jf.frame_record(record(1, 0))])])
        assert events.syncs("journal.fsync") == 0, events.items
        assert len(events.writes("journal.write")) == 1
    finally:
        jfile.close()


# ---------------------------------------------------------------------------
# journalWriteBufferSizeKB
# ---------------------------------------------------------------------------


@pytest.mark.parametrize("buffer_kib", [4, 16, 64])
async def test_journal_writes_are_cut_to_the_write_buffer(tmp_path: Path, buffer_kib: int) -> None:
    """One 256 KiB group goes out in writes of the buffer size (the writer
    process counts them), and the file reads back whole."""
    j = Journal(
        tmp_path,
        conf(
            tmp_path,
            journalWriteBufferSizeKB=buffer_kib,
            journalMaxGroupWaitMSec=5000,
            journalBufferedWritesThreshold=1 << 30,
        ),
    )
    await j.start()
    records = [record(7, i, os.urandom(1000 + i % 37)) for i in range(256)]
    try:
        await log_and_wait(j, records)
        assert j.stats.writes == -(-j.stats.bytes_written // (buffer_kib * KIB))
    finally:
        await j.close()
    scanned = [r for _, r in jf.scan_journal(tmp_path / jf.journal_file_name(1))]
    assert scanned == records


@pytest.mark.parametrize("buffer_kib", [4, 16, 64])
def test_journal_file_cuts_writes_to_the_write_buffer(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, buffer_kib: int
) -> None:
    """Every write but the last is exactly the buffer size."""
    jfile = journal_file(tmp_path, journalWriteBufferSizeKB=buffer_kib)
    events = Events(monkeypatch)
    records = [record(7, i, os.urandom(1000 + i % 37)) for i in range(256)]
    try:
        jfile.write_batch([(256, [jf.frame_record(r) for r in records])])
        sizes = events.writes("journal.write")
        assert sum(sizes) == jfile.stats.bytes_written
        assert all(n == buffer_kib * KIB for n in sizes[:-1]), sizes
        assert 0 < sizes[-1] <= buffer_kib * KIB
    finally:
        jfile.close()
    scanned = [r for _, r in jf.scan_journal(tmp_path / jf.journal_file_name(1))]
    assert scanned == records


async def test_small_groups_share_a_write_buffer(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Groups waiting for the writer together are written together, up to
    the buffer size: 64 groups of one 100-byte record need fewer writes
    than groups."""
    monkeypatch.setenv("DLOG_FAILPOINT_DIR", str(tmp_path / "failpoints"))
    held = tmp_path / "failpoints" / "journal.write"
    # The first group's write holds (its file's header write passes first),
    # so the others pile up in the pipe behind it.
    failpoints.configure("journal.write=hold+1*1")
    j = Journal(tmp_path, conf(tmp_path, journalWriteBufferSizeKB=64, journalMaxGroupWaitMSec=0))
    await j.start()
    loop = asyncio.get_running_loop()
    futures: list[asyncio.Future[int]] = []
    try:
        for i in range(64):
            fut: asyncio.Future[int] = loop.create_future()
            futures.append(fut)
            j.log(record(3, i, b"x" * 84), fut.set_result)
            if i == 0:
                for _ in range(1000):
                    if held.exists():
                        break
                    await asyncio.sleep(0.01)
                assert held.exists()
        assert j.stats.groups == 64  # journalMaxGroupWaitMSec=0: a group per record
        await asyncio.sleep(0.05)  # all in the pipe
        held.unlink()
        assert await asyncio.wait_for(asyncio.gather(*futures), 10) == [EOK] * 64
        # Each group is padded to 512 bytes: the 63 behind the first are
        # 31.5 KiB, which fits one 64 KiB buffer.
        assert j.stats.writes == 2, j.stats
        assert j.stats.fsyncs == 2, j.stats
    finally:
        failpoints.configure("")
        held.unlink(missing_ok=True)
        await j.close()
    scanned = [r for _, r in jf.scan_journal(tmp_path / jf.journal_file_name(1))]
    assert scanned == [record(3, i, b"x" * 84) for i in range(64)]


# ---------------------------------------------------------------------------
# flushEntrylogBytes
# ---------------------------------------------------------------------------


@pytest.mark.parametrize("every", [0, 64 * KIB, 256 * KIB])
def test_entry_log_syncs_every_flush_entrylog_bytes(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, every: int
) -> None:
    """1 MiB of entries added without a flush: about one sync per
    ``flushEntrylogBytes`` (none when 0), each after that many bytes."""
    f = EntryLogFile(tmp_path, 1, flush_every_bytes=every)
    events = Events(monkeypatch)
    total = 0
    unsynced_at_sync: list[int] = []
    for i in range(1024):
        f.add(1, record(1, i, b"e" * 1008))  # 1024 bytes, 1028 with its size
        total += 1028
        n = events.syncs("entry_log.fsync")
        if len(unsynced_at_sync) < n:
            unsynced_at_sync.append(total)
    syncs = events.syncs("entry_log.fsync")
    if every == 0:
        assert syncs == 0  # only a flush syncs
    else:
        assert total // every - 1 <= syncs <= total // every, (syncs, total)
        gaps = [b - a for a, b in zip([0] + unsynced_at_sync, unsynced_at_sync, strict=False)]
        assert all(every <= g < every + 1028 for g in gaps), gaps
    f.flush()
    assert syncs <= events.syncs("entry_log.fsync") <= syncs + 1
    f.close_unsealed()


@pytest.mark.parametrize("every", [0, 64 * KIB])
async def test_ledger_storage_passes_flush_entrylog_bytes_to_its_entry_logs(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, every: int
) -> None:
    """From the bookie's configuration down to the entry log: a flush of
    1 MiB of entries syncs every ``flushEntrylogBytes``, or once at the end."""
    c = conf(tmp_path, flushEntrylogBytes=every)
    d = tmp_path / "ledgers" / "current"
    d.mkdir(parents=True)
    storage = SingleDirectoryDbLedgerStorage(
        d, c, write_cache_bytes=c.write_cache_bytes, read_cache_bytes=c.read_cache_bytes
    )
    try:
        storage.ledger_index.set_master_key(5, b"k")
        for i in range(1024):
            assert storage.try_add(5, i, record(5, i, b"s" * 1008))
        events = Events(monkeypatch)
        await storage.flush()
        syncs = events.syncs("entry_log.fsync")
        if every == 0:
            assert syncs == 1
        else:
            assert syncs >= (1024 * 1028) // every - 1, syncs
        assert storage.get_entry(5, 1023) == record(5, 1023, b"s" * 1008)
    finally:
        await storage.close()
