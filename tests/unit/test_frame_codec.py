"""BookKeeper v3 framing (dlog.protocol.frame) and message helpers
(dlog.protocol.messages): round trips, split frames, limits, and fuzzing."""

from __future__ import annotations

import struct

import pytest
from google.protobuf.message import DecodeError
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from dlog.errors import (
    EBADREQ,
    EFENCED,
    EIO,
    ENOENTRY,
    ENOLEDGER,
    EOK,
    ETOOMANYREQUESTS,
    EUA,
    ProtocolError,
)
from dlog.protocol import bookkeeper_pb2 as pb
from dlog.protocol import messages as m
from dlog.protocol.frame import (
    DEFAULT_MAX_FRAME_SIZE,
    HEADER_SIZE,
    FrameDecoder,
    FrameTooLargeError,
    encode_frame,
)

INT64 = st.integers(min_value=-(2**63), max_value=2**63 - 1)
LEDGER_IDS = st.integers(min_value=0, max_value=2**63 - 1)
ENTRY_IDS = st.integers(min_value=-1, max_value=2**63 - 1)
TXN_IDS = st.integers(min_value=0, max_value=2**64 - 1)
KEYS = st.binary(min_size=0, max_size=20)
BODIES = st.binary(max_size=300)
STATUSES = st.sampled_from(sorted(pb.StatusCode.values()))
OPERATIONS = st.sampled_from(sorted(pb.OperationType.values()))

REQUESTS = st.one_of(
    st.builds(
        m.add_request,
        TXN_IDS,
        LEDGER_IDS,
        ENTRY_IDS,
        KEYS,
        BODIES,
        recovery=st.booleans(),
        write_flags=st.integers(min_value=0, max_value=2**31 - 1),
    ),
    st.builds(
        m.read_request,
        TXN_IDS,
        LEDGER_IDS,
        ENTRY_IDS,
        fence=st.booleans(),
        master_key=st.none() | KEYS,
        previous_lac=st.none() | INT64,
        timeout_ms=st.none() | st.integers(min_value=0, max_value=2**40),
        piggyback=st.booleans(),
    ),
    st.builds(m.write_lac_request, TXN_IDS, LEDGER_IDS, INT64, KEYS, BODIES),
    st.builds(m.read_lac_request, TXN_IDS, LEDGER_IDS),
    st.builds(m.force_ledger_request, TXN_IDS, LEDGER_IDS),
    st.builds(m.write_close_request, TXN_IDS, LEDGER_IDS, KEYS),
    st.builds(m.bookie_info_request, TXN_IDS, st.integers(min_value=0, max_value=3)),
)


def _frames(requests: list[pb.Request]) -> list[bytes]:
    return [encode_frame(r.SerializeToString()) for r in requests]


# ---------------------------------------------------------------------------
# encode_frame and basic decoding
# ---------------------------------------------------------------------------


def test_encode_frame_is_big_endian_length_prefix() -> None:
    assert encode_frame(b"") == b"\x00\x00\x00\x00"
    assert encode_frame(b"abc") == b"\x00\x00\x00\x03abc"
    payload = bytes(range(256)) * 3
    frame = encode_frame(payload)
    assert frame[:4] == struct.pack(">I", 768)
    assert frame[4:] == payload
    assert HEADER_SIZE == 4
    assert DEFAULT_MAX_FRAME_SIZE == 5 * 1024 * 1024


def test_empty_frame_decodes_to_empty_payload() -> None:
    dec = FrameDecoder()
    assert dec.feed(encode_frame(b"")) == [b""]
    assert dec.buffered == 0


