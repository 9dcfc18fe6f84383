"""The write proxy's thrift codec: upstream's wire facts, round trips, and
a reader whose output is bounded by its input."""

from __future__ import annotations

import struct
import zlib
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from dlog.dlsn import DLSN
from dlog.errors import ThriftProtocolError
from dlog.proxy import protocol as wire

ROOT = Path(__file__).resolve().parents[2]
T = wire.thrift
S = wire.service


def test_the_packaged_idl_is_the_one_in_proto() -> None:
    assert (ROOT / "proto" / wire.IDL_NAME).read_bytes() == (
        ROOT / "dlog" / "proxy" / wire.IDL_NAME
    ).read_bytes()


def test_upstream_status_codes_and_server_status() -> None:
    # DistributedLog's service.thrift (distributedlog-proxy-protocol).
    expected = {
        "SUCCESS": 200,
        "FOUND": 302,
        "REQUEST_DENIED": 403,
        "TOO_LARGE_RECORD": 413,
        "INTERNAL_SERVER_ERROR": 500,
        "SERVICE_UNAVAILABLE": 503,
        "LOCKING_EXCEPTION": 504,
        "STREAM_UNAVAILABLE": 515,
        "OVER_CAPACITY": 517,
        "STREAM_NOT_READY": 518,
        "CHECKSUM_FAILED": 523,
        "TOO_MANY_STREAMS": 524,
        "LOG_SEGMENT_IS_TRUNCATED": 527,
        "UNEXPECTED": 600,
        "ILLEGAL_STATE": 603,
        "READ_CANCELLED_EXCEPTION": 1002,
    }
    for name, value in expected.items():
        assert getattr(T.StatusCode, name) == value
    assert len(T.StatusCode._VALUES_TO_NAMES) == 40
    assert (T.ServerStatus.WRITE_AND_ACCEPT, T.ServerStatus.WRITE_ONLY, T.ServerStatus.DOWN) == (
        100,
        200,
        300,
    )


def test_method_names_and_implicit_argument_ids() -> None:
    assert S.thrift_services == [
        "handshake",
        "handshakeWithClientInfo",
        "heartbeat",
        "heartbeatWithOptions",
        "write",
        "writeWithContext",
        "writeBulkWithContext",
        "truncate",
        "release",
        "create",
        "delete",
        "getOwner",
        "setAcceptNewStream",
    ]

    def ids(method: str) -> list[tuple[int, str]]:
        return [(k, v[1]) for k, v in getattr(S, f"{method}_args").thrift_spec.items()]

    assert ids("writeBulkWithContext") == [(-1, "stream"), (-2, "data"), (-3, "ctx")]
    assert ids("heartbeatWithOptions") == [(-1, "stream"), (-2, "ctx"), (-3, "options")]
    assert ids("delete") == [(-1, "stream"), (-2, "ctx")]
    assert ids("setAcceptNewStream") == [(-1, "enabled")]
    assert [(k, v[1]) for k, v in T.WriteContext.thrift_spec.items()] == [
        (1, "triedHosts"),
        (2, "crc32"),
        (3, "isRecordSet"),
    ]


def test_a_call_on_the_wire() -> None:
    """Strict binary protocol: version word, name, seqid, then fields with
    negative ids; ``delete`` goes out under its own name."""
    frame = wire.encode_call("delete", 7, S.delete_args(stream="ab"))
    payload = frame[4:]
    assert struct.unpack(">i", frame[:4])[0] == len(payload)
    assert payload == (
        b"\x80\x01\x00\x01"
        + struct.pack(">i", 6)
        + b"delete"
        + struct.pack(">i", 7)
        + b"\x0b\xff\xff"
        + struct.pack(">i", 2)
        + b"ab"
        + b"\x00"
    )
    call = wire.decode_call(payload)
    assert (call.name, call.seqid, call.args.stream, call.args.ctx) == ("delete", 7, "ab", None)


def test_crc32_is_javas_over_the_stream_name_then_the_data() -> None:
    assert wire.write_crc32("s", b"data") == zlib.crc32(b"sdata")
    assert wire.stream_crc32("stream") == zlib.crc32(b"stream")
    d = DLSN(3, 4, 5)
    assert wire.truncate_crc32("s", d) == zlib.crc32(b"s" + d.serialize_bytes())


def test_owner_addresses() -> None:
    assert wire.format_owner("10.0.0.1", 8000, 3) == "1;3;10.0.0.1:8000"
    assert wire.parse_owner("1;-1;host:1") == (-1, "host", 1)
    for bad in ("host:1", "2;1;h:1", "1;x;h:1", "1;1;:1", "1;1;h:x"):
        with pytest.raises(ThriftProtocolError):
            wire.parse_owner(bad)


contexts = st.builds(
    T.WriteContext,
    triedHosts=st.none() | st.sets(st.text(max_size=10), max_size=3),
    crc32=st.none() | st.integers(0, 2**32 - 1),
    isRecordSet=st.none() | st.booleans(),
)


@given(
    stream=st.text(max_size=30),
    data=st.lists(st.binary(max_size=50), max_size=20),
    ctx=st.none() | contexts,
    seqid=st.integers(-(2**31), 2**31 - 1),
)
def test_bulk_calls_round_trip(stream: str, data: list[bytes], ctx: object, seqid: int) -> None:
    args = S.writeBulkWithContext_args(stream=stream, data=data, ctx=ctx)
    call = wire.decode_call(wire.encode_call("writeBulkWithContext", seqid, args)[4:])
    assert (call.name, call.seqid) == ("writeBulkWithContext", seqid)
    assert call.args == args


