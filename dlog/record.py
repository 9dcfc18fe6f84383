"""Log records and the BookKeeper entry format, compatible with DistributedLog.

Three nested layouts, all big-endian, as in Apache DistributedLog
(``LogRecord.java``, ``LogRecordSet.java``, ``EnvelopedEntry.java``,
``EnvelopedEntryWriter.java``, ``EnvelopedRecordSetWriter/Reader.java``):

**LogRecord** (20-byte header + payload)::

    int64 metadata   bits 0-15 flags (CONTROL=1, END_OF_STREAM=2, RECORD_SET=4)
                     bits 16-47 position within the log segment
                     bits 48-63 unused (zero)
    int64 txid
    int32 payload length
    bytes payload

**Entry** (what is stored in one BookKeeper entry; DistributedLog's
``EnvelopedEntry``, 13-byte header)::

    int8  version (1)
    int32 flags      bits 0-1 compression codec (0 none, 1 LZ4; 2 and 3 undefined)
    int32 decompressed length
    int32 stored length
    bytes records    a stream of LogRecords, compressed as a whole

DistributedLog segments whose metadata predates enveloped entries hold the
bare LogRecord stream with no envelope; :func:`decode_entry` reads those with
``enveloped=False`` (or ``None`` to detect: an envelope starts with byte 1, a
LogRecord with byte 0 because its top 16 metadata bits are unused).

**Record set** (the payload of a LogRecord flagged RECORD_SET; DistributedLog
clients use it to ship many small records as one; 16-byte header)::

    int32 metadata   bits 12-15 version (0x1000), bits 0-1 compression codec
    int32 record count
    int32 decompressed length
    int32 stored length
    bytes records    count times (int32 length, bytes), compressed as a whole

Records of a set share the set's txid and take consecutive slots and
positions. LZ4 is the raw LZ4 *block* format with no size prefix: the
decompressed length comes from the header (lz4-java's block codec).
DistributedLog's ``CompressionCodec.Type`` defines only NONE (0) and LZ4 (1);
codec bits 2 and 3 mean nothing to it, so dlog neither writes nor accepts
them (a Java reader would not decode them either).

Slot ids count records within the entry, record-set members included, so a
record's DLSN is ``(segment, entry, index of the record in the entry)``. Its
sequence id is ``segment start sequence id + position - 1``: positions start
at 1, and control records repeat the position of the last user record.
"""

from __future__ import annotations

import enum
import struct
from collections.abc import Iterable, Sequence
from operator import index
from typing import Any

import lz4.block

from dlog.dlsn import DLSN
from dlog.errors import InvalidRecordError, RecordTooLargeError
from dlog.extensions import extension

__all__ = [
    "ENTRY_HEADER_SIZE",
    "MAX_LOGRECORDSET_SIZE",
    "MAX_LOGRECORD_SIZE",
    "MAX_PAYLOAD_SIZE",
    "MAX_TXID",
    "RECORD_HEADER_SIZE",
    "RECORD_SET_HEADER_SIZE",
    "CompressionCodec",
    "LogRecord",
    "LogRecordWithDLSN",
    "RecordSetWriter",
    "build_record_set",
    "decode_entry",
    "decode_record",
    "encode_record",
    "record_set_count",
]

# ---------------------------------------------------------------------------
# Constants (LogRecord.java, LogRecordSet.java, EnvelopedEntry.java)
# ---------------------------------------------------------------------------

#: Largest serialized record (header + payload), 1 MiB - 8 KiB.
MAX_LOGRECORD_SIZE = 1024 * 1024 - 8 * 1024
#: Largest entry before compression (envelope header + records), 1 MiB - 4 KiB.
MAX_LOGRECORDSET_SIZE = 1024 * 1024 - 4 * 1024

RECORD_HEADER_SIZE = 20
ENTRY_HEADER_SIZE = 13
RECORD_SET_HEADER_SIZE = 16
#: Largest payload of one record: DistributedLog bounds the serialized size.
MAX_PAYLOAD_SIZE = MAX_LOGRECORD_SIZE - RECORD_HEADER_SIZE

MAX_TXID = (1 << 63) - 1
_INT64_MIN = -(1 << 63)
_INT32_MAX = (1 << 31) - 1

