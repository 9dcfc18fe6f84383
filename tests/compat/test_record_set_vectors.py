"""DistributedLog's LogRecord, LogRecordSet and EnvelopedEntry formats, as data.

Facts from apache/bookkeeper 9590a97f67c81a2964c79a92c7c58976894588f3,
stream/distributedlog/:

* ``LogRecord`` (protocol/.../LogRecord.java): metadata long, txid long,
  payload length int, payload; metadata bits 0-15 are flags
  (``LOGRECORD_FLAGS_CONTROL_MESSAGE = 0x1``, ``..._END_OF_STREAM = 0x2``,
  ``..._RECORD_SET = 0x4``), bits 16-47 the position within the log segment
  (``LOGRECORD_METADATA_POSITION_MASK = 0x0000ffffffff0000``, shift 16).
* ``LogRecordSet`` / ``EnvelopedRecordSetWriter``: ``HEADER_LEN`` 16 =
  metadata int (``VERSION = 0x1000`` under mask ``0xf000``, codec under
  ``0x3``), record count int, decompressed length int, stored length int;
  then per record its length int and bytes, the whole body compressed.
* ``EnvelopedEntry`` (core/.../EnvelopedEntry.java): ``VERSION_ONE = 1``
  byte, flags int (codec under ``COMPRESSION_CODEC_MASK = 0x3``),
  decompressed length int, stored length int (``HEADER_LENGTH`` 13); a NONE
  entry whose two lengths differ is rejected; then the LogRecord stream.
* ``CompressionCodec.Type``: ``NONE(0x0)``, ``LZ4(0x1)``; LZ4 is lz4-java's
  raw block format (``fastCompressor`` / ``safeDecompressor``), the
  decompressed length coming from the header.
* ``DistributedLogConstants.CONTROL_RECORD_CONTENT = "control"``; the end of
  stream record is ``new LogRecord(MAX_TXID = Long.MAX_VALUE,
  "endOfStream")`` with ``setEndOfStream()``.
* ``TestLogRecordSet``: an empty set is ``HEADER_LEN`` bytes and reads as no
  records; ``"record-0"`` .. ``"record-9"`` written with NONE or LZ4, read back
  from a record with DLSN (1, 1, 10), txid 99, position 888 and segment start
  sequence id 999, give DLSN (1, 1, 10 + i), txid 99, position 888 + i and
  sequence id 999 + 888 + i - 1.

Every expected byte string below is written by hand from those facts,
including the LZ4 blocks (token, literals, little-endian offset, extra
length bytes, as the LZ4 block format defines them).  dlog may write a set
or entry uncompressed when LZ4 would not shrink it (both are valid to every
reader), so LZ4 encoding is checked on compressible data, by header and by
decompressing the block with the lz4 library directly.
"""

from __future__ import annotations

import lz4.block
import pytest

from dlog.dlsn import DLSN
from dlog.errors import InvalidRecordError
from dlog.record import (
    ENTRY_HEADER_SIZE,
    RECORD_HEADER_SIZE,
    RECORD_SET_HEADER_SIZE,
    CompressionCodec,
    LogRecord,
    RecordSetWriter,
    build_record_set,
    decode_entry,
    decode_record,
    encode_record,
    record_set_count,
)

MAX_TXID = (1 << 63) - 1


def h(text: str) -> bytes:
    """Hex with spaces between fields."""
    return bytes.fromhex(text)


def test_header_sizes_and_codes() -> None:
    assert RECORD_HEADER_SIZE == 8 + 8 + 4
    assert RECORD_SET_HEADER_SIZE == 4 + 4 + 4 + 4
    assert ENTRY_HEADER_SIZE == 1 + 4 + 4 + 4
    assert (CompressionCodec.NONE, CompressionCodec.LZ4) == (0, 1)


# --- LogRecord --------------------------------------------------------------

