"""The journal's files: groups of records written, padded, rolled and synced.

This is the half of the journal that touches the disk, and it runs in the
journal's writer process (:mod:`dlog.bookie.journal_writer`), not in the
bookie: a write or an fsync that returns must not wait for the bookie's
interpreter lock, which the event loop and the storage flush hold in turn.

Invariants:

* a group's bytes are written contiguously, then padded so the next group
  starts at a ``journalAlignmentSize`` boundary (journal format V5);
* a group never straddles two files: when it would take the file past
  ``journalMaxSizeMB`` the file is synced and a new one started;
* :meth:`JournalFile.write_batch` returns only once every byte it was given
  is written and, with ``journalSyncData``, fdatasynced: the mark it leaves
  (``file_id``, ``offset``) is durable.
"""

from __future__ import annotations

import dataclasses
import errno
import logging
import os
import time
from collections.abc import Sequence
from pathlib import Path

from dlog.bookie import fileio
from dlog.bookie import journal_format as jf
from dlog.conf.bookie import BookieConfig

log = logging.getLogger(__name__)

IOV_MAX = fileio.IOV_MAX


@dataclasses.dataclass(frozen=True, slots=True)
class FileSettings:
    """The journal settings the file side needs, in bytes."""

    max_size: int
    prealloc: int
    alignment: int
    write_buffer: int
    sync: bool

    @classmethod
    def from_conf(cls, conf: BookieConfig) -> FileSettings:
        return cls(
            max_size=conf.journal_max_size_mb * 1024 * 1024,
            prealloc=conf.journal_pre_alloc_size_mb * 1024 * 1024,
            alignment=conf.journal_alignment_size,
            write_buffer=conf.journal_write_buffer_size_kb * 1024,
            sync=conf.journal_sync_data,
        )

    def to_args(self) -> list[str]:
        """As the writer process takes them on its command line."""
        return [
            str(self.max_size),
            str(self.prealloc),
            str(self.alignment),
            str(self.write_buffer),
            "1" if self.sync else "0",
        ]

    @classmethod
    def from_args(cls, args: list[str]) -> FileSettings:
        max_size, prealloc, alignment, write_buffer = (int(a) for a in args[:4])
        return cls(max_size, prealloc, alignment, write_buffer, args[4] == "1")


@dataclasses.dataclass
class FileStats:
    """What the file side did, cumulative: the journal's metrics and the
    group-commit tests read these."""

    writes: int = 0  # write() calls of group data
    fsyncs: int = 0  # fdatasync calls covering groups
    bytes_written: int = 0
    rolls: int = 0
    records_synced: int = 0