FLAG_CONTROL = 0x1
FLAG_END_OF_STREAM = 0x2
FLAG_RECORD_SET = 0x4
_KNOWN_FLAGS = FLAG_CONTROL | FLAG_END_OF_STREAM | FLAG_RECORD_SET
_POSITION_SHIFT = 16
# Anything outside the known flags and a non-negative int32 position: unused
# flag bits, position bit 31 (DistributedLog rejects positions > int32 max)
# and the 16 unused high bits.
METADATA_INVALID_MASK = 0xFFFF_8000_0000_0000 | (0xFFFF & ~_KNOWN_FLAGS)

ENTRY_VERSION = 1
ENTRY_CODEC_MASK = 0x3

RECORD_SET_VERSION = 0x1000
RECORD_SET_VERSION_MASK = 0xF000
RECORD_SET_CODEC_MASK = 0x3

#: Control records carry this payload (DistributedLog's CONTROL_RECORD_CONTENT).
CONTROL_RECORD_PAYLOAD = b"control"
#: DistributedLog's end-of-stream marker payload.
END_OF_STREAM_PAYLOAD = b"endOfStream"

# A corrupt header must not make us allocate gigabytes: an entry never holds
# more than MAX_LOGRECORDSET_SIZE before compression, and LZ4 expands at most
# 255x. The cap leaves room for writers with larger buffers.
MAX_DECOMPRESSED_SIZE = 8 * 1024 * 1024

_RECORD_HEADER = struct.Struct(">Qqi")  # metadata, txid, payload length
_ENTRY_HEADER = struct.Struct(">BIii")  # version, flags, decompressed, stored
_SET_HEADER = struct.Struct(">Iiii")  # metadata, count, decompressed, stored
_INT32 = struct.Struct(">i")

_pack_record_header = _RECORD_HEADER.pack
_unpack_record_header = _RECORD_HEADER.unpack_from
_unpack_int32 = _INT32.unpack_from
_pack_int32 = _INT32.pack
_tuple_new = tuple.__new__


class CompressionCodec(enum.IntEnum):
    """Codec ids in the envelope and record-set headers: exactly
    DistributedLog's ``CompressionCodec.Type`` codes, which stop at LZ4."""

    NONE = 0
    LZ4 = 1

    @classmethod
    def parse(cls, value: str | int | CompressionCodec) -> CompressionCodec:
        """Accept DistributedLog's config strings ("none", "lz4") or ids."""
        if isinstance(value, str):
            try:
                codec = cls[value.strip().upper()]
            except KeyError:
                raise ValueError(f"unknown compression codec {value!r}") from None
        else:
            try:
                codec = cls(value)
            except ValueError:
                raise ValueError(f"unknown compression codec {value!r}") from None
        return codec


# ---------------------------------------------------------------------------
# Records
# ---------------------------------------------------------------------------


def _check_txid(txid: Any) -> int:
    if type(txid) is not int:
        if isinstance(txid, bool):
            raise TypeError("txid must be an int, not bool")
        try:
            txid = index(txid)
        except TypeError:
            raise TypeError(f"txid must be an int, not {type(txid).__name__}") from None
    if not _INT64_MIN <= txid <= MAX_TXID:
        raise ValueError(f"txid {txid} is outside the int64 range")
    return txid


def _check_payload_size(size: int) -> None:
    if size > MAX_PAYLOAD_SIZE:
        raise RecordTooLargeError(
            f"log record of {size + RECORD_HEADER_SIZE} bytes ({size} bytes of payload) "
            f"exceeds the limit of {MAX_LOGRECORD_SIZE} bytes"
        )


