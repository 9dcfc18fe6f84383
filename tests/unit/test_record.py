"""LogRecord, record-set and entry formats, compatible with DistributedLog.

Every test runs twice: with the C codec (dlog/_record_codec.c) doing the
per-record loops, and with dlog.record's pure-Python loops alone."""

from __future__ import annotations

import struct
from collections.abc import Iterator

import lz4.block
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import dlog.record
from dlog.dlsn import DLSN
from dlog.errors import InvalidRecordError, RecordTooLargeError
from dlog.record import (
    ENTRY_HEADER_SIZE,
    MAX_LOGRECORD_SIZE,
    MAX_LOGRECORDSET_SIZE,
    MAX_PAYLOAD_SIZE,
    MAX_TXID,
    RECORD_HEADER_SIZE,
    CompressionCodec,
    LogRecord,
    LogRecordWithDLSN,
    RecordSetWriter,
    build_record_set,
    decode_entry,
    decode_record,
    encode_record,
    record_set_count,
)


@pytest.fixture(autouse=True, scope="module", params=["c", "python"])
def codec(request: pytest.FixtureRequest) -> Iterator[str]:
    """The C codec, or none (module-scoped: hypothesis tests share it)."""
    built = dlog.record._codec
    assert built is not None, "dlog._record_codec is not built (make install builds it)"
    dlog.record._codec = built if request.param == "c" else None
    try:
        yield request.param
    finally:
        dlog.record._codec = built


# A record description for hypothesis: (kind, txid, payload or list of payloads)
TXIDS = st.integers(min_value=0, max_value=MAX_TXID - 1)
PAYLOADS = (
    st.binary(max_size=64)
    | st.just(b"")
    | st.binary(min_size=200, max_size=400).map(lambda b: b[:10] * 40)
)
USER = st.tuples(st.just("user"), TXIDS, PAYLOADS)
CONTROL = st.tuples(st.just("control"), TXIDS, st.just(b"control"))
SET = st.tuples(st.just("set"), TXIDS, st.lists(PAYLOADS, max_size=6))
CODECS = st.sampled_from(["none", "lz4"])


def make(kind: str, txid: int, body, codec: str = "none") -> LogRecord:
    if kind == "user":
        return LogRecord(txid, body)
    if kind == "control":
        return LogRecord(txid, body, control=True)
    if kind == "eos":
        return LogRecord.end_of_stream_marker()
    return LogRecord(txid, build_record_set(body, compression=codec), record_set=True)


def expected_records(specs, start_position: int = 0):
    """What decode_entry should yield: (txid, payload, flags, slot, position)."""
    out = []
    slot = 0
    last = start_position
    for kind, txid, body in specs:
        if kind == "user":
            last += 1
            out.append((txid, body, 0, slot, last))
            slot += 1
        elif kind in ("control", "eos"):
            flags = 1 if kind == "control" else 2
            txid = MAX_TXID if kind == "eos" else txid
            payload = b"endOfStream" if kind == "eos" else body
            out.append((txid, payload, flags, slot, last))
            slot += 1
        else:
            for p in body:
                last += 1
                out.append((txid, p, 0, slot, last))
                slot += 1
    return out


# ---------------------------------------------------------------------------
# LogRecord
# ---------------------------------------------------------------------------


def test_log_record_fields_and_flags() -> None:
    r = LogRecord(5, b"abc")
    assert (r.txid, r.payload, r.flags) == (5, b"abc", 0)
    assert not (r.control or r.end_of_stream or r.record_set)
    assert LogRecord(5, bytearray(b"abc")).payload == b"abc"
    assert type(LogRecord(5, memoryview(b"abc")).payload) is bytes
    c = LogRecord.control_record(9)
    assert c.control and c.flags == 1 and c.txid == 9 and c.payload == b"control"
    eos = LogRecord.end_of_stream_marker()
    assert eos.end_of_stream and not eos.control
    assert eos.txid == MAX_TXID == 2**63 - 1
    assert eos.flags == 2 and eos.payload == b"endOfStream"
    assert r.persistent_size == 23


