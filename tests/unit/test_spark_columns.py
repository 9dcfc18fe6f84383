"""The Spark executor's columnar entry decoder gives exactly decode_entry's rows.

Every test compares :func:`dlog.spark.columns.decode_entry_columns` with
:func:`dlog.record.decode_entry` on the same input: well-formed entries
(user, control and end-of-stream records, record sets, LZ4 on sets and on
the envelope, bare record streams, runs of equal lengths that take the
vectorized path and varied lengths that do not) and malformed ones
(truncated, corrupted, random bytes), which must raise the same error.

Every test runs twice: with the C codec (dlog/_record_codec.c) cutting
plain entries into columns, and with the Python paths alone.
"""

from __future__ import annotations

import struct
from typing import Any

import lz4.block
import pyarrow as pa
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from dlog.errors import InvalidRecordError
from dlog.record import (
    MAX_TXID,
    LogRecord,
    RecordSetWriter,
    build_record_set,
    decode_entry,
)
from dlog.spark import columns
from dlog.spark.columns import MIN_RUN, EntryColumns, decode_entry_columns

pytestmark = pytest.mark.usefixtures("spark_codec")  # with the C codec and without

TXIDS = st.integers(min_value=-(2**63), max_value=MAX_TXID - 1)
CODECS = st.sampled_from(["none", "lz4"])
SMALL = st.binary(max_size=40)
# A run of records with payloads of one length: long enough for the
# vectorized path, or just too short for it.
RUN = st.tuples(
    st.integers(min_value=0, max_value=120),
    st.integers(min_value=1, max_value=3 * MIN_RUN),
    st.binary(min_size=1, max_size=8),
)


