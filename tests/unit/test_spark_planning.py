"""The dlog Spark source without Spark or bookies: option parsing and
validation, partition planning over segment metadata, counting records by
position for maxRecordsPerTrigger, and the DLSN text of the ``dlsn`` column.

pyspark and pyarrow must be installed (the planning module builds Spark
``InputPartition``s): without them these tests fail on import, never skip."""

from __future__ import annotations

import contextlib
import dataclasses
import itertools
from collections.abc import Iterator

import pyarrow as pa
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from dlog.dlsn import DLSN, NonInclusiveLowerBound
from dlog.segment import LogSegmentMetadata
from dlog.spark import reader as reader_module
from dlog.spark.options import (
    DEFAULT_ENTRIES_PER_PARTITION,
    EARLIEST,
    LATEST,
    DlogSourceOptionError,
    Position,
    before,
    parse_options,
)
from dlog.spark.planning import (
    MAX_DLSN,
    DlogPartition,
    EntryRecord,
    allocate,
    available,
    count_through,
    limited_end,
    plan_stream,
    spans,
)
from dlog.spark.reader import ARROW_SCHEMA, _batch, dlsn_column, dlsn_text

URI = "distributedlog://127.0.0.1:2181/messaging"
MSU = "zk+hierarchical://127.0.0.1:2181/ledgers"


def opts(**kw: str):
    base = {"uri": URI, "stream": "events"}
    base.update(kw)
    # Spark hands a Python data source lower-cased keys.
    return parse_options({k.lower(): v for k, v in base.items()})


def option_error(**kw: str) -> str:
    with pytest.raises(DlogSourceOptionError) as info:
        opts(**kw)
    return str(info.value)


# ---------------------------------------------------------------------------
# options
# ---------------------------------------------------------------------------


def test_defaults() -> None:
    o = opts(stream="a, b,c")
    assert o.uri == URI
    assert o.streams == ("a", "b", "c")
    assert [o.starting_for(s) for s in o.streams] == [EARLIEST] * 3
    assert [o.ending_for(s) for s in o.streams] == [LATEST] * 3
    assert not o.ending_given
    assert o.subscription is None
    assert o.max_records_per_trigger is None
    assert o.entries_per_partition == DEFAULT_ENTRIES_PER_PARTITION
    assert o.dlog_settings == ()


def test_missing_uri_and_stream_name_the_option() -> None:
    with pytest.raises(DlogSourceOptionError) as info:
        parse_options({"stream": "events"})
    assert str(info.value).startswith("dlog source option 'uri': is required")
    assert info.value.option == "uri"
    with pytest.raises(DlogSourceOptionError, match="option 'stream': is required"):
        parse_options({"uri": URI})
    assert "option 'uri'" in option_error(uri="http://x/y")
    assert "option 'stream'" in option_error(stream="a,a")
    assert "option 'stream'" in option_error(stream="bad name")


def test_malformed_dlsn_names_the_option() -> None:
    assert (
        option_error(startingPosition="abc")
        == "dlog source option 'startingPosition': 'abc' is not a DLSN, 'earliest' or 'latest'"
    )
    assert "option 'endingPosition'" in option_error(endingPosition="1/2")
    assert "not a record position" in option_error(startingPosition="1/0/-1")


def test_positions_in_every_dlsn_form() -> None:
    d = DLSN(3, 4, 5)
    for text in (d.serialize(), "3/4/5", "3:4:5", str(d), " LATEST ", "Earliest"):
        pos = opts(startingPosition=text).starting_for("events")
        assert pos in (Position("dlsn", d), LATEST, EARLIEST)
    assert opts(startingPosition="3/4/5").starting_for("events") == Position("dlsn", d)
    o = opts(endingPosition="7/0/0")
    assert o.ending_given and o.ending_for("events") == Position("dlsn", DLSN(7, 0, 0))


def test_positions_per_stream_as_json() -> None:
    o = opts(stream="a,b,c", startingPosition='{"a": "2/0/0", "b": "latest"}')
    assert o.starting_for("a") == Position("dlsn", DLSN(2, 0, 0))
    assert o.starting_for("b") == LATEST
    assert o.starting_for("c") == EARLIEST
    assert "stream(s) 'zz'" in option_error(stream="a", startingPosition='{"zz": "latest"}')
    assert "not valid JSON" in option_error(startingPosition="{nope")


