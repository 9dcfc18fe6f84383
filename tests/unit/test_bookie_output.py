"""The bookie's output batching (dlog.bookie.server.coalesce): one write
per loop pass, with large response parts (entries) passed as they are."""

from __future__ import annotations

import itertools

from hypothesis import given
from hypothesis import strategies as st

from dlog.bookie.server import LARGE_PART, coalesce

sizes = st.one_of(st.integers(0, 100), st.integers(LARGE_PART - 2, LARGE_PART + 2))


@given(st.lists(sizes, max_size=12))
def test_coalesce_joins_runs_of_small_parts_only(lengths: list[int]) -> None:
    pieces = [bytes([i % 251]) * n for i, n in enumerate(lengths)]
    out = coalesce(pieces)
    assert b"".join(out) == b"".join(pieces)
    large = [p for p in pieces if len(p) >= LARGE_PART]
    # every large part is passed on as the same object, in order
    assert [p for p in out if any(p is q for q in large)] == large
    # and between two of them, at most one joined run of small ones
    small = [p for p in out if not any(p is q for q in large)]
    assert all(p for p in small)
    for a, b in itertools.pairwise(out):
        assert any(a is q for q in large) or any(b is q for q in large)
