"""The executor keeps exactly the rows the library's filter would keep:
``lower < dlsn <= upper``, control and end-of-stream records skipped, and
its batches hold exactly those rows of every entry, in order, however they
were gathered (straight from the bytes by the C codec, or column by column).

Every test runs twice: with the C codec (dlog/_record_codec.c), and with the
Python paths alone.
"""

from __future__ import annotations

from typing import Any

import pyarrow as pa
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from dlog.errors import InvalidRecordError
from dlog.ledger.read_handle import LedgerEntry
from dlog.record import (
    FLAG_CONTROL,
    FLAG_END_OF_STREAM,
    LogRecord,
    RecordSetWriter,
    build_record_set,
    decode_entry,
)
from dlog.spark.columns import BatchColumns, EntryColumns, decode_entry_columns
from dlog.spark.planning import DlogPartition
from dlog.spark.reader import ARROW_SCHEMA, _batch, _kept, add_entry, batches

pytestmark = pytest.mark.usefixtures("spark_codec")  # with the C codec and without

SEGMENT, ENTRY = 4, 7
KINDS = st.lists(st.sampled_from(["user", "user", "user", "control"]), min_size=1, max_size=40)
# Bounds near the entry: before it, in it (any slot), after it.
SLOT = st.integers(min_value=-2, max_value=45)
BOUND = st.one_of(
    st.tuples(st.sampled_from([SEGMENT]), st.sampled_from([ENTRY - 1, ENTRY, ENTRY + 1]), SLOT),
    st.tuples(st.sampled_from([SEGMENT - 1, SEGMENT + 1]), st.integers(0, 9), SLOT),
)


def entry_bytes(kinds: list[str], eos: bool) -> bytes:
    writer = RecordSetWriter()
    for i, kind in enumerate(kinds):
        if kind == "user":
            writer.append(LogRecord(i, b"p%d" % i))
        else:
            writer.append(LogRecord.control_record(i))
    if eos:
        writer.append(LogRecord.end_of_stream_marker())
    return writer.build()


@settings(max_examples=400, deadline=None)
@given(KINDS, st.booleans(), BOUND, BOUND)
def test_kept_rows_are_the_filtered_records(
    kinds: list[str], eos: bool, lower: tuple[int, int, int], upper: tuple[int, int, int]
) -> None:
    data = entry_bytes(kinds, eos)
    expected = [
        (r.dlsn[2], r.txid, r.payload)
        for r in decode_entry(data, SEGMENT, ENTRY)
        if lower < r.dlsn <= upper and not r.flags & (FLAG_CONTROL | FLAG_END_OF_STREAM)
    ]
    kept = _kept(decode_entry_columns(data, SEGMENT, ENTRY), SEGMENT, ENTRY, lower, upper)
    if kept is None:
        assert expected == []
        return
    got = list(
        zip(kept.slot.to_pylist(), kept.txid.to_pylist(), kept.payload.to_pylist(), strict=True)
    )
    assert got == expected
    assert got  # no rows is None, not an empty entry


# -- batches of many entries -----------------------------------------------------
PAYLOADS = st.one_of(st.binary(max_size=30), st.sampled_from([b"", b"x" * 100]))


@st.composite
def stream_entry(draw: st.DrawFn) -> bytes:
    """An entry as a writer makes it: user, control and end-of-stream
    records, maybe a record set, maybe LZ4 on the envelope; or, rarely,
    damaged bytes."""
    writer = RecordSetWriter(compression=draw(st.sampled_from(["none", "none", "lz4"])))
    for i, kind in enumerate(draw(st.lists(st.sampled_from("uuuuucsr"), max_size=30))):
        if kind == "u":
            record = LogRecord(i, draw(PAYLOADS))
        elif kind == "c":
            record = LogRecord.control_record(i)
        elif kind == "s":
            members = draw(st.lists(PAYLOADS, max_size=4))
            record = LogRecord(i, build_record_set(members), record_set=True)
        else:
            record = LogRecord(i, bytes(draw(st.integers(0, 300))))
        writer.append(record)
    if draw(st.integers(0, 9)) == 0:
        writer.append(LogRecord.end_of_stream_marker())
    data = writer.build()
    if data and draw(st.integers(0, 14)) == 0:
        at = draw(st.integers(0, len(data) - 1))
        data = data[:at] + bytes([data[at] ^ 0x40]) + data[at + 1 :]
    return data


def expected_rows(data: bytes, entry_id: int, lower: Any, upper: Any) -> list[Any]:
    return [
        (r.dlsn[1], r.dlsn[2], r.txid, r.payload)
        for r in decode_entry(data, SEGMENT, entry_id)
        if lower < r.dlsn <= upper and not r.flags & (FLAG_CONTROL | FLAG_END_OF_STREAM)
    ]


def batch_rows(columns_: tuple[Any, ...]) -> list[Any]:
    batch = _batch("s", SEGMENT, *columns_)
    batch.validate(full=True)
    assert batch.schema.equals(ARROW_SCHEMA)
    picked = [batch.column(name).to_pylist() for name in ("entry", "slot", "txid", "payload")]
    return list(zip(*picked, strict=True))