class LogRecord:
    """A record to write: an application txid and opaque payload bytes.

    ``end_of_stream`` records must carry ``txid == MAX_TXID`` (DistributedLog
    relies on it to refuse any later segment); build them with
    :meth:`end_of_stream_marker`.
    """

    __slots__ = ("flags", "payload", "txid")

    txid: int
    payload: bytes
    flags: int

    def __init__(
        self,
        txid: int,
        payload: bytes | bytearray | memoryview,
        *,
        control: bool = False,
        end_of_stream: bool = False,
        record_set: bool = False,
    ) -> None:
        # Fast path first: this runs once per record written.
        if type(txid) is not int or not _INT64_MIN <= txid <= MAX_TXID:
            txid = _check_txid(txid)
        if type(payload) is not bytes:
            if not isinstance(payload, (bytearray, memoryview)):
                raise TypeError(f"payload must be bytes, not {type(payload).__name__}")
            payload = bytes(payload)
        if len(payload) > MAX_PAYLOAD_SIZE:
            _check_payload_size(len(payload))
        flags = 0
        if control or end_of_stream or record_set:
            if control:
                flags |= FLAG_CONTROL
            if end_of_stream:
                if txid != MAX_TXID:
                    raise ValueError(f"an end-of-stream record needs txid MAX_TXID, not {txid}")
                flags |= FLAG_END_OF_STREAM
            if record_set:
                record_set_count(payload)  # validates the header
                flags |= FLAG_RECORD_SET
        self.txid = txid
        self.payload = payload
        self.flags = flags

    @classmethod
    def control_record(cls, txid: int) -> LogRecord:
        """The control record DistributedLog writes to commit (txid = last user txid)."""
        return cls(txid, CONTROL_RECORD_PAYLOAD, control=True)

    @classmethod
    def end_of_stream_marker(cls) -> LogRecord:
        """The record that seals a log, as DistributedLog writes it."""
        return cls(MAX_TXID, END_OF_STREAM_PAYLOAD, end_of_stream=True)

    @property
    def control(self) -> bool:
        return bool(self.flags & FLAG_CONTROL)

    @property
    def end_of_stream(self) -> bool:
        return bool(self.flags & FLAG_END_OF_STREAM)

    @property
    def record_set(self) -> bool:
        return bool(self.flags & FLAG_RECORD_SET)

    @property
    def persistent_size(self) -> int:
        """Serialized size in an entry (header + payload)."""
        return RECORD_HEADER_SIZE + len(self.payload)

    def __eq__(self, other: object) -> bool:
        if type(other) is not type(self):
            return NotImplemented
        return (
            self.txid == other.txid and self.flags == other.flags and self.payload == other.payload
        )

    __hash__ = None  # type: ignore[assignment]

    def __repr__(self) -> str:
        return (
            f"LogRecord(txid={self.txid}, payload=<{len(self.payload)} bytes>"
            f"{_flag_text(self.flags)})"
        )


class LogRecordWithDLSN(LogRecord):
    """A record as read back: adds its DLSN, position and sequence id.

    Built by :func:`decode_entry` without re-validating fields it just parsed.
    Those the C codec builds (and their DLSNs) are left out of the cyclic
    garbage collector, as CPython leaves out tuples of plain values: they
    hold only ints and bytes, and a reader makes them by the hundred
    thousand a second. Do not store in one an object that refers back to it.
    """

    __slots__ = ("dlsn", "position", "sequence_id")

    dlsn: DLSN
    position: int
    sequence_id: int

    def __init__(
        self,
        txid: int,
        payload: bytes,
        flags: int,
        dlsn: DLSN,
        position: int,
        sequence_id: int,
    ) -> None:
        self.txid = txid
        self.payload = payload
        self.flags = flags
        self.dlsn = dlsn
        self.position = position
        self.sequence_id = sequence_id

    def __eq__(self, other: object) -> bool:
        if type(other) is not LogRecordWithDLSN:
            return NotImplemented
        return (
            self.dlsn == other.dlsn
            and self.txid == other.txid
            and self.flags == other.flags
            and self.position == other.position
            and self.sequence_id == other.sequence_id
            and self.payload == other.payload
        )

    __hash__ = None

    def __repr__(self) -> str:
        return (
            f"LogRecordWithDLSN(dlsn={self.dlsn!r}, txid={self.txid}, "
            f"position={self.position}, sequence_id={self.sequence_id}, "
            f"payload=<{len(self.payload)} bytes>{_flag_text(self.flags)})"
        )


def _flag_text(flags: int) -> str:
    out = ""
    if flags & FLAG_CONTROL:
        out += ", control=True"
    if flags & FLAG_END_OF_STREAM:
        out += ", end_of_stream=True"
    if flags & FLAG_RECORD_SET:
        out += ", record_set=True"
    return out


def _check_position(position: int) -> None:
    if type(position) is not int or not 0 <= position <= _INT32_MAX:
        raise ValueError(f"position {position!r} must be an int in [0, 2**31 - 1]")


def encode_record(record: LogRecord, position: int = 0) -> bytes:
    """One LogRecord in wire form (header + payload)."""
    _check_position(position)
    payload = record.payload
    return (
        _pack_record_header(record.flags | (position << _POSITION_SHIFT), record.txid, len(payload))
        + payload
    )


