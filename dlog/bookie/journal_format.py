"""On-disk format of BookKeeper journal files and the lastMark checkpoint.

A journal file ``<hex id>.txn`` starts with a 512-byte header (magic
``BKLG``, an int version, zero padding). Records follow: a 4-byte length and
the entry bytes, whose first 16 bytes are (ledgerId, entryId). Each group
commit ends with a padding record so the next group starts aligned. A length
of 0 (preallocated zeros) ends the journal.
"""

from __future__ import annotations

import dataclasses
import os
import struct
from collections.abc import Iterator
from pathlib import Path

from dlog.bookie import fileio
from dlog.errors import CorruptedFileError

MAGIC = b"BKLG"
VERSION = 6  # V5 added alignment padding, V6 explicit-LAC records
HEADER_SIZE = 512
PADDING_MASK = -0x100

# Meta-records carry a negative entry id.
METAENTRY_ID_LEDGER_KEY = -0x1000
METAENTRY_ID_FENCE_KEY = -0x2000
METAENTRY_ID_FORCE_LEDGER = -0x4000
METAENTRY_ID_LEDGER_EXPLICITLAC = -0x8000

_LEN = struct.Struct(">i")
_IDS = struct.Struct(">qq")
_MARK = struct.Struct(">qq")
_PADDING_HEAD = struct.Struct(">ii")

#: Largest record we accept while scanning; anything bigger is a torn tail.
MAX_RECORD_SIZE = 64 * 1024 * 1024


def journal_file_name(journal_id: int) -> str:
    return f"{journal_id:x}.txn"


def list_journal_ids(directory: Path) -> list[int]:
    """Journal ids present in ``directory``, oldest first."""
    ids = []
    try:
        names = os.listdir(directory)
    except FileNotFoundError:
        return []
    for name in names:
        if name.endswith(".txn"):
            try:
                ids.append(int(name[:-4], 16))
            except ValueError:
                continue
    return sorted(ids)


def header_bytes() -> bytes:
    return (MAGIC + struct.pack(">i", VERSION)).ljust(HEADER_SIZE, b"\0")


def check_header(data: bytes, path: Path) -> int:
    """Validate a journal header; returns the offset of the first record."""
    if len(data) < 8 or data[:4] != MAGIC:
        raise CorruptedFileError(f"{path}: not a journal file (bad magic)")
    version = struct.unpack_from(">i", data, 4)[0]
    if version < 1 or version > VERSION:
        raise CorruptedFileError(f"{path}: unsupported journal version {version}")
    return HEADER_SIZE if version >= 5 else 8


def padding_record(position: int, alignment: int) -> bytes:
    """The padding that brings ``position`` to a multiple of ``alignment``."""
    rem = position % alignment
    if rem == 0:
        return b""
    gap = alignment - rem
    if gap < _PADDING_HEAD.size:
        gap += alignment
    return _PADDING_HEAD.pack(PADDING_MASK, gap - _PADDING_HEAD.size) + bytes(
        gap - _PADDING_HEAD.size
    )


def frame_record(data: bytes) -> bytes:
    return _LEN.pack(len(data)) + data


def ledger_key_record(ledger_id: int, master_key: bytes) -> bytes:
    return _IDS.pack(ledger_id, METAENTRY_ID_LEDGER_KEY) + _LEN.pack(len(master_key)) + master_key


def fence_record(ledger_id: int) -> bytes:
    return _IDS.pack(ledger_id, METAENTRY_ID_FENCE_KEY)


def force_ledger_record(ledger_id: int) -> bytes:
    return _IDS.pack(ledger_id, METAENTRY_ID_FORCE_LEDGER)


def explicit_lac_record(ledger_id: int, lac_body: bytes) -> bytes:
    return (
        _IDS.pack(ledger_id, METAENTRY_ID_LEDGER_EXPLICITLAC) + _LEN.pack(len(lac_body)) + lac_body
    )


def parse_ids(record: bytes) -> tuple[int, int]:
    if len(record) < 16:
        raise CorruptedFileError(f"journal record of {len(record)} bytes is too short")
    return _IDS.unpack_from(record, 0)


