"""The hand-encoded add request and response (dlog.protocol.messages) give
exactly the bytes protobuf's generated code gives for the same message."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from dlog.errors import STATUS_NAMES
from dlog.protocol import messages as m

int64 = st.integers(-(2**63), 2**63 - 1)
ids = st.one_of(st.integers(-1, 300), st.integers(0, 2**63 - 1), int64)
txns = st.one_of(st.integers(0, 300), st.integers(0, 2**64 - 1))  # uint64 on the wire
statuses = st.sampled_from(sorted(STATUS_NAMES))


@settings(max_examples=500)
@given(txns, statuses, ids, ids)
def test_add_response_bytes_match_protobuf(txn: int, status: int, lid: int, eid: int) -> None:
    expected = m.add_response(txn, status, lid, eid).SerializeToString()
    assert m.encode_add_response(txn, status, lid, eid) == expected
    # and again, now that the (status, ledger) parts are cached
    assert m.encode_add_response(txn, status, lid, eid) == expected


def test_add_response_cache_is_bounded() -> None:
    for lid in range(m._ADD_PARTS_MAX + 10):
        m.encode_add_response(1, 0, lid, 1)
    assert len(m._ADD_PARTS) <= m._ADD_PARTS_MAX
    assert m.encode_add_response(7, 0, 3, 9) == m.add_response(7, 0, 3, 9).SerializeToString()


@settings(max_examples=300)
@given(txns, ids, ids, st.binary(max_size=40), st.binary(max_size=300), st.booleans())
def test_add_request_bytes_match_protobuf(
    txn: int, lid: int, eid: int, key: bytes, body: bytes, recovery: bool
) -> None:
    expected = m.add_request(txn, lid, eid, key, body, recovery).SerializeToString()
    assert m.encode_add_request(txn, lid, eid, key, body, recovery) == expected