def decode_record(data: bytes | bytearray | memoryview) -> tuple[LogRecord, int]:
    """Parse exactly one LogRecord; returns it with its position in the segment."""
    buf = _as_bytes(data, "log record")
    metadata, txid, length, end = _parse_record_header(buf, 0, len(buf), "log record")
    if end != len(buf):
        raise InvalidRecordError(
            f"log record has {len(buf) - end} bytes of trailing data after its payload"
        )
    record = LogRecord.__new__(LogRecord)
    record.txid = txid
    record.payload = buf[RECORD_HEADER_SIZE:end]
    record.flags = metadata & 0xFFFF
    if record.flags & FLAG_RECORD_SET:
        record_set_count(record.payload)
    return record, metadata >> _POSITION_SHIFT


# ---------------------------------------------------------------------------
# Record sets (LogRecordSet: the payload of a RECORD_SET record)
# ---------------------------------------------------------------------------


def build_record_set(
    payloads: Iterable[bytes | bytearray | memoryview],
    *,
    compression: str | int | CompressionCodec = CompressionCodec.NONE,
) -> bytes:
    """Pack payloads into DistributedLog's LogRecordSet format.

    Wrap the result as ``LogRecord(txid, data, record_set=True)``; its members
    share that txid. The set as a whole must fit in one record.
    """
    codec = CompressionCodec.parse(compression)
    body = bytearray()
    count = 0
    for p in payloads:
        if not isinstance(p, (bytes, bytearray, memoryview)):
            raise TypeError(f"payload must be bytes, not {type(p).__name__}")
        n = len(p)
        _check_payload_size(n)
        body += _pack_int32(n)
        body += p
        count += 1
        if len(body) > MAX_PAYLOAD_SIZE:
            # Bound the raw size too: a reader must never inflate a set past the limit.
            raise RecordTooLargeError(
                f"record set of {len(body) + RECORD_SET_HEADER_SIZE} bytes exceeds "
                f"the record limit of {MAX_PAYLOAD_SIZE} bytes of payload"
            )
    stored, codec = _compress(body, codec)
    metadata = RECORD_SET_VERSION | codec
    data = _SET_HEADER.pack(metadata, count, len(body), len(stored)) + stored
    _check_payload_size(len(data))
    return data


def record_set_count(data: bytes | bytearray | memoryview) -> int:
    """Number of records in a serialized record set (header check only)."""
    buf = _as_bytes(data, "record set")
    if len(buf) < RECORD_SET_HEADER_SIZE:
        raise InvalidRecordError(
            f"record set truncated: {len(buf)} bytes, header needs {RECORD_SET_HEADER_SIZE}"
        )
    metadata, count, _, _ = _SET_HEADER.unpack_from(buf)
    _check_set_metadata(metadata)
    if count < 0:
        raise InvalidRecordError(f"record set has a negative record count {count}")
    return count


def _check_set_metadata(metadata: int) -> int:
    version = metadata & RECORD_SET_VERSION_MASK
    if version != RECORD_SET_VERSION:
        raise InvalidRecordError(
            f"unknown record set version {version:#x} (expected {RECORD_SET_VERSION:#x})"
        )
    if metadata & ~(RECORD_SET_VERSION_MASK | RECORD_SET_CODEC_MASK):
        raise InvalidRecordError(f"record set metadata {metadata:#010x} has unknown bits set")
    return metadata & RECORD_SET_CODEC_MASK


# ---------------------------------------------------------------------------
# Entry writer (EnvelopedEntryWriter)
# ---------------------------------------------------------------------------