def test_start_bounds() -> None:
    o = opts(stream="a,b,c", startingPosition='{"a": "2/3/0", "b": "latest"}')
    assert o.start_bound("a", None) == DLSN(2, 3, -1)
    assert o.start_bound("b", DLSN(9, 9, 9)) == DLSN(9, 9, 9)
    assert o.start_bound("b", None) == NonInclusiveLowerBound
    assert o.start_bound("c", DLSN(9, 9, 9)) == NonInclusiveLowerBound


@pytest.mark.parametrize(
    "record", [DLSN(1, 0, 0), DLSN(1, 0, 1), DLSN(2, 5, 0), DLSN(2, 5, 7), DLSN(3, 0, 0)]
)
def test_before_has_no_record_between(record: DLSN) -> None:
    b = before(record)
    assert b < record
    # Every possible record position below ``record`` is at or below ``b``.
    for seq, entry, slot in itertools.product(range(1, 4), range(0, 7), range(0, 9)):
        other = DLSN(seq, entry, slot)
        if other < record:
            assert other <= b


def test_integers() -> None:
    o = opts(maxRecordsPerTrigger="1_000", entriesPerPartition="16")
    assert (o.max_records_per_trigger, o.entries_per_partition) == (1000, 16)
    assert "option 'maxRecordsPerTrigger': must be at least 1" in option_error(
        maxRecordsPerTrigger="0"
    )
    assert "option 'entriesPerPartition': 'x' is not an integer" in option_error(
        entriesPerPartition="x"
    )


def test_dlog_settings_case_insensitive_and_validated() -> None:
    o = opts(
        **{
            "dlog.bkc.readEntryTimeoutSec": "10",
            "dlog.logSegmentBasedSubscriptionsStoreEnabled": "true",
        }
    )
    assert dict(o.dlog_settings) == {
        "bkc.readEntryTimeoutSec": "10",
        "logSegmentBasedSubscriptionsStoreEnabled": "true",
    }
    conf = o.config()
    assert conf.bkc.read_entry_timeout_sec == 10
    assert conf.log_segment_based_subscriptions_store_enabled is True
    assert "option 'dlog.nosuchsetting'" in option_error(**{"dlog.noSuchSetting": "1"})
    message = option_error(**{"dlog.bkc.readEntryTimeoutSec": "soon"})
    assert message.startswith("dlog source option 'dlog.bkc.readEntryTimeoutSec': expected")


def test_stream_as_the_path() -> None:
    assert parse_options({"uri": URI, "path": "a,b"}).streams == ("a", "b")
    with pytest.raises(DlogSourceOptionError, match="not both"):
        parse_options({"uri": URI, "path": "a", "stream": "b"})


def test_unknown_option_and_subscription() -> None:
    assert "option 'startingoffsets': unknown option" in option_error(startingOffsets="x")
    assert opts(subscription="etl").subscription == "etl"
    assert "option 'subscription'" in option_error(subscription="a/b")


def test_options_pickle() -> None:
    import pickle

    o = opts(stream="a,b", startingPosition="1/2/3", **{"dlog.bkc.readEntryTimeoutSec": "3"})
    assert pickle.loads(pickle.dumps(o)) == o


# ---------------------------------------------------------------------------
# a model stream: segments and their entries
# ---------------------------------------------------------------------------


def completed(seq: int, last_entry: int, records: int, **kw) -> LogSegmentMetadata:
    seg = LogSegmentMetadata(ledger_id=100 + seq, first_txid=0, log_segment_sequence_no=seq)
    seg = seg.complete(last_txid=1, record_count=records, last_entry_id=last_entry, last_slot_id=0)
    return dataclasses.replace(seg, **kw) if kw else seg


def inprogress(seq: int) -> LogSegmentMetadata:
    return LogSegmentMetadata(ledger_id=100 + seq, first_txid=0, log_segment_sequence_no=seq)