def test_request_round_trip_through_frames() -> None:
    reqs = [
        m.add_request(7, 42, 3, b"k" * 20, b"body-bytes", recovery=True, write_flags=1),
        m.read_request(8, 42, -1, fence=True, master_key=b"m" * 20),
        m.read_request(9, 42, 5, previous_lac=4, timeout_ms=1000, piggyback=True),
        m.write_lac_request(10, 42, 17, b"k", b"lac"),
        m.read_lac_request(11, 42),
        m.force_ledger_request(12, 42),
        m.write_close_request(13, 42, b"key"),
        m.bookie_info_request(2**64 - 1),
    ]
    dec = FrameDecoder()
    payloads = dec.feed(b"".join(_frames(reqs)))
    assert len(payloads) == len(reqs)
    for req, payload in zip(reqs, payloads, strict=True):
        back = m.Request.FromString(payload)
        assert back == req
        assert back.IsInitialized()
        assert m.request_problem(back) is None
    assert dec.buffered == 0
    # spot-check decoded fields
    add = m.Request.FromString(payloads[0])
    assert add.header.version == m.VERSION_THREE
    assert add.header.operation == m.ADD_ENTRY
    assert add.header.txnId == 7
    assert add.addRequest.flag == m.RECOVERY_ADD
    assert add.addRequest.body == b"body-bytes"
    read = m.Request.FromString(payloads[1])
    assert read.readRequest.flag == m.FENCE_LEDGER
    assert read.readRequest.entryId == m.LAST_ADD_CONFIRMED
    lp = m.Request.FromString(payloads[2])
    assert lp.readRequest.flag == m.ENTRY_PIGGYBACK
    assert (lp.readRequest.previousLAC, lp.readRequest.timeOut) == (4, 1000)
    wc = m.Request.FromString(payloads[6])
    assert wc.header.operation == m.WRITE_CLOSE == 100
    assert m.Request.FromString(payloads[7]).header.txnId == 2**64 - 1


def test_response_round_trip_through_frames() -> None:
    resps = [
        m.add_response(1, EOK, 5, 6),
        m.read_response(2, EOK, 5, 6, body=b"data", max_lac=6),
        m.read_response(3, ENOENTRY, 5, 7),
        m.write_lac_response(4, EOK, 5),
        m.read_lac_response(5, EOK, 5, b"lac", b"last"),
        m.read_lac_response(6, ENOLEDGER, 5, None, None),
        m.force_ledger_response(7, EFENCED, 5),
        m.write_close_response(8, EOK, 5),
        m.bookie_info_response(9, EOK, 1000, 500),
        m.bookie_info_response(10, EIO, None, None),
    ]
    dec = FrameDecoder()
    data = b"".join(encode_frame(r.SerializeToString()) for r in resps)
    payloads = dec.feed(data)
    assert [m.Response.FromString(p) for p in payloads] == resps
    for r in resps:
        assert r.IsInitialized()
    rr = m.Response.FromString(payloads[1]).readResponse
    assert (rr.body, rr.maxLAC) == (b"data", 6)
    assert not m.Response.FromString(payloads[2]).readResponse.HasField("body")
    info = m.Response.FromString(payloads[9]).getBookieInfoResponse
    assert not info.HasField("totalDiskCapacity")


def test_frames_split_at_every_byte_boundary() -> None:
    reqs = [m.add_request(1, 2, 3, b"k", b"x" * 50), m.read_lac_request(2, 9)]
    data = b"".join(_frames(reqs))
    expected = [r.SerializeToString() for r in reqs]
    for cut in range(len(data) + 1):
        dec = FrameDecoder()
        out = dec.feed(data[:cut])
        out += dec.feed(data[cut:])
        assert out == expected, cut
        assert dec.buffered == 0


def test_frames_split_at_two_boundaries() -> None:
    reqs = [m.read_lac_request(i, i) for i in range(3)]
    data = b"".join(_frames(reqs))
    expected = [r.SerializeToString() for r in reqs]
    for a in range(len(data) + 1):
        for b in range(a, len(data) + 1):
            dec = FrameDecoder()
            out = dec.feed(data[:a]) + dec.feed(data[a:b]) + dec.feed(data[b:])
            assert out == expected


