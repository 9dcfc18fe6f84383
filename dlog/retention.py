"""Truncation and retention: what a stream stops keeping.

Truncating marks records before a DLSN as gone (segments TRUNCATED or
PARTIALLY_TRUNCATED in their metadata; readers skip them). Retention then
deletes truncated segments, and completed ones older than
``logSegmentRetentionHours`` unless ``explicitTruncationByApplication``,
always keeping the newest completed segment. Metadata goes before the
ledger: a ledger without metadata is an orphan the auditor can flag,
metadata without its ledger would break readers.
"""

from __future__ import annotations

import logging
import time

from dlog.dlsn import DLSN
from dlog.errors import (
    IncorrectParameterError,
    LogEmptyError,
    LogMetadataVersionError,
    NoSuchLedgerError,
)
from dlog.positions import last_dlsn
from dlog.stream import StreamContext

log = logging.getLogger(__name__)

__all__ = ["purge_expired", "truncate"]


async def truncate(ctx: StreamContext, dlsn: DLSN) -> bool:
    """Mark every record before ``dlsn`` truncated: whole completed
    segments become TRUNCATED, the completed segment holding ``dlsn``
    PARTIALLY_TRUNCATED from ``dlsn`` on. Returns whether anything changed."""
    segments = await ctx.metadata.get_segments(ctx.name)
    try:
        last: DLSN | None = await last_dlsn(ctx)
    except LogEmptyError:
        last = None
    if last is None or dlsn > last.next():
        raise IncorrectParameterError(
            f"cannot truncate stream {ctx.name!r} at {dlsn}: it is past the last record ({last})"
        )
    changed = False
    for seg, version in segments:
        if seg.in_progress:
            break
        if seg.last_dlsn < dlsn:
            if not seg.is_truncated:
                await ctx.metadata.update_segment(ctx.name, seg.mark_truncated(), version)
                changed = True
            continue
        if (
            seg.log_segment_sequence_no == dlsn.log_segment_sequence_no
            and dlsn > seg.min_active_dlsn
        ):
            await ctx.metadata.update_segment(ctx.name, seg.truncate_to(dlsn), version)
            changed = True
        break
    return changed


async def purge_expired(ctx: StreamContext) -> list[int]:
    """Delete completed segments past retention and truncated ones, always
    keeping the newest completed segment. Returns the deleted sequence numbers.

    Both kinds are a prefix of the stream (segments complete in order, and
    truncation marks everything before a DLSN), so segments are read from
    the oldest and the purge stops at the first one it keeps: a writer
    purges after every roll, and reading every segment each time would
    cost it a round trip per segment the stream keeps. (A segment completed
    on a machine whose clock lags can hold later expired ones back until it
    expires itself: retention keeps records at least as long as it says.)"""
    names = await ctx.metadata.segment_names(ctx.name)
    completed = [znode for _, in_progress, znode in names if not in_progress]
    conf = ctx.conf
    cutoff = int(time.time() * 1000) - int(conf.log_segment_retention_hours * 3600 * 1000)
    deleted = []
    by_age = not conf.explicit_truncation_by_app
    for znode in completed[:-1]:
        try:
            seg, version = await ctx.metadata.get_segment(ctx.name, znode)
        except LogMetadataVersionError:
            continue  # deleted meanwhile (by another purge)
        if not (seg.is_truncated or (by_age and seg.completion_time < cutoff)):
            break
        await ctx.metadata.delete_segment(ctx.name, seg, version)
        try:
            await ctx.bk.delete_ledger(seg.ledger_id)
        except NoSuchLedgerError:
            pass
        deleted.append(seg.log_segment_sequence_no)
        log.info(
            "stream %s: purged segment %d (ledger %d)",
            ctx.name,
            seg.log_segment_sequence_no,
            seg.ledger_id,
        )
    return deleted