class Model:
    """Segments with entries holding ``layout[seq][entry]`` records each,
    "c" marking a control record (it repeats the last user position)."""

    def __init__(self, layout: dict[int, list[list[str]]], in_progress: int | None = None) -> None:
        self.entries: dict[int, list[list[EntryRecord]]] = {}
        self.records: dict[int, list[DLSN]] = {}
        self.reads = 0
        segments = []
        for seq, entries in layout.items():
            position = 0
            seg_entries = []
            users = []
            for entry_id, kinds in enumerate(entries):
                out = []
                for slot, kind in enumerate(kinds):
                    dlsn = DLSN(seq, entry_id, slot)
                    if kind == "u":
                        position += 1
                        users.append(dlsn)
                    out.append(EntryRecord(dlsn, position, kind == "u"))
                seg_entries.append(out)
            self.entries[seq] = seg_entries
            self.records[seq] = users
            if seq == in_progress:
                segments.append(inprogress(seq))
            else:
                segments.append(completed(seq, len(entries) - 1, position))
        self.segments = segments

    def read(self, seg: LogSegmentMetadata, entry_id: int) -> list[EntryRecord]:
        self.reads += 1
        return self.entries[seg.log_segment_sequence_no][entry_id]

    def lac(self, seg: LogSegmentMetadata) -> int:
        return len(self.entries[seg.log_segment_sequence_no]) - 1

    def all_records(self) -> list[DLSN]:
        return [d for seq in sorted(self.records) for d in self.records[seq]]


def uneven_model(in_progress: int | None = 3) -> Model:
    return Model(
        {
            1: [["u"] * 5, ["u", "u", "c"], ["u"] * 9, ["c"], ["u"]],
            2: [["u"] * 3 for _ in range(10)],
            3: [["u"] * 50, ["u"], ["u"] * 20, ["c", "u", "u"], ["u"] * 7],
        },
        in_progress=in_progress,
    )


# ---------------------------------------------------------------------------
# partition planning
# ---------------------------------------------------------------------------


def test_one_partition_per_segment_and_chunks_for_large_ones() -> None:
    m = uneven_model()
    parts = plan_stream("s", m.segments, NonInclusiveLowerBound, None, 4, m.lac, MSU)
    got = [(p.segment, p.first_entry, p.last_entry) for p in parts]
    assert got == [
        (1, 0, 3),
        (1, 4, 4),
        (2, 0, 3),
        (2, 4, 7),
        (2, 8, 9),
        (3, 0, 3),
        (3, 4, 4),
    ]
    assert all(p.lower == NonInclusiveLowerBound and p.upper == MAX_DLSN for p in parts)
    assert all(p.ledger_id == 100 + p.segment and p.metadata_service_uri == MSU for p in parts)
    whole = plan_stream("s", m.segments, NonInclusiveLowerBound, None, 256, m.lac, MSU)
    assert [(p.segment, p.first_entry, p.last_entry) for p in whole] == [
        (1, 0, 4),
        (2, 0, 9),
        (3, 0, 4),
    ]


def test_bounds_pick_segments_and_entries() -> None:
    m = uneven_model()
    lac_calls = []

    def lac(seg: LogSegmentMetadata) -> int:
        lac_calls.append(seg.log_segment_sequence_no)
        return m.lac(seg)

    lower, upper = DLSN(1, 2, 4), DLSN(3, 1, 0)
    parts = plan_stream("s", m.segments, lower, upper, 256, lac, MSU)
    assert [(p.segment, p.first_entry, p.last_entry) for p in parts] == [
        (1, 2, 4),
        (2, 0, 9),
        (3, 0, 1),
    ]
    assert all(p.lower == lower and p.upper == upper for p in parts)
    assert lac_calls == [3]  # upper inside the in-progress segment: capped by its LAC
    lac_calls.clear()
    plan_stream("s", m.segments, lower, upper, 256, lac, MSU, trust_upper=True)
    assert lac_calls == []
    # An upper bound past a completed segment's end is clamped to its last entry.
    parts = plan_stream("s", m.segments[:2], DLSN(2, 8, 1), DLSN(2, 99, 0), 256, lac, MSU)
    assert [(p.segment, p.first_entry, p.last_entry) for p in parts] == [(2, 8, 9)]
    # Nothing between equal bounds, or with an upper bound below the lower one.
    assert plan_stream("s", m.segments, upper, upper, 256, lac, MSU) == []
    assert plan_stream("s", m.segments, upper, lower, 256, lac, MSU) == []