class JournalFile:
    """The current journal file of one directory, written one batch at a time."""

    def __init__(self, directory: Path, settings: FileSettings) -> None:
        self.directory = directory
        self.settings = settings
        self.stats = FileStats()
        self.fd = -1
        self.file_id = 0
        self.offset = 0
        self._allocated = 0

    def open_next(self) -> None:
        """Start the journal file after the newest one in the directory."""
        ids = jf.list_journal_ids(self.directory)
        self._open_file((ids[-1] + 1) if ids else 1)

    def reopen(self) -> None:
        """Start a new file after a failure (the failed one may end in a
        partial group, which replay stops at)."""
        old = self.fd
        try:
            self._open_file(self.file_id + 1)
        except OSError:
            self.fd = old  # still the failed file: the next attempt tries again
            raise
        if old >= 0:
            os.close(old)

    def close(self) -> None:
        if self.fd >= 0:
            try:
                os.fsync(self.fd)
            except OSError:
                pass
            os.close(self.fd)
            self.fd = -1

    def write_batch(self, groups: Sequence[tuple[int, Sequence[bytes | memoryview]]]) -> float:
        """Write ``groups`` (each ``(records, parts)``; the parts are length
        prefixes and records) and, with ``journalSyncData``, sync them all
        with one fdatasync; returns when (``time.monotonic``) the writes were
        done. Raises OSError; the file is then not to be used again before
        :meth:`reopen`."""
        s = self.settings
        buffered: list[bytes | memoryview] = []  # bytes not yet written, ending at self.offset
        nbuffered = 0
        records = 0
        for count, parts in groups:
            nbytes = sum(map(len, parts))
            if self.offset + nbytes > s.max_size and self.offset > jf.HEADER_SIZE:
                self._write_buffered(buffered, nbuffered, final=True)
                buffered, nbuffered = [], 0
                self._roll()
            pad = jf.padding_record(self.offset + nbytes, s.alignment)
            total = nbytes + len(pad)
            self._ensure_space(total)
            buffered += parts
            if pad:
                buffered.append(pad)
            nbuffered += total
            self.offset += total
            self.stats.bytes_written += total
            records += count
            if nbuffered >= s.write_buffer:
                buffered, nbuffered = self._write_buffered(buffered, nbuffered, final=False)
        self._write_buffered(buffered, nbuffered, final=True)
        written = time.monotonic()
        if s.sync:
            # Measured and not kept (with the writes in a thread of the
            # bookie's): when the batch fits one write, that write synced by
            # itself (pwritev2 RWF_DSYNC), which spared the thread one wait
            # for the GIL (2.5 -> 1.3 ms per group beside a GIL-busy
            # thread), but five alternating pairs of light-load runs showed
            # no latency gain beyond noise. At half load (bench/bookie_add.py,
            # 27,000 adds/s, checkpoints in the window), p99 with it against
            # without: ledgers on tmpfs 9.7, 8.4, 9.5 against 9.7, 10.4 ms;
            # one disk 19.1, 25.0, 131 against 10.2, 12.9 ms (worse in all
            # three). Nor kept: every batch in one write (a 4 MiB write
            # buffer) and synced by it, tmpfs 8.0, 10.1 against 18.2, 10.7,
            # one disk 14.0, 14.6 against 16.6, 12.6; a 1 MiB write buffer
            # alone, tmpfs 10.9, 13.7, 9.2 against 18.1, 11.1, 7.3, one disk
            # 18.3, 9.7, 13.7 against 13.1, 12.1, 13.2 ms.
            fileio.fdatasync(self.fd, "journal.fsync")
            self.stats.fsyncs += 1
        self.stats.records_synced += records
        return written

    def _write_buffered(
        self, parts: list[bytes | memoryview], nbytes: int, *, final: bool
    ) -> tuple[list[bytes | memoryview], int]:
        """Write the ``nbytes`` of ``parts`` (they end at ``self.offset``) in
        writes of ``journalWriteBufferSizeKB``, as BookKeeper's journal fills
        its write buffer and writes it out when full: every full buffer, and
        the last partial one too when ``final``. Returns what is left."""
        size = self.settings.write_buffer
        offset = self.offset - nbytes
        chunk: list[bytes | memoryview] = []
        filled = 0
        for part in parts:
            if filled + len(part) < size:  # the common case: no copy, no slicing
                chunk.append(part)
                filled += len(part)
                continue
            view = memoryview(part)
            while len(view):
                take = min(len(view), size - filled)
                chunk.append(view[:take])
                view = view[take:]
                filled += take
                if filled == size:
                    self._write_parts(chunk, offset)
                    offset += filled
                    chunk, filled = [], 0
        if final and filled:
            self._write_parts(chunk, offset)
            chunk, filled = [], 0
        return chunk, filled

    def _write_parts(self, parts: list[bytes | memoryview], offset: int) -> None:
        """Write ``parts`` contiguously at ``offset`` with as few syscalls as
        the iovec limit allows; the kernel gathers them (no join in Python)."""
        fileio.pwritev(self.fd, parts, offset, "journal.write")
        self.stats.writes += (len(parts) + IOV_MAX - 1) // IOV_MAX

    def _ensure_space(self, n: int) -> None:
        need = self.offset + n
        if need <= self._allocated:
            return
        grow = max(self.settings.prealloc, need - self._allocated)
        try:
            fileio.fallocate(self.fd, self._allocated, grow, "journal.allocate")
        except OSError as e:
            if e.errno in (errno.EOPNOTSUPP, errno.EINVAL):
                return  # filesystem cannot preallocate; plain writes still work
            raise
        self._allocated += grow

    def _open_file(self, journal_id: int) -> None:
        path = self.directory / jf.journal_file_name(journal_id)
        fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_EXCL, 0o644)
        try:
            header = jf.header_bytes()
            self.fd, self._allocated = fd, 0
            self.offset = 0
            self._ensure_space(len(header))
            fileio.pwrite(fd, header, 0, "journal.write")
            fileio.fsync(fd, "journal.fsync")
            fileio.sync_dir(self.directory, "journal.fsync")
        except OSError:
            os.close(fd)
            path.unlink(missing_ok=True)  # the next attempt reuses the id
            self.fd = -1
            raise
        self.file_id = journal_id
        self.offset = len(header)
        log.info("opened journal %s", path)

    def _roll(self) -> None:
        if self.settings.sync:
            fileio.fdatasync(self.fd, "journal.fsync")
        old = self.fd
        self._open_file(self.file_id + 1)
        os.close(old)
        self.stats.rolls += 1