def run_payloads(length: int, count: int, seed: bytes) -> list[bytes]:
    return [(seed * (length // len(seed) + 2))[i % len(seed) :][:length] for i in range(count)]


@st.composite
def records(draw: st.DrawFn) -> list[LogRecord]:
    out: list[LogRecord] = []
    for kind in draw(st.lists(st.sampled_from("uucrsSe"), max_size=8)):
        txid = draw(TXIDS)
        if kind == "u":
            out.append(LogRecord(txid, draw(SMALL)))
        elif kind == "c":
            out.append(LogRecord.control_record(txid))
        elif kind == "e":
            out.append(LogRecord.end_of_stream_marker())
        elif kind == "r":
            out += [LogRecord(txid, p) for p in run_payloads(*draw(RUN))]
        else:
            members = run_payloads(*draw(RUN)) if kind == "S" else draw(st.lists(SMALL, max_size=6))
            body = build_record_set(members, compression=draw(CODECS))
            out.append(LogRecord(txid, body, record_set=True))
    return out


@st.composite
def entries(draw: st.DrawFn) -> tuple[bytes, bool | None]:
    enveloped = draw(st.booleans())
    writer = RecordSetWriter(
        compression=draw(CODECS),
        enveloped=enveloped,
        last_position=draw(st.sampled_from([0, 7, 2**31 - 200])),
    )
    for record in draw(records()):
        if not writer.fits(record):
            break
        try:
            writer.append(record)
        except ValueError:  # positions would overflow int32
            break
    return writer.build(), draw(st.sampled_from([enveloped, None]))


@st.composite
def damaged(draw: st.DrawFn) -> tuple[bytes, bool | None]:
    data, enveloped = draw(entries())
    buf = bytearray(data)
    for _ in range(draw(st.integers(min_value=1, max_value=3))):
        how = draw(st.sampled_from(["flip", "cut", "splice", "set-int"]))
        if not buf:
            break
        at = draw(st.integers(min_value=0, max_value=len(buf) - 1))
        if how == "flip":
            buf[at] ^= 1 << draw(st.integers(min_value=0, max_value=7))
        elif how == "cut":
            del buf[at:]
        elif how == "splice":
            buf[at:at] = draw(st.binary(min_size=1, max_size=6))
        else:
            value = draw(st.sampled_from([-1, 0, 1, 2**31 - 1, -(2**31), 4096, 3]))
            buf[at : at + 4] = struct.pack(">i", value)
    return bytes(buf), draw(st.sampled_from([True, False, None]))


# Raw entries, built field by field, where any field may lie: a record's
# length off by a little or negative, metadata with bits DistributedLog never
# sets, a record-set header whose count, lengths, version or codec are wrong,
# set members whose lengths lie; mostly inside long runs of equal lengths, so
# that the vectorized paths meet them too.
LIE = st.sampled_from([0] * 12 + [-1, 1, -3, 5, -(2**31)])
FLAGS = st.sampled_from([0] * 8 + [1, 2, 3, 8, 0x10, 0x8000, 1 << 47, 1 << 48, 1 << 63])


def raw_record(meta: int, txid: int, payload: bytes, lie: int) -> bytes:
    length = max(-(2**31), min(2**31 - 1, len(payload) + lie))
    return struct.pack(">QQi", meta % 2**64, txid % 2**64, length) + payload


@st.composite
def raw_set(draw: st.DrawFn) -> bytes:
    length = draw(st.integers(min_value=0, max_value=12))
    count = draw(st.sampled_from([0, 1, 3, MIN_RUN, 2 * MIN_RUN + 1]))
    members = [bytes([i % 251]) * length for i in range(count)]
    lie_at = draw(st.integers(min_value=0, max_value=max(count - 1, 0)))
    lie = draw(LIE)
    body = b"".join(
        struct.pack(">i", max(-(2**31), len(m) + (lie if i == lie_at else 0))) + m
        for i, m in enumerate(members)
    )
    body += draw(st.sampled_from([b""] * 4 + [b"\0", b"junk!"]))  # bytes after the members
    codec = draw(st.sampled_from([0, 0, 0, 1, 1, 2, 3]))
    stored = lz4.block.compress(body, store_size=False) if codec == 1 else body
    version = draw(st.sampled_from([0x1000] * 8 + [0, 0x2000, 0x1000 | 0x100]))
    fields = [count, len(body), len(stored)]
    which = draw(st.integers(min_value=0, max_value=4))
    if which < 3:
        fields[which] += draw(st.sampled_from([-1, 1, 2, 5, -(2**31)]))
    header = struct.pack(">Iiii", version | codec, *(max(-(2**31), f) for f in fields))
    return header + stored


@st.composite
def raw_entries(draw: st.DrawFn) -> tuple[bytes, bool | None]:
    out = bytearray()
    position = draw(st.sampled_from([1, 2**31 - 40, 2**31 + 5]))
    for kind in draw(st.lists(st.sampled_from("rrrusS"), min_size=1, max_size=4)):
        txid = draw(TXIDS)
        if kind == "r":  # a run of equal lengths, perhaps one record lying in it
            length = draw(st.integers(min_value=0, max_value=30))
            count = draw(st.sampled_from([MIN_RUN - 1, MIN_RUN, 3 * MIN_RUN]))
            odd = draw(st.integers(min_value=0, max_value=count - 1))
            for i in range(count):
                flags, lie = (draw(FLAGS), draw(LIE)) if i == odd else (0, 0)
                out += raw_record((position << 16) | flags, txid + i, bytes([i]) * length, lie)
                position += 1
        elif kind == "u":
            payload = draw(st.binary(max_size=20))
            out += raw_record((position << 16) | draw(FLAGS), txid, payload, draw(LIE))
            position += 1
        else:
            body = draw(raw_set()) if kind == "s" else build_record_set([b"m" * 5] * MIN_RUN)
            out += raw_record((position << 16) | 4 | draw(FLAGS), txid, body, draw(LIE))
            position += MIN_RUN
    cut = draw(st.sampled_from([None] * 6 + [1, 3, 19, 25]))
    if cut is not None:
        del out[len(out) - min(cut, len(out)) :]
    enveloped = draw(st.sampled_from([False, False, True, None]))
    if enveloped is not False:
        codec = draw(st.sampled_from([0, 1]))
        stored = lz4.block.compress(bytes(out), store_size=False) if codec else bytes(out)
        out = bytearray(struct.pack(">BIii", 1, codec, len(out), len(stored)) + stored)
    return bytes(out), enveloped


def rows_of(records: list[Any], start_sequence_id: int) -> list[tuple[Any, ...]]:
    return [(r.dlsn[2], r.position, r.txid, r.flags, r.payload, r.sequence_id) for r in records]


def column_rows(cols: EntryColumns, start_sequence_id: int) -> list[tuple[Any, ...]]:
    for a in (cols.slot, cols.position, cols.txid, cols.flags):
        assert a.type == pa.int64() and a.null_count == 0
    assert cols.payload.type == pa.binary() and cols.payload.null_count == 0
    cols.payload.validate(full=True)
    rows = list(
        zip(
            cols.slot.to_pylist(),
            cols.position.to_pylist(),
            cols.txid.to_pylist(),
            cols.flags.to_pylist(),
            cols.payload.to_pylist(),
            cols.sequence_ids(start_sequence_id),
            strict=True,
        )
    )
    assert cols.any_flags == any(r[3] for r in rows)
    return rows


def same(data: Any, enveloped: bool | None, seg: int = 3, entry: int = 9, start: int = 1) -> int:
    """Both decoders on ``data``: the same rows or the same error. Returns the rows."""
    try:
        expected = rows_of(decode_entry(data, seg, entry, start, enveloped=enveloped), start)
    except (InvalidRecordError, TypeError, ValueError) as e:
        with pytest.raises(type(e)) as info:
            decode_entry_columns(data, seg, entry, start, enveloped=enveloped)
        assert str(info.value) == str(e)
        return -1
    got = column_rows(decode_entry_columns(data, seg, entry, start, enveloped=enveloped), start)
    assert got == expected
    return len(got)


@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(entries(), st.integers(min_value=-(2**63), max_value=2**63 - 1))
def test_well_formed_entries_give_decode_entrys_rows(
    entry: tuple[bytes, bool | None], start: int
) -> None:
    data, enveloped = entry
    assert same(data, enveloped, start=start) >= 0


@settings(max_examples=600, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(damaged())
def test_damaged_entries_give_the_same_rows_or_the_same_error(
    entry: tuple[bytes, bool | None],
) -> None:
    same(*entry)


@settings(max_examples=1500, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(raw_entries())
def test_entries_with_lying_fields_give_the_same_rows_or_the_same_error(
    entry: tuple[bytes, bool | None],
) -> None:
    same(*entry)


@settings(max_examples=200, deadline=None)
@given(st.binary(max_size=80), st.sampled_from([True, False, None]))
def test_random_bytes(data: bytes, enveloped: bool | None) -> None:
    same(data, enveloped)


def spy_uniform_runs(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """The length of each uniform run the Python paths cut from now on."""
    calls: list[int] = []
    real = columns._uniform_run

    def spy(*args: Any) -> Any:
        m, view = real(*args)
        calls.append(m)
        return m, view

    monkeypatch.setattr(columns, "_uniform_run", spy)
    return calls


def test_plain_entries_are_cut_by_the_codec_and_the_rest_handed_back(
    monkeypatch: pytest.MonkeyPatch, spark_codec: str
) -> None:
    """With the C codec, an entry of plain records (control and end-of-stream
    ones too) never reaches the Python paths; an entry holding a record set
    does, whole."""
    calls = spy_uniform_runs(monkeypatch)
    writer = RecordSetWriter()
    for i in range(100):
        writer.append(LogRecord(i, bytes([i]) * 10))
    writer.append(LogRecord.control_record(99))
    writer.append(LogRecord.end_of_stream_marker())
    assert same(writer.build(), True) == 102
    assert calls == ([] if spark_codec == "c" else [100])

    calls.clear()
    writer = RecordSetWriter()
    for i in range(20):
        writer.append(LogRecord(i, b"x" * 9))
    writer.append(LogRecord(5, build_record_set([b"y" * 3] * 40), record_set=True))
    assert same(writer.build(), True) == 60
    assert calls == [20, 40]


def test_uniform_runs_take_the_vectorized_path(monkeypatch: pytest.MonkeyPatch) -> None:
    """Without the C codec, runs of equal lengths (records and record-set
    members) are cut by Arrow, not walked in Python; varied lengths are
    walked."""
    monkeypatch.setattr(columns, "_codec", None)
    calls = spy_uniform_runs(monkeypatch)
    writer = RecordSetWriter()
    for i in range(100):
        writer.append(LogRecord(i, bytes([i]) * 10))
    writer.append(LogRecord.control_record(99))
    assert same(writer.build(), True) == 101
    assert calls == [100]

    calls.clear()
    writer = RecordSetWriter(compression="lz4")
    writer.append(
        LogRecord(5, build_record_set([b"x" * 7] * 40, compression="lz4"), record_set=True)
    )
    writer.append(LogRecord(6, b"tail"))
    assert same(writer.build(), True) == 41
    assert calls == [40]

    calls.clear()
    writer = RecordSetWriter()
    for i in range(200):
        writer.append(LogRecord(i, bytes(i % 7)))
    assert same(writer.build(), True) == 200
    assert calls == []


def test_a_uniform_run_stops_at_bad_metadata_or_a_record_set() -> None:
    writer = RecordSetWriter()
    for i in range(40):
        writer.append(LogRecord(i, b"abcd"))
    data = bytearray(writer.build())
    # Record 30 (of the same length) claims to be a record set: not a valid
    # one, so decode_entry's error; record 20 gets an unused flag bit.
    at = 13 + 30 * 24
    assert same(bytes(data[:at]) + bytes([0] * 7 + [4]) + bytes(data[at + 8 :]), False) == -1
    data[13 + 20 * 24 + 7] |= 0x10
    assert same(bytes(data), True) == -1


def test_bad_arguments_raise_decode_entrys_errors() -> None:
    data = RecordSetWriter().build()
    for args in [("1", 0, 0), (1, 2**63, 0), (1, 0, True), (1, 0, -(2**63) - 1)]:
        with pytest.raises((TypeError, ValueError)) as expected:
            decode_entry(data, *args)  # type: ignore[arg-type]
        with pytest.raises(type(expected.value), match=str(expected.value)):
            decode_entry_columns(data, *args)  # type: ignore[arg-type]
    with pytest.raises(InvalidRecordError, match="must be bytes"):
        decode_entry_columns("text", 1, 0)  # type: ignore[arg-type]
    assert same(bytearray(data), True) == 0
    assert same(memoryview(data), True) == 0


def entry_of(*records: bytes) -> bytes:
    body = b"".join(records)
    return struct.pack(">BIii", 1, 0, len(body), len(body)) + body


def set_of(members: list[bytes], *, count: int | None = None, tail: bytes = b"") -> bytes:
    body = b"".join(struct.pack(">i", len(m)) + m for m in members) + tail
    n = len(members) if count is None else count
    return struct.pack(">Iiii", 0x1000, n, len(body), len(body)) + body


@pytest.mark.parametrize("bad", [-1, -20, -21, -(2**31)])
def test_negative_lengths_are_decode_entrys_errors(bad: int) -> None:
    """A negative length would walk backwards (or loop for ever)."""
    good = [raw_record((i + 1) << 16, i, b"x" * 8, 0) for i in range(MIN_RUN + 2)]
    lying = struct.pack(">Qqi", 40 << 16, 1, bad) + b"y" * 30
    assert same(entry_of(*good[:2], lying, *good[2:]), True) == -1
    assert same(entry_of(*good, lying), True) == -1
    members = [b"m" * 6] * (MIN_RUN + 1)
    body = set_of(members)
    at = 16 + 5 * 10  # the length of member 5
    lying_set = body[:at] + struct.pack(">i", bad) + body[at + 4 :]
    assert same(entry_of(raw_record((1 << 16) | 4, 1, lying_set, 0)), True) == -1


def test_record_set_members_must_fill_the_set_exactly() -> None:
    members = [b"m" * 6] * (MIN_RUN + 1)
    for body in (
        set_of(members, tail=b"\0"),  # bytes after the last member
        set_of(members, tail=b"\0\0\0\0\0\0\0\0\0\0"),  # a whole member's worth
        set_of(members[:-1] + [b"m" * 5], tail=b"\0"),
        set_of(members, count=len(members) + 1),  # a member with no length
        set_of(members, count=len(members) - 1),
    ):
        assert same(entry_of(raw_record((1 << 16) | 4, 1, body, 0)), True) == -1
    assert same(entry_of(raw_record((1 << 16) | 4, 1, set_of(members), 0)), True) == len(members)


def test_a_set_claiming_too_much_decompressed_data_is_refused() -> None:
    """decode_entry refuses to inflate past 8 MiB even when the LZ4 data would."""
    body = struct.pack(">i", 9 * 2**20 - 4) + bytes(9 * 2**20 - 4)
    stored = lz4.block.compress(body, store_size=False)
    data = struct.pack(">Iiii", 0x1001, 1, len(body), len(stored)) + stored
    assert same(entry_of(raw_record((1 << 16) | 4, 1, data, 0)), True) == -1
