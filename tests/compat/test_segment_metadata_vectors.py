"""DistributedLog's own log segment metadata test cases, as data.

Each vector is the znode data upstream's ``TestLogSegmentMetadata`` and
``TestSequenceID`` (distributedlog-core/src/test/.../distributedlog/) produce
with ``getFinalisedData``, with the values those tests assert after
``parseData``. Upstream builds several of them without a sequence number, so
sequence number 0 must parse.
"""

from __future__ import annotations

from typing import Any

import pytest

from dlog.dlsn import DLSN
from dlog.errors import MetadataError, UnsupportedMetadataVersionError
from dlog.record import LogRecord, RecordSetWriter, decode_entry
from dlog.segment import (
    INVALID_TXID,
    LogSegmentMetadata,
    TruncationStatus,
    assign_start_sequence_ids,
    start_sequence_id_after,
)

LONG_MIN = -(1 << 63)
TEST_REGION_ID = 0xF - 1  # TestLogSegmentMetadata.TEST_REGION_ID

# (name, data, skip_min_version_check, expected fields, Java's getStartSequenceId)
VECTORS: list[tuple[str, bytes, bool, dict[str, Any], int]] = [
    (
        # testReadMetadata: current version, ledger 1000, first txid 1,
        # region 14, no sequence number set (0), in progress.
        "testReadMetadata",
        b"3758096389;1000;1;0;0;0;-1",  # 5 | 14 << 28
        False,
        {
            "version": 5,
            "ledger_id": 1000,
            "first_txid": 1,
            "log_segment_sequence_no": 0,
            "region_id": TEST_REGION_ID,
            "in_progress": True,
            "last_txid": INVALID_TXID,
            "start_sequence_id": -1,
            "truncation_status": TruncationStatus.ACTIVE,
        },
        LONG_MIN,
    ),
    (
        # testReadMetadataCrossVersion: version 1 writes no region (nor
        # status, nor sequence number); read back with skipMinVersionCheck.
        "testReadMetadataCrossVersion",
        b"1;1000;1",
        True,
        {
            "version": 1,
            "ledger_id": 1000,
            "first_txid": 1,
            "last_txid": INVALID_TXID,
            "log_segment_sequence_no": 0,
            "region_id": 0,  # LOCAL_REGION_ID
            "in_progress": True,
        },
        LONG_MIN,
    ),
    (
        # testMutateTruncationStatus: v4, ledger 1, first txid 0, seq 1,
        # completed with last txid 1000, 1000 records, last DLSN (1, 1000, 0)
        # (completion time is "now" upstream; fixed here).
        "testMutateTruncationStatus/completed",
        b"4294967296004;1;0;1000;1500000000000;1;1000;0;0;0",  # 4 | 1000 << 32
        False,
        {
            "version": 4,
            "ledger_id": 1,
            "first_txid": 0,
            "last_txid": 1000,
            "completion_time": 1500000000000,
            "log_segment_sequence_no": 1,
            "last_entry_id": 1000,
            "last_slot_id": 0,
            "record_count": 1000,
            "in_progress": False,
            "truncation_status": TruncationStatus.ACTIVE,
            "min_active_dlsn": DLSN(1, 0, 0),
        },
        LONG_MIN + (1 << 32),
    ),
    (
        "testMutateTruncationStatus/partially-truncated",
        b"4294967296260;1;0;1000;1500000000000;1;1000;0;500;0",  # status 1 << 8
        False,
        {
            "truncation_status": TruncationStatus.PARTIALLY_TRUNCATED,
            "min_active_dlsn": DLSN(1, 500, 0),
            "record_count": 1000,
        },
        LONG_MIN + (1 << 32),
    ),
    (
        "testMutateTruncationStatus/truncated",
        b"4294967296516;1;0;1000;1500000000000;1;1000;0;500;0",  # status 2 << 8
        False,
        {
            "truncation_status": TruncationStatus.TRUNCATED,
            "min_active_dlsn": DLSN(1, 500, 0),
            "is_truncated": True,
        },
        LONG_MIN + (1 << 32),
    ),
    (
        # testReadLogSegmentWithSequenceId: v5 in progress with start id 999.
        "testReadLogSegmentWithSequenceId/v5",
        b"5;1;0;1;0;0;999",
        False,
        {"version": 5, "log_segment_sequence_no": 1, "start_sequence_id": 999},
        999,
    ),
    (
        # ... and the same built as v4: the start id is not stored, so
        # getStartSequenceId() < 0.
        "testReadLogSegmentWithSequenceId/v4",
        b"4;1;0;1;0;0",
        False,
        {"version": 4, "log_segment_sequence_no": 1, "start_sequence_id": -1},
        LONG_MIN + (1 << 32),
    ),
]


