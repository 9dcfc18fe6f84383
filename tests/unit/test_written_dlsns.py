"""A bulk write's DLSNs, computed on demand from the entries holding its
records, and what a bulk reports when the writer fails under it."""

from __future__ import annotations

import asyncio

import pytest
from hypothesis import given
from hypothesis import strategies as st

from dlog.dlsn import DLSN
from dlog.errors import BKTransmitError
from dlog.writer import BulkOutcome, WrittenDLSNs, _Bulk


def test_dlsns_run_over_each_entry_in_order() -> None:
    parts = [(1, 7, 3, 2), (1, 8, 0, 3), (2, 0, 0, 1)]
    written = WrittenDLSNs(parts)
    expected = [DLSN(1, 7, 3), DLSN(1, 7, 4), DLSN(1, 8, 0), DLSN(1, 8, 1), DLSN(1, 8, 2)]
    expected.append(DLSN(2, 0, 0))
    assert list(written) == expected and written == expected
    assert len(written) == 6 and written.entries == 3
    assert [written[i] for i in range(6)] == expected
    assert [written[i] for i in range(-6, 0)] == expected
    assert written[1:4] == expected[1:4] and written[::-2] == expected[::-2]
    assert type(written[0]) is DLSN
    for bad in (6, -7):
        with pytest.raises(IndexError):
            written[bad]
    assert written == WrittenDLSNs(parts) and written != expected[:-1]


def test_an_empty_bulk() -> None:
    assert len(WrittenDLSNs([])) == 0 and list(WrittenDLSNs([])) == []


def test_a_failed_outcome_bulk_reports_the_entries_acknowledged_before_the_error() -> None:
    """The mechanism under ``write_bulk_outcome_nowait``: entries that were
    acknowledged before the failure are the outcome's DLSNs, in order; one
    acknowledged after it changes nothing; a plain bulk fails instead."""

    async def main() -> None:
        loop = asyncio.get_running_loop()
        bulk = _Bulk(loop.create_future(), 7, outcome=True)
        bulk.parts += [(1, 9, 0, 2), (1, 8, 1, 3)]  # acknowledged, out of order
        error = BKTransmitError("gone")
        bulk.fail(error)
        outcome = bulk.future.result()
        assert type(outcome) is BulkOutcome
        assert list(outcome.written) == [DLSN(1, 8, i) for i in (1, 2, 3)] + [
            DLSN(1, 9, 0),
            DLSN(1, 9, 1),
        ]
        assert isinstance(outcome.error, BKTransmitError) and outcome.error is not error
        bulk.parts.append((1, 10, 0, 2))
        bulk.complete()  # too late: the outcome stands
        assert len(bulk.future.result().written) == 5

        plain = _Bulk(loop.create_future(), 3, outcome=False)
        plain.parts.append((1, 8, 0, 1))
        plain.fail(error)
        with pytest.raises(BKTransmitError):
            plain.future.result()

        whole = _Bulk(loop.create_future(), 2, outcome=True)
        whole.parts.append((2, 0, 0, 2))
        whole.complete()
        assert whole.future.result() == BulkOutcome(WrittenDLSNs([(2, 0, 0, 2)]), None)

    asyncio.run(main())


@given(
    st.lists(
        st.tuples(
            st.integers(0, 2**63 - 1),
            st.integers(-1, 2**63 - 1),
            st.integers(0, 2**63 - 100),
            st.integers(0, 5),
        ),
        max_size=4,
    )
)
def test_serialized_is_each_dlsns_own_serialization(parts: list[tuple[int, int, int, int]]) -> None:
    """What the write proxy answers a bulk with: the strings DLSN.serialize
    gives, built an entry at a time."""
    written = WrittenDLSNs(parts)
    assert written.serialized() == [d.serialize() for d in written]