class RecordSetWriter:
    """Batches records into one BookKeeper entry.

    Positions follow DistributedLog's segment writer: ``last_position`` is
    the position of the last record already in the segment (0 when it is
    new); each user record takes the next one (a record set takes one per
    member) and control / end-of-stream records repeat the last one. Carry
    :attr:`last_position` over to the writer of the next entry.

    ``max_bytes`` bounds the entry before compression, envelope included
    (DistributedLog's rule). A record that would overflow it is refused unless
    the entry is still empty, so one large record can always go out alone;
    ``MAX_LOGRECORDSET_SIZE`` is never exceeded.
    """

    __slots__ = (
        "_buf",
        "_codec",
        "_count",
        "_enveloped",
        "_has_user_records",
        "_last_position",
        "_limit",
        "_max_txid",
    )

    def __init__(
        self,
        *,
        compression: str | int | CompressionCodec = CompressionCodec.NONE,
        max_bytes: int = MAX_LOGRECORDSET_SIZE,
        last_position: int = 0,
        enveloped: bool = True,
    ) -> None:
        self._codec = CompressionCodec.parse(compression)
        header = ENTRY_HEADER_SIZE if enveloped else 0
        if type(max_bytes) is not int or not header < max_bytes <= MAX_LOGRECORDSET_SIZE:
            raise ValueError(
                f"max_bytes {max_bytes!r} must be in ({header}, {MAX_LOGRECORDSET_SIZE}]"
            )
        _check_position(last_position)
        self._enveloped = enveloped
        self._limit = max_bytes
        self._buf = bytearray(header)
        self._count = 0
        self._last_position = last_position
        self._has_user_records = False
        self._max_txid: int | None = None

    # -- state ------------------------------------------------------------

    @property
    def num_records(self) -> int:
        """Records in the entry, record-set members counted one by one."""
        return self._count

    @property
    def num_bytes(self) -> int:
        """Entry size before compression, envelope header included."""
        return len(self._buf)

    @property
    def last_position(self) -> int:
        return self._last_position

    @property
    def has_user_records(self) -> bool:
        return self._has_user_records

    @property
    def max_txid(self) -> int | None:
        return self._max_txid

    def __len__(self) -> int:
        return self._count

    def fits(self, record: LogRecord | int) -> bool:
        """Whether a record (or a record with this payload length) can be appended."""
        n = record if isinstance(record, int) else len(record.payload)
        if n > MAX_PAYLOAD_SIZE:
            return False
        new_size = len(self._buf) + RECORD_HEADER_SIZE + n
        return new_size <= self._limit or (self._count == 0 and new_size <= MAX_LOGRECORDSET_SIZE)

    # -- writing ----------------------------------------------------------

    def append(self, record: LogRecord) -> int:
        """Add a record; returns its slot id (its DLSN's slot once written)."""
        payload = record.payload
        n = len(payload)
        buf = self._buf
        new_size = len(buf) + RECORD_HEADER_SIZE + n
        if new_size > self._limit and (self._count or new_size > MAX_LOGRECORDSET_SIZE):
            self._refuse(n)
        if n > MAX_PAYLOAD_SIZE:  # only if the payload was swapped after construction
            _check_payload_size(n)
        flags = record.flags
        txid = record.txid
        slot = self._count
        if flags & (FLAG_CONTROL | FLAG_END_OF_STREAM):
            # DistributedLog's segment writer does not advance the position
            # for the records it writes itself.
            position = self._last_position
            members = 1
        else:
            members = record_set_count(payload) if flags & FLAG_RECORD_SET else 1
            position = self._last_position + 1
            if position + members - 1 > _INT32_MAX:
                raise ValueError("position within the segment overflows int32")
            self._last_position = position + members - 1
            self._has_user_records = True
        buf += _pack_record_header(flags | (position << _POSITION_SHIFT), txid, n)
        buf += payload
        self._count = slot + members
        if self._max_txid is None or txid > self._max_txid:
            self._max_txid = txid
        return slot

    def extend(self, records: Iterable[LogRecord]) -> int:
        """Append records in order; returns the slot id of the first.

        All or nothing: if one does not fit, none are added.
        """
        first = self._count
        saved = (len(self._buf), self._count, self._last_position,
                 self._has_user_records, self._max_txid)  # fmt: skip
        try:
            for record in records:
                self.append(record)
        except BaseException:
            del self._buf[saved[0] :]
            (_, self._count, self._last_position,
             self._has_user_records, self._max_txid) = saved  # fmt: skip
            raise
        return first

    def append_many(self, records: Sequence[LogRecord], start: int, threshold: int) -> int:
        """Append ``records[start:]`` in order while they fit, stopping after
        the record that brings the entry to ``threshold`` bytes or more (a
        writer's flush threshold); returns the index after the last record
        appended. A record that does not fit ends the run unless the entry
        is empty (then it raises, as :meth:`append` does).

        The slots of the records appended are consecutive, from
        :attr:`num_records` before the call, when none is a record set.
        """
        buf = self._buf
        limit = self._limit
        count = self._count
        position = first_position = self._last_position
        max_txid = self._max_txid
        pack = _pack_record_header
        header = RECORD_HEADER_SIZE
        n = len(records)
        i = start
        try:
            if _codec is not None and type(records) is list:
                # The same loop in C, up to a record that needs the one below.
                i, count, position, max_txid, done = _codec.append_plain(
                    buf, records, start, limit, threshold, count, position, max_txid
                )
                if done:
                    return i
            while i < n:
                record = records[i]
                payload = record.payload
                size = len(payload)
                new_size = len(buf) + header + size
                if new_size > limit and (count or new_size > MAX_LOGRECORDSET_SIZE):
                    if count:
                        break
                    self._refuse(size)
                txid = record.txid
                if record.flags or size > MAX_PAYLOAD_SIZE or position >= _INT32_MAX:
                    # Anything but a plain record: the general path.
                    self._count, self._last_position, self._max_txid = count, position, max_txid
                    self.append(record)
                    count, position, max_txid = self._count, self._last_position, self._max_txid
                else:
                    # The state moves only once the bytes are in (a held
                    # view of the buffer makes ``+=`` raise BufferError).
                    buf += pack((position + 1) << _POSITION_SHIFT, txid, size)
                    buf += payload
                    position += 1
                    count += 1
                    if max_txid is None or txid > max_txid:
                        max_txid = txid
                i += 1
                if len(buf) >= threshold:
                    break
        finally:
            if position != first_position:  # only user records advance it
                self._has_user_records = True
            self._count, self._last_position, self._max_txid = count, position, max_txid
        return i

    def _refuse(self, payload_len: int) -> None:
        _check_payload_size(payload_len)
        raise RecordTooLargeError(
            f"log record of {RECORD_HEADER_SIZE + payload_len} bytes does not fit: the entry "
            f"holds {len(self._buf)} of {self._limit} bytes; flush it first"
        )

    def build(self) -> bytes:
        """The entry bytes to add to the ledger. The writer stays usable."""
        buf = self._buf
        if not self._enveloped:
            return bytes(buf)
        data_len = len(buf) - ENTRY_HEADER_SIZE
        if self._codec is CompressionCodec.NONE:
            _ENTRY_HEADER.pack_into(buf, 0, ENTRY_VERSION, 0, data_len, data_len)
            return bytes(buf)
        # Compress straight from the buffer, and release the view at once so
        # the bytearray can still grow if the caller appends after building.
        view = memoryview(buf)[ENTRY_HEADER_SIZE:]
        try:
            compressed = lz4.block.compress(view, store_size=False) if data_len else b""
        finally:
            view.release()
        if not data_len or len(compressed) >= data_len:  # see _compress
            _ENTRY_HEADER.pack_into(buf, 0, ENTRY_VERSION, 0, data_len, data_len)
            return bytes(buf)
        return (
            _ENTRY_HEADER.pack(ENTRY_VERSION, self._codec, data_len, len(compressed)) + compressed
        )


