"""Reading a segment's ledger: the one place that knows how.

A segment is a ledger plus its metadata (:class:`dlog.segment.LogSegmentMetadata`).
Whoever needs to look inside one (the tailing reader, a stream's position
queries, Spark planning, the subscriptions stores, a new writer recovering
its predecessor's segment) goes through here, so the rules live once:

* **Where a segment ends.** A completed segment ends at the
  ``last_entry_id`` its metadata records. An in-progress one is read up to
  its ledger's last add confirmed (LAC), never beyond: entries past it may
  still fail. Only recovery (``fence=True``) or an explicit read beyond the
  LAC by recovery's rules (``beyond_lac=True``, for a writer known to be
  gone) look further.
* **Reading never fences, unless asked.** Opening with ``fence=True``
  recovers the ledger: its writer can append nothing more, and its end is
  final. Everything else opens without recovery.
* **Entries decode with their segment's numbers.** A record's DLSN and
  position come from the segment's sequence number and start sequence id,
  so decoding always takes the segment (:func:`records_of`).
* **A missing ledger is NoSuchLedgerError**, for the caller to interpret
  (deleted by retention meanwhile, or a corrupted subscription).
"""

from __future__ import annotations

import contextlib
import dataclasses
from collections.abc import AsyncIterator
from typing import TYPE_CHECKING

from dlog.dlsn import DLSN
from dlog.errors import NoSuchLedgerError
from dlog.record import LogRecordWithDLSN, decode_entry
from dlog.segment import LogSegmentMetadata

if TYPE_CHECKING:
    from dlog.ledger.client import BookKeeper
    from dlog.ledger.read_handle import LedgerEntry, ReadHandle

__all__ = [
    "RecordSpan",
    "RecoveredEnd",
    "last_entry",
    "last_user_record",
    "last_user_records",
    "open_segment",
    "readable_lac",
    "record_position",
    "records_of",
    "read_entry_records",
    "recover_end",
]


@contextlib.asynccontextmanager
async def open_segment(
    bk: BookKeeper, ledger_id: int, password: bytes, *, fence: bool = False
) -> AsyncIterator[ReadHandle]:
    """The segment's ledger opened for reading, closed on exit. ``fence``
    recovers it first (its writer is cut off; its end is final)."""
    handle = await bk.open_ledger(ledger_id, password, recovery=fence)
    try:
        yield handle
    finally:
        await handle.close()


def records_of(seg: LogSegmentMetadata, entry: LedgerEntry) -> list[LogRecordWithDLSN]:
    """Every record (control records and end-of-stream included) of one
    entry of ``seg``."""
    return decode_entry(
        entry.data, seg.log_segment_sequence_no, entry.entry_id, seg.effective_start_sequence_id
    )


def _user_records(records: list[LogRecordWithDLSN]) -> list[LogRecordWithDLSN]:
    return [r for r in records if not r.control and not r.end_of_stream]


async def last_entry(
    bk: BookKeeper,
    ledger_id: int,
    password: bytes,
    *,
    fence: bool = False,
    beyond_lac: bool = False,
) -> LedgerEntry | None:
    """A ledger's last entry, None if it has none (see
    :meth:`dlog.ledger.read_handle.ReadHandle.read_last_entry`)."""
    async with open_segment(bk, ledger_id, password, fence=fence) as handle:
        return await handle.read_last_entry(beyond_lac=beyond_lac)


async def readable_lac(bk: BookKeeper, seg: LogSegmentMetadata, password: bytes) -> int:
    """The last entry of ``seg`` readable now: its recorded end once
    completed, else its LAC; -1 for none (or a ledger already deleted)."""
    if not seg.in_progress:
        return seg.last_entry_id
    try:
        async with open_segment(bk, seg.ledger_id, password) as handle:
            return await handle.read_last_add_confirmed()
    except NoSuchLedgerError:
        return -1


async def read_entry_records(
    bk: BookKeeper, seg: LogSegmentMetadata, password: bytes, entry_id: int
) -> list[LogRecordWithDLSN]:
    """The records of one entry of ``seg`` (within its readable end)."""
    async with open_segment(bk, seg.ledger_id, password) as handle:
        entry = (await handle.read_unconfirmed(entry_id, entry_id))[0]
    return records_of(seg, entry)


