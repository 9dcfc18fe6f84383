"""LogSegmentMetadata: DistributedLog's segment strings (golden strings written
by hand from LogSegmentMetadata.java's getFinalisedData/parseData), round
trips, strict rejection of malformed data, and the copy helpers."""

from __future__ import annotations

import dataclasses

import pytest
from hypothesis import assume, example, given, settings
from hypothesis import strategies as st

from dlog.dlsn import DLSN
from dlog.errors import IllegalStateError, MetadataError, UnsupportedMetadataVersionError
from dlog.ledger.read_handle import LedgerEntry
from dlog.log_metadata import _from_seqno
from dlog.record import LogRecord, RecordSetWriter
from dlog.segment import (
    INVALID_TXID,
    UNASSIGNED_SEQUENCE_ID,
    LogSegmentMetadata,
    TruncationStatus,
    assign_start_sequence_ids,
    completed_znode_name,
    inprogress_znode_name,
    parse_znode_name,
    start_sequence_id_after,
)
from dlog.segment_reader import records_of

INT64 = st.integers(-(2**63), 2**63 - 1)
NONNEG64 = st.integers(0, 2**63 - 1)


def inprogress(**kw) -> LogSegmentMetadata:
    fields = dict(ledger_id=42, first_txid=100, log_segment_sequence_no=3)
    fields.update(kw)
    return LogSegmentMetadata(**fields)


def completed(**kw) -> LogSegmentMetadata:
    fields = dict(
        ledger_id=42,
        first_txid=100,
        last_txid=250,
        completion_time=1700000000000,
        log_segment_sequence_no=3,
        last_entry_id=17,
        last_slot_id=4,
        start_sequence_id=1000,
        record_count=151,
        in_progress=False,
    )
    fields.update(kw)
    return LogSegmentMetadata(**fields)


# ---------------------------------------------------------------------------
# golden strings
# ---------------------------------------------------------------------------

# (segment, exact znode data). versionStatusCount = version | status << 8 |
# region << 28 | recordCount << 32 (record count only when completed);
# the arithmetic is spelled out per case.
GOLDEN = [
    # v5 in progress: vsc;ledgerId;firstTxId;seqNo;minActiveEntryId;minActiveSlotId;startSequenceId
    (inprogress(), "5;42;100;3;0;0;-1"),
    # v5 completed, 151 records: 151 * 2**32 + 5 = 648540061696 + 5
    (
        completed(),
        "648540061701;42;100;250;1700000000000;3;17;4;0;0;1000",
    ),
    # v5 completed, TRUNCATED (2 << 8 = 512), region 3 (3 << 28 = 805306368),
    # 1 record (2**32 = 4294967296): 4294967296 + 805306368 + 512 + 5
    (
        completed(
            ledger_id=7,
            first_txid=1,
            last_txid=10,
            completion_time=1234,
            log_segment_sequence_no=2,
            last_entry_id=3,
            last_slot_id=0,
            start_sequence_id=0,
            record_count=1,
            region_id=3,
            truncation_status=TruncationStatus.TRUNCATED,
        ),
        "5100274181;7;1;10;1234;2;3;0;0;0;0",
    ),
    # v5 in progress, PARTIALLY_TRUNCATED (1 << 8 = 256) at (3, 5, 2): 256 + 5
    (
        inprogress(
            ledger_id=8,
            first_txid=11,
            min_active_entry_id=5,
            min_active_slot_id=2,
            start_sequence_id=10,
            truncation_status=TruncationStatus.PARTIALLY_TRUNCATED,
        ),
        "261;8;11;3;5;2;10",
    ),
    # the largest record count (Integer.MAX_VALUE): (2**31 - 1) * 2**32 + 5
    # = 2**63 - 2**32 + 5 = 9223372032559808512 + 5
    (
        completed(record_count=2**31 - 1),
        "9223372032559808517;42;100;250;1700000000000;3;17;4;0;0;1000",
    ),
    # empty completed segment as recovery writes it: lastTxId = firstTxId, no entries
    (
        completed(last_txid=100, last_entry_id=-1, last_slot_id=-1, record_count=0),
        "5;42;100;100;1700000000000;3;-1;-1;0;0;1000",
    ),
    # v2: no min active DLSN, no start sequence id
    (inprogress(version=2, ledger_id=5, log_segment_sequence_no=1), "2;5;100;1"),
    (
        completed(
            version=2,
            ledger_id=5,
            last_txid=200,
            log_segment_sequence_no=1,
            last_entry_id=9,
            last_slot_id=0,
            start_sequence_id=UNASSIGNED_SEQUENCE_ID,
            record_count=0,
        ),
        "2;5;100;200;1700000000000;1;9;0",
    ),
    # v3 / v4: min active DLSN, no start sequence id; 3 records: 3 * 2**32 + 4
    (inprogress(version=3, ledger_id=5, log_segment_sequence_no=1), "3;5;100;1;0;0"),
    (
        completed(
            version=4,
            ledger_id=5,
            last_txid=200,
            log_segment_sequence_no=1,
            last_entry_id=9,
            last_slot_id=0,
            min_active_entry_id=2,
            min_active_slot_id=1,
            start_sequence_id=UNASSIGNED_SEQUENCE_ID,
            record_count=3,
            truncation_status=TruncationStatus.PARTIALLY_TRUNCATED,
        ),
        # 12884901888 + 256 + 4
        "12884902148;5;100;200;1700000000000;1;9;0;2;1",
    ),
]


