"""Spark planning gives partitions the start sequence ids DistributedLog's
Java readers use, so executors number records as a Java reader would.

Upstream (LogSegmentMetadata.getStartSequenceId, PerStreamLogSegmentCache):
a segment without a stored start id (version < 5, or -1) starts at
``Long.MIN_VALUE + (seq << 32)``; the first in-progress version-5 segment
starts where the last completed version-5 one ended, or at 0 after one
without sequence ids. Pure: no Spark session, no bookies.
"""

from __future__ import annotations

import dataclasses

from dlog.dlsn import DLSN
from dlog.segment import UNASSIGNED_SEQUENCE_ID, LogSegmentMetadata, assign_start_sequence_ids
from dlog.spark.planning import plan_stream

INT64_MIN = -(1 << 63)
MSU = "zk+hierarchical://127.0.0.1:2181/ledgers"
EVERYTHING = DLSN(0, -1, -1)


def completed(seq: int, records: int, start: int, version: int = 5) -> LogSegmentMetadata:
    seg = LogSegmentMetadata(ledger_id=100 + seq, first_txid=0, log_segment_sequence_no=seq)
    seg = seg.complete(last_txid=1, record_count=records, last_entry_id=0, last_slot_id=0)
    if version < 5:
        return dataclasses.replace(seg, version=version, start_sequence_id=UNASSIGNED_SEQUENCE_ID)
    return dataclasses.replace(seg, start_sequence_id=start)


def java_inprogress(seq: int, version: int = 5) -> LogSegmentMetadata:
    """As a Java writer stores it until completion: start id -1."""
    return LogSegmentMetadata(
        version=version,
        ledger_id=100 + seq,
        first_txid=0,
        log_segment_sequence_no=seq,
        start_sequence_id=UNASSIGNED_SEQUENCE_ID,
    )


def planned(segments: list[LogSegmentMetadata]) -> list[tuple[int, int]]:
    """(segment, start id) of each partition, as the driver plans them."""
    parts = plan_stream(
        "events", assign_start_sequence_ids(segments), EVERYTHING, None, 100, lambda s: 0, MSU
    )
    return [(p.segment, p.start_sequence_id) for p in parts]


def test_v4_then_v5_then_java_inprogress() -> None:
    segs = [completed(1, 3, 0, version=4), completed(2, 2, 0), java_inprogress(3)]
    assert planned(segs) == [(1, INT64_MIN + (1 << 32)), (2, 0), (3, 2)]


def test_java_inprogress_after_a_v4_segment_starts_at_zero() -> None:
    assert planned([completed(1, 3, 0, version=4), java_inprogress(2)]) == [
        (1, INT64_MIN + (1 << 32)),
        (2, 0),
    ]


def test_v4_inprogress_counts_from_its_sequence_number() -> None:
    segs = [completed(1, 5, 10), java_inprogress(2, version=4)]
    assert planned(segs) == [(1, 10), (2, INT64_MIN + (2 << 32))]


def test_stored_start_ids_are_kept() -> None:
    segs = [completed(1, 5, 10), completed(2, 4, 15), java_inprogress(3)]
    assert planned(segs) == [(1, 10), (2, 15), (3, 19)]