def test_frames_fed_byte_by_byte() -> None:
    reqs = [m.add_request(i, 1, i, b"key", bytes([i]) * i) for i in range(20)]
    data = b"".join(_frames(reqs))
    dec = FrameDecoder()
    out: list[bytes] = []
    for i in range(len(data)):
        got = dec.feed(data[i : i + 1])
        assert len(got) <= 1
        out += got
        # Never buffers a whole frame it could have returned.
        assert dec.buffered < max(len(f) for f in _frames(reqs))
    assert [m.Request.FromString(p) for p in out] == reqs
    assert dec.buffered == 0


def test_several_frames_in_one_chunk_and_partial_tail_kept() -> None:
    frames = [encode_frame(bytes([i]) * i) for i in range(10)]
    tail = encode_frame(b"partial-frame")
    dec = FrameDecoder()
    out = dec.feed(b"".join(frames) + tail[:7])
    assert out == [bytes([i]) * i for i in range(10)]
    assert dec.buffered == 7
    assert dec.feed(tail[7:]) == [b"partial-frame"]
    assert dec.buffered == 0


def test_feeding_nothing_returns_nothing() -> None:
    dec = FrameDecoder()
    assert dec.feed(b"") == []
    assert dec.feed(b"\x00\x00") == []
    assert dec.feed(b"") == []
    assert dec.buffered == 2


def test_frame_of_exactly_max_size_is_accepted() -> None:
    dec = FrameDecoder(max_frame_size=1024)
    payload = b"p" * 1024
    assert dec.feed(encode_frame(payload)) == [payload]


@pytest.mark.parametrize("limit", [16, 1024, DEFAULT_MAX_FRAME_SIZE])
def test_oversize_frame_raises(limit: int) -> None:
    dec = FrameDecoder(max_frame_size=limit)
    with pytest.raises(FrameTooLargeError) as exc:
        dec.feed((limit + 1).to_bytes(4, "big"))
    assert str(limit) in str(exc.value)
    assert isinstance(exc.value, ProtocolError)


def test_oversize_detected_from_header_alone_after_valid_frames() -> None:
    dec = FrameDecoder(max_frame_size=100)
    data = encode_frame(b"ok") + (101).to_bytes(4, "big")
    with pytest.raises(FrameTooLargeError):
        dec.feed(data)
    # Split: the good frame comes back first, the bad header then raises.
    dec = FrameDecoder(max_frame_size=100)
    assert dec.feed(encode_frame(b"ok")) == [b"ok"]
    assert dec.feed((101).to_bytes(2, "big")[:1]) == []
    with pytest.raises(FrameTooLargeError):
        dec.feed(b"\x00\x00\x65")


@pytest.mark.parametrize("length", [-1, -(2**31), -256])
def test_negative_length_raises(length: int) -> None:
    dec = FrameDecoder()
    with pytest.raises(FrameTooLargeError) as exc:
        dec.feed(struct.pack(">i", length) + b"xxxx")
    assert "negative" in str(exc.value)


def test_default_limit_rejects_2gib_length() -> None:
    with pytest.raises(FrameTooLargeError):
        FrameDecoder().feed(b"\x7f\xff\xff\xff")


# ---------------------------------------------------------------------------
# fuzzing
# ---------------------------------------------------------------------------


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    reqs=st.lists(REQUESTS, min_size=0, max_size=8),
    cuts=st.lists(st.integers(min_value=0, max_value=10_000), max_size=6),
)
def test_valid_frames_always_come_back_intact(reqs: list[pb.Request], cuts: list[int]) -> None:
    data = b"".join(_frames(reqs))
    points = sorted({c % (len(data) + 1) for c in cuts})
    dec = FrameDecoder()
    out: list[bytes] = []
    prev = 0
    for p in [*points, len(data)]:
        out += dec.feed(data[prev:p])
        prev = p
    assert [m.Request.FromString(p) for p in out] == reqs
    assert dec.buffered == 0