def test_truncated_segments_are_skipped_and_partial_ones_start_at_min_active() -> None:
    m = uneven_model(in_progress=None)
    segs = list(m.segments)
    segs[0] = segs[0].mark_truncated()
    segs[1] = segs[1].truncate_to(DLSN(2, 6, 1))
    parts = plan_stream("s", segs, NonInclusiveLowerBound, None, 256, m.lac, MSU)
    assert [(p.segment, p.first_entry, p.last_entry) for p in parts] == [(2, 6, 9), (3, 0, 4)]
    assert parts[0].lower == DLSN(2, 6, 0)  # records before 2/6/1 are truncated
    assert parts[1].lower == NonInclusiveLowerBound
    # A start past the truncation point wins.
    parts = plan_stream("s", segs, DLSN(2, 7, 0), None, 256, m.lac, MSU)
    assert parts[0].lower == DLSN(2, 7, 0) and parts[0].first_entry == 7


def test_empty_segments_and_empty_in_progress_segment() -> None:
    empty = completed(1, -1, 0)
    fresh = inprogress(2)
    parts = plan_stream("s", [empty, fresh], NonInclusiveLowerBound, None, 8, lambda s: -1, MSU)
    assert parts == []


def test_partitions_pickle_small() -> None:
    import pickle

    p = DlogPartition("s", 2, 102, 40, 0, 255, DLSN(1, 0, -1), MAX_DLSN, MSU)
    data = pickle.dumps(p)
    assert pickle.loads(data) == p
    assert len(data) < 400


# ---------------------------------------------------------------------------
# counting records: maxRecordsPerTrigger
# ---------------------------------------------------------------------------


@pytest.mark.parametrize("in_progress", [None, 3])
def test_limited_end_is_the_exact_nth_record(in_progress: int | None) -> None:
    m = uneven_model(in_progress)
    records = m.all_records()
    starts = [NonInclusiveLowerBound, DLSN(1, 1, 2), records[7], before(records[30]), records[-2]]
    cap = records[-1]
    for start in starts:
        after = [d for d in records if d > start]
        counted = available(spans(m.segments, start, cap, m.lac, trust_upper=True), m.read)
        assert sum(hi - lo for _, lo, hi in counted) == len(after)
        for n in range(1, len(after) + 1):
            m.reads = 0
            assert limited_end(counted, n, m.read) == after[n - 1], (start, n)
            assert m.reads <= 12  # a search, not a scan
        assert limited_end(counted, len(after) + 1, m.read) is None


def test_limited_end_with_a_cap_inside_the_stream() -> None:
    m = uneven_model()
    records = m.all_records()
    cap = records[40]
    counted = available(spans(m.segments, records[3], cap, m.lac, trust_upper=True), m.read)
    assert sum(hi - lo for _, lo, hi in counted) == 37
    assert limited_end(counted, 37, m.read) == cap


def test_count_through() -> None:
    m = uneven_model()
    seg1 = m.segments[0]
    assert count_through(seg1, DLSN(1, 0, 4), 4, m.read) == 5
    assert count_through(seg1, DLSN(1, 1, 2), 4, m.read) == 7  # a control record
    assert count_through(seg1, DLSN(1, 3, -1), 4, m.read) == 16
    assert count_through(seg1, DLSN(1, 3, 0), 4, m.read) == 16  # a control-only entry
    assert count_through(seg1, DLSN(1, 0, -1), 4, m.read) == 0
    assert count_through(seg1, DLSN(2, 0, 0), 4, m.read) == 17
    assert count_through(m.segments[2], MAX_DLSN, 4, m.read) == 80  # in progress: read


def test_locate_is_a_search_on_a_large_segment() -> None:
    m = Model({1: [["u"] * 7 for _ in range(5000)]})
    records = m.all_records()
    counted = available(spans(m.segments, NonInclusiveLowerBound, records[-1], m.lac), m.read)
    for n in (1, 2, 1234, 20_000, 34_999, 35_000):
        m.reads = 0
        assert limited_end(counted, n, m.read) == records[n - 1]
        assert m.reads <= 4


