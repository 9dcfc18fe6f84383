"""Where a stream begins and ends: first and last DLSN, last txid, count,
where its last N records begin.

Answered from the segments' metadata where it is final (completed
segments) and from the ledgers where it is not (the in-progress segment,
read up to its LAC, never fencing its writer): see
:mod:`dlog.segment_reader`.
"""

from __future__ import annotations

from dlog.dlsn import DLSN
from dlog.errors import LogEmptyError
from dlog.record import MAX_TXID, LogRecordWithDLSN
from dlog.segment import LogSegmentMetadata
from dlog.segment_reader import RecordSpan, last_user_record, last_user_records, record_position
from dlog.stream import StreamContext

__all__ = ["RecordSpan", "first_dlsn", "last_dlsn", "last_records", "last_txid", "record_count"]


async def _segments(ctx: StreamContext) -> list[tuple[LogSegmentMetadata, int]]:
    return await ctx.metadata.get_segments(ctx.name)


async def _last_record(ctx: StreamContext, seg: LogSegmentMetadata) -> LogRecordWithDLSN | None:
    return await last_user_record(ctx.bk, seg, ctx.password)


async def first_dlsn(ctx: StreamContext) -> DLSN:
    """DLSN of the first record that is not truncated."""
    for seg, _ in await _segments(ctx):
        if seg.is_truncated or (not seg.in_progress and seg.record_count == 0):
            continue
        if seg.is_partially_truncated:
            return seg.min_active_dlsn
        return seg.first_dlsn
    raise LogEmptyError(f"stream {ctx.name!r} has no records")


async def last_dlsn(ctx: StreamContext) -> DLSN:
    """DLSN of the last durable record (LogEmptyError when there is none)."""
    for seg, _ in reversed(await _segments(ctx)):
        if seg.is_truncated:
            break
        found = await _last_record(ctx, seg)
        if found is not None:
            return found.dlsn
    raise LogEmptyError(f"stream {ctx.name!r} has no records")


async def last_txid(ctx: StreamContext) -> int:
    """Transaction id of the last durable record."""
    for seg, _ in reversed(await _segments(ctx)):
        if not seg.in_progress and seg.record_count and seg.last_txid not in (None, MAX_TXID):
            return seg.last_txid
        found = await _last_record(ctx, seg)
        if found is not None:
            return found.txid
    raise LogEmptyError(f"stream {ctx.name!r} has no records")


async def record_count(ctx: StreamContext) -> int:
    """Records not truncated (an in-progress segment counts up to its LAC)."""
    total = 0
    for seg, _ in await _segments(ctx):
        if seg.is_truncated:
            continue
        if seg.in_progress:
            found = await _last_record(ctx, seg)
            if found is not None:
                total += await record_position(ctx.bk, seg, ctx.password, found.dlsn)
            continue
        count = seg.record_count
        if seg.is_partially_truncated:
            position = await record_position(ctx.bk, seg, ctx.password, seg.min_active_dlsn)
            count = max(0, count - position + 1)
        total += count
    return total


async def last_records(
    ctx: StreamContext, n: int, *, not_before: DLSN | None = None
) -> RecordSpan | None:
    """Where the stream's last ``n`` records begin and end, and how many
    there are (fewer if the stream has fewer; None for none): the records
    readable now that are not truncated, and not before ``not_before``.

    It walks back from the end (an in-progress segment from its LAC),
    segment by segment, and stops as soon as it has ``n``: what `tail -n`
    needs without reading the stream from its start.
    """
    if n < 1:
        raise ValueError(f"want at least one record, not {n}")
    first = last = None
    count = 0
    for seg, _ in reversed(await _segments(ctx)):
        if (
            not_before is not None
            and seg.log_segment_sequence_no < not_before.log_segment_sequence_no
        ):
            break
        if seg.is_truncated:
            continue
        floor = not_before
        if seg.is_partially_truncated and (floor is None or floor < seg.min_active_dlsn):
            floor = seg.min_active_dlsn
        span = await last_user_records(
            ctx.bk, seg, ctx.password, n - count, floor=floor, batch=ctx.conf.read_ahead_batch_size
        )
        if span is None:
            continue
        if last is None:
            last = span.last
        first = span.first
        count += span.count
        if count == n:
            break
    if first is None or last is None:
        return None
    return RecordSpan(first, last, count)