def test_log_record_argument_checks() -> None:
    with pytest.raises(ValueError, match="MAX_TXID"):
        LogRecord(5, b"", end_of_stream=True)
    with pytest.raises(TypeError):
        LogRecord(5, "text")  # type: ignore[arg-type]
    with pytest.raises(TypeError):
        LogRecord(True, b"")
    with pytest.raises(ValueError):
        LogRecord(2**63, b"")
    with pytest.raises(InvalidRecordError):
        LogRecord(5, b"not a record set", record_set=True)


def test_size_limits_match_distributedlog() -> None:
    assert MAX_LOGRECORD_SIZE == 1024 * 1024 - 8 * 1024
    assert MAX_LOGRECORDSET_SIZE == 1024 * 1024 - 4 * 1024
    # DistributedLog bounds the serialized record (20-byte header + payload).
    assert MAX_PAYLOAD_SIZE == MAX_LOGRECORD_SIZE - 20
    assert len(LogRecord(1, bytes(MAX_PAYLOAD_SIZE)).payload) == MAX_PAYLOAD_SIZE
    with pytest.raises(RecordTooLargeError) as info:
        LogRecord(1, bytes(MAX_PAYLOAD_SIZE + 1))
    assert str(MAX_LOGRECORD_SIZE + 1) in str(info.value)
    assert str(MAX_LOGRECORD_SIZE) in str(info.value)


def test_single_record_known_vector() -> None:
    data = encode_record(LogRecord(1, b"abc", control=True), position=7)
    assert data.hex() == (
        "0000000000070001"  # metadata: position 7 << 16 | CONTROL
        "0000000000000001"  # txid
        "00000003"  # length
        "616263"
    )
    record, position = decode_record(data)
    assert position == 7
    assert record == LogRecord(1, b"abc", control=True)


def test_position_bits_are_16_to_47() -> None:
    data = encode_record(LogRecord(0, b""), position=2**31 - 1)
    (metadata,) = struct.unpack_from(">Q", data)
    assert metadata == (2**31 - 1) << 16
    assert decode_record(data)[1] == 2**31 - 1
    with pytest.raises(ValueError):
        encode_record(LogRecord(0, b""), position=2**31)
    with pytest.raises(ValueError):
        encode_record(LogRecord(0, b""), position=-1)


@pytest.mark.parametrize(
    ("data", "reason"),
    [
        (b"", "truncated"),
        (bytes(19), "truncated"),
        (struct.pack(">Qqi", 0, 1, 4) + b"abc", "truncated"),
        (struct.pack(">Qqi", 0, 1, -1), "negative length"),
        (struct.pack(">Qqi", 0, 1, 2) + b"abcd", "trailing"),
        (struct.pack(">Qqi", 0x8, 1, 0), "invalid metadata"),  # unknown flag
        (struct.pack(">Qqi", 1 << 48, 1, 0), "invalid metadata"),  # unused high bits
        (struct.pack(">Qqi", 1 << 47, 1, 0), "invalid metadata"),  # position > int32
    ],
)
def test_decode_record_rejects(data: bytes, reason: str) -> None:
    with pytest.raises(InvalidRecordError, match=reason):
        decode_record(data)


@given(TXIDS, PAYLOADS, st.integers(0, 2**31 - 1), st.booleans())
def test_single_record_round_trip(txid: int, payload: bytes, position: int, control: bool) -> None:
    record = LogRecord(txid, payload, control=control)
    data = encode_record(record, position)
    assert len(data) == RECORD_HEADER_SIZE + len(payload)
    assert decode_record(data) == (record, position)


# ---------------------------------------------------------------------------
# Entry layout: known bytes and interop with plain lz4 block decoding
# ---------------------------------------------------------------------------


def test_enveloped_entry_known_bytes() -> None:
    w = RecordSetWriter()
    w.append(LogRecord(5, b"hi"))
    entry = w.build()
    record = struct.pack(">Qqi", 1 << 16, 5, 2) + b"hi"
    assert entry == struct.pack(">bIii", 1, 0, len(record), len(record)) + record
    assert len(entry) == ENTRY_HEADER_SIZE + 22
    assert w.num_bytes == len(entry)