@given(
    ownerships=st.none() | st.dictionaries(st.text(max_size=10), st.text(max_size=10), max_size=5),
    status=st.none() | st.sampled_from([100, 200, 300]),
)
def test_handshake_replies_round_trip(ownerships: object, status: object) -> None:
    result = S.handshakeWithClientInfo_result(
        success=T.ServerInfo(ownerships=ownerships, serverStatus=status)
    )
    reply = wire.decode_reply(wire.encode_reply("handshakeWithClientInfo", 1, result)[4:])
    assert reply.result == result


def test_an_exception_reply_decodes() -> None:
    reply = wire.decode_reply(wire.encode_exception("x", 5, 1, "unknown method")[4:])
    assert (reply.seqid, reply.result.type, reply.result.message) == (5, 1, "unknown method")


_GOOD = wire.encode_call(
    "writeBulkWithContext",
    1,
    S.writeBulkWithContext_args(
        stream="s", data=[b"x" * 10] * 5, ctx=T.WriteContext(triedHosts={"a"}, crc32=1)
    ),
)[4:]


@settings(max_examples=2000)
@given(
    edits=st.lists(st.tuples(st.integers(0, len(_GOOD) - 1), st.integers(0, 255)), max_size=6),
    cut=st.integers(0, len(_GOOD)),
)
def test_corrupt_calls_fail_cleanly_and_stay_bounded(
    edits: list[tuple[int, int]], cut: int
) -> None:
    """Any corruption either decodes or raises ThriftProtocolError; what it
    decodes to is never bigger than the frame (thriftpy2's own readers
    would build a list of 2**31 elements from a 40-byte frame)."""
    b = bytearray(_GOOD)
    for pos, value in edits:
        b[pos] = value
    payload = bytes(b[:cut])
    try:
        call = wire.decode_call(payload)
    except ThriftProtocolError:
        return
    if call.args is not None and getattr(call.args, "data", None) is not None:
        assert len(call.args.data) <= len(payload)


def test_huge_counts_are_refused_before_reading() -> None:
    name = b"writeBulkWithContext"
    head = b"\x80\x01\x00\x01" + struct.pack(">i", len(name)) + name + struct.pack(">i", 1)
    huge_list = head + b"\x0f\xff\xfe\x0b" + struct.pack(">i", 2**31 - 1)
    with pytest.raises(ThriftProtocolError, match="truncated"):
        wire.decode_call(huge_list)
    zero_width = head + b"\x0f\xff\xfe\x00" + struct.pack(">i", 2**31 - 1)
    with pytest.raises(ThriftProtocolError, match="unknown thrift type"):
        wire.decode_call(zero_width)
    not_strict = struct.pack(">i", 5) + b"write" + b"\x01" + struct.pack(">i", 1)
    with pytest.raises(ThriftProtocolError, match="strict binary"):
        wire.decode_call(not_strict)


def _generic_bulk(seqid: int, header: object, responses: list[object]) -> bytes:
    return wire.encode_reply(
        "writeBulkWithContext",
        seqid,
        S.writeBulkWithContext_result(
            success=T.BulkWriteResponse(
                header=header,
                writeResponses=[
                    T.WriteResponse(header=T.ResponseHeader(code=200), dlsn=r)
                    if isinstance(r, str)
                    else r
                    for r in responses
                ],
            )
        ),
    )


bulk_items = st.lists(
    st.builds(
        lambda a, b, c: DLSN(a, b, c).serialize(),
        st.integers(1, 2**40),
        st.integers(0, 2**40),
        st.integers(0, 2**20),
    )
    | st.builds(
        lambda code, msg: T.WriteResponse(header=T.ResponseHeader(code=code, errMsg=msg)),
        st.sampled_from([302, 413, 515, 517, 523]),
        st.none() | st.text(max_size=20),
    ),
    max_size=40,
)


@given(seqid=st.integers(-(2**31), 2**31 - 1), items=bulk_items)
def test_the_fast_bulk_reply_is_the_generic_one(seqid: int, items: list[object]) -> None:
    header = T.ResponseHeader(code=200)
    fast = wire.encode_bulk_write_reply(seqid, header, items)
    assert fast == _generic_bulk(seqid, header, items)
    got = wire.decode_bulk_write_reply(fast[4:])
    want = wire.decode_reply(fast[4:])
    assert got.seqid == want.seqid == seqid
    assert got.result.success.header == want.result.success.header
    assert [
        (r.header.code, r.header.errMsg, r.dlsn) for r in got.result.success.writeResponses
    ] == [(r.header.code, r.header.errMsg, r.dlsn) for r in want.result.success.writeResponses]


_BULK = wire.encode_bulk_write_reply(
    3, T.ResponseHeader(code=200), [DLSN(1, 0, i).serialize() for i in range(4)]
)[4:]


@settings(max_examples=1000)
@given(
    edits=st.lists(st.tuples(st.integers(0, len(_BULK) - 1), st.integers(0, 255)), max_size=4),
    cut=st.integers(0, len(_BULK)),
)
def test_corrupt_bulk_replies_fail_cleanly(edits: list[tuple[int, int]], cut: int) -> None:
    b = bytearray(_BULK)
    for pos, value in edits:
        b[pos] = value
    try:
        wire.decode_bulk_write_reply(bytes(b[:cut]))
    except ThriftProtocolError:
        pass
