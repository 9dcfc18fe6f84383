"""Entry log files, in BookKeeper's layout, and the logger that owns them.

An entry log ``<hex id>.log`` has a 1024-byte header (magic ``BKLO``, int
version 1, long ledgersMapOffset, int ledgersCount), then records: a 4-byte
size and the entry, whose first 16 bytes are (ledgerId, entryId). An entry's
location is ``(logId << 32) | offset``, the offset pointing just past the
size field. When a log is rotated the ledgers map (ledgerId -> bytes used)
is appended in batches and the header patched: a rotated log is sealed and
never written again.

Which log an entry goes to is decided by an :class:`EntryLogManager`
(:mod:`dlog.bookie.entry_log_manager`), chosen by the ledger storage.

A failed write or sync (ENOSPC, EIO, a short write) must never leave a
location pointing at the wrong bytes. So ``size`` (from which locations are
computed) always equals the bytes handed to the kernel plus those still
buffered, and a flush that fails is rolled back to its :class:`Savepoint`:
buffered bytes dropped, the file cut back, sizes restored. The entries it
held are still in the write cache and the journal; the retry writes them
again at fresh locations, and only then are locations indexed.
"""

from __future__ import annotations

import dataclasses
import logging
import os
import struct
import threading
import time
from collections import OrderedDict
from collections.abc import Callable, Iterator
from pathlib import Path

from dlog.bookie import fileio
from dlog.errors import CorruptedFileError

log = logging.getLogger(__name__)

MAGIC = b"BKLO"
VERSION = 1
HEADER_SIZE = 1024
INVALID_LID = -1
LEDGERS_MAP_ENTRY_ID = -2
LEDGERS_MAP_MAX_BATCH_SIZE = 10000
MAX_LOG_SIZE = 0xFFFFFFFF  # offsets must fit the low 32 bits of a location
#: A removed log's open descriptor is closed this much later: a read that
#: looked the location up just before the removal still finishes.
RETIRED_FD_SECONDS = 60.0
#: Buffered entry bytes handed to the kernel before a flush asks for them.
#: Entry logs are written through the page cache. Direct I/O (BookKeeper's
#: dbStorage_directIOEntryLogger) was measured and not kept: the kernel's copy
#: (0.4-0.6 ms of CPU per MB, the GIL released) becomes a copy into an aligned
#: buffer in Python (0.3-0.55 ms per MB, the GIL held), and two alternating
#: pairs of half-load runs showed no p99 gain beyond the VM's run-to-run noise.
WRITE_THRESHOLD = 4 << 20
#: Written bytes of a log whose writeback may still be under way: each write
#: starts its own writeback at once, and a write waits for the writeback of
#: whatever lies further back than this. A flush then puts at most this much
#: dirty data per log in the disk's queue ahead of a journal fsync, instead
#: of the whole flush at its final fdatasync (measured on this project's
#: 2-core VM, 300 MB written then synced: the fdatasync 190 ms -> 2 ms, the
#: longest 1 KiB journal fdatasync meanwhile 148 -> 74 ms).
WRITEBACK_WINDOW = 2 * WRITE_THRESHOLD

_HEADER = struct.Struct(">4siqi")
_SIZE = struct.Struct(">i")
_IDS = struct.Struct(">qq")
_MAP_HEAD = struct.Struct(">qqi")
_MAP_ITEM = struct.Struct(">qq")


def location(log_id: int, offset: int) -> int:
    return (log_id << 32) | offset


def split_location(loc: int) -> tuple[int, int]:
    return loc >> 32, loc & 0xFFFFFFFF


#: A compaction's output log until it is complete and recorded (see
#: :mod:`dlog.bookie.compactor`): never read, never indexed.
COMPACTING_SUFFIX = ".compacting"


def log_file_name(log_id: int) -> str:
    return f"{log_id:x}.log"


def header_bytes(ledgers_map_offset: int = 0, ledgers_count: int = 0) -> bytes:
    return _HEADER.pack(MAGIC, VERSION, ledgers_map_offset, ledgers_count).ljust(HEADER_SIZE, b"\0")