def test_lz4_entry_is_a_raw_lz4_block_with_sizes_in_header() -> None:
    w = RecordSetWriter(compression="lz4")
    for i in range(50):
        w.append(LogRecord(i, b"compressible " * 8))
    plain = RecordSetWriter()
    for i in range(50):
        plain.append(LogRecord(i, b"compressible " * 8))
    raw = plain.build()[ENTRY_HEADER_SIZE:]
    entry = w.build()
    version, flags, original, stored = struct.unpack_from(">bIii", entry)
    assert (version, flags, original) == (1, CompressionCodec.LZ4, len(raw))
    assert stored == len(entry) - ENTRY_HEADER_SIZE < original
    body = entry[ENTRY_HEADER_SIZE:]
    assert lz4.block.decompress(body, uncompressed_size=original) == raw
    # and an entry compressed by someone else's LZ4 block encoder decodes too
    ours = lz4.block.compress(raw, store_size=False, mode="high_compression")
    foreign = struct.pack(">bIii", 1, 1, len(raw), len(ours)) + ours
    assert [r.payload for r in decode_entry(foreign, 1, 0)] == [b"compressible " * 8] * 50


def test_lz4_falls_back_to_plain_when_it_does_not_help() -> None:
    noise = bytes(range(1, 40))
    w = RecordSetWriter(compression="lz4")
    w.append(LogRecord(0x1234567890ABCDEF, noise))
    entry = w.build()
    assert struct.unpack_from(">bIii", entry)[1] == 0
    assert decode_entry(entry, 1, 0)[0].payload == noise


def test_record_set_known_layout() -> None:
    data = build_record_set([b"a", b"bc"])
    body = struct.pack(">i", 1) + b"a" + struct.pack(">i", 2) + b"bc"
    assert data == struct.pack(">Iiii", 0x1000, 2, len(body), len(body)) + body
    assert record_set_count(data) == 2
    lz = build_record_set([b"x" * 300] * 4, compression="lz4")
    metadata, count, original, stored = struct.unpack_from(">Iiii", lz)
    assert (metadata, count, original) == (0x1001, 4, 4 * 304)
    assert stored == len(lz) - 16
    assert lz4.block.decompress(lz[16:], uncompressed_size=original) == (
        (struct.pack(">i", 300) + b"x" * 300) * 4
    )


def test_compression_codec_parsing() -> None:
    assert CompressionCodec.parse("lz4") is CompressionCodec.LZ4
    assert CompressionCodec.parse("none") is CompressionCodec.NONE
    assert CompressionCodec.parse(1) is CompressionCodec.LZ4
    assert [c.value for c in CompressionCodec] == [0, 1]  # DistributedLog's codes, no more
    for bad in ("zstd", "gzip", 2, 3, 7):
        with pytest.raises(ValueError):
            CompressionCodec.parse(bad)


# ---------------------------------------------------------------------------
# Round trips, DLSN and sequence ids
# ---------------------------------------------------------------------------


@settings(suppress_health_check=[HealthCheck.too_slow])
@given(
    st.lists(USER | CONTROL | SET, max_size=25),
    CODECS,
    st.integers(0, 1000),
    st.integers(1, 2**40),
    st.integers(0, 2**40),
    st.integers(-1, 2**40),
    st.booleans(),
)
def test_entry_round_trip(
    specs, codec, start_position, seq_no, entry_id, start_seq_id, eos
) -> None:
    if eos:
        specs = [*specs, ("eos", MAX_TXID, b"")]
    w = RecordSetWriter(compression=codec, last_position=start_position)
    slots = [w.append(make(kind, txid, body, codec)) for kind, txid, body in specs]
    entry = w.build()
    assert w.build() == entry  # build is repeatable
    expected = expected_records(specs, start_position)
    assert w.num_records == len(expected)
    assert w.last_position == (expected[-1][4] if expected else start_position)
    records = decode_entry(entry, seq_no, entry_id, start_seq_id)
    got = [(r.txid, r.payload, r.flags, r.dlsn.slot_id, r.position) for r in records]
    assert got == expected
    for r in records:
        assert type(r) is LogRecordWithDLSN
        assert type(r.dlsn) is DLSN
        assert r.dlsn == DLSN(seq_no, entry_id, r.dlsn.slot_id)
        assert r.sequence_id == start_seq_id + r.position - 1
    # each append returned the slot of its (first) record
    first_slots = []
    slot = 0
    for kind, _, body in specs:
        first_slots.append(slot)
        slot += len(body) if kind == "set" else 1
    assert slots == first_slots