@pytest.mark.parametrize(
    ("data", "skip", "expected", "java_start"),
    [pytest.param(*v[1:], id=v[0]) for v in VECTORS],
)
def test_upstream_vectors_parse_to_upstream_values(
    data: bytes, skip: bool, expected: dict[str, Any], java_start: int
) -> None:
    seg = LogSegmentMetadata.parse(data, skip_min_version_check=skip)
    for name, value in expected.items():
        assert getattr(seg, name) == value, name
    assert seg.effective_start_sequence_id == java_start
    assert seg.serialize() == data  # getFinalisedData writes exactly these bytes


def test_version_1_needs_skip_min_version_check() -> None:
    # testReadMetadataCrossVersionFailure
    with pytest.raises(UnsupportedMetadataVersionError):
        LogSegmentMetadata.parse(b"1;1000;1")


def test_empty_data_is_invalid() -> None:
    # testParseInvalidMetadata
    with pytest.raises(MetadataError):
        LogSegmentMetadata.parse(b"")


def test_mutate_truncation_status() -> None:
    # testMutateTruncationStatus through the API: completing a v4 segment
    # with a start sequence id (0) is allowed and the id is not kept.
    seg = LogSegmentMetadata(version=4, ledger_id=1, first_txid=0, log_segment_sequence_no=1)
    seg = seg.complete(
        last_txid=1000,
        record_count=1000,
        last_entry_id=1000,
        last_slot_id=0,
        start_sequence_id=0,
        completion_time=1500000000000,
    )
    assert seg.serialize() == VECTORS[2][1]
    partial = seg.truncate_to(DLSN(1, 500, 0))
    assert partial.serialize() == VECTORS[3][1]
    truncated = partial.mark_truncated()
    assert truncated.min_active_dlsn == DLSN(1, 500, 0)
    assert truncated.serialize() == VECTORS[4][1]


# TestSequenceID.testSequenceID: three completed v4 segments of two records
# and a fourth, written in progress as v4 and completed by a v5 writer (so
# still v4); then three completed v5 segments of two records and a v5 segment
# in progress holding one record. Completion times are "now" upstream.
SEQUENCE_ID_SEGMENTS = [
    b"8589934596;11;0;1;1500000000000;1;1;1;0;0",  # 4 | 2 << 32
    b"8589934596;12;2;3;1500000000000;2;1;1;0;0",
    b"8589934596;13;4;5;1500000000000;3;1;1;0;0",
    b"4294967300;14;6;6;1500000000000;4;0;0;0;0",  # 1 record
    b"8589934597;15;7;8;1500000000000;5;1;1;0;0;0",
    b"8589934597;16;9;10;1500000000000;6;1;1;0;0;2",
    b"8589934597;17;11;12;1500000000000;7;1;1;0;0;4",
    b"5;18;13;8;0;0;-1",  # a Java writer's in-progress segment: start id unassigned
]


def test_sequence_id_upgrade_from_v4_to_v5() -> None:
    segments = [LogSegmentMetadata.parse(d) for d in SEQUENCE_ID_SEGMENTS]
    seen = assign_start_sequence_ids(segments)
    starts = [s.effective_start_sequence_id for s in seen]
    # segments 1-4: negative, increasing; 5-7: 0, 2, 4; in progress 8: 6
    assert all(s < 0 for s in starts[:4])
    assert starts[:4] == sorted(starts[:4])
    assert starts[0] == LONG_MIN + (1 << 32)
    assert starts[4:] == [0, 2, 4, 6]
    # DLUtils.computeStartSequenceId: after a v4 segment start over at 0
    assert start_sequence_id_after(seen[3]) == 0
    assert start_sequence_id_after(seen[6]) == 6
    assert start_sequence_id_after(None) == 0
    # the raw in-progress metadata alone reads as getStartSequenceId does
    assert segments[7].effective_start_sequence_id == LONG_MIN + (8 << 32)


def _entry(first_position: int, count: int) -> bytes:
    w = RecordSetWriter(last_position=first_position - 1)
    for i in range(count):
        w.append(LogRecord(100 + i, b"r%d" % i))
    return w.build()


def test_record_sequence_ids_match_java_readers() -> None:
    # LogRecordWithDLSN.getSequenceId = segment start id + position - 1, with
    # the start id the reader's segment list gives (see above).
    seen = assign_start_sequence_ids(LogSegmentMetadata.parse(d) for d in SEQUENCE_ID_SEGMENTS)
    got = [
        r.sequence_id
        for seg in seen
        for r in decode_entry(
            _entry(1, 2 if not seg.in_progress else 1),
            seg.log_segment_sequence_no,
            0,
            seg.effective_start_sequence_id,
        )
    ]
    negative, positive = got[:8], got[8:]
    assert all(s < 0 for s in negative) and negative == sorted(set(negative))
    assert negative[0] == LONG_MIN + (1 << 32)
    assert positive == [0, 1, 2, 3, 4, 5, 6]