def gather(
    rows: BatchColumns,
    entries: list[bytes],
    first: int,
    lower_slot: int,
    upper_slot: int,
    cuts: set[int],
) -> tuple[list[Any], list[Any]]:
    """The rows of the batches taken, and the rows decode_entry keeps."""
    last = first + len(entries) - 1
    lower = (SEGMENT, first, lower_slot)
    upper = (SEGMENT, last, upper_slot)
    expected: list[Any] = []
    got: list[Any] = []
    for i, data in enumerate(entries):
        entry_id = first + i
        try:
            want = expected_rows(data, entry_id, lower, upper)
        except InvalidRecordError as refused:
            before = len(rows), rows.nbytes
            with pytest.raises(type(refused)):
                add_entry(rows, data, SEGMENT, entry_id, 0, lower, upper)
            assert (len(rows), rows.nbytes) == before
            continue
        expected += want
        add_entry(rows, data, SEGMENT, entry_id, 0, lower, upper)
        if i in cuts:
            got += batch_rows(rows.take())
            assert len(rows) == 0 and rows.nbytes == 0
    got += batch_rows(rows.take())
    return got, expected


@settings(max_examples=300, deadline=None)
@given(
    entries=st.lists(stream_entry(), min_size=1, max_size=8),
    first=st.integers(0, 3),
    lower_slot=SLOT,
    upper_slot=SLOT,
    cuts=st.sets(st.integers(0, 8)),
    small=st.booleans(),
)
def test_batches_hold_every_kept_row_of_every_entry_in_order(
    entries: list[bytes],
    first: int,
    lower_slot: int,
    upper_slot: int,
    cuts: set[int],
    small: bool,
) -> None:
    """A partition's entries through add_entry, its batches taken after any
    of them: the batches' rows are decode_entry's filtered rows, in order; an
    entry that decode_entry refuses raises its error and adds nothing."""
    with pytest.MonkeyPatch.context() as patch:
        if small:  # columns that start tiny and grow under the writes
            patch.setattr(BatchColumns, "MIN_ROWS", 1)
            patch.setattr(BatchColumns, "MIN_BYTES", 1)
        rows = BatchColumns()
        got, expected = gather(rows, entries, first, lower_slot, upper_slot, cuts)
    assert got == expected
    dlsns = _batch("s", SEGMENT, *rows.take()).column("dlsn").to_pylist()
    assert dlsns == []


def test_plain_entries_go_straight_into_the_columns(spark_codec: str) -> None:
    """With the C codec, an entry of plain records inside the bounds is
    written into the batch's columns without decoding it into arrays."""
    writer = RecordSetWriter()
    for i in range(50):
        writer.append(LogRecord(i, b"p%d" % i))
    writer.append(LogRecord.control_record(50))
    data = writer.build()
    rows = BatchColumns()
    assert rows.add_plain(data, 3) is (spark_codec == "c")
    if spark_codec == "c":
        assert batch_rows(rows.take()) == [(3, i, i, b"p%d" % i) for i in range(50)]


def test_rows_added_from_sliced_columns_are_read_from_their_offset() -> None:
    """Columns that are slices of larger arrays (an offset into their
    buffers, payload offsets not starting at 0) add exactly their rows."""
    ints = pa.array(range(10), pa.int64())
    payload = pa.array([b"%d" % i * i for i in range(10)], pa.binary())
    rows = BatchColumns()
    rows.add(
        5, EntryColumns(ints.slice(0, 2), ints, ints.slice(0, 2), ints, payload.slice(0, 2), False)
    )
    picked = EntryColumns(*(a.slice(6, 3) for a in (ints, ints, ints, ints, payload)), False)
    rows.add(9, picked)
    assert batch_rows(rows.take()) == [(5, 0, 0, b""), (5, 1, 1, b"1")] + [
        (9, i, i, b"%d" % i * i) for i in (6, 7, 8)
    ]


def partition_of(entries: int, lower: tuple[int, int, int], upper: tuple[int, int, int]) -> Any:
    return DlogPartition("s", SEGMENT, 99, 1, 0, entries - 1, lower, upper, "zk://x/ledgers")


def test_batches_are_cut_at_the_entry_that_reaches_the_rows_or_the_bytes() -> None:
    """A batch ends with the entry that brings it to batch_rows rows or
    batch_bytes of payloads (int32 offsets: a batch's payloads must stay
    under 2 GiB), and no row is lost or repeated across the cuts."""
    sizes = [(10, 1), (10, 1), (1, 500), (3, 1), (2, 300), (5, 1)]  # (records, bytes each)
    runs = []
    for entry_id, (count, size) in enumerate(sizes):
        writer = RecordSetWriter()
        for i in range(count):
            writer.append(LogRecord(i, bytes([entry_id]) * size))
        runs.append(LedgerEntry(99, entry_id, writer.build(), 0))
    part = partition_of(len(sizes), (SEGMENT, -1, 0), (SEGMENT, len(sizes), 0))
    got = list(batches([runs[:2], runs[2:5], runs[5:]], part, batch_rows=15, batch_bytes=400))
    assert [b.column("entry").to_pylist() for b in got] == [
        [0] * 10 + [1] * 10,  # 20 rows >= 15
        [2],  # 500 bytes >= 400
        [3, 3, 3, 4, 4],  # 603 bytes >= 400
        [5] * 5,  # the rest
    ]
    for batch in got:
        assert batch.column("payload").to_pylist() == [
            bytes([e]) * sizes[e][1] for e in batch.column("entry").to_pylist()
        ]