# (name, record, position, bytes: metadata, txid, length, payload)
RECORDS: list[tuple[str, LogRecord, int, bytes]] = [
    (
        "user record",
        LogRecord(7, b"hello"),
        3,
        h("0000000000030000 0000000000000007 00000005") + b"hello",
    ),
    (
        "control record",
        LogRecord.control_record(7),
        3,
        h("0000000000030001 0000000000000007 00000007") + b"control",
    ),
    (
        "end of stream",
        LogRecord.end_of_stream_marker(),
        4,
        h("0000000000040002 7fffffffffffffff 0000000b") + b"endOfStream",
    ),
    (
        "record set flag",
        LogRecord(99, h("00001000 00000000 00000000 00000000"), record_set=True),
        888,
        h("0000000003780004 0000000000000063 00000010 00001000 00000000 00000000 00000000"),
    ),
    (
        "largest position, negative txid",
        LogRecord(-2, b""),
        0x7FFFFFFF,
        h("00007fffffff0000 fffffffffffffffe 00000000"),
    ),
]


@pytest.mark.parametrize(
    ("name", "record", "position", "data"), RECORDS, ids=[r[0] for r in RECORDS]
)
def test_log_record(name: str, record: LogRecord, position: int, data: bytes) -> None:
    assert encode_record(record, position) == data
    decoded, decoded_position = decode_record(data)
    assert decoded_position == position
    assert (decoded.txid, decoded.payload, decoded.flags) == (
        record.txid,
        record.payload,
        record.flags,
    )
    flags = int.from_bytes(data[6:8], "big")
    assert decoded.control == bool(flags & 0x1)
    assert decoded.end_of_stream == bool(flags & 0x2)
    assert decoded.record_set == bool(flags & 0x4)


# --- LogRecordSet -------------------------------------------------------------

TEN = [f"record-{i}".encode() for i in range(10)]
# Each member: length int 8, then "record-i".
TEN_BODY = b"".join(h("00000008") + p for p in TEN)


def test_empty_record_set() -> None:
    data = h("00001000 00000000 00000000 00000000")
    assert build_record_set([]) == data
    assert record_set_count(data) == 0
    entry = h("01 00000000 00000024 00000024") + encode_record(
        LogRecord(1, data, record_set=True), 1
    )
    assert decode_entry(entry, 1, 0) == []


def test_record_set_none() -> None:
    data = h("00001000 0000000a 00000078 00000078") + TEN_BODY
    assert len(TEN_BODY) == 0x78
    assert build_record_set(TEN) == data
    assert build_record_set(TEN, compression=CompressionCodec.NONE) == data
    assert record_set_count(data) == 10


def test_record_set_lz4_encode() -> None:
    data = build_record_set(TEN, compression=CompressionCodec.LZ4)
    assert data[:12] == h("00001001 0000000a 00000078")
    stored = int.from_bytes(data[12:16], "big")
    assert stored == len(data) - 16 < 0x78
    assert lz4.block.decompress(data[16:], uncompressed_size=0x78) == TEN_BODY


# One member of forty "a": length int 0x28 then the bytes, 44 bytes.  LZ4
# block: token 0x5f (5 literals; match length 15 + 15 + 4 = 34 with the extra
# byte 0x0f), literals 00 00 00 28 61, offset 0x0001; then token 0x50 and the
# last five literals "aaaaa".
A40_BODY = h("00000028") + b"a" * 40
A40_LZ4 = h("5f 0000002861 0100 0f 50 6161616161")
A40_SET_LZ4 = h("00001001 00000001 0000002c 0000000f") + A40_LZ4


def test_handwritten_lz4_block_is_valid() -> None:
    assert lz4.block.decompress(A40_LZ4, uncompressed_size=44) == A40_BODY


def test_record_set_lz4_decode() -> None:
    assert record_set_count(A40_SET_LZ4) == 1
    entry = h("01 00000000 00000033 00000033") + encode_record(
        LogRecord(5, A40_SET_LZ4, record_set=True), 1
    )
    assert len(entry) == ENTRY_HEADER_SIZE + 0x33
    [record] = decode_entry(entry, 2, 3, 100)
    assert (record.dlsn, record.txid, record.payload) == (DLSN(2, 3, 0), 5, b"a" * 40)
    assert (record.position, record.sequence_id, record.flags) == (1, 100, 0)


