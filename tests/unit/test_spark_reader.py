"""The executor keeps exactly the rows the library's filter would keep:
``lower < dlsn <= upper``, control and end-of-stream records skipped."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from dlog.record import FLAG_CONTROL, FLAG_END_OF_STREAM, LogRecord, RecordSetWriter, decode_entry
from dlog.spark.columns import decode_entry_columns
from dlog.spark.reader import _kept

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