@settings(max_examples=150, deadline=None)
@given(reqs=st.lists(REQUESTS, min_size=1, max_size=6), data=st.data())
def test_truncated_stream_yields_prefix_of_frames(
    reqs: list[pb.Request], data: st.DataObject
) -> None:
    frames = _frames(reqs)
    stream = b"".join(frames)
    cut = data.draw(st.integers(min_value=0, max_value=len(stream)))
    dec = FrameDecoder()
    out = dec.feed(stream[:cut])
    # Exactly the frames wholly inside the prefix come back.
    whole = 0
    total = 0
    for f in frames:
        if total + len(f) > cut:
            break
        total += len(f)
        whole += 1
    assert out == [r.SerializeToString() for r in reqs[:whole]]
    assert dec.buffered == cut - total


def _decode_all(chunks: list[bytes], max_frame_size: int) -> list[pb.Request]:
    """Run the server-side decode path; only the two allowed errors may escape."""
    dec = FrameDecoder(max_frame_size=max_frame_size)
    decoded: list[pb.Request] = []
    for chunk in chunks:
        for payload in dec.feed(chunk):
            assert len(payload) <= max_frame_size
            try:
                req = m.Request.FromString(payload)
            except DecodeError:
                continue
            # Whatever parsed must be answerable without raising.
            m.request_problem(req)
            resp = m.error_response(req, EBADREQ)
            assert resp.IsInitialized()
            decoded.append(req)
    return decoded


PIECES = st.one_of(
    REQUESTS.map(lambda r: ("frame", encode_frame(r.SerializeToString()))),
    REQUESTS.flatmap(
        lambda r: st.integers(min_value=0, max_value=len(r.SerializeToString()) + 3).map(
            lambda n, r=r: ("trunc", encode_frame(r.SerializeToString())[:n])
        )
    ),
    st.binary(max_size=64).map(lambda b: ("garbage", b)),
    st.binary(max_size=64).map(lambda b: ("framed-garbage", encode_frame(b))),
)


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    pieces=st.lists(PIECES, max_size=10),
    chunk_sizes=st.lists(st.integers(min_value=1, max_value=97), min_size=1, max_size=8),
    max_frame_size=st.sampled_from([64, 4096, DEFAULT_MAX_FRAME_SIZE]),
)
def test_fuzz_decoder_and_parser_raise_only_expected_errors(
    pieces: list[tuple[str, bytes]], chunk_sizes: list[int], max_frame_size: int
) -> None:
    stream = b"".join(p for _, p in pieces)
    chunks = []
    pos = 0
    i = 0
    while pos < len(stream):
        n = chunk_sizes[i % len(chunk_sizes)]
        chunks.append(stream[pos : pos + n])
        pos += n
        i += 1
    try:
        _decode_all(chunks, max_frame_size)
    except FrameTooLargeError:
        pass


@settings(max_examples=300, deadline=None)
@given(data=st.binary(max_size=512))
def test_fuzz_random_bytes(data: bytes) -> None:
    try:
        _decode_all([data], 256)
    except FrameTooLargeError:
        pass


@settings(max_examples=150, deadline=None)
@given(
    reqs=st.lists(REQUESTS, min_size=1, max_size=5),
    garbage=st.binary(min_size=1, max_size=40),
)
def test_valid_frames_before_garbage_are_intact(reqs: list[pb.Request], garbage: bytes) -> None:
    """Garbage after valid frames never corrupts the frames already decoded."""
    stream = b"".join(_frames(reqs)) + garbage
    dec = FrameDecoder(max_frame_size=4096)
    out: list[bytes] = []
    for i in range(len(stream)):
        try:
            out += dec.feed(stream[i : i + 1])
        except FrameTooLargeError:
            break
    assert [m.Request.FromString(p) for p in out[: len(reqs)]] == reqs


@settings(max_examples=300, deadline=None)
@given(payload=st.binary(max_size=200))
def test_request_parse_of_framed_garbage(payload: bytes) -> None:
    out = FrameDecoder().feed(encode_frame(payload))
    assert out == [payload]
    try:
        m.Request.FromString(payload)
    except DecodeError:
        pass