@pytest.mark.parametrize("codec", [CompressionCodec.NONE, CompressionCodec.LZ4])
def test_upstream_testlogrecordset_read(codec: CompressionCodec) -> None:
    """TestLogRecordSet.testWriteRecords's reading half, inside an entry whose
    first ten slots hold other records so the set starts at slot 10."""
    writer = RecordSetWriter(last_position=877)
    for i in range(10):
        writer.append(LogRecord(i, b""))
    writer.append(LogRecord(99, build_record_set(TEN, compression=codec), record_set=True))
    records = decode_entry(writer.build(), 1, 1, 999)
    members = records[10:]
    assert [r.payload for r in members] == TEN
    for i, r in enumerate(members):
        assert r.dlsn == DLSN(1, 1, 10 + i)
        assert r.txid == 99
        assert r.position == 888 + i
        assert r.sequence_id == 999 + 888 + i - 1


# --- EnvelopedEntry -----------------------------------------------------------


def test_entry_none() -> None:
    writer = RecordSetWriter()
    assert writer.append(LogRecord(7, b"hello")) == 0
    assert writer.append(LogRecord.control_record(7)) == 1
    body = (
        h("0000000000010000 0000000000000007 00000005")
        + b"hello"
        + h("0000000000010001 0000000000000007 00000007")
        + b"control"
    )
    assert len(body) == 0x34
    expected = h("01 00000000 00000034 00000034") + body
    assert writer.build() == expected
    first, control = decode_entry(expected, 4, 5, 10)
    assert (first.dlsn, first.txid, first.payload, first.position) == (
        DLSN(4, 5, 0),
        7,
        b"hello",
        1,
    )
    assert (first.sequence_id, first.control) == (10, False)
    assert (control.dlsn, control.payload, control.control, control.position) == (
        DLSN(4, 5, 1),
        b"control",
        True,
        1,
    )


# One record at position 1, txid 1, payload forty "b": 60 bytes.  LZ4 block:
# token 0xff with extra literal length 0x06 (15 + 6 = 21 literals: the 20-byte
# header and one "b"), offset 0x0001, extra match length 0x0f (34); then token
# 0x50 and "bbbbb".
B40_BODY = h("0000000000010000 0000000000000001 00000028") + b"b" * 40
B40_LZ4 = h("ff 06 0000000000010000 0000000000000001 00000028 62 0100 0f 50") + b"bbbbb"
B40_ENTRY_LZ4 = h("01 00000001 0000003c 00000020") + B40_LZ4


def test_entry_lz4_decode() -> None:
    assert lz4.block.decompress(B40_LZ4, uncompressed_size=60) == B40_BODY
    [record] = decode_entry(B40_ENTRY_LZ4, 1, 0, 1)
    assert (record.dlsn, record.txid, record.payload, record.position) == (
        DLSN(1, 0, 0),
        1,
        b"b" * 40,
        1,
    )


def test_entry_lz4_encode() -> None:
    writer = RecordSetWriter(compression=CompressionCodec.LZ4)
    writer.append(LogRecord(1, b"b" * 40))
    data = writer.build()
    assert data[:9] == h("01 00000001 0000003c")
    assert int.from_bytes(data[9:13], "big") == len(data) - 13 < 60
    assert lz4.block.decompress(data[13:], uncompressed_size=60) == B40_BODY


REJECTED: list[tuple[str, bytes]] = [
    ("entry version 2", h("02") + B40_ENTRY_LZ4[1:]),
    ("entry version 0 read as enveloped", h("00") + B40_ENTRY_LZ4[1:]),
    (
        "NONE entry with unequal lengths",
        h("01 00000000 0000003d 0000003c") + B40_BODY,
    ),
    (
        "record set version 0x2000",
        h("01 00000000 00000024 00000024")
        + encode_record(LogRecord(1, b""), 1)[:6]
        + h("0004 0000000000000001 00000010 00002000 00000000 00000000 00000000"),
    ),
    (
        "negative record length",
        h("01 00000000 00000014 00000014 0000000000010000 0000000000000001 ffffffff"),
    ),
]


@pytest.mark.parametrize("data", [r[1] for r in REJECTED], ids=[r[0] for r in REJECTED])
def test_rejected(data: bytes) -> None:
    with pytest.raises(InvalidRecordError):
        decode_entry(data, 1, 0, 1)