@pytest.mark.parametrize(("segment", "text"), GOLDEN)
def test_golden_serialize(segment: LogSegmentMetadata, text: str) -> None:
    assert segment.serialize() == text.encode("ascii")


@pytest.mark.parametrize(("segment", "text"), GOLDEN)
def test_golden_parse(segment: LogSegmentMetadata, text: str) -> None:
    assert LogSegmentMetadata.parse(text.encode(), segment.znode_name) == segment
    assert LogSegmentMetadata.parse(text) == segment  # str and no name are fine too


def test_inprogress_defaults_are_distributedlogs() -> None:
    seg = inprogress()
    assert seg.version == 5
    assert seg.last_txid == INVALID_TXID == -999
    assert (seg.last_entry_id, seg.last_slot_id) == (-1, -1)
    assert (seg.min_active_entry_id, seg.min_active_slot_id) == (0, 0)
    assert seg.start_sequence_id == -1
    assert seg.region_id == 0 and seg.record_count == 0 and seg.completion_time == 0
    assert seg.truncation_status is TruncationStatus.ACTIVE


def test_znode_names() -> None:
    assert inprogress().znode_name == "inprogress_000000000000000003"
    assert completed().znode_name == "logrecs_000000000000000003"
    assert inprogress_znode_name(12345) == "inprogress_000000000000012345"
    assert completed_znode_name(2**63 - 1) == "logrecs_9223372036854775807"
    assert parse_znode_name("logrecs_000000000000000007") == (False, 7)
    assert parse_znode_name("inprogress_000000000000000007") == (True, 7)
    for bad in (
        "logrecs_7",
        "inprogress_1a",  # DistributedLog's old hex-txid name
        "logrecs_000000000000000001_000000000000000002",
        "logrecs_0000000000000000007",  # 19 digits with a leading zero
        "logrecs_9223372036854775808",  # > int64
        "ledgers",
        "logrecs_000000000000000007 ",
    ):
        assert parse_znode_name(bad) is None, bad


# ---------------------------------------------------------------------------
# round trips
# ---------------------------------------------------------------------------


@st.composite
def segments(draw: st.DrawFn) -> LogSegmentMetadata:
    version = draw(st.integers(2, 5))
    in_progress = draw(st.booleans())
    kw = dict(
        version=version,
        in_progress=in_progress,
        ledger_id=draw(NONNEG64),
        first_txid=draw(INT64),
        log_segment_sequence_no=draw(st.integers(0, 2**63 - 1)),
        truncation_status=draw(st.sampled_from(TruncationStatus)),
        region_id=draw(st.integers(0, 15)),
    )
    if not in_progress:
        kw.update(
            last_txid=draw(INT64),
            completion_time=draw(NONNEG64),
            last_entry_id=draw(st.integers(-1, 2**63 - 1)),
            last_slot_id=draw(st.integers(-1, 2**63 - 1)),
            record_count=draw(st.integers(0, 2**31 - 1)),
        )
    if version >= 3:
        kw.update(min_active_entry_id=draw(NONNEG64), min_active_slot_id=draw(NONNEG64))
    if version >= 5:
        kw.update(start_sequence_id=draw(INT64))
    return LogSegmentMetadata(**kw)