def _compress(
    data: bytes | bytearray | memoryview, codec: CompressionCodec
) -> tuple[bytes | bytearray | memoryview, CompressionCodec]:
    """Compress; falls back to NONE when LZ4 would not save space.

    DistributedLog keeps LZ4 even when it grows the data; both are valid to
    every reader, and storing plain bytes saves the reader a copy.
    """
    if codec is CompressionCodec.NONE or len(data) == 0:
        return data, CompressionCodec.NONE
    compressed = lz4.block.compress(data, store_size=False)
    if len(compressed) >= len(data):
        return data, CompressionCodec.NONE
    return compressed, codec


# ---------------------------------------------------------------------------
# Reading
# ---------------------------------------------------------------------------


def _as_bytes(data: Any, what: str) -> bytes:
    if type(data) is bytes:
        return data
    if isinstance(data, (bytearray, memoryview)):
        return bytes(data)
    raise InvalidRecordError(f"{what} must be bytes, not {type(data).__name__}")


def _decompress(stored: bytes, codec: int, size: int, what: str) -> bytes:
    if codec == CompressionCodec.NONE:
        if size != len(stored):
            raise InvalidRecordError(
                f"{what} is uncompressed but its lengths differ: "
                f"decompressed {size}, stored {len(stored)}"
            )
        return stored
    if codec == CompressionCodec.LZ4:
        if size > MAX_DECOMPRESSED_SIZE or size > 255 * len(stored) + 16:
            raise InvalidRecordError(
                f"{what} claims {size} bytes after decompressing {len(stored)} bytes"
            )
        try:
            out = lz4.block.decompress(stored, uncompressed_size=size)
        except Exception as e:  # LZ4BlockError, ValueError, MemoryError: all corruption
            raise InvalidRecordError(f"{what} has corrupt LZ4 data: {e}") from None
        if len(out) != size:
            raise InvalidRecordError(f"{what} decompressed to {len(out)} bytes, header says {size}")
        return out
    raise InvalidRecordError(
        f"{what} has unknown compression codec {codec} (DistributedLog defines 0 none, 1 LZ4)"
    )