def parse_meta_payload(record: bytes) -> bytes:
    """The length-prefixed payload of a ledger-key or explicit-LAC record."""
    if len(record) < 20:
        raise CorruptedFileError("journal meta-record is truncated")
    (n,) = _LEN.unpack_from(record, 16)
    if n < 0 or 20 + n > len(record):
        raise CorruptedFileError(
            f"journal meta-record has a bad length: {n} payload bytes in a {len(record)}-byte record"
        )
    if 20 + n < len(record):  # BookKeeper writes nothing after the payload
        raise CorruptedFileError(
            f"journal meta-record has {len(record) - 20 - n} bytes after its {n}-byte payload"
        )
    return record[20 : 20 + n]


def record_damage(record: bytes) -> str | None:
    """Why a record that framed well cannot be replayed: too short for its
    ids, or a ledger-key or explicit-LAC record whose own payload length is
    wrong (flipped bytes inside it); None when it can be."""
    try:
        _, entry_id = parse_ids(record)
        if entry_id in (METAENTRY_ID_LEDGER_KEY, METAENTRY_ID_LEDGER_EXPLICITLAC):
            parse_meta_payload(record)
    except CorruptedFileError as e:
        return str(e)
    return None


@dataclasses.dataclass(frozen=True, order=True)
class LogMark:
    """A position in the journal: everything before it is in ledger storage
    once a checkpoint has written it."""

    journal_id: int = 0
    offset: int = 0

    def to_bytes(self) -> bytes:
        return _MARK.pack(self.journal_id, self.offset)

    @classmethod
    def from_bytes(cls, data: bytes) -> LogMark:
        if len(data) != _MARK.size:
            raise CorruptedFileError(f"lastMark must be {_MARK.size} bytes, found {len(data)}")
        return cls(*_MARK.unpack(data))


def scan_journal(path: Path, start_offset: int = 0) -> Iterator[tuple[int, bytes]]:
    """Yield ``(offset after record, record bytes)`` from ``start_offset``.

    Stops quietly at the end of the written part: a zero length, or a record
    that runs past the end of the file or has an impossible length (a torn
    tail after a crash: it was never acknowledged)."""
    with open(path, "rb") as f:
        data = f.read()
    first = check_header(data, path)
    pos = max(start_offset, first)
    end = len(data)
    while pos + 4 <= end:
        (n,) = _LEN.unpack_from(data, pos)
        if n == 0:
            return
        if n == PADDING_MASK:
            if pos + 8 > end:
                return
            (pad,) = _LEN.unpack_from(data, pos + 4)
            if pad < 0 or pos + 8 + pad > end:
                return
            pos += 8 + pad
            continue
        if n < 0 or n > MAX_RECORD_SIZE or pos + 4 + n > end:
            return
        record = data[pos + 4 : pos + 4 + n]
        pos += 4 + n
        yield pos, record


def damage_at(path: Path, offset: int) -> str | None:
    """Why :func:`scan_journal` stopped at ``offset`` if not at the written
    end (a zero length, or the end of the file): the damaged length found
    there. Replay cannot tell a torn record from flipped bytes (records carry
    no checksum, as in BookKeeper), but either way nothing after it is
    replayed, which the operator must hear about."""
    with open(path, "rb") as f:
        f.seek(max(offset, HEADER_SIZE))
        head = f.read(8)
    if len(head) < 4:
        return None
    (n,) = _LEN.unpack_from(head, 0)
    if n == 0:
        return None
    if n == PADDING_MASK:
        return "a padding record with a bad length" if len(head) == 8 else None
    return f"a record length of {n}"


def read_last_mark(ledger_dirs: list[Path], name: str = "lastMark") -> LogMark:
    """The newest mark among the ledger dirs (all are written at each
    checkpoint, so a crash mid-write leaves at worst an older one)."""
    best = LogMark()
    for d in ledger_dirs:
        p = d / name
        try:
            mark = LogMark.from_bytes(p.read_bytes())
        except FileNotFoundError:
            continue
        except CorruptedFileError:
            continue
        best = max(best, mark)
    return best


def write_last_mark(ledger_dirs: list[Path], mark: LogMark, name: str = "lastMark") -> None:
    """Durably replace the mark in every ledger dir (write, fsync, rename)."""
    data = mark.to_bytes()
    for d in ledger_dirs:
        tmp = d / (name + ".tmp")
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
        try:
            fileio.pwrite(fd, data, 0, "checkpoint.write")
            fileio.fsync(fd, "checkpoint.fsync")
        finally:
            os.close(fd)
        os.replace(tmp, d / name)
        fileio.sync_dir(d, "checkpoint.fsync")