async def last_user_record(
    bk: BookKeeper, seg: LogSegmentMetadata, password: bytes
) -> LogRecordWithDLSN | None:
    """The last user record of ``seg`` within its readable end (control
    records and the end-of-stream marker skipped), or None."""
    last = await readable_lac(bk, seg, password)
    if last < 0 or (not seg.in_progress and seg.record_count == 0):
        return None
    async with open_segment(bk, seg.ledger_id, password) as handle:
        for entry_id in range(last, -1, -1):
            entry = (await handle.read_unconfirmed(entry_id, entry_id))[0]
            records = _user_records(records_of(seg, entry))
            if records:
                return records[-1]
    return None


@dataclasses.dataclass(frozen=True)
class RecordSpan:
    """``count`` user records, from ``first`` to ``last`` (DLSNs, both included)."""

    first: DLSN
    last: DLSN
    count: int


async def last_user_records(
    bk: BookKeeper,
    seg: LogSegmentMetadata,
    password: bytes,
    n: int,
    *,
    floor: DLSN | None = None,
    batch: int = 100,
) -> RecordSpan | None:
    """Where the last ``n`` user records of ``seg`` at or after ``floor``
    begin and end (fewer if it has fewer; None for none).

    Read from the segment's readable end back, at most ``batch`` entries
    a read and never more entries than records still wanted, so the cost
    follows ``n``, not the segment's length. ``floor`` is not checked
    against truncation: pass ``min_active_dlsn`` when that is the floor.
    """
    if n < 1:
        raise ValueError(f"want at least one record, not {n}")
    seq = seg.log_segment_sequence_no
    if floor is not None and floor.log_segment_sequence_no > seq:
        return None
    if not seg.in_progress and seg.record_count == 0:
        return None
    low = 0
    if floor is not None and floor.log_segment_sequence_no == seq:
        low = max(0, floor.entry_id)
    else:
        floor = None
    first = last = None
    count = 0
    async with open_segment(bk, seg.ledger_id, password) as handle:
        high = await handle.read_last_add_confirmed() if seg.in_progress else seg.last_entry_id
        while high >= low and count < n:
            start = max(low, high - min(batch, n - count) + 1)
            for entry in reversed(await handle.read_unconfirmed(start, high)):
                records = _user_records(records_of(seg, entry))
                if floor is not None:
                    records = [r for r in records if r.dlsn >= floor]
                if not records:
                    continue
                if last is None:
                    last = records[-1].dlsn
                taken = records[-(n - count) :]
                first = taken[0].dlsn
                count += len(taken)
                if count == n:
                    break
            high = start - 1
    if first is None or last is None:
        return None
    return RecordSpan(first, last, count)


async def record_position(
    bk: BookKeeper, seg: LogSegmentMetadata, password: bytes, dlsn: DLSN
) -> int:
    """Position (1-based) within ``seg`` of the first record at or after
    ``dlsn`` in its entry; 0 if the entry has none."""
    for r in await read_entry_records(bk, seg, password, dlsn.entry_id):
        if r.dlsn >= dlsn:
            return r.position
    return 0


@dataclasses.dataclass(frozen=True)
class RecoveredEnd:
    """Where a recovered (fenced) segment ends: what completing it records."""

    last_entry_id: int
    last_txid: int
    last_slot_id: int
    record_count: int


async def recover_end(bk: BookKeeper, seg: LogSegmentMetadata, password: bytes) -> RecoveredEnd:
    """Fence an in-progress segment (its writer can acknowledge nothing
    more) and find its end: the last entry that may have been acknowledged.
    NoSuchLedgerError if its ledger does not exist."""
    async with open_segment(bk, seg.ledger_id, password, fence=True) as handle:
        lac = handle.last_add_confirmed
        last_txid, last_slot, count = seg.first_txid, -1, 0
        if lac >= 0:
            records = records_of(seg, (await handle.read(lac, lac))[0])
            if records:
                last_txid = max(r.txid for r in records)
                last_slot = records[-1].dlsn.slot_id
                count = records[-1].position
    return RecoveredEnd(lac, last_txid, last_slot, count)