def _open_envelope(buf: bytes) -> bytes:
    n = len(buf)
    if n < ENTRY_HEADER_SIZE:
        raise InvalidRecordError(
            f"entry truncated: {n} bytes, envelope header needs {ENTRY_HEADER_SIZE}"
        )
    version, flags, size, stored_len = _ENTRY_HEADER.unpack_from(buf)
    if version != ENTRY_VERSION:
        raise InvalidRecordError(f"unknown entry envelope version {version} (expected 1)")
    if flags & ~ENTRY_CODEC_MASK:
        raise InvalidRecordError(f"entry envelope flags {flags:#010x} have unknown bits set")
    if size < 0 or stored_len < 0:
        raise InvalidRecordError(
            f"entry envelope has a negative length (decompressed {size}, stored {stored_len})"
        )
    if stored_len != n - ENTRY_HEADER_SIZE:
        raise InvalidRecordError(
            f"entry envelope says {stored_len} stored bytes but {n - ENTRY_HEADER_SIZE} follow"
        )
    return _decompress(buf[ENTRY_HEADER_SIZE:], flags & ENTRY_CODEC_MASK, size, "entry")


def _parse_record_header(buf: bytes, off: int, n: int, what: str) -> tuple[int, int, int, int]:
    if n - off < RECORD_HEADER_SIZE:
        raise InvalidRecordError(
            f"{what} truncated at byte {off}: {n - off} bytes left, "
            f"record header needs {RECORD_HEADER_SIZE}"
        )
    metadata, txid, length = _unpack_record_header(buf, off)
    if metadata & METADATA_INVALID_MASK:
        raise InvalidRecordError(
            f"{what}: record at byte {off} has invalid metadata {metadata:#018x}"
        )
    if length < 0:
        raise InvalidRecordError(f"{what}: record at byte {off} has negative length {length}")
    end = off + RECORD_HEADER_SIZE + length
    if end > n:
        raise InvalidRecordError(
            f"{what} truncated: record at byte {off} needs {length} payload bytes, "
            f"{n - off - RECORD_HEADER_SIZE} left"
        )
    return metadata, txid, length, end


def _expand_record_set(
    payload: bytes,
    txid: int,
    position: int,
    segment_seq_no: int,
    entry_id: int,
    slot: int,
    seq_base: int,
    out: list[LogRecordWithDLSN],
) -> int:
    """Append the members of a record set to ``out``; returns how many."""
    n = len(payload)
    if n < RECORD_SET_HEADER_SIZE:
        raise InvalidRecordError(
            f"record set truncated: {n} bytes, header needs {RECORD_SET_HEADER_SIZE}"
        )
    metadata, count, size, stored_len = _SET_HEADER.unpack_from(payload)
    codec = _check_set_metadata(metadata)
    if count < 0 or size < 0 or stored_len < 0:
        raise InvalidRecordError(
            f"record set has a negative field (count {count}, decompressed {size}, "
            f"stored {stored_len})"
        )
    if stored_len != n - RECORD_SET_HEADER_SIZE:
        raise InvalidRecordError(
            f"record set says {stored_len} stored bytes but {n - RECORD_SET_HEADER_SIZE} follow"
        )
    if count * 4 > size:
        raise InvalidRecordError(f"record set claims {count} records in {size} bytes")
    if position + count - 1 > _INT32_MAX:
        raise InvalidRecordError("record set positions overflow int32")
    body = _decompress(payload[RECORD_SET_HEADER_SIZE:], codec, size, "record set")
    off = 0
    new = LogRecordWithDLSN.__new__
    append = out.append
    for i in range(count):
        if size - off < 4:
            raise InvalidRecordError(
                f"record set truncated: record {i} of {count} has no length at byte {off}"
            )
        (length,) = _unpack_int32(body, off)
        off += 4
        end = off + length
        if length < 0 or end > size:
            raise InvalidRecordError(
                f"record set: record {i} of {count} has bad length {length} at byte {off - 4}"
            )
        rec = new(LogRecordWithDLSN)
        rec.txid = txid
        rec.payload = body[off:end]
        rec.flags = 0
        rec.dlsn = _tuple_new(DLSN, (segment_seq_no, entry_id, slot + i))
        rec.position = position + i
        rec.sequence_id = seq_base + position + i
        append(rec)
        off = end
    if off != size:
        raise InvalidRecordError(
            f"record set has {size - off} bytes left after its {count} records"
        )
    return count