# ---------------------------------------------------------------------------
# request_problem / error_response
# ---------------------------------------------------------------------------


def test_request_problem_accepts_complete_requests() -> None:
    assert m.request_problem(m.add_request(1, 2, 3, b"k", b"b")) is None
    assert m.request_problem(m.read_request(1, 2, 3)) is None
    assert m.request_problem(m.bookie_info_request(1)) is None


def test_request_problem_add_without_body() -> None:
    req = m.add_request(1, 2, 3, b"k", b"b")
    req.addRequest.ClearField("body")
    problem = m.request_problem(req)
    assert problem is not None
    assert "body" in problem


def test_request_problem_no_header() -> None:
    req = m.Request(addRequest=pb.AddRequest(ledgerId=1, entryId=2, masterKey=b"", body=b""))
    assert m.request_problem(req) == "request has no header"


def test_request_problem_header_missing_fields() -> None:
    req = m.Request()
    req.header.version = m.VERSION_THREE
    req.header.txnId = 5
    problem = m.request_problem(req)
    assert problem is not None and "operation" in problem


def test_request_problem_operation_without_sub_request() -> None:
    req = m.Request(header=pb.BKPacketHeader(version=3, operation=m.ADD_ENTRY, txnId=1))
    problem = m.request_problem(req)
    assert problem is not None
    assert "ADD_ENTRY" in problem and "addRequest" in problem
    req = m.Request(header=pb.BKPacketHeader(version=3, operation=m.WRITE_CLOSE, txnId=1))
    assert "writeCloseRequest" in (m.request_problem(req) or "")


def test_request_problem_read_missing_entry_id() -> None:
    req = m.read_request(1, 2, 3)
    req.readRequest.ClearField("entryId")
    problem = m.request_problem(req)
    assert problem is not None and "entryId" in problem


def test_error_response_for_add() -> None:
    req = m.add_request(77, 5, 9, b"k", b"b")
    resp = m.error_response(req, EFENCED)
    assert resp.IsInitialized()
    assert resp.header.txnId == 77
    assert resp.header.operation == m.ADD_ENTRY
    assert resp.header.version == m.VERSION_THREE
    assert resp.status == EFENCED
    assert (resp.addResponse.status, resp.addResponse.ledgerId, resp.addResponse.entryId) == (
        EFENCED,
        5,
        9,
    )


def test_error_response_for_request_without_header() -> None:
    resp = m.error_response(m.Request(), EBADREQ)
    assert resp.IsInitialized()
    assert resp.status == EBADREQ
    assert resp.header.txnId == 0


def test_error_response_for_auth_and_start_tls_is_initialized() -> None:
    for op in (m.AUTH, m.START_TLS):
        req = m.Request(header=pb.BKPacketHeader(version=3, operation=op, txnId=3))
        resp = m.error_response(req, EBADREQ)
        assert resp.IsInitialized()
        assert resp.header.operation == op
        assert not resp.HasField("authResponse")
        assert not resp.HasField("startTLSResponse")


_SUB_FIELDS = {
    "readRequest": ("ledgerId", "entryId", "masterKey", "previousLAC", "timeOut", "flag"),
    "addRequest": ("ledgerId", "entryId", "masterKey", "body", "writeFlags", "flag"),
    "authRequest": ("authPluginName", "payload"),
    "writeLacRequest": ("ledgerId", "lac", "masterKey", "body"),
    "readLacRequest": ("ledgerId",),
    "getBookieInfoRequest": ("requested",),
    "startTLSRequest": (),
    "forceLedgerRequest": ("ledgerId",),
    "getListOfEntriesOfLedgerRequest": ("ledgerId",),
    "writeCloseRequest": ("ledgerId", "masterKey"),
}


