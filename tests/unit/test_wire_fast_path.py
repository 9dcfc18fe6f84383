"""The hand-encoded add request and response (dlog.protocol.messages) give
exactly the bytes protobuf's generated code gives for the same message.

Every test runs twice: with the C codec (dlog/protocol/_add_codec.c) and
with the Python one; and the two decoders accept exactly the same requests."""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from dlog.errors import STATUS_NAMES
from dlog.protocol import messages as m

_NAMES = ("encode_add_request", "encode_add_response", "decode_add_request")
_C = {name: getattr(m, name) for name in _NAMES}


@pytest.fixture(autouse=True, scope="module", params=["c", "python"])
def codec(request: pytest.FixtureRequest) -> Iterator[str]:
    """The C codec's functions, or the Python ones (module-scoped:
    hypothesis tests share it)."""
    assert m._add_codec is not None, "dlog.protocol._add_codec is not built (make install)"
    for name in _NAMES:
        setattr(m, name, _C[name] if request.param == "c" else getattr(m, f"py_{name}"))
    try:
        yield request.param
    finally:
        for name in _NAMES:
            setattr(m, name, _C[name])


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


# -- the hand-decoded add request ---------------------------------------------------


def _protobuf_add(data: bytes) -> tuple[int, int, int, bytes, bytes, bool] | None:
    """What the bookie's protobuf path makes of ``data``: the add it would
    serve, or None when it would not serve ``data`` as a complete add."""
    try:
        req = m.Request.FromString(data)
    except Exception:
        return None
    if m.request_problem(req) is not None or req.header.operation != m.ADD_ENTRY:
        return None
    ar = req.addRequest
    recovery = ar.HasField("flag") and ar.flag == m.RECOVERY_ADD
    return (req.header.txnId, ar.ledgerId, ar.entryId, ar.masterKey, ar.body, recovery)


def _fast_add(data: bytes | memoryview) -> tuple[int, int, int, bytes, bytes, bool] | None:
    f = m.decode_add_request(data)
    if f is None:
        return None
    return (f.txn_id, f.ledger_id, f.entry_id, f.master_key, f.body, f.recovery)


def _canonical(
    txn: int, lid: int, eid: int, key: bytes, body: bytes, recovery: bool, priority: int | None
) -> bytes:
    req = m.add_request(txn, lid, eid, key, body, recovery)
    if priority is not None:
        req.header.priority = priority
    return req.SerializeToString()


def _adds(bodies: st.SearchStrategy[bytes]) -> st.SearchStrategy[bytes]:
    return st.builds(
        _canonical,
        txns,
        ids,
        ids,
        st.binary(max_size=40),
        bodies,
        st.booleans(),
        st.one_of(st.none(), st.integers(0, 2**32 - 1)),
    )