@given(st.lists(USER | CONTROL | SET, max_size=15), CODECS)
def test_entry_without_expanding_record_sets(specs, codec) -> None:
    w = RecordSetWriter(compression=codec)
    for kind, txid, body in specs:
        w.append(make(kind, txid, body, codec))
    records = decode_entry(w.build(), 2, 3, 10, expand_record_sets=False)
    assert len(records) == len(specs)
    slot = 0
    for r, (kind, txid, body) in zip(records, specs, strict=True):
        assert r.dlsn == DLSN(2, 3, slot)
        assert r.txid == txid
        assert r.record_set == (kind == "set")
        if kind == "set":
            assert record_set_count(r.payload) == len(body)
            slot += len(body)
        else:
            slot += 1


def test_dlsn_and_sequence_id_example() -> None:
    # Segment 4 starts at sequence id 1000; this entry follows 10 records.
    w = RecordSetWriter(last_position=10)
    assert w.append(LogRecord(100, b"a")) == 0
    assert w.append(LogRecord(101, build_record_set([b"b", b"c"]), record_set=True)) == 1
    assert w.append(LogRecord.control_record(101)) == 3
    assert w.append(LogRecord(102, b"d")) == 4
    got = decode_entry(w.build(), 4, 17, 1000)
    assert [(r.payload, r.dlsn, r.position, r.sequence_id, r.txid) for r in got] == [
        (b"a", DLSN(4, 17, 0), 11, 1010, 100),
        (b"b", DLSN(4, 17, 1), 12, 1011, 101),
        (b"c", DLSN(4, 17, 2), 13, 1012, 101),
        (b"control", DLSN(4, 17, 3), 13, 1012, 101),
        (b"d", DLSN(4, 17, 4), 14, 1013, 102),
    ]
    assert got[3].control and not got[4].control
    assert w.last_position == 14 and w.max_txid == 102 and w.has_user_records


def test_empty_entries() -> None:
    assert decode_entry(RecordSetWriter().build(), 1, 0) == []
    assert decode_entry(RecordSetWriter(compression="lz4").build(), 1, 0) == []
    assert decode_entry(b"", 1, 0, enveloped=False) == []
    w = RecordSetWriter()
    w.append(LogRecord(1, b""))
    w.append(LogRecord(2, build_record_set([]), record_set=True))
    w.append(LogRecord(3, b""))
    got = decode_entry(w.build(), 1, 0)
    assert [(r.txid, r.payload, r.dlsn.slot_id) for r in got] == [(1, b"", 0), (3, b"", 1)]


@given(st.lists(USER | CONTROL | SET, max_size=10))
def test_bare_record_stream_and_detection(specs) -> None:
    bare = RecordSetWriter(enveloped=False)
    enveloped = RecordSetWriter()
    for kind, txid, body in specs:
        bare.append(make(kind, txid, body))
        enveloped.append(make(kind, txid, body))
    bare_bytes, env_bytes = bare.build(), enveloped.build()
    assert env_bytes[ENTRY_HEADER_SIZE:] == bare_bytes
    want = decode_entry(env_bytes, 1, 2, 3)
    assert decode_entry(bare_bytes, 1, 2, 3, enveloped=False) == want
    assert decode_entry(bare_bytes, 1, 2, 3, enveloped=None) == want
    assert decode_entry(env_bytes, 1, 2, 3, enveloped=None) == want


