"""Record sequence ids as DistributedLog's Java readers and writers give them.

A stream here mixes what Java clients leave behind: a completed version-4
segment (no start sequence id stored), then a version-5 one, then a
version-5 in-progress segment whose start id is ``-1``
(``UNASSIGNED_SEQUENCE_ID``, what Java writers store until completion). The
metadata znodes are rewritten to those forms with dlog's own codec.

Upstream's numbering (LogSegmentMetadata.getStartSequenceId,
PerStreamLogSegmentCache.getLogSegments, DLUtils.computeStartSequenceId):
record ``p`` (1-based) of a segment without a start id has
``Long.MIN_VALUE + (seq << 32) + p - 1``; the first in-progress v5 segment
starts where the previous completed v5 one ended; a writer's segment after
a v4 one starts at 0.
"""

from __future__ import annotations

import asyncio
import dataclasses
from collections.abc import Callable
from typing import Any

from dlog.dlsn import DLSN
from dlog.log import LogManager
from dlog.record import LogRecord, LogRecordWithDLSN
from dlog.segment import UNASSIGNED_SEQUENCE_ID, LogSegmentMetadata
from dlog.spark.options import parse_options
from dlog.spark.planning import DriverSession, plan_stream

INT64_MIN = -(1 << 63)
STREAM = "seqids"


def v4_ids(seq: int, n: int) -> list[int]:
    return [INT64_MIN + (seq << 32) + p - 1 for p in range(1, n + 1)]


async def write_segment(lm: LogManager, txids: range) -> None:
    """One completed segment holding ``txids``: a writer opened and closed."""
    w = await lm.open_writer()
    await w.write_bulk([LogRecord(t, b"r%d" % t) for t in txids])
    await w.close()


async def segments(lm: LogManager) -> list[tuple[LogSegmentMetadata, int]]:
    return await lm.store.get_segments(STREAM)


async def java_stream(open_namespace: Callable[..., Any]) -> tuple[Any, LogManager]:
    """Segment 1: completed v4 (3 records); 2: completed v5 (2 records,
    written after the v4 one by dlog's writer); 3: in progress, v5, start
    id -1 (2 records in its ledger)."""
    ns = await open_namespace()
    lm = await ns.open_log(STREAM)
    store = lm.store
    ledgers = store.paths(STREAM).ledgers

    await write_segment(lm, range(0, 3))
    ((s1, ver1),) = await segments(lm)
    v4 = dataclasses.replace(s1, version=4, start_sequence_id=UNASSIGNED_SEQUENCE_ID)
    await store.zk.set(f"{ledgers}/{s1.znode_name}", v4.serialize(), version=ver1)

    await write_segment(lm, range(3, 5))
    await write_segment(lm, range(5, 7))
    s3, ver3 = (await segments(lm))[-1]
    assert s3.log_segment_sequence_no == 3 and not s3.in_progress
    # As a Java writer leaves it before completion: in progress, start id -1.
    java_inprogress = LogSegmentMetadata(
        ledger_id=s3.ledger_id,
        first_txid=s3.first_txid,
        log_segment_sequence_no=3,
        region_id=s3.region_id,
        start_sequence_id=UNASSIGNED_SEQUENCE_ID,
    )
    await store.zk.delete(f"{ledgers}/{s3.znode_name}", version=ver3)
    await store.zk.create(f"{ledgers}/{java_inprogress.znode_name}", java_inprogress.serialize())
    return ns, lm


async def test_writer_starts_over_at_zero_after_a_v4_segment(open_namespace) -> None:  # type: ignore[no-untyped-def]
    _, lm = await java_stream(open_namespace)
    s1, s2, s3 = [s for s, _ in await segments(lm)]
    assert (s1.version, s1.start_sequence_id, s1.record_count) == (4, UNASSIGNED_SEQUENCE_ID, 3)
    # DLUtils.computeStartSequenceId: a predecessor without sequence ids adds nothing.
    assert (s2.version, s2.start_sequence_id, s2.record_count) == (5, 0, 2)
    assert s3.in_progress and s3.start_sequence_id == UNASSIGNED_SEQUENCE_ID


async def test_reader_numbers_records_as_java_readers(open_namespace) -> None:  # type: ignore[no-untyped-def]
    _, lm = await java_stream(open_namespace)
    reader = await lm.open_reader()
    got: list[LogRecordWithDLSN] = []
    while len(got) < 7:
        got.extend(await reader.read_bulk(7 - len(got), timeout=10))
    await reader.close()
    assert [r.txid for r in got] == list(range(7))
    assert [r.sequence_id for r in got] == v4_ids(1, 3) + [0, 1] + [2, 3]


async def test_spark_driver_plans_the_same_start_ids(open_namespace, zk_server, zk_root) -> None:  # type: ignore[no-untyped-def]
    await java_stream(open_namespace)
    options = parse_options(
        {"uri": f"distributedlog://{zk_server.connect_string}{zk_root}/ns", "stream": STREAM}
    )

    def plan() -> list[tuple[int, int]]:
        with DriverSession(options) as session:
            segs = session.segments(STREAM)
            parts = plan_stream(
                STREAM, segs, DLSN(0, -1, -1), None, 100, session.lac, session.metadata_service_uri
            )
        return [(p.segment, p.start_sequence_id) for p in parts]

    assert await asyncio.to_thread(plan) == [(1, INT64_MIN + (1 << 32)), (2, 0), (3, 2)]