small_adds = _adds(st.binary(max_size=300))
#: Also bodies whose length takes a 3- or 4-byte varint (built from a short
#: random run: hypothesis cannot draw binaries this long itself).
big_bodies = st.builds(
    lambda run, size: (run * (size // len(run) + 1))[:size],
    st.binary(min_size=1, max_size=16),
    st.sampled_from([16_384, 20_001, (1 << 21) + 5]),
)
canonical_adds = st.one_of(small_adds, _adds(big_bodies))


@settings(max_examples=400)
@given(canonical_adds)
def test_adds_as_protobuf_writes_them_are_decoded_without_it(data: bytes) -> None:
    expected = _protobuf_add(data)
    assert expected is not None
    assert _fast_add(data) == expected
    assert _fast_add(memoryview(bytearray(data))) == expected  # as frames arrive


@settings(max_examples=200)
@given(small_adds, st.booleans())
def test_adds_protobuf_parsed_give_the_same_frame(data: bytes, with_context: bool) -> None:
    """The bookie's protobuf path (adds the fast path declines, such as
    ones with a request context) builds its AddFrame with add_frame."""
    req = m.Request.FromString(data)
    if with_context:
        req.requestContext.add(key="k", value="v")
        data = req.SerializeToString()
        assert m.decode_add_request(data) is None
    expected = _protobuf_add(data)
    assert expected is not None
    assert dataclasses.astuple(m.add_frame(m.Request.FromString(data))) == expected


@settings(max_examples=300)
@given(txns, ids, ids, st.binary(max_size=40), st.binary(max_size=300), st.booleans())
def test_adds_dlog_encodes_by_hand_are_decoded(
    txn: int, lid: int, eid: int, key: bytes, body: bytes, recovery: bool
) -> None:
    data = m.encode_add_request(txn, lid, eid, key, body, recovery)
    assert _fast_add(data) == (txn, lid, eid, key, body, recovery)


def _mutate(data: bytes, how: int, at: int, value: int) -> bytes:
    at %= len(data) + 1
    if how == 0:  # overwrite a byte
        return data[:at] + bytes([value]) + data[at + 1 :]
    if how == 1:  # insert a byte
        return data[:at] + bytes([value]) + data[at:]
    if how == 2:  # delete a byte
        return data[:at] + data[at + 1 :]
    if how == 3:  # cut short
        return data[:at]
    return data + bytes([value]) * (at % 4 + 1)  # trailing bytes


Mutation = tuple[int, int, int]


def mutation_lists(min_size: int = 0) -> st.SearchStrategy[list[Mutation]]:
    """Up to three (how, where, byte) edits for :func:`mutated`."""
    return st.lists(
        st.tuples(st.integers(0, 4), st.integers(0, 2**16), st.integers(0, 255)),
        min_size=min_size,
        max_size=3,
    )


def mutated(data: bytes, mutations: list[Mutation]) -> bytes:
    for how, at, value in mutations:
        data = _mutate(data, how, at, value)
    return data


@settings(max_examples=1500)
@given(small_adds, mutation_lists(min_size=1))
def test_a_mutated_add_is_declined_or_read_as_protobuf_reads_it(
    data: bytes, mutations: list[Mutation]
) -> None:
    data = mutated(data, mutations)
    fast = _fast_add(data)
    if fast is not None:
        assert fast == _protobuf_add(data)


@settings(max_examples=300)
@given(canonical_adds, st.sampled_from(["context", "writeFlags", "read", "second header"]))
def test_adds_with_more_than_the_canonical_fields_go_to_protobuf(data: bytes, extra: str) -> None:
    req = m.Request.FromString(data)
    if extra == "context":
        req.requestContext.add(key="k", value="v")
    elif extra == "writeFlags":
        req.addRequest.writeFlags = 1
    elif extra == "read":
        req.readRequest.ledgerId = 1
        req.readRequest.entryId = 2
    out = req.SerializeToString()
    if extra == "second header":  # protobuf merges a repeated message field
        out += m.Request(header=req.header).SerializeToString()
    assert _fast_add(out) is None
    assert _protobuf_add(out) is not None


def test_other_requests_are_not_adds() -> None:
    for req in (
        m.read_request(1, 2, 3),
        m.read_lac_request(1, 2),
        m.write_lac_request(1, 2, 5, b"k" * 20, b"x"),
        m.write_close_request(1, 2, b"k" * 20),
    ):
        assert m.decode_add_request(req.SerializeToString()) is None


# -- the read response, in parts -------------------------------------------------------

maybe_lac = st.one_of(st.none(), int64)


@settings(max_examples=300)
@given(txns, statuses, ids, ids, st.one_of(st.none(), st.binary(max_size=300)), maybe_lac)
def test_read_response_parts_match_protobuf(
    txn: int, status: int, lid: int, eid: int, body: bytes | None, lac: int | None
) -> None:
    expected = m.read_response(txn, status, lid, eid, body, lac).SerializeToString()
    head, sent, tail = m.encode_read_response(txn, status, lid, eid, body, lac)
    assert head + sent + tail == expected
    if body:
        assert sent is body  # the entry itself, never a copy of it


def test_a_large_read_response_parses_as_protobuf() -> None:
    body = bytes(range(256)) * 1000
    resp = m.Response.FromString(b"".join(m.encode_read_response(3, 0, 9, 4, body, 7)))
    rr = resp.readResponse
    assert (resp.header.txnId, resp.header.operation, resp.status) == (3, m.READ_ENTRY, 0)
    assert (rr.ledgerId, rr.entryId, rr.body, rr.maxLAC) == (9, 4, body, 7)