def test_decode_accepts_bytearray_and_memoryview() -> None:
    w = RecordSetWriter()
    w.append(LogRecord(1, b"x"))
    entry = w.build()
    assert decode_entry(bytearray(entry), 1, 0) == decode_entry(memoryview(entry), 1, 0)
    with pytest.raises(InvalidRecordError, match="must be bytes"):
        decode_entry("text", 1, 0)  # type: ignore[arg-type]


# ---------------------------------------------------------------------------
# Writer limits
# ---------------------------------------------------------------------------


def test_writer_limit_and_fits() -> None:
    w = RecordSetWriter(max_bytes=100)
    assert w.num_bytes == ENTRY_HEADER_SIZE
    assert w.fits(100 - ENTRY_HEADER_SIZE - RECORD_HEADER_SIZE)
    w.append(LogRecord(1, bytes(40)))  # 13 + 60 = 73
    assert w.num_bytes == 73
    assert w.fits(7) and not w.fits(8)
    assert w.fits(LogRecord(2, bytes(7))) and not w.fits(LogRecord(2, bytes(8)))
    with pytest.raises(RecordTooLargeError, match=r"28 bytes does not fit.*73 of 100"):
        w.append(LogRecord(2, bytes(8)))
    w.append(LogRecord(2, bytes(7)))
    assert w.num_bytes == 100 and w.num_records == 2 and len(w) == 2
    assert [r.txid for r in decode_entry(w.build(), 1, 0)] == [1, 2]


def test_empty_writer_takes_one_record_over_the_soft_limit() -> None:
    w = RecordSetWriter(max_bytes=64)
    assert w.fits(1000)
    w.append(LogRecord(1, bytes(1000)))
    assert not w.fits(0)
    with pytest.raises(RecordTooLargeError):
        w.append(LogRecord(2, b""))


def test_entry_never_exceeds_max_logrecordset_size() -> None:
    w = RecordSetWriter()
    big = LogRecord(1, bytes(MAX_PAYLOAD_SIZE))
    w.append(big)
    room = MAX_LOGRECORDSET_SIZE - w.num_bytes - RECORD_HEADER_SIZE
    assert w.fits(room) and not w.fits(room + 1)
    w.append(LogRecord(2, bytes(room)))
    assert w.num_bytes == MAX_LOGRECORDSET_SIZE
    assert len(w.build()) == MAX_LOGRECORDSET_SIZE
    with pytest.raises(RecordTooLargeError):
        w.append(LogRecord(3, b""))


def test_record_with_mutated_oversize_payload_is_refused() -> None:
    r = LogRecord(1, b"")
    for size in (MAX_PAYLOAD_SIZE + 1, MAX_LOGRECORDSET_SIZE):
        r.payload = bytes(size)
        assert not RecordSetWriter().fits(r)
        with pytest.raises(RecordTooLargeError, match=f"exceeds the limit of {MAX_LOGRECORD_SIZE}"):
            RecordSetWriter().append(r)


def test_extend_is_all_or_nothing() -> None:
    w = RecordSetWriter(max_bytes=200, last_position=5)
    assert w.extend([LogRecord(1, b"a"), LogRecord(2, b"b")]) == 0
    before = (w.build(), w.num_records, w.last_position, w.max_txid)
    with pytest.raises(RecordTooLargeError):
        w.extend([LogRecord(3, b"c"), LogRecord(4, bytes(200))])
    assert (w.build(), w.num_records, w.last_position, w.max_txid) == before
    assert w.extend([LogRecord(3, b"c")]) == 2


def test_writer_argument_checks() -> None:
    for bad in (0, ENTRY_HEADER_SIZE, MAX_LOGRECORDSET_SIZE + 1, 1.5):
        with pytest.raises(ValueError):
            RecordSetWriter(max_bytes=bad)  # type: ignore[arg-type]
    with pytest.raises(ValueError):
        RecordSetWriter(last_position=-1)
    with pytest.raises(ValueError):
        RecordSetWriter(compression="zstd")


