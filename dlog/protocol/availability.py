"""BookKeeper's AvailabilityOfEntriesOfLedger byte format.

The bytes a bookie returns in ``GetListOfEntriesOfLedgerResponse`` (field
``availabilityOfEntriesOfLedger``), as upstream's
``org.apache.bookkeeper.util.AvailabilityOfEntriesOfLedger`` serializes them:

* a 64-byte header: int32 version (0), int32 number of sequence groups,
  then zeros;
* per sequence group, 24 bytes: int64 firstSequenceStart, int64
  lastSequenceStart, int32 sequenceSize, int32 sequencePeriod; all
  big-endian, groups ordered by firstSequenceStart.

A group holds the runs ``[s, s + sequenceSize)`` for ``s`` from
firstSequenceStart to lastSequenceStart in steps of sequencePeriod (period 0
when the group has one run). Upstream's encoder only ever closes a group
after one run (a run joins a group only at the group's period, which is
still 0 when the second run comes), so it writes one group per run of
consecutive entry ids; :func:`encode` writes exactly those bytes, and
:func:`decode` reads any group a peer may send.
"""

from __future__ import annotations

import struct
from collections.abc import Iterable, Iterator

from dlog.errors import ProtocolError

HEADER_SIZE = 64
VERSION = 0
_HEADER = struct.Struct(">ii")
_GROUP = struct.Struct(">qqii")
GROUP_SIZE = _GROUP.size
#: A run longer than an int32 is split over several groups.
_MAX_RUN = (1 << 31) - 1


def _runs(entry_ids: Iterable[int]) -> Iterator[tuple[int, int]]:
    """(start, length) of each run of consecutive ids, ascending."""
    start = prev = -1
    for eid in sorted(set(entry_ids)):
        if eid < 0:
            raise ValueError(f"entry id {eid} is negative")
        if start >= 0 and eid == prev + 1 and eid - start < _MAX_RUN:
            prev = eid
            continue
        if start >= 0:
            yield start, prev - start + 1
        start = prev = eid
    if start >= 0:
        yield start, prev - start + 1


def encode(entry_ids: Iterable[int]) -> bytes:
    """The bytes upstream's bookie sends for a ledger holding ``entry_ids``."""
    groups = [_GROUP.pack(start, start, size, 0) for start, size in _runs(entry_ids)]
    header = _HEADER.pack(VERSION, len(groups)).ljust(HEADER_SIZE, b"\0")
    return header + b"".join(groups)


def decode_groups(data: bytes) -> list[tuple[int, int, int, int]]:
    """The (firstSequenceStart, lastSequenceStart, sequenceSize,
    sequencePeriod) groups in ``data``, checked so that every group
    describes a finite set of entries."""
    if len(data) < HEADER_SIZE:
        raise ProtocolError(f"{len(data)} bytes: shorter than the 64-byte header")
    version, count = _HEADER.unpack_from(data, 0)
    if version > VERSION:
        raise ProtocolError(f"unsupported header version {version}")
    if count < 0 or len(data) < HEADER_SIZE + count * GROUP_SIZE:
        raise ProtocolError(f"{len(data)} bytes cannot hold {count} sequence groups")
    groups = []
    for i in range(count):
        first, last, size, period = _GROUP.unpack_from(data, HEADER_SIZE + i * GROUP_SIZE)
        if first < 0 or last < first or size <= 0 or period < 0:
            raise ProtocolError(f"sequence group {i} is invalid")
        if last != first and (period == 0 or (last - first) % period):
            raise ProtocolError(f"sequence group {i}: bad sequence period {period}")
        groups.append((first, last, size, period))
    return groups


def decode(data: bytes) -> list[int]:
    """The entry ids ``data`` says are available, ascending."""
    ids: set[int] = set()
    for first, last, size, period in decode_groups(data):
        step = period or 1
        for start in range(first, last + 1, step):
            ids.update(range(start, start + size))
    return sorted(ids)