def test_allocate_shares_fairly() -> None:
    assert allocate(10, {"a": 100, "b": 100}) == {"a": 5, "b": 5}
    assert allocate(10, {"a": 2, "b": 100, "c": 100}) == {"a": 2, "b": 4, "c": 4}
    assert allocate(10, {"a": 0, "b": 3}) == {"a": 0, "b": 3}
    assert allocate(3, {"a": 10, "b": 10}, first=0) == {"a": 2, "b": 1}
    assert allocate(3, {"a": 10, "b": 10}, first=1) == {"a": 1, "b": 2}
    assert allocate(1, {"a": 10, "b": 10, "c": 10}, first=2) == {"a": 0, "b": 0, "c": 1}
    for limit in range(0, 40):
        got = allocate(limit, {"a": 5, "b": 17, "c": 0, "d": 9})
        assert sum(got.values()) == min(limit, 31)


# ---------------------------------------------------------------------------
# executor-side encoding
# ---------------------------------------------------------------------------


@pytest.mark.parametrize(
    "dlsn",
    [
        DLSN(1, 0, 0),
        DLSN(1, 0, 255),
        DLSN(1, 0, 256),
        DLSN(7, 123456, 70000),
        DLSN(2**40, 2**50, 2**21),
    ],
)
@pytest.mark.parametrize("codec", ["c", "python"])
def test_dlsn_text_is_the_base64_form(dlsn: DLSN, codec: str) -> None:
    with dlsn_codec(codec):
        assert dlsn_text(*dlsn) == dlsn.serialize()


INT64 = st.integers(min_value=-(2**63), max_value=2**63 - 1)


@contextlib.contextmanager
def dlsn_codec(which: str) -> Iterator[None]:
    """DLSN texts written by the C codec (dlog/_record_codec.c), or in Python."""
    built = reader_module._codec
    assert built is not None, "dlog._record_codec is not built (make install builds it)"
    reader_module._codec = built if which == "c" else None
    try:
        yield
    finally:
        reader_module._codec = built


@pytest.mark.parametrize("codec", ["c", "python"])
@settings(max_examples=200, deadline=None)
@given(segment=INT64, rows=st.lists(st.tuples(INT64, INT64), max_size=40))
def test_dlsn_column_is_the_base64_form_of_each_row(
    codec: str, segment: int, rows: list[tuple[int, int]]
) -> None:
    with dlsn_codec(codec):
        dlsn_column_cases(segment, rows)


def test_dlsn_column_needs_as_many_entries_as_slots() -> None:
    for codec in ("c", "python"):
        with dlsn_codec(codec), pytest.raises(ValueError, match="2 entries for 1 slots"):
            dlsn_column(1, pa.array([1, 2], pa.int64()), pa.array([0], pa.int64()))


def dlsn_column_cases(segment: int, rows: list[tuple[int, int]]) -> None:
    entries = pa.array([e for e, _ in rows], pa.int64())
    slots = pa.array([s for _, s in rows], pa.int64())
    column = dlsn_column(segment, entries, slots)
    column.validate(full=True)
    assert column.type == pa.string()
    assert column.to_pylist() == [DLSN(segment, e, s).serialize() for e, s in rows]
    # Sliced inputs (an array's offset into its buffers) are read from their offset.
    if rows:
        tail = dlsn_column(segment, entries.slice(1), slots.slice(1))
        assert tail.to_pylist() == [DLSN(segment, e, s).serialize() for e, s in rows[1:]]


def test_arrow_batch_matches_the_schema() -> None:
    batch = _batch(
        "s",
        3,
        pa.array([0, 1], pa.int64()),
        pa.array([0, 0], pa.int64()),
        pa.array([10, 11], pa.int64()),
        pa.array([b"a", b""]),
    )
    batch.validate(full=True)
    assert batch.schema.equals(ARROW_SCHEMA)
    assert batch.column("payload").to_pylist() == [b"a", b""]
    assert batch.column("segment").to_pylist() == [3, 3]
    assert batch.column("entry").to_pylist() == [0, 1]
    assert batch.column("stream").to_pylist() == ["s", "s"]
    assert batch.column("dlsn").to_pylist() == [
        DLSN(3, 0, 0).serialize(),
        DLSN(3, 1, 0).serialize(),
    ]
