"""The auditor's fragment arithmetic: which entries each bookie of a
ledger should hold, and how many of them a bookie's listing lacks."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from dlog.ledger.checker import (
    bookies_to_check,
    checked_last_entry,
    count_expected,
    expected_entries,
    fragments,
    missing_count,
)
from dlog.ledger.metadata import LedgerMetadata, LedgerState
from dlog.ledger.quorum import write_set

POOL = [f"b{i}:3181" for i in range(8)]


@st.composite
def ledgers(draw: st.DrawFn) -> LedgerMetadata:
    e = draw(st.integers(1, 5))
    w = draw(st.integers(1, e))
    a = draw(st.integers(1, w))
    starts = sorted(draw(st.sets(st.integers(1, 60), max_size=4)))
    ensembles = []
    for first in [0, *starts]:
        ensembles.append((first, tuple(draw(st.permutations(POOL))[:e])))
    closed = draw(st.booleans())
    if closed:
        last = draw(st.integers(-1, 80))
        return LedgerMetadata(
            ledger_id=1,
            ensemble_size=e,
            write_quorum_size=w,
            ack_quorum_size=a,
            ensembles=tuple(ensembles),
            state=LedgerState.CLOSED,
            last_entry_id=last,
            length=max(0, last + 1),
        )
    state = draw(st.sampled_from([LedgerState.OPEN, LedgerState.IN_RECOVERY]))
    return LedgerMetadata(
        ledger_id=1,
        ensemble_size=e,
        write_quorum_size=w,
        ack_quorum_size=a,
        ensembles=tuple(ensembles),
        state=state,
    )


def brute_expected(md: LedgerMetadata, bookie: str) -> list[int]:
    """Entry by entry: the ensemble that stores it and its write set."""
    out = []
    for entry in range(checked_last_entry(md) + 1):
        ensemble = md.ensemble_for(entry)
        indices = write_set(entry, md.ensemble_size, md.write_quorum_size)
        if bookie in [ensemble[i] for i in indices]:
            out.append(entry)
    return out


@settings(max_examples=300)
@given(ledgers())
def test_expected_entries_follow_the_write_sets(md: LedgerMetadata) -> None:
    for bookie in POOL:
        want = brute_expected(md, bookie)
        assert list(expected_entries(md, bookie)) == want
        assert count_expected(md, bookie) == len(want)
        assert missing_count(md, bookie, []) == len(want)
        assert missing_count(md, bookie, want) == 0
        assert (bookie in bookies_to_check(md)) == bool(want)


@settings(max_examples=300)
@given(ledgers(), st.data())
def test_missing_count_is_what_the_listing_lacks(md: LedgerMetadata, data: st.DataObject) -> None:
    bookie = data.draw(st.sampled_from(POOL))
    want = brute_expected(md, bookie)
    held = data.draw(st.sets(st.integers(0, 100)))
    # extra entries (another fragment's, or beyond the checked end) never count
    assert missing_count(md, bookie, sorted(held)) == len(set(want) - held)


def test_the_open_tail_is_never_judged() -> None:
    ens0 = tuple(POOL[:3])
    ens1 = (POOL[0], POOL[1], POOL[3])
    md = LedgerMetadata(
        ledger_id=7,
        ensemble_size=3,
        write_quorum_size=2,
        ack_quorum_size=2,
        ensembles=((0, ens0), (10, ens1)),
    )
    assert checked_last_entry(md) == 9
    assert [(f.first, f.last) for f in fragments(md)] == [(0, 9), (10, 9)]
    # POOL[3] is only in the open last ensemble: nothing is expected of it
    assert count_expected(md, POOL[3]) == 0
    assert POOL[3] not in bookies_to_check(md)
    # single ensemble, open: nothing at all
    single = md.replace(ensembles=((0, ens0),))
    assert checked_last_entry(single) == -1
    assert all(count_expected(single, b) == 0 for b in POOL)
    # once closed at 20, the second ensemble counts up to entry 20
    closed = md.replace(state=LedgerState.CLOSED, last_entry_id=20, length=21)
    assert list(expected_entries(closed, POOL[3])) == [e for e in range(10, 21) if e % 3 in (1, 2)]


def test_a_closed_empty_ledger_expects_nothing() -> None:
    md = LedgerMetadata(
        ledger_id=7,
        ensemble_size=3,
        write_quorum_size=3,
        ack_quorum_size=2,
        ensembles=((0, tuple(POOL[:3])),),
        state=LedgerState.CLOSED,
        last_entry_id=-1,
    )
    assert bookies_to_check(md) == []
    assert all(missing_count(md, b, []) == 0 for b in POOL)