@given(segments())
def test_round_trip(seg: LogSegmentMetadata) -> None:
    data = seg.serialize()
    assert LogSegmentMetadata.parse(data, seg.znode_name) == seg
    assert LogSegmentMetadata.parse(data, f"/ns/s/ledgers/{seg.znode_name}") == seg


@given(segments())
def test_version_status_count_fields(seg: LogSegmentMetadata) -> None:
    vsc = int(seg.serialize().split(b";")[0])
    assert -(2**63) <= vsc < 2**63
    assert vsc & 0xFF == seg.version
    assert (vsc >> 8) & 0xFF == seg.truncation_status
    assert (vsc >> 28) & 0xF == seg.region_id
    assert vsc & 0x0FFF0000 == 0
    assert vsc >> 32 == (0 if seg.in_progress else seg.record_count)


@given(st.text(alphabet="0123456789-;+ x", max_size=60))
def test_parse_is_canonical_or_rejects(text: str) -> None:
    """Never garbage: whatever parses serializes back to the very same text."""
    try:
        seg = LogSegmentMetadata.parse(text.encode())
    except MetadataError:
        return
    assert seg.serialize() == text.encode()


@given(segments(), st.data())
def test_mutations_of_valid_data_parse_canonically_or_fail(
    seg: LogSegmentMetadata, data: st.DataObject
) -> None:
    raw = bytearray(seg.serialize())
    i = data.draw(st.integers(0, len(raw) - 1))
    raw[i] = data.draw(st.sampled_from(b"0123456789-;+ a\x00"))
    assume(bytes(raw) != seg.serialize())
    try:
        other = LogSegmentMetadata.parse(bytes(raw))
    except MetadataError:
        return
    assert other.serialize() == bytes(raw)


# ---------------------------------------------------------------------------
# rejection
# ---------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("data", "needle"),
    [
        (b"", "empty"),
        (b"abc", "not a decimal"),
        (b"5;42;100", "7 fields"),
        (b"5;42;100;3;0;0", "got 6"),
        (b"5;42;100;3;0;0;-1;", "not a decimal"),  # trailing ';' (Java's split drops it)
        (b"5;42;100;3;0;0;-1;0;0;0;0;0", "got 12"),
        (b"5; 42;100;3;0;0;-1", "not a decimal"),
        (b"5;042;100;3;0;0;-1", "not a decimal"),
        (b"+5;42;100;3;0;0;-1", "not a decimal"),
        (b"5;42;-0;3;0;0;-1", "not a decimal"),
        (b"5;42;100;3;0;0;9223372036854775808", "int64"),
        (b"5;4\xc3\xa9;100;3;0;0;-1", "not ASCII"),
        (b"773;42;100;3;0;0;-1", "truncation status 3"),  # 3 << 8 | 5
        (b"1029;42;100;3;0;0;-1", "status bits"),  # 4 << 8 | 5
        (b"65541;42;100;3;0;0;-1", "unused bits"),  # 1 << 16 | 5
        (b"4294967301;42;100;3;0;0;-1", "record count"),  # in progress, 1 << 32 | 5
        (b"-9223372036854775803;42;100;250;1;3;17;4;0;0;1000", "negative record count"),
        (b"5;-1;100;3;0;0;-1", "ledger_id"),
        (b"5;42;100;-1;0;0;-1", "log_segment_sequence_no"),  # 0 is accepted, as upstream
        (b"5;42;100;3;-1;0;-1", "min_active_entry_id"),
        (b"5;42;100;250;-5;3;17;4;0;0;1000", "completion_time"),
        (b"5;42;100;250;1;3;-2;4;0;0;1000", "last_entry_id"),
        (b"5" + b";1" * 600, "too long"),
    ],
)
def test_malformed_data_is_rejected(data: bytes, needle: str) -> None:
    with pytest.raises(MetadataError) as e:
        LogSegmentMetadata.parse(data, "inprogress_000000000000000003")
    assert not isinstance(e.value, UnsupportedMetadataVersionError)
    assert needle in str(e.value)