def test_record_set_size_limit() -> None:
    with pytest.raises(RecordTooLargeError):
        build_record_set([bytes(MAX_PAYLOAD_SIZE // 2)] * 3)
    with pytest.raises(RecordTooLargeError):
        build_record_set([bytes(MAX_PAYLOAD_SIZE + 1)])


# ---------------------------------------------------------------------------
# Malformed entries
# ---------------------------------------------------------------------------


def envelope(body: bytes, codec: int = 0, original: int | None = None, version: int = 1) -> bytes:
    n = len(body) if original is None else original
    return struct.pack(">BIii", version, codec, n, len(body)) + body


def rec(payload: bytes, metadata: int = 1 << 16, txid: int = 1) -> bytes:
    return struct.pack(">Qqi", metadata, txid, len(payload)) + payload


def set_record(body: bytes, count: int, metadata: int = 0x1000, original: int | None = None):
    n = len(body) if original is None else original
    return rec(struct.pack(">Iiii", metadata, count, n, len(body)) + body, metadata=(1 << 16) | 4)


GOOD_SET_BODY = struct.pack(">i", 1) + b"a" + struct.pack(">i", 2) + b"bc"


@pytest.mark.parametrize(
    ("entry", "reason"),
    [
        (b"", "envelope header needs 13"),
        (b"\x01\x00", "envelope header needs 13"),
        (envelope(rec(b"x"), version=2), "unknown entry envelope version 2"),
        (envelope(rec(b"x"), version=0), "unknown entry envelope version 0"),
        (envelope(rec(b"x"), codec=0x10), "unknown bits"),
        (envelope(rec(b"x"), codec=3), "unknown compression codec 3"),
        # DistributedLog defines codecs 0 and 1 only: no ZSTD (or anything) at 2
        (envelope(rec(b"x"), codec=2), "unknown compression codec 2"),
        (envelope(rec(b"x"))[:-1], "stored bytes"),
        (envelope(rec(b"x")) + b"\x00", "stored bytes"),
        (envelope(rec(b"x"), original=-1), "negative"),
        (envelope(rec(b"x"), original=5), "lengths differ"),
        (envelope(rec(b"x") + b"\x00\x00"), "truncated"),
        (envelope(rec(b"x")[:-1]), "truncated"),
        (envelope(struct.pack(">Qqi", 1 << 16, 1, -5)), "negative length"),
        (envelope(rec(b"x", metadata=0x10)), "invalid metadata"),
        (envelope(b"\xff" * 40, codec=1, original=100), "corrupt LZ4"),
        (envelope(lz4.block.compress(b"z" * 100, store_size=False), 1, 99), "LZ4"),
        (envelope(lz4.block.compress(b"z" * 100, store_size=False), 1, 101), "header says 101"),
        (envelope(b"\x00" * 8, codec=1, original=2**31 - 1), "claims"),
        (envelope(set_record(GOOD_SET_BODY, 3)), "record set"),
        (envelope(set_record(GOOD_SET_BODY, 1)), "bytes left after"),
        (envelope(set_record(GOOD_SET_BODY, -1)), "negative"),
        (envelope(set_record(GOOD_SET_BODY, 2, metadata=0x2000)), "version"),
        (envelope(set_record(GOOD_SET_BODY, 2, metadata=0x1100)), "unknown bits"),
        (envelope(set_record(GOOD_SET_BODY, 2, metadata=0x1003)), "codec 3"),
        (envelope(set_record(GOOD_SET_BODY, 2, metadata=0x1002)), "codec 2"),
        (envelope(set_record(GOOD_SET_BODY, 2, original=99)), "lengths differ"),
        (envelope(set_record(struct.pack(">i", -1), 1)), "bad length"),
        (envelope(set_record(struct.pack(">i", 9) + b"a", 1)), "bad length"),
        (envelope(rec(b"\x00\x00\x10", metadata=(1 << 16) | 4)), "record set truncated"),
        (envelope(set_record(b"", 2**30)), "claims"),
    ],
)
def test_malformed_entries_raise_invalid_record(entry: bytes, reason: str) -> None:
    with pytest.raises(InvalidRecordError, match=reason):
        decode_entry(entry, 1, 0)


def test_record_set_count_mismatch_without_expanding() -> None:
    bad = envelope(rec(b"\x00" * 3, metadata=(1 << 16) | 4))
    with pytest.raises(InvalidRecordError):
        decode_entry(bad, 1, 0, expand_record_sets=False)


def test_decode_entry_argument_checks() -> None:
    with pytest.raises(TypeError):
        decode_entry(b"", "1", 0, enveloped=False)  # type: ignore[arg-type]
    with pytest.raises(ValueError):
        decode_entry(b"", 1, 2**63, enveloped=False)


def _sample_entry(codec: str) -> bytes:
    w = RecordSetWriter(compression=codec, last_position=3)
    w.append(LogRecord(1, b"first record " * 3))
    w.append(LogRecord(2, build_record_set([b"m1" * 20, b"m2" * 20], compression=codec),
                       record_set=True))  # fmt: skip
    w.append(LogRecord.control_record(2))
    w.append(LogRecord(3, b""))
    return w.build()


@pytest.mark.parametrize("codec", ["none", "lz4"])
def test_every_truncation_of_an_enveloped_entry_is_rejected(codec: str) -> None:
    entry = _sample_entry(codec)
    assert len(decode_entry(entry, 1, 0)) == 5
    for cut in range(len(entry)):
        with pytest.raises(InvalidRecordError):
            decode_entry(entry[:cut], 1, 0)


def test_truncated_bare_stream_is_rejected_or_a_prefix() -> None:
    bare = _sample_entry("none")[ENTRY_HEADER_SIZE:]
    full = decode_entry(bare, 1, 0, enveloped=False)
    for cut in range(len(bare)):
        try:
            got = decode_entry(bare[:cut], 1, 0, enveloped=False)
        except InvalidRecordError:
            continue
        # only a cut on a record boundary can parse, and then it is a prefix
        assert got == full[: len(got)]
        assert len(got) < len(full)


ENVELOPED_MODES = st.sampled_from([True, False, None])


@settings(max_examples=300)
@given(st.binary(max_size=200), ENVELOPED_MODES, st.booleans())
def test_random_bytes_only_raise_invalid_record(data: bytes, mode, expand: bool) -> None:
    try:
        records = decode_entry(data, 1, 0, enveloped=mode, expand_record_sets=expand)
    except InvalidRecordError:
        return
    assert all(type(r) is LogRecordWithDLSN for r in records)


@settings(max_examples=300)
@given(st.sampled_from(["none", "lz4"]), st.data())
def test_bit_flips_only_raise_invalid_record(codec: str, data: st.DataObject) -> None:
    entry = bytearray(_sample_entry(codec))
    for _ in range(data.draw(st.integers(1, 3))):
        bit = data.draw(st.integers(0, len(entry) * 8 - 1))
        entry[bit // 8] ^= 1 << (bit % 8)
    for mode in (True, None):
        try:
            records = decode_entry(bytes(entry), 1, 0, enveloped=mode)
        except InvalidRecordError:
            continue
        # undetectable flips (payload bytes) still give well-formed records
        slots = [r.dlsn.slot_id for r in records]
        assert slots == list(range(len(records)))


@settings(max_examples=200)
@given(st.binary(max_size=64), st.binary(max_size=64))
def test_random_record_sets_only_raise_invalid_record(header: bytes, body: bytes) -> None:
    payload = header[:16].ljust(16, b"\x00")
    metadata, count, original, stored = struct.unpack(">Iiii", payload)
    # keep the header plausible half of the time so parsing goes deeper
    if metadata & 1:
        payload = struct.pack(
            ">Iiii", 0x1000 | (metadata & 1), count % 8, original % 128, len(body)
        )
    entry = envelope(rec(payload + body, metadata=(1 << 16) | 4))
    for expand in (True, False):
        try:
            decode_entry(entry, 1, 0, expand_record_sets=expand)
        except InvalidRecordError:
            pass
    try:
        record_set_count(payload + body)
    except InvalidRecordError:
        pass


def test_position_overflow_is_refused_without_side_effects() -> None:
    w = RecordSetWriter(last_position=2**31 - 2)
    w.append(LogRecord(1, b"a"))
    assert w.last_position == 2**31 - 1
    with pytest.raises(ValueError, match="overflows"):
        w.append(LogRecord(2, b"b"))
    assert w.append(LogRecord.control_record(1)) == 1  # control records do not advance
    assert (w.num_records, w.last_position) == (2, 2**31 - 1)
    got = decode_entry(w.build(), 1, 0, 0)
    assert [(r.position, r.sequence_id) for r in got] == [(2**31 - 1, 2**31 - 2)] * 2


@pytest.mark.parametrize("payload", [b"z" * 100, bytes(range(1, 40))])
def test_writer_stays_usable_after_build(payload: bytes) -> None:
    w = RecordSetWriter(compression="lz4")
    w.append(LogRecord(0x1234567890ABCDEF, payload))
    first = w.build()
    w.append(LogRecord(0x1234567890ABCDEF, payload))
    second = w.build()
    assert len(decode_entry(first, 1, 0)) == 1
    assert [r.payload for r in decode_entry(second, 1, 0)] == [payload, payload]


# ---------------------------------------------------------------------------
# RecordSetWriter.append_many: a writer's bulk path
# ---------------------------------------------------------------------------


def _one_by_one(records: list[LogRecord], threshold: int) -> list[bytes]:
    """Entries as a writer appending record by record would build them."""
    entries, w = [], RecordSetWriter(last_position=5)
    for r in records:
        if w.num_records and not w.fits(r):
            entries.append(w.build())
            w = RecordSetWriter(last_position=w.last_position)
        w.append(r)
        if w.num_bytes >= threshold:
            entries.append(w.build())
            w = RecordSetWriter(last_position=w.last_position)
    if w.num_records:
        entries.append(w.build())
    return entries


@pytest.mark.parametrize("threshold", [0, 50, 300, MAX_LOGRECORDSET_SIZE])
def test_append_many_builds_the_entries_appending_one_by_one_builds(threshold: int) -> None:
    records = [LogRecord(i, b"p" * (i % 7 * 40)) for i in range(60)]
    records[10] = LogRecord.control_record(9)
    records[20] = LogRecord(20, b"big" * 100_000)
    entries, w, i = [], RecordSetWriter(last_position=5), 0
    slots = []
    while i < len(records):
        first = w.num_records
        j = w.append_many(records, i, threshold)
        slots.append((first, j - i))
        i = j
        if i < len(records) or w.num_bytes >= threshold:
            entries.append(w.build())
            w = RecordSetWriter(last_position=w.last_position)
    if w.num_records:
        entries.append(w.build())
    assert entries == _one_by_one(records, threshold)
    decoded = [r for k, e in enumerate(entries) for r in decode_entry(e, 1, k)]
    assert [r.txid for r in decoded] == [r.txid for r in records]
    # Positions go on from last_position; the control record repeats one.
    assert decoded[0].position == 6 and decoded[10].position == decoded[9].position


def test_append_many_keeps_the_writer_state() -> None:
    w = RecordSetWriter()
    assert not w.has_user_records
    assert w.append_many([LogRecord.control_record(3)], 0, 1 << 20) == 1
    assert not w.has_user_records and w.max_txid == 3 and w.last_position == 0
    assert w.append_many([LogRecord(7, b"a"), LogRecord(5, b"b")], 0, 1 << 20) == 2
    assert w.has_user_records and w.max_txid == 7 and w.last_position == 2
    assert w.num_records == 3
    assert w.append_many([LogRecord(8, b"c"), LogRecord(9, b"d")], 1, 1 << 20) == 2
    assert [r.txid for r in decode_entry(w.build(), 1, 0)] == [3, 7, 5, 9]


def test_append_many_stops_at_a_record_that_does_not_fit() -> None:
    w = RecordSetWriter(max_bytes=ENTRY_HEADER_SIZE + 2 * (RECORD_HEADER_SIZE + 10))
    records = [LogRecord(i, b"x" * 10) for i in range(5)]
    assert w.append_many(records, 0, 1 << 20) == 2
    assert w.num_records == 2
