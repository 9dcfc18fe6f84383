"""The C add codec (dlog/protocol/_add_codec.c) against its Python twin and
protobuf: the two request decoders accept exactly the same requests, and
the response decoder the ledger client uses reads what protobuf reads or
declines. (tests/unit/test_wire_fast_path.py runs its tests with each codec.)"""

from __future__ import annotations

import dataclasses

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from dlog.errors import EIO, EOK
from dlog.protocol import messages as m
from tests.unit.test_wire_fast_path import (
    _C,
    Mutation,
    canonical_adds,
    ids,
    mutated,
    mutation_lists,
    statuses,
    txns,
)


def _both(data: bytes | memoryview) -> tuple[object, object]:
    def fields(f: m.AddFrame | None) -> object:
        return None if f is None else dataclasses.astuple(f)

    return fields(_C["decode_add_request"](data)), fields(m.py_decode_add_request(data))


@settings(max_examples=800)
@given(canonical_adds | st.binary(max_size=60), mutation_lists())
def test_the_c_and_python_decoders_accept_the_same_adds(
    data: bytes, mutations: list[Mutation]
) -> None:
    data = mutated(data, mutations)
    c, py = _both(data)
    assert c == py
    assert _both(memoryview(bytearray(data))) == (c, py)


@pytest.mark.parametrize(
    "varint",
    [b"\xff" * 9 + b"\x01", b"\xff" * 9 + b"\x02", b"\x80" * 9 + b"\x7f", b"\xff" * 10 + b"\x01"],
    ids=["2**64 - 1", "2**64 + ...", "over 64 bits", "11 bytes"],
)
def test_ten_byte_varints_are_judged_alike(varint: bytes) -> None:
    """A txn id of 2**64 - 1 is a uint64; more is protobuf's to judge."""
    body = m.py_encode_add_request(1, 2, 3, b"k", b"b")
    header = b"\x08\x03\x10\x02\x18" + varint
    sub = body[body.index(b"\xaa\x06") + 3 :]
    data = b"\x0a" + bytes([len(header)]) + header + b"\xaa\x06" + bytes([len(sub)]) + sub
    c, py = _both(data)
    assert c == py
    assert (c is not None) == (varint == b"\xff" * 9 + b"\x01")


def _protobuf_result(data: bytes) -> m.AddResult | None:
    try:
        resp = m.parse_response(data)
    except Exception:
        return None
    return m.add_result(resp)


responses = st.builds(
    lambda txn, status, lid, eid, priority: (
        m.py_encode_add_response(txn, status, lid, eid)
        if priority is None
        else _with_priority(m.add_response(txn, status, lid, eid), priority)
    ),
    txns,
    statuses,
    ids,
    ids,
    st.one_of(st.none(), st.integers(0, 2**32 - 1)),
)


def _with_priority(resp: m.Response, priority: int) -> bytes:
    resp.header.priority = priority
    return resp.SerializeToString()


@settings(max_examples=400)
@given(responses)
def test_add_responses_as_bookies_write_them_are_decoded_without_protobuf(data: bytes) -> None:
    expected = _protobuf_result(data)
    assert m.decode_add_response(data) == expected is not None
    assert m.decode_add_response(memoryview(bytearray(data))) == expected


@settings(max_examples=800)
@given(responses | st.binary(max_size=40), mutation_lists())
def test_a_mutated_add_response_is_declined_or_read_as_protobuf_reads_it(
    data: bytes, mutations: list[Mutation]
) -> None:
    data = mutated(data, mutations)
    fast = m.decode_add_response(data)
    if fast is not None:
        assert fast == _protobuf_result(data)


def test_an_unknown_status_is_never_read_as_success() -> None:
    """protobuf leaves an enum field unset for a code it does not know, and
    reading it gives EOK: a bookie answering a code newer than this client
    must not have its add counted as written."""
    data = m.py_encode_add_response(5, 9999, 7, 9)
    assert m.decode_add_response(data) is None
    assert m.Response.FromString(data).status == EOK  # what protobuf reads
    assert m.add_result(m.parse_response(data)).status == EIO