@pytest.mark.parametrize(
    "data",
    [
        b"0;42;100",
        b"1;42;100",  # DistributedLog v1 in progress
        b"1;42;100;250;1700000000000",  # v1 completed
        b"6;42;100;3;0;0;-1",
        b"255;42;100;3;0;0;-1",
    ],
)
def test_unknown_versions_are_unsupported(data: bytes) -> None:
    with pytest.raises(UnsupportedMetadataVersionError) as e:
        LogSegmentMetadata.parse(data)
    assert "version" in str(e.value)


@pytest.mark.parametrize(
    ("data", "name"),
    [
        (b"5;42;100;3;0;0;-1", "logrecs_000000000000000003"),  # in-progress data
        (b"5;42;100;3;0;0;-1", "inprogress_000000000000000004"),  # other seq
        (b"648540061701;42;100;250;1700000000000;3;17;4;0;0;1000", "inprogress_000000000000000003"),
        (b"5;42;100;3;0;0;-1", "inprogress_3"),
    ],
)
def test_znode_name_must_match_data(data: bytes, name: str) -> None:
    with pytest.raises(MetadataError) as e:
        LogSegmentMetadata.parse(data, name)
    assert "does not match" in str(e.value)


def test_constructor_rejects_fields_its_form_cannot_store() -> None:
    with pytest.raises(ValueError, match="last_txid"):
        inprogress(last_txid=5)
    with pytest.raises(ValueError, match="record_count"):
        inprogress(record_count=5)
    with pytest.raises(ValueError, match="start sequence id"):
        inprogress(version=4, start_sequence_id=0)
    with pytest.raises(ValueError, match="min active"):
        inprogress(version=2, min_active_entry_id=1)
    with pytest.raises(ValueError, match="version"):
        inprogress(version=1)
    with pytest.raises(ValueError, match="region_id"):
        inprogress(region_id=16)
    with pytest.raises(ValueError, match="record_count"):
        completed(record_count=2**31)
    with pytest.raises(TypeError):
        inprogress(ledger_id=1.0)
    with pytest.raises(ValueError, match="truncation status"):
        inprogress(truncation_status=3)


# ---------------------------------------------------------------------------
# positions and copies
# ---------------------------------------------------------------------------


def test_dlsns() -> None:
    seg = completed()
    assert seg.first_dlsn == DLSN(3, 0, 0)
    assert seg.last_dlsn == DLSN(3, 17, 4)
    assert seg.min_active_dlsn == DLSN(3, 0, 0)
    assert inprogress().last_dlsn == DLSN(3, -1, -1)  # as DistributedLog's getLastDLSN


def test_complete() -> None:
    seg = inprogress()
    done = seg.complete(
        last_txid=250,
        record_count=151,
        last_entry_id=17,
        last_slot_id=4,
        start_sequence_id=1000,
        completion_time=1700000000000,
    )
    assert done == completed()
    assert done.znode_name == "logrecs_000000000000000003"
    assert seg.in_progress  # the original is unchanged
    now = seg.complete(last_txid=100, record_count=0, last_entry_id=-1, last_slot_id=-1)
    assert now.completion_time > 1_600_000_000_000
    with pytest.raises(IllegalStateError):
        done.complete(last_txid=1, record_count=0, last_entry_id=-1, last_slot_id=-1)


def test_truncation_copies() -> None:
    seg = completed()
    part = seg.truncate_to(DLSN(3, 10, 2))
    assert part.is_partially_truncated and not part.is_truncated
    assert part.min_active_dlsn == DLSN(3, 10, 2)
    assert seg.is_non_truncated and seg.min_active_dlsn == DLSN(3, 0, 0)
    assert LogSegmentMetadata.parse(part.serialize(), part.znode_name) == part
    gone = part.mark_truncated()
    assert gone.is_truncated and not gone.is_partially_truncated
    assert gone.serialize().split(b";")[0] == str(151 * 2**32 + (2 << 8) + 5).encode()
    assert gone.mark_active().is_non_truncated
    with pytest.raises(ValueError, match="not in segment"):
        seg.truncate_to(DLSN(4, 0, 0))
    with pytest.raises(IllegalStateError):
        gone.truncate_to(DLSN(3, 11, 0))
    with pytest.raises(IllegalStateError):
        completed(version=2, start_sequence_id=-1).truncate_to(DLSN(3, 1, 0))