def decode_entry(
    entry: bytes | bytearray | memoryview,
    segment_seq_no: int,
    entry_id: int,
    start_sequence_id: int = 0,
    *,
    enveloped: bool | None = True,
    expand_record_sets: bool = True,
) -> list[LogRecordWithDLSN]:
    """All records of one BookKeeper entry, with DLSNs and sequence ids.

    ``start_sequence_id`` is the segment's start sequence id from its
    metadata. ``enveloped`` follows the segment's metadata version (True for
    every segment dlog writes; ``None`` detects it from the first byte).
    Record sets are expanded into their members unless ``expand_record_sets``
    is false, in which case a set comes back as one record flagged
    ``record_set`` and takes as many slots as it has members.

    Any malformed input raises :class:`InvalidRecordError`.
    """
    for name, value in (
        ("segment_seq_no", segment_seq_no),
        ("entry_id", entry_id),
        ("start_sequence_id", start_sequence_id),
    ):
        if type(value) is not int:
            raise TypeError(f"{name} must be an int, not {type(value).__name__}")
        if not _INT64_MIN <= value <= MAX_TXID:
            raise ValueError(f"{name} {value} is outside the int64 range")
    buf = _as_bytes(entry, "entry")
    if enveloped is None:
        enveloped = len(buf) > 0 and buf[0] == ENTRY_VERSION
    if enveloped:
        buf = _open_envelope(buf)
    seq_base = start_sequence_id - 1
    if _codec is not None:
        # Plain records only; None hands anything else to the loop below.
        records = _codec.decode_records(buf, segment_seq_no, entry_id, seq_base)
        if records is not None:
            return records
    return _decode_records(buf, segment_seq_no, entry_id, seq_base, expand_record_sets)


def _decode_records(
    buf: bytes, segment_seq_no: int, entry_id: int, seq_base: int, expand_record_sets: bool
) -> list[LogRecordWithDLSN]:
    """:func:`decode_entry`'s loop over an entry's records, every case and
    every error (the C codec does only plain, well-formed records)."""
    n = len(buf)
    out: list[LogRecordWithDLSN] = []
    # Hot loop: everything bound to locals.
    append = out.append
    cls = LogRecordWithDLSN
    new = cls.__new__
    dlsn_cls = DLSN
    tuple_new = _tuple_new
    unpack = _unpack_record_header
    invalid = METADATA_INVALID_MASK
    struct_error = struct.error
    off = 0
    slot = 0
    while off < n:
        try:
            metadata, txid, length = unpack(buf, off)
        except struct_error:
            metadata = txid = length = 0
            _parse_record_header(buf, off, n, "entry")  # raises: truncated header
        start = off + RECORD_HEADER_SIZE
        end = start + length
        if metadata & invalid or length < 0 or end > n:
            _parse_record_header(buf, off, n, "entry")  # raises with a precise message
        position = metadata >> 16
        if metadata & FLAG_RECORD_SET:
            payload = buf[start:end]
            if expand_record_sets:
                slot += _expand_record_set(
                    payload, txid, position, segment_seq_no, entry_id, slot, seq_base, out
                )
                off = end
                continue
            members = record_set_count(payload)
        else:
            payload = buf[start:end]
            members = 1
        rec = new(cls)
        rec.txid = txid
        rec.payload = payload
        rec.flags = metadata & 0xFFFF
        rec.dlsn = tuple_new(dlsn_cls, (segment_seq_no, entry_id, slot))
        rec.position = position
        rec.sequence_id = seq_base + position
        append(rec)
        slot += members
        off = end
    return out


# The per-record loops of append_many and decode_entry in C, when the
# optional extension was built (dlog/_record_codec.c); the Python above is
# complete without it (see dlog.extensions).
_codec: Any = extension("dlog._record_codec")
if _codec is not None:
    _codec.configure(LogRecord, LogRecordWithDLSN, DLSN)
