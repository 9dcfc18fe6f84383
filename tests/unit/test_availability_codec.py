"""AvailabilityOfEntriesOfLedger bytes, as upstream's bookie writes them.

Vectors follow the layout documented in upstream's
org.apache.bookkeeper.util.AvailabilityOfEntriesOfLedger: a 64-byte header
(int32 version 0, int32 group count, zeros), then 24 bytes per sequence
group (int64 firstSequenceStart, int64 lastSequenceStart, int32
sequenceSize, int32 sequencePeriod), big-endian.
"""

from __future__ import annotations

import struct

import pytest
from hypothesis import given
from hypothesis import strategies as st

from dlog.errors import ProtocolError
from dlog.protocol import availability as av


def _header(count: int) -> bytes:
    return struct.pack(">ii", 0, count) + b"\0" * 56


def _group(first: int, last: int, size: int, period: int) -> bytes:
    return struct.pack(">qqii", first, last, size, period)


def test_upstream_vector_one_group_per_run() -> None:
    # Upstream's test array {1, 2, 3, 5, 6, 7, 8}: runs [1,3] and [5,8].
    expected = _header(2) + _group(1, 1, 3, 0) + _group(5, 5, 4, 0)
    assert len(expected) == 64 + 2 * 24
    assert av.encode([1, 2, 3, 5, 6, 7, 8]) == expected
    assert av.decode(expected) == [1, 2, 3, 5, 6, 7, 8]


def test_runs_of_equal_size_are_not_merged() -> None:
    # {1, 2, 4, 5, 7, 8}: three runs of 2 at period 3; upstream's encoder
    # still writes one group each (a run only joins a group at its period,
    # and that period is 0 until a second run has joined).
    expected = _header(3) + _group(1, 1, 2, 0) + _group(4, 4, 2, 0) + _group(7, 7, 2, 0)
    assert av.encode([1, 2, 4, 5, 7, 8]) == expected


def test_empty_and_duplicates() -> None:
    assert av.encode([]) == _header(0)
    assert av.decode(_header(0)) == []
    assert av.encode([3, 3, 1, 1, 2]) == _header(1) + _group(1, 1, 3, 0)


def test_decodes_periodic_groups_a_peer_may_send() -> None:
    # Runs of 2 starting at 0, 5 and 10.
    data = _header(1) + _group(0, 10, 2, 5)
    assert av.decode(data) == [0, 1, 5, 6, 10, 11]


def test_trailing_bytes_beyond_the_groups_are_ignored() -> None:
    assert av.decode(_header(1) + _group(7, 7, 1, 0) + b"\xff" * 24) == [7]


@pytest.mark.parametrize(
    "data",
    [
        b"",
        _header(0)[:63],
        struct.pack(">ii", 1, 0) + b"\0" * 56,  # a newer header version
        _header(2) + _group(0, 0, 1, 0),  # fewer groups than announced
        _header(1) + _group(0, 10, 2, 0),  # two starts, no period
        _header(1) + _group(0, 10, 2, 3),  # last start off the period
        _header(1) + _group(0, 0, 0, 0),  # empty runs
        _header(1) + _group(-1, -1, 1, 0),  # negative entry id
        struct.pack(">ii", 0, -1) + b"\0" * 56,
    ],
)
def test_rejects_malformed(data: bytes) -> None:
    with pytest.raises(ProtocolError):
        av.decode(data)


@given(st.sets(st.integers(min_value=0, max_value=2_000), max_size=200))
def test_round_trip(ids: set[int]) -> None:
    data = av.encode(ids)
    assert av.decode(data) == sorted(ids)
    count = struct.unpack_from(">i", data, 4)[0]
    assert len(data) == 64 + 24 * count
    # One group per run of consecutive ids, as upstream writes them.
    runs = sum(1 for i in ids if i - 1 not in ids)
    assert count == runs


@given(st.sets(st.integers(min_value=0, max_value=(1 << 63) - 1), max_size=50))
def test_round_trip_large_ids(ids: set[int]) -> None:
    assert av.decode(av.encode(ids)) == sorted(ids)


def test_runs_longer_than_an_int32_are_split(monkeypatch: pytest.MonkeyPatch) -> None:
    # sequenceSize is an int32: a longer run takes several groups.
    monkeypatch.setattr(av, "_MAX_RUN", 3)
    data = av.encode(range(7))
    assert data == _header(3) + _group(0, 0, 3, 0) + _group(3, 3, 3, 0) + _group(6, 6, 1, 0)
    assert av.decode(data) == list(range(7))