def test_sort_key_puts_inprogress_first() -> None:
    segs = [completed(log_segment_sequence_no=2), inprogress(), completed()]
    ordered = sorted(segs, key=lambda s: s.sort_key)
    assert [(s.log_segment_sequence_no, s.in_progress) for s in ordered] == [
        (2, False),
        (3, True),
        (3, False),
    ]


def test_frozen() -> None:
    seg = inprogress()
    with pytest.raises(dataclasses.FrozenInstanceError):
        seg.ledger_id = 1  # type: ignore[misc]


# ---------------------------------------------------------------------------
# version 1 (only with skip_min_version_check), sequence number 0
# ---------------------------------------------------------------------------


def test_version_1_parses_with_skip_min_version_check() -> None:
    seg = LogSegmentMetadata.parse(
        b"4294967297;42;100;250;1700000000000", "logrecs_100_250", skip_min_version_check=True
    )
    assert (seg.version, seg.in_progress, seg.ledger_id, seg.first_txid) == (1, False, 42, 100)
    assert (seg.last_txid, seg.completion_time, seg.record_count) == (250, 1700000000000, 1)
    assert seg.log_segment_sequence_no == 0
    assert seg.serialize() == b"4294967297;42;100;250;1700000000000"
    # v1 writers never set status or region bits: such data was not written by one
    with pytest.raises(MetadataError, match="version 1"):
        LogSegmentMetadata.parse(b"268435457;42;100", skip_min_version_check=True)
    with pytest.raises(MetadataError, match="got 4"):
        LogSegmentMetadata.parse(b"1;42;100;3", skip_min_version_check=True)
    with pytest.raises(UnsupportedMetadataVersionError):
        LogSegmentMetadata.parse(b"0;42;100", skip_min_version_check=True)


def test_sequence_number_zero_is_accepted() -> None:
    seg = LogSegmentMetadata.parse(b"5;42;100;0;0;0;-1", "inprogress_000000000000000000")
    assert seg.log_segment_sequence_no == 0
    assert seg.first_dlsn == DLSN(0, 0, 0)


# ---------------------------------------------------------------------------
# sequence ids
# ---------------------------------------------------------------------------

LONG_MIN = -(2**63)


def test_effective_start_sequence_id() -> None:
    assert inprogress(start_sequence_id=7).effective_start_sequence_id == 7
    # unassigned (what Java writes in progress) or not stored: MIN + (seq << 32)
    assert inprogress().effective_start_sequence_id == LONG_MIN + (3 << 32)
    assert completed(version=4, start_sequence_id=-1).effective_start_sequence_id == (
        LONG_MIN + (3 << 32)
    )
    # seq << 32 overflows a Java long for seq >= 2**31: it wraps
    big = inprogress(log_segment_sequence_no=2**31)
    assert big.effective_start_sequence_id == 0
    huge = inprogress(log_segment_sequence_no=2**32 + 1)
    assert huge.effective_start_sequence_id == LONG_MIN + (1 << 32)


def test_complete_drops_start_sequence_id_before_v5() -> None:
    seg = inprogress(version=4).complete(
        last_txid=1, record_count=1, last_entry_id=0, last_slot_id=0, start_sequence_id=5
    )
    assert seg.start_sequence_id == UNASSIGNED_SEQUENCE_ID
    seg5 = inprogress().complete(
        last_txid=1, record_count=1, last_entry_id=0, last_slot_id=0, start_sequence_id=5
    )
    assert seg5.start_sequence_id == 5


def _seg(seq: int, *, version: int = 5, start: int = -1, count: int = 0, done: bool = True):
    if not done:
        return LogSegmentMetadata(
            version=version,
            ledger_id=seq,
            first_txid=seq,
            log_segment_sequence_no=seq,
            start_sequence_id=start,
        )
    return LogSegmentMetadata(
        version=version,
        ledger_id=seq,
        first_txid=seq,
        last_txid=seq,
        log_segment_sequence_no=seq,
        last_entry_id=0,
        last_slot_id=0,
        record_count=count,
        start_sequence_id=start,
        in_progress=False,
    )