def _set_field(msg, name: str, draw) -> None:  # type: ignore[no-untyped-def]
    field = msg.DESCRIPTOR.fields_by_name[name]
    fd = field.type
    if fd == field.TYPE_BYTES:
        setattr(msg, name, draw(st.binary(max_size=8)))
    elif fd == field.TYPE_STRING:
        setattr(msg, name, draw(st.text(max_size=8)))
    elif fd == field.TYPE_ENUM:
        setattr(msg, name, draw(st.sampled_from(sorted(field.enum_type.values_by_number))))
    elif fd in (field.TYPE_INT32,):
        setattr(msg, name, draw(st.integers(min_value=-(2**31), max_value=2**31 - 1)))
    else:
        setattr(msg, name, draw(INT64))


@st.composite
def partial_requests(draw) -> pb.Request:  # type: ignore[no-untyped-def]
    req = pb.Request()
    if draw(st.booleans()):
        req.header.SetInParent()
        if draw(st.booleans()):
            req.header.version = draw(st.sampled_from([1, 2, 3]))
        if draw(st.booleans()):
            req.header.operation = draw(OPERATIONS)
        if draw(st.booleans()):
            req.header.txnId = draw(TXN_IDS)
        if draw(st.booleans()):
            req.header.priority = draw(st.integers(min_value=0, max_value=2**32 - 1))
    for sub_name in draw(st.lists(st.sampled_from(sorted(_SUB_FIELDS)), max_size=3, unique=True)):
        sub = getattr(req, sub_name)
        sub.SetInParent()
        for f in _SUB_FIELDS[sub_name]:
            if draw(st.booleans()):
                _set_field(sub, f, draw)
    # Sometimes go through the wire, as the bookie would see it.
    if draw(st.booleans()):
        req = pb.Request.FromString(req.SerializePartialToString())
    return req


def _expected_problem(req: pb.Request) -> bool:
    if not req.HasField("header") or not req.IsInitialized():
        return True
    fields = m.OP_FIELDS.get(req.header.operation)
    return fields is not None and not req.HasField(fields[0])


@settings(max_examples=400, deadline=None)
@given(req=partial_requests(), status=STATUSES)
def test_error_response_always_initialized(req: pb.Request, status: int) -> None:
    resp = m.error_response(req, status)
    assert resp.IsInitialized(), resp.FindInitializationErrors()
    # It must serialize and parse back as a complete Response.
    back = m.Response.FromString(resp.SerializeToString())
    assert back.IsInitialized()
    assert back.status == status
    assert back.header.version == m.VERSION_THREE
    assert back.header.txnId == (req.header.txnId if req.HasField("header") else 0)
    expected_op = req.header.operation if req.header.HasField("operation") else m.READ_ENTRY
    assert back.header.operation == expected_op
    fields = m.OP_FIELDS.get(expected_op)
    if fields is not None and expected_op not in (m.AUTH, m.START_TLS):
        sub = getattr(back, fields[1])
        assert back.HasField(fields[1])
        assert sub.status == status
        sub_req = getattr(req, fields[0])
        if "ledgerId" in sub.DESCRIPTOR.fields_by_name:
            assert sub.ledgerId == sub_req.ledgerId
        if "entryId" in sub.DESCRIPTOR.fields_by_name:
            assert sub.entryId == sub_req.entryId


@settings(max_examples=400, deadline=None)
@given(req=partial_requests())
def test_request_problem_matches_required_fields(req: pb.Request) -> None:
    problem = m.request_problem(req)
    assert (problem is not None) == _expected_problem(req), (problem, req)
    if problem is None:
        assert req.IsInitialized()


@pytest.mark.parametrize("status", [EOK, EIO, EUA, ETOOMANYREQUESTS])
def test_error_response_for_every_operation(status: int) -> None:
    for op in pb.OperationType.values():
        req = m.Request(header=pb.BKPacketHeader(version=3, operation=op, txnId=op * 1000))
        resp = m.error_response(req, status)
        assert resp.IsInitialized(), (op, resp.FindInitializationErrors())
        assert resp.header.operation == op
        assert resp.header.txnId == op * 1000