def parse_header(data: bytes, path: Path | str) -> tuple[int, int]:
    """(ledgersMapOffset, ledgersCount) of a log header."""
    if len(data) < _HEADER.size:
        raise CorruptedFileError(f"{path}: entry log header is truncated")
    magic, version, map_offset, count = _HEADER.unpack_from(data)
    if magic != MAGIC:
        raise CorruptedFileError(f"{path}: not an entry log (bad magic)")
    if version != VERSION:
        raise CorruptedFileError(f"{path}: unsupported entry log version {version}")
    if map_offset < 0 or count < 0:
        raise CorruptedFileError(
            f"{path}: entry log header has a negative ledgers map offset {map_offset} "
            f"or count {count}"
        )
    return map_offset, count


def _check_map_offset(path: Path | str, map_offset: int, file_size: int) -> None:
    """A sealed log's ledgers map lies after the header and inside the file
    (a damaged offset must not send a read or seek anywhere else)."""
    if map_offset and not HEADER_SIZE <= map_offset <= file_size:
        raise CorruptedFileError(
            f"{path}: ledgers map offset {map_offset} is outside the "
            f"{file_size}-byte log (entries start at {HEADER_SIZE})"
        )


def ledgers_map_records(ledgers: dict[int, int]) -> bytes:
    """The ledgers map appended at rotation, in batches of at most 10,000."""
    items = sorted(ledgers.items())
    out = bytearray()
    for start in range(0, len(items), LEDGERS_MAP_MAX_BATCH_SIZE):
        batch = items[start : start + LEDGERS_MAP_MAX_BATCH_SIZE]
        body = _MAP_HEAD.pack(INVALID_LID, LEDGERS_MAP_ENTRY_ID, len(batch))
        body += b"".join(_MAP_ITEM.pack(lid, size) for lid, size in batch)
        out += _SIZE.pack(len(body)) + body
    return bytes(out)


@dataclasses.dataclass(frozen=True)
class Savepoint:
    """Where a log stood when a flush began: everything before ``offset``
    is durable and may be indexed; nothing after it is."""

    offset: int
    ledgers: dict[int, int]