def test_assign_start_sequence_ids() -> None:
    # PerStreamLogSegmentCache: the first in-progress v5 segment starts
    # after the last completed one, whatever it stores
    segs = [_seg(2, start=10, count=5, done=False), _seg(1, start=10, count=4)]
    out = assign_start_sequence_ids(segs)
    assert [s.log_segment_sequence_no for s in out] == [1, 2]
    assert out[1].start_sequence_id == 14
    assert assign_start_sequence_ids([_seg(2, start=99, done=False)])[0].start_sequence_id == 0
    # after a v4 segment: 0
    after_v4 = assign_start_sequence_ids([_seg(1, version=4, count=3), _seg(2, done=False)])
    assert after_v4[1].start_sequence_id == 0
    # an in-progress v4 segment keeps MIN + (seq << 32); later ones are left alone
    v4 = assign_start_sequence_ids([_seg(1, count=3, start=0), _seg(2, version=4, done=False)])
    assert v4[1].effective_start_sequence_id == LONG_MIN + (2 << 32)
    two = assign_start_sequence_ids([_seg(1, start=0, count=3, done=False), _seg(2, done=False)])
    assert [s.start_sequence_id for s in two] == [0, -1]
    # completed segments keep their own
    assert assign_start_sequence_ids([_seg(1, start=8, count=3)])[0].start_sequence_id == 8


@given(
    st.lists(
        st.tuples(st.booleans(), st.sampled_from([4, 5]), st.integers(-1, 50), st.integers(0, 9)),
        max_size=12,
    ),
    st.integers(0, 14),
)
@example([(True, 5, 10, 4), (False, 5, -1, 0)], 2)  # the completed one below counts
@example([(True, 5, 10, 4), (False, 5, -1, 0), (False, 5, -1, 0), (False, 5, -1, 0)], 4)
@settings(max_examples=300)
def test_a_listing_from_a_sequence_number_numbers_its_segments_as_the_whole(
    specs: list[tuple[bool, int, int, int]], from_seqno: int
) -> None:
    """A tailing reader lists only the segments from its own on (and below
    them down to the last completed one): their start sequence ids are
    what the whole list gives them."""
    segs = [
        _seg(i + 1, version=v, start=start if v == 5 else -1, count=count, done=done)
        for i, (done, v, start, count) in enumerate(specs)
    ]
    named = [(s.log_segment_sequence_no, s.in_progress, s.znode_name) for s in segs]
    kept = {n for _, _, n in _from_seqno(named, from_seqno)}
    assert {s.znode_name for s in segs if s.log_segment_sequence_no >= from_seqno} <= kept

    def wanted(out: list[LogSegmentMetadata]) -> list[LogSegmentMetadata]:
        return [s for s in out if s.log_segment_sequence_no >= from_seqno]

    whole = wanted(assign_start_sequence_ids(segs))
    assert wanted(assign_start_sequence_ids(s for s in segs if s.znode_name in kept)) == whole
    assert _from_seqno(named, None) == named


def test_start_sequence_id_after() -> None:
    assert start_sequence_id_after(None) == 0
    assert start_sequence_id_after(_seg(1, start=10, count=4)) == 14
    assert start_sequence_id_after(_seg(1, version=4, count=4)) == 0
    # a v5 segment without one counts from MIN + (seq << 32), as Java's does
    assert start_sequence_id_after(_seg(1, count=4)) == LONG_MIN + (1 << 32) + 4


def test_records_of_numbers_java_in_progress_segment_as_java() -> None:
    # a Java writer's in-progress v5 segment (start id -1) after a completed
    # segment starting at 10 with 4 records: Java readers number its records
    # from 14, i.e. start + position - 1
    w = RecordSetWriter()
    for i in range(3):
        w.append(LogRecord(i, b"x"))
    entry = LedgerEntry(2, 0, w.build(), 0)
    java = LogSegmentMetadata.parse(b"5;2;2;2;0;0;-1")
    seen = assign_start_sequence_ids([_seg(1, start=10, count=4), java])[1]
    assert [r.sequence_id for r in records_of(seen, entry)] == [14, 15, 16]
    # and on its own (a v4 segment, say) from getStartSequenceId
    v4 = LogSegmentMetadata.parse(b"4;2;2;2;0;0")
    assert [r.sequence_id for r in records_of(v4, entry)] == [
        LONG_MIN + (2 << 32) + i for i in range(3)
    ]