class EntryLogFile:
    """One entry log open for writing. Not thread safe: its manager locks."""

    def __init__(
        self,
        directory: Path,
        log_id: int,
        *,
        flush_every_bytes: int = 0,
        path: Path | None = None,
    ) -> None:
        self.directory = directory
        self.log_id = log_id
        self.path = path if path is not None else directory / log_file_name(log_id)
        self._fd = os.open(self.path, os.O_RDWR | os.O_CREAT | os.O_EXCL, 0o644)
        try:
            fileio.pwrite(self._fd, header_bytes(), 0, "entry_log.write")
        except OSError:
            os.close(self._fd)
            self.path.unlink(missing_ok=True)  # no half-written header left behind
            raise
        self.size = HEADER_SIZE  # logical size, including buffered bytes
        self._written = HEADER_SIZE  # bytes handed to the OS
        self._parts: list[bytes] = []  # size prefixes and entries not yet written
        self._parts_bytes = 0
        self._unsynced = 0
        self._written_back = HEADER_SIZE  # bytes below this are on the disk
        self._flush_every = flush_every_bytes
        self.ledgers: dict[int, int] = {}
        self.sealed = False

    def can_fit(self, n: int, limit: int) -> bool:
        return self.size + 4 + n <= min(limit, MAX_LOG_SIZE)

    def room(self, limit: int) -> int:
        """Bytes (size prefixes included) that still fit under ``limit``."""
        return min(limit, MAX_LOG_SIZE) - self.size

    def add(self, ledger_id: int, entry: bytes) -> int:
        return self.add_batch(ledger_id, [entry])[0]

    def add_batch(self, ledger_id: int, entries: list[bytes]) -> list[int]:
        """Append entries of one ledger; returns their locations. The bytes
        are handed to the kernel with pwritev, never copied in Python."""
        every = self._flush_every
        if not every:
            return self._add_batch(ledger_id, entries)
        # flushEntrylogBytes: sync each time that many bytes were added, also
        # inside one big batch (as BookKeeper's buffered channel does).
        locations: list[int] = []
        start = 0
        room = every - self._unsynced - self._parts_bytes
        for i, data in enumerate(entries):
            room -= len(data) + 4
            if room <= 0:
                locations += self._add_batch(ledger_id, entries[start : i + 1])
                start = i + 1
                room = every - self._unsynced - self._parts_bytes
        if start < len(entries):
            locations += self._add_batch(ledger_id, entries[start:])
        return locations

    def _add_batch(self, ledger_id: int, entries: list[bytes]) -> list[int]:
        base = self.log_id << 32
        pos = self.size
        locations = []
        parts = self._parts
        pack = _SIZE.pack
        for data in entries:
            n = len(data)
            parts.append(pack(n))
            parts.append(data)
            pos += 4
            locations.append(base | pos)
            pos += n
        added = pos - self.size
        self.size = pos
        self._parts_bytes += added
        self.ledgers[ledger_id] = self.ledgers.get(ledger_id, 0) + added
        if self._parts_bytes >= WRITE_THRESHOLD or (
            # flushEntrylogBytes below the write threshold: write (and sync) that often
            self._flush_every and self._unsynced + self._parts_bytes >= self._flush_every
        ):
            self._write_parts()
        return locations

    def _write_parts(self) -> None:
        """Hand the buffered bytes to the kernel. On failure nothing
        changes here: the flush's rollback decides what the log holds."""
        start = self._written
        written = fileio.pwritev(self._fd, self._parts, start, "entry_log.write")
        self._parts = []
        self._parts_bytes = 0
        self._unsynced += written
        self._written += written
        if self._flush_every and self._unsynced >= self._flush_every:
            fileio.fdatasync(self._fd, "entry_log.fsync")
            self._unsynced = 0
            self._written_back = self._written
            return
        fileio.writeback(self._fd, start, written, "entry_log.writeback")
        behind = self._written - WRITEBACK_WINDOW
        if behind > self._written_back:
            fileio.writeback(
                self._fd,
                self._written_back,
                behind - self._written_back,
                "entry_log.writeback",
                wait=True,
            )
            self._written_back = behind

    def flush(self) -> None:
        """Make every added entry durable."""
        if self._parts:
            self._write_parts()
        if self._unsynced or self._written == HEADER_SIZE:
            fileio.fdatasync(self._fd, "entry_log.fsync")
            self._unsynced = 0
            self._written_back = self._written

    def savepoint(self) -> Savepoint:
        return Savepoint(self.size, dict(self.ledgers))

    def rollback(self, savepoint: Savepoint | None) -> None:
        """Forget everything added since ``savepoint`` (None: since the log
        was created), so the next entry goes where the dropped ones began."""
        if self.sealed:
            return
        offset = savepoint.offset if savepoint is not None else HEADER_SIZE
        self._parts = []
        self._parts_bytes = 0
        self.ledgers = dict(savepoint.ledgers) if savepoint is not None else {}
        self.size = offset
        self._written = offset
        self._written_back = min(self._written_back, offset)
        self._unsynced = 0
        try:
            # Cut the failed attempt off and undo a half-done seal's header,
            # so a later scan of an unsealed log stops at the right place.
            # Bytes this fails to cut are never indexed, and get overwritten.
            os.ftruncate(self._fd, offset)
            os.pwrite(self._fd, header_bytes(), 0)
        except OSError as e:
            log.warning("entry log %s: could not cut back to %d: %s", self.path.name, offset, e)

    def seal(self) -> None:
        """Append the ledgers map, patch the header, sync and close. A
        failure leaves the log open and unsealed: sealing can be retried."""
        if self.sealed:
            return
        if self._parts:
            self._write_parts()
        map_offset = self._written
        records = ledgers_map_records(self.ledgers)
        fileio.pwrite(self._fd, records, map_offset, "entry_log.write")
        fileio.pwrite(
            self._fd,
            _HEADER.pack(MAGIC, VERSION, map_offset, len(self.ledgers)),
            0,
            "entry_log.write",
        )
        fileio.fsync(self._fd, "entry_log.fsync")
        os.close(self._fd)
        self.size = map_offset + len(records)
        self.sealed = True
        log.info(
            "sealed entry log %s (%d ledgers, %d bytes)",
            self.path.name,
            len(self.ledgers),
            self.size,
        )

    def close_unsealed(self) -> None:
        """Flush and close without sealing (shutdown mid-log)."""
        if self.sealed:
            return
        self.flush()
        os.close(self._fd)
        self.sealed = True

    def abandon(self) -> None:
        """Close without writing anything more (shutdown after a failed
        flush: what it holds is in the journal, which replay restores)."""
        if self.sealed:
            return
        try:
            os.close(self._fd)
        except OSError:
            pass
        self.sealed = True


class EntryLogger:
    """Owns the entry log files of a set of ledger directories: allocates
    log ids, opens new logs, and reads entries by location."""

    def __init__(
        self,
        ledger_dirs: list[Path],
        *,
        flush_every_bytes: int = 0,
        writable_dirs: Callable[[], list[Path]] | None = None,
        max_open_readers: int = 64,
    ) -> None:
        if not ledger_dirs:
            raise ValueError("EntryLogger needs at least one ledger directory")
        self.ledger_dirs = ledger_dirs
        self._writable = writable_dirs or (lambda: self.ledger_dirs)
        self._flush_every = flush_every_bytes
        self._lock = threading.Lock()
        self._readers: OrderedDict[int, int] = OrderedDict()
        self._max_readers = max_open_readers
        self._dir_of: dict[int, Path] = {}
        #: Descriptors of removed logs, closed once no read can still use them.
        self._retired: list[tuple[float, int]] = []
        self._next_dir = 0
        last = 0
        for d in ledger_dirs:
            for lid in self._scan_ids(d):
                self._dir_of[lid] = d
                last = max(last, lid)
            try:
                last = max(last, int((d / "lastId").read_text().strip() or "0", 16))
            except (FileNotFoundError, ValueError):
                pass
        self._last_id = last

    @staticmethod
    def _scan_ids(d: Path) -> list[int]:
        ids = []
        for name in os.listdir(d):
            if name.endswith(".log"):
                try:
                    ids.append(int(name[:-4], 16))
                except ValueError:
                    continue
        return ids

    @property
    def last_log_id(self) -> int:
        return self._last_id

    def log_ids(self) -> list[int]:
        with self._lock:
            return sorted(self._dir_of)

    def create_log(self, *, compacting: bool = False) -> EntryLogFile:
        """A new log with the next id, in the next writable directory.
        ``compacting``: a compaction's output, named ``<id>.log.compacting``
        and unknown to readers until :meth:`install`."""
        with self._lock:
            dirs = self._writable()
            if not dirs and compacting:
                # Compaction on full disks (isForceGCAllowWhenNoSpace) is how
                # they get room back: it may use the space left.
                dirs = self.ledger_dirs[:1]
            if not dirs:
                from dlog.errors import DiskFullError

                raise DiskFullError("no writable ledger directory for a new entry log")
            d = dirs[self._next_dir % len(dirs)]
            self._next_dir += 1
            self._last_id += 1
            log_id = self._last_id
            tmp = d / "lastId.tmp"
            tmp.write_text(f"{log_id:x}\n")
            os.replace(tmp, d / "lastId")
            if compacting:
                path = d / (log_file_name(log_id) + COMPACTING_SUFFIX)
                f = EntryLogFile(d, log_id, flush_every_bytes=self._flush_every, path=path)
            else:
                f = EntryLogFile(d, log_id, flush_every_bytes=self._flush_every)
                self._dir_of[log_id] = d
        fileio.sync_dir(d, "entry_log.sync_dir")
        return f

    def install(self, directory: Path, log_id: int, path: Path) -> Path:
        """Make a sealed compaction output at ``path`` an ordinary log
        (renamed into place, durably); returns its final path."""
        final = directory / log_file_name(log_id)
        if path != final:
            os.replace(path, final)
            fileio.sync_dir(directory, "entry_log.sync_dir")
        with self._lock:
            self._dir_of[log_id] = directory
            self._last_id = max(self._last_id, log_id)
        return final

    def remove_log(self, log_id: int) -> int:
        """Delete a log file for good; returns the bytes freed. Reads that
        already hold its descriptor finish (it is closed a while later)."""
        with self._lock:
            d = self._dir_of.pop(log_id, None)
            fd = self._readers.pop(log_id, None)
            if fd is not None:
                self._retired.append((time.monotonic(), fd))
            now = time.monotonic()
            while self._retired and now - self._retired[0][0] > RETIRED_FD_SECONDS:
                os.close(self._retired.pop(0)[1])
        if d is None:
            return 0
        path = d / log_file_name(log_id)
        try:
            size = path.stat().st_size
            path.unlink()
        except FileNotFoundError:
            return 0
        fileio.sync_dir(d, "entry_log.sync_dir")
        return size

    def directory_of(self, log_id: int) -> Path | None:
        with self._lock:
            return self._dir_of.get(log_id)

    def path_of(self, log_id: int) -> Path:
        d = self._dir_of.get(log_id)
        if d is None:
            raise FileNotFoundError(f"entry log {log_id:x}.log does not exist")
        return d / log_file_name(log_id)

    def _reader_fd(self, log_id: int) -> int:
        with self._lock:
            fd = self._readers.get(log_id)
            if fd is not None:
                self._readers.move_to_end(log_id)
                return fd
        fd = os.open(self.path_of(log_id), os.O_RDONLY)
        with self._lock:
            other = self._readers.get(log_id)
            if other is not None:
                os.close(fd)
                return other
            self._readers[log_id] = fd
            while len(self._readers) > self._max_readers:
                _, old = self._readers.popitem(last=False)
                os.close(old)
        return fd

    def read_entry(self, loc: int, ledger_id: int, entry_id: int) -> bytes:
        """The entry stored at ``loc``; checks it is the one asked for."""
        log_id, pos = split_location(loc)
        fd = self._reader_fd(log_id)
        head = os.pread(fd, 4 + 16, pos - 4)
        if len(head) < 20:
            raise CorruptedFileError(f"entry log {log_id:x}: short read at {pos}")
        (size,) = _SIZE.unpack_from(head)
        lid, eid = _IDS.unpack_from(head, 4)
        if size < 16 or lid != ledger_id or eid != entry_id:
            raise CorruptedFileError(
                f"entry log {log_id:x} at {pos}: expected ledger {ledger_id} entry {entry_id}, "
                f"found ledger {lid} entry {eid} (size {size})"
            )
        end = os.fstat(fd).st_size
        if pos + size > end:
            # Before the read: a corrupted size would have it allocate up to 2 GiB.
            raise CorruptedFileError(
                f"entry log {log_id:x} at {pos}: ledger {lid} entry {eid} of {size} bytes "
                f"would end past the end of the file ({end} bytes)"
            )
        data = os.pread(fd, size, pos)
        if len(data) != size:
            raise CorruptedFileError(f"entry log {log_id:x}: entry at {pos} is truncated")
        return data

    def read_following(
        self, loc: int, ledger_id: int, max_entries: int, max_bytes: int = 1 << 20
    ) -> list[tuple[int, int, bytes]]:
        """Entries of ``ledger_id`` stored right after ``loc`` (read-ahead):
        ``[(entry_id, location, data)]``, stopping at another ledger."""
        if max_entries <= 0:
            return []
        log_id, pos = split_location(loc)
        fd = self._reader_fd(log_id)
        head = os.pread(fd, 4, pos - 4)
        if len(head) < 4:
            return []
        (size,) = _SIZE.unpack(head)
        start = pos + size
        chunk = os.pread(fd, max_bytes, start)
        out: list[tuple[int, int, bytes]] = []
        off = 0
        while len(out) < max_entries and off + 20 <= len(chunk):
            (n,) = _SIZE.unpack_from(chunk, off)
            if n < 16 or off + 4 + n > len(chunk):
                break
            lid, eid = _IDS.unpack_from(chunk, off + 4)
            if lid != ledger_id or eid < 0:
                break
            out.append((eid, location(log_id, start + off + 4), chunk[off + 4 : off + 4 + n]))
            off += 4 + n
        return out

    def scan(self, log_id: int) -> Iterator[tuple[int, int, int, int]]:
        """Yield (ledgerId, entryId, location, size) of every entry in a log.

        An unsealed log (a crash) ends quietly at its torn tail: a length
        that is zero or runs past the end of the file. In a sealed log the
        entries end exactly where the ledgers map starts, so stopping
        anywhere else is corruption and raises :class:`CorruptedFileError`
        (a compaction must not copy part of a log and then delete it)."""
        path = self.path_of(log_id)
        # Record headers only, through a buffered reader: a log is up to
        # logSizeLimit (1 GiB by default) and must not be read into memory.
        with open(path, "rb", buffering=1 << 20) as f:
            map_offset, _ = parse_header(f.read(HEADER_SIZE), path)
            size = os.fstat(f.fileno()).st_size
            _check_map_offset(path, map_offset, size)
            sealed = map_offset > 0
            end = map_offset if sealed else size
            pos = HEADER_SIZE
            f.seek(pos)
            while pos + 4 <= end:
                head = f.read(20)
                n = _SIZE.unpack_from(head)[0] if len(head) >= 4 else 0
                if n <= 0 or pos + 4 + n > end:
                    break
                if n < 16 or len(head) < 20:
                    raise CorruptedFileError(f"{path}: record of {n} bytes at {pos}")
                lid, eid = _IDS.unpack_from(head, 4)
                if lid != INVALID_LID:
                    yield lid, eid, location(log_id, pos + 4), n
                pos += 4 + n
                f.seek(pos)
            if sealed and pos != end:
                raise CorruptedFileError(
                    f"{path}: entries end at byte {pos} (a bad record length or a short "
                    f"file) but the ledgers map starts at {end}"
                )

    def read_ledgers_map(self, log_id: int) -> dict[int, int] | None:
        """The ledgers map of a sealed log, or None if the log was not sealed.
        Reads the header and the map only (it is at the end of the log)."""
        path = self.path_of(log_id)
        with open(path, "rb") as f:
            map_offset, count = parse_header(f.read(HEADER_SIZE), path)
            _check_map_offset(path, map_offset, os.fstat(f.fileno()).st_size)
            if map_offset <= 0:
                return None
            f.seek(map_offset)
            data = f.read()
        out: dict[int, int] = {}
        pos = 0
        while pos + 4 <= len(data) and len(out) < count:
            (n,) = _SIZE.unpack_from(data, pos)
            at = map_offset + pos
            if n < _MAP_HEAD.size or pos + 4 + n > len(data):
                raise CorruptedFileError(f"{path}: bad ledgers map record at {at}")
            lid, eid, items = _MAP_HEAD.unpack_from(data, pos + 4)
            if (
                lid != INVALID_LID
                or eid != LEDGERS_MAP_ENTRY_ID
                or _MAP_HEAD.size + items * 16 != n
            ):
                raise CorruptedFileError(f"{path}: bad ledgers map header at {at}")
            for i in range(items):
                ledger, size = _MAP_ITEM.unpack_from(data, pos + 4 + _MAP_HEAD.size + i * 16)
                out[ledger] = size
            pos += 4 + n
        if len(out) != count:
            raise CorruptedFileError(f"{path}: ledgers map has {len(out)} of {count} ledgers")
        return out

    def close(self) -> None:
        with self._lock:
            for fd in self._readers.values():
                os.close(fd)
            self._readers.clear()
            for _, fd in self._retired:
                os.close(fd)
            self._retired.clear()
