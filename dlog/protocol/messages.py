"""Builders and checks for BookKeeper v3 messages.

The bookie and the client both build messages here; the logic that decides
what to send lives elsewhere.
"""

from __future__ import annotations

import dataclasses
import re
from typing import NamedTuple, cast

from dlog.errors import EIO
from dlog.extensions import extension
from dlog.protocol import bookkeeper_pb2 as pb

VERSION_THREE = pb.VERSION_THREE

# Operation types.
READ_ENTRY = pb.READ_ENTRY
ADD_ENTRY = pb.ADD_ENTRY
AUTH = pb.AUTH
WRITE_LAC = pb.WRITE_LAC
READ_LAC = pb.READ_LAC
GET_BOOKIE_INFO = pb.GET_BOOKIE_INFO
START_TLS = pb.START_TLS
FORCE_LEDGER = pb.FORCE_LEDGER
GET_LIST_OF_ENTRIES_OF_LEDGER = pb.GET_LIST_OF_ENTRIES_OF_LEDGER
WRITE_CLOSE = pb.WRITE_CLOSE

# Flags.
FENCE_LEDGER = pb.ReadRequest.FENCE_LEDGER
ENTRY_PIGGYBACK = pb.ReadRequest.ENTRY_PIGGYBACK
RECOVERY_ADD = pb.AddRequest.RECOVERY_ADD
TOTAL_DISK_CAPACITY = pb.GetBookieInfoRequest.TOTAL_DISK_CAPACITY
FREE_DISK_SPACE = pb.GetBookieInfoRequest.FREE_DISK_SPACE

#: entryId that asks a bookie for the last entry it has of a ledger.
LAST_ADD_CONFIRMED = -1

Request = pb.Request
Response = pb.Response

# Operation -> (request field, response field).
OP_FIELDS: dict[int, tuple[str, str]] = {
    READ_ENTRY: ("readRequest", "readResponse"),
    ADD_ENTRY: ("addRequest", "addResponse"),
    AUTH: ("authRequest", "authResponse"),
    WRITE_LAC: ("writeLacRequest", "writeLacResponse"),
    READ_LAC: ("readLacRequest", "readLacResponse"),
    GET_BOOKIE_INFO: ("getBookieInfoRequest", "getBookieInfoResponse"),
    START_TLS: ("startTLSRequest", "startTLSResponse"),
    FORCE_LEDGER: ("forceLedgerRequest", "forceLedgerResponse"),
    GET_LIST_OF_ENTRIES_OF_LEDGER: (
        "getListOfEntriesOfLedgerRequest",
        "getListOfEntriesOfLedgerResponse",
    ),
    WRITE_CLOSE: ("writeCloseRequest", "writeCloseResponse"),
}

OP_NAMES = {v: k for k, v in pb.OperationType.items()}


def _header(operation: pb.OperationType, txn_id: int) -> pb.BKPacketHeader:
    return pb.BKPacketHeader(version=VERSION_THREE, operation=operation, txnId=txn_id)


def _status(status: int) -> pb.StatusCode:
    """A status code from dlog.errors (a plain int) typed as the enum the
    protobuf stubs want for a ``status`` field: the same int at run time."""
    return cast(pb.StatusCode, status)


def request_problem(req: pb.Request) -> str | None:
    """Why ``req`` cannot be served (missing required fields or body), or None."""
    if not req.IsInitialized():
        if not req.HasField("header"):
            return "request has no header"
        # types-protobuf leaves FindInitializationErrors out of Message; every
        # protobuf implementation has it.
        missing = req.FindInitializationErrors()  # type: ignore[attr-defined]
        return "missing required fields: " + ", ".join(missing)
    fields = OP_FIELDS.get(req.header.operation)
    if fields is not None and not req.HasField(fields[0]):
        return (
            f"{OP_NAMES.get(req.header.operation, req.header.operation)} request has no {fields[0]}"
        )
    return None


def error_response(req: pb.Request, status: int) -> pb.Response:
    """A complete Response carrying ``status`` for any (even partial) request."""
    header = req.header
    op = header.operation if header.HasField("operation") else READ_ENTRY
    resp = pb.Response(header=_header(op, header.txnId), status=_status(status))
    fields = OP_FIELDS.get(op)
    if fields is None:
        return resp
    sub_req = getattr(req, fields[0])
    sub = getattr(resp, fields[1])
    descriptor = sub.DESCRIPTOR.fields_by_name
    if "status" in descriptor:
        sub.status = status
    if "ledgerId" in descriptor:
        sub.ledgerId = getattr(sub_req, "ledgerId", 0)
    if "entryId" in descriptor:
        sub.entryId = getattr(sub_req, "entryId", 0)
    if op in (START_TLS, AUTH):
        resp.ClearField(fields[1])
    return resp


# ---------------------------------------------------------------------------
# Responses (bookie side)
# ---------------------------------------------------------------------------


def add_response(txn_id: int, status: int, ledger_id: int, entry_id: int) -> pb.Response:
    return pb.Response(
        header=_header(ADD_ENTRY, txn_id),
        status=_status(status),
        addResponse=pb.AddResponse(status=_status(status), ledgerId=ledger_id, entryId=entry_id),
    )


class AddResult(NamedTuple):
    """An add's answer as a ledger client needs it: decoded without
    protobuf (:func:`decode_add_response`) or taken from a protobuf-parsed
    Response (:func:`add_result`). ``status`` is the Response's."""

    txn_id: int
    status: int
    ledger_id: int
    entry_id: int


def parse_response(payload: bytes | bytearray | memoryview) -> pb.Response:
    """A Response frame's payload, parsed by protobuf (DecodeError if it is
    not one). A status code protobuf does not know (a newer bookie's, or a
    damaged one) leaves the required field unset, and reading it would give
    EOK: such an answer's status is set to EIO here, so that no caller counts
    it as a success. (Java's protobuf refuses the message outright.)"""
    # protobuf parses any buffer; its stubs say bytes (a copy we avoid).
    resp = Response.FromString(payload)  # type: ignore[arg-type]
    if not resp.HasField("status"):
        resp.status = _status(EIO)
    return resp


def add_result(resp: pb.Response) -> AddResult:
    """The add answer in an ADD_ENTRY Response from :func:`parse_response`
    (which made an unknown status EIO: the add failed on that bookie)."""
    ar = resp.addResponse
    return AddResult(resp.header.txnId, resp.status, ar.ledgerId, ar.entryId)


def read_response(
    txn_id: int,
    status: int,
    ledger_id: int,
    entry_id: int,
    body: bytes | None = None,
    max_lac: int | None = None,
) -> pb.Response:
    rr = pb.ReadResponse(status=_status(status), ledgerId=ledger_id, entryId=entry_id)
    if body is not None:
        rr.body = body
    if max_lac is not None:
        rr.maxLAC = max_lac
    return pb.Response(header=_header(READ_ENTRY, txn_id), status=_status(status), readResponse=rr)


def write_lac_response(txn_id: int, status: int, ledger_id: int) -> pb.Response:
    return pb.Response(
        header=_header(WRITE_LAC, txn_id),
        status=_status(status),
        writeLacResponse=pb.WriteLacResponse(status=_status(status), ledgerId=ledger_id),
    )


def read_lac_response(
    txn_id: int, status: int, ledger_id: int, lac_body: bytes | None, last_entry: bytes | None
) -> pb.Response:
    r = pb.ReadLacResponse(status=_status(status), ledgerId=ledger_id)
    if lac_body is not None:
        r.lacBody = lac_body
    if last_entry is not None:
        r.lastEntryBody = last_entry
    return pb.Response(header=_header(READ_LAC, txn_id), status=_status(status), readLacResponse=r)


def force_ledger_response(txn_id: int, status: int, ledger_id: int) -> pb.Response:
    return pb.Response(
        header=_header(FORCE_LEDGER, txn_id),
        status=_status(status),
        forceLedgerResponse=pb.ForceLedgerResponse(status=_status(status), ledgerId=ledger_id),
    )


def write_close_response(txn_id: int, status: int, ledger_id: int) -> pb.Response:
    return pb.Response(
        header=_header(WRITE_CLOSE, txn_id),
        status=_status(status),
        writeCloseResponse=pb.WriteCloseResponse(status=_status(status), ledgerId=ledger_id),
    )


def bookie_info_response(
    txn_id: int, status: int, total: int | None, free: int | None
) -> pb.Response:
    r = pb.GetBookieInfoResponse(status=_status(status))
    if total is not None:
        r.totalDiskCapacity = total
    if free is not None:
        r.freeDiskSpace = free
    return pb.Response(
        header=_header(GET_BOOKIE_INFO, txn_id), status=_status(status), getBookieInfoResponse=r
    )


def list_of_entries_response(
    txn_id: int, status: int, ledger_id: int, availability: bytes | None
) -> pb.Response:
    """``availability``: AvailabilityOfEntriesOfLedger bytes
    (:mod:`dlog.protocol.availability`), sent only with EOK."""
    r = pb.GetListOfEntriesOfLedgerResponse(status=_status(status), ledgerId=ledger_id)
    if availability is not None:
        r.availabilityOfEntriesOfLedger = availability
    return pb.Response(
        header=_header(GET_LIST_OF_ENTRIES_OF_LEDGER, txn_id),
        status=_status(status),
        getListOfEntriesOfLedgerResponse=r,
    )


# ---------------------------------------------------------------------------
# Requests (client side)
# ---------------------------------------------------------------------------


def add_request(
    txn_id: int,
    ledger_id: int,
    entry_id: int,
    master_key: bytes,
    body: bytes,
    recovery: bool = False,
    write_flags: int = 0,
) -> pb.Request:
    ar = pb.AddRequest(ledgerId=ledger_id, entryId=entry_id, masterKey=master_key, body=body)
    if recovery:
        ar.flag = RECOVERY_ADD
    if write_flags:
        ar.writeFlags = write_flags
    return pb.Request(header=_header(ADD_ENTRY, txn_id), addRequest=ar)


def read_request(
    txn_id: int,
    ledger_id: int,
    entry_id: int,
    *,
    fence: bool = False,
    master_key: bytes | None = None,
    previous_lac: int | None = None,
    timeout_ms: int | None = None,
    piggyback: bool = False,
) -> pb.Request:
    rr = pb.ReadRequest(ledgerId=ledger_id, entryId=entry_id)
    if fence:
        rr.flag = FENCE_LEDGER
    elif piggyback:
        rr.flag = ENTRY_PIGGYBACK
    if master_key is not None:
        rr.masterKey = master_key
    if previous_lac is not None:
        rr.previousLAC = previous_lac
    if timeout_ms is not None:
        rr.timeOut = timeout_ms
    return pb.Request(header=_header(READ_ENTRY, txn_id), readRequest=rr)


def write_lac_request(
    txn_id: int, ledger_id: int, lac: int, master_key: bytes, body: bytes
) -> pb.Request:
    return pb.Request(
        header=_header(WRITE_LAC, txn_id),
        writeLacRequest=pb.WriteLacRequest(
            ledgerId=ledger_id, lac=lac, masterKey=master_key, body=body
        ),
    )


def read_lac_request(txn_id: int, ledger_id: int) -> pb.Request:
    return pb.Request(
        header=_header(READ_LAC, txn_id), readLacRequest=pb.ReadLacRequest(ledgerId=ledger_id)
    )


def force_ledger_request(txn_id: int, ledger_id: int) -> pb.Request:
    return pb.Request(
        header=_header(FORCE_LEDGER, txn_id),
        forceLedgerRequest=pb.ForceLedgerRequest(ledgerId=ledger_id),
    )


def list_of_entries_request(txn_id: int, ledger_id: int) -> pb.Request:
    return pb.Request(
        header=_header(GET_LIST_OF_ENTRIES_OF_LEDGER, txn_id),
        getListOfEntriesOfLedgerRequest=pb.GetListOfEntriesOfLedgerRequest(ledgerId=ledger_id),
    )


def write_close_request(txn_id: int, ledger_id: int, master_key: bytes) -> pb.Request:
    return pb.Request(
        header=_header(WRITE_CLOSE, txn_id),
        writeCloseRequest=pb.WriteCloseRequest(ledgerId=ledger_id, masterKey=master_key),
    )


def bookie_info_request(
    txn_id: int, requested: int = TOTAL_DISK_CAPACITY | FREE_DISK_SPACE
) -> pb.Request:
    return pb.Request(
        header=_header(GET_BOOKIE_INFO, txn_id),
        getBookieInfoRequest=pb.GetBookieInfoRequest(requested=requested),
    )


# ---------------------------------------------------------------------------
# Hand-encoded hot-path messages
#
# Building a Response through the protobuf API costs several microseconds;
# adds are the bookie's hottest path, so the add request and response are
# also encoded directly here. They produce exactly the bytes protobuf does
# (tests/unit/test_wire_fast_path.py checks it against the generated code).
# ---------------------------------------------------------------------------

_VARINT_CACHE = [bytes([i]) for i in range(128)]


def _varint(value: int) -> bytes:
    if value < 0:
        value += 1 << 64
    if value < 0x80:
        return _VARINT_CACHE[value]
    if value < 0x4000:
        return bytes(((value & 0x7F) | 0x80, value >> 7))
    if value < 0x200000:
        return bytes(((value & 0x7F) | 0x80, ((value >> 7) & 0x7F) | 0x80, value >> 14))
    if value < 0x10000000:
        return bytes(
            (
                (value & 0x7F) | 0x80,
                ((value >> 7) & 0x7F) | 0x80,
                ((value >> 14) & 0x7F) | 0x80,
                value >> 21,
            )
        )
    out = bytearray()
    while value >= 0x80:
        out.append((value & 0x7F) | 0x80)
        value >>= 7
    out.append(value)
    return bytes(out)


# header {version=3 (field 1), operation (field 2), txnId (field 3)}
_HEADER_PREFIX = {op: b"\x08\x03\x10" + _varint(op) + b"\x18" for op in OP_NAMES}


def _header_bytes(operation: int, txn_id: int) -> bytes:
    body = _HEADER_PREFIX[operation] + _varint(txn_id)
    return b"\x0a" + _varint(len(body)) + body


_ADD_HEADER_PREFIX = _HEADER_PREFIX[ADD_ENTRY]


#: (status, ledger id) -> the parts of an add response that depend only on
#: them; a bookie answers many adds of few ledgers. Bounded: cleared when full.
_ADD_PARTS: dict[tuple[int, int], tuple[bytes, bytes]] = {}
_ADD_PARTS_MAX = 4096


def encode_add_response(txn_id: int, status: int, ledger_id: int, entry_id: int) -> bytes:
    """``add_response(...).SerializeToString()``, without building messages."""
    key = (status, ledger_id)
    parts = _ADD_PARTS.get(key)
    if parts is None:
        if len(_ADD_PARTS) >= _ADD_PARTS_MAX:
            _ADD_PARTS.clear()
        st = _varint(status)
        parts = _ADD_PARTS[key] = (
            b"\x08" + st + b"\x10" + _varint(ledger_id) + b"\x18",  # addResponse up to entryId
            b"\x10" + st + b"\xaa\x06",  # Response.status, then addResponse's tag
        )
    sub = parts[0] + _varint(entry_id)
    header = _ADD_HEADER_PREFIX + _varint(txn_id)
    return b"".join(
        (b"\x0a", _VARINT_CACHE[len(header)], header, parts[1], _VARINT_CACHE[len(sub)], sub)
    )


def encode_read_response(
    txn_id: int,
    status: int,
    ledger_id: int,
    entry_id: int,
    body: bytes | None = None,
    max_lac: int | None = None,
) -> tuple[bytes, bytes, bytes]:
    """``read_response(...).SerializeToString()`` as three parts, head + body
    + tail, without building messages and without copying the body.

    An entry is up to a frame's size; through protobuf it was copied into
    the message, out of it when serialized, and again joined to the frame:
    most of a bookie's CPU per byte read. The parts are written as they are
    (:meth:`dlog.bookie.server.BookieConnection.send_parts`)."""
    st = _varint(status)
    fields = b"\x08" + st + b"\x10" + _varint(ledger_id) + b"\x18" + _varint(entry_id)
    if body is None:
        body = b""
    else:
        fields += b"\x22" + _varint(len(body))  # body (4), then maxLAC (5): number order
    tail = b"" if max_lac is None else b"\x28" + _varint(max_lac)
    head = b"".join(
        (
            _header_bytes(READ_ENTRY, txn_id),
            b"\x10" + st + b"\xa2\x06",  # Response.status, then readResponse's tag (100)
            _varint(len(fields) + len(body) + len(tail)),
            fields,
        )
    )
    return head, body, tail


def encode_add_request(
    txn_id: int,
    ledger_id: int,
    entry_id: int,
    master_key: bytes,
    body: bytes,
    recovery: bool = False,
) -> bytes:
    """``add_request(...).SerializeToString()``, without building messages."""
    sub = b"".join(
        (
            b"\x08",
            _varint(ledger_id),
            b"\x10",
            _varint(entry_id),
            b"\x1a",
            _varint(len(master_key)),
            master_key,
            b"\x22",
            _varint(len(body)),
            body,
            b"\xa0\x06\x01" if recovery else b"",
        )
    )
    return _header_bytes(ADD_ENTRY, txn_id) + b"\xaa\x06" + _varint(len(sub)) + sub


# ---------------------------------------------------------------------------
# Hand-decoded add requests
#
# Parsing a request with protobuf's upb runtime makes an arena per message,
# and that runtime calls malloc_trim(0) on every 10,000th arena it frees
# (upb_trim_allocfunc in protobuf's python/protobuf.c): at a bookie's add
# rate that is several times a second, each a GIL-holding madvise sweep of
# every free page in the heap, measured as the largest part of the add
# tail. Adds in the shape BookKeeper's clients send are decoded here
# instead; anything else (another operation, unknown or repeated fields,
# request context, writeFlags, a value protobuf would treat differently) is
# declined and parsed by protobuf, so the two can never disagree about a
# request the fast path accepts (tests/unit/test_wire_fast_path.py).
# ---------------------------------------------------------------------------


@dataclasses.dataclass(slots=True)
class AddFrame:
    """An ADD_ENTRY request's fields, however it was decoded: by
    :func:`decode_add_request`, or from protobuf by :func:`add_frame`."""

    txn_id: int
    ledger_id: int
    entry_id: int
    master_key: bytes = dataclasses.field(repr=False)
    body: bytes = dataclasses.field(repr=False)
    recovery: bool


def add_frame(req: pb.Request) -> AddFrame:
    """The add in a protobuf-parsed ADD_ENTRY request."""
    ar = req.addRequest
    recovery = ar.HasField("flag") and ar.flag == RECOVERY_ADD
    return AddFrame(req.header.txnId, ar.ledgerId, ar.entryId, ar.masterKey, ar.body, recovery)


#: A varint of at most 10 bytes (group).
_VARINT = rb"([\x80-\xff]{0,9}[\x00-\x7f])"

#: An add request as protobuf serializers write it, fields in number order,
#: up to the master key's length: header{version=3, operation=ADD_ENTRY,
#: txnId[, priority]}, then addRequest{ledgerId, entryId, masterKey's length.
_ADD_REQUEST = re.compile(
    rb"\x0a([\x00-\x7f])\x08"
    + re.escape(bytes((VERSION_THREE, 0x10, ADD_ENTRY, 0x18)))
    + _VARINT
    + rb"(?:\x20"
    + _VARINT
    + rb")?\xaa\x06"
    + _VARINT
    + rb"\x08"
    + _VARINT
    + rb"\x10"
    + _VARINT
    + rb"\x1a"
    + _VARINT,
    re.DOTALL,
)
#: The body's tag and length: at most 5 bytes for any frame a bookie accepts.
_BODY_LENGTH = re.compile(rb"\x22([\x80-\xff]{0,4}[\x00-\x7f])")
#: The add's flag field (100) set to RECOVERY_ADD, after the body.
_RECOVERY_FLAG = b"\xa0\x06" + bytes((RECOVERY_ADD,))
_U64 = 1 << 64
_I64_LIMIT = 1 << 63


def _varint_value(data: bytes) -> int:
    """The value of a whole varint (its bytes as :data:`_VARINT` matched)."""
    size = len(data)
    if size == 1:
        return data[0]
    if size == 2:
        return (data[0] & 0x7F) | data[1] << 7
    if size == 3:
        return (data[0] & 0x7F) | (data[1] & 0x7F) << 7 | data[2] << 14
    value = 0
    shift = 0
    for b in data:
        value |= (b & 0x7F) << shift
        shift += 7
    return value


def decode_add_request(data: bytes | memoryview) -> AddFrame | None:
    """The add request in ``data`` (a serialized ``Request``), or None when
    it is not an add in the canonical shape; then parse it with protobuf."""
    match = _ADD_REQUEST.match(data)
    if match is None:
        return None
    # A bookie has no use for the priority (protobuf keeps any varint's low 32 bits).
    header_len, txn, _priority, sub_len, lid, eid, key_len = match.groups()
    n = len(data)
    p = match.end()
    if (
        match.start(4) != 4 + header_len[0]  # the header ends where addRequest starts
        or match.end(4) + _varint_value(sub_len) != n  # and addRequest ends the request
    ):
        return None
    txn_id = _varint_value(txn)
    ledger_id = _varint_value(lid)
    entry_id = _varint_value(eid)
    if txn_id >= _U64 or ledger_id >= _U64 or entry_id >= _U64:
        return None  # over 64 bits: protobuf's to judge
    if ledger_id >= _I64_LIMIT:  # int64s travel as their two's complement
        ledger_id -= _U64
    if entry_id >= _I64_LIMIT:
        entry_id -= _U64
    key_end = p + _varint_value(key_len)
    body = _BODY_LENGTH.match(data, key_end)
    if body is None:
        return None
    key = bytes(data[p:key_end])
    p = body.end()
    body_end = p + _varint_value(body.group(1))
    if body_end == n:
        recovery = False
    elif body_end + 3 == n and data[body_end:] == _RECOVERY_FLAG:
        recovery = True
    else:
        return None
    return AddFrame(txn_id, ledger_id, entry_id, key, bytes(data[p:body_end]), recovery)


# ---------------------------------------------------------------------------
# The same three in C, when the optional extension was built
# (dlog/protocol/_add_codec.c, byte for byte the same; see dlog.extensions).
# The Python ones stay importable under these names.
# ---------------------------------------------------------------------------

py_encode_add_request = encode_add_request
py_encode_add_response = encode_add_response
py_decode_add_request = decode_add_request

_add_codec = extension("dlog.protocol._add_codec")

#: Every status code protobuf knows (an unknown enum value is no status to it).
_KNOWN_STATUSES = frozenset(pb.StatusCode.values())


def decode_add_response(data: bytes | memoryview) -> AddResult | None:
    """The add answer in ``data`` (a serialized Response), decoded without
    protobuf, whose runtime trims the heap every 10,000 messages it frees
    (see the hand-decoded add requests above); None when it is not an add
    response in the shape protobuf writes, or without the C codec: then
    parse it with protobuf (:func:`add_result`)."""
    if _add_codec is None:
        return None
    fields = _add_codec.decode_add_response(data)
    if fields is None:
        return None
    txn_id, status, add_status, ledger_id, entry_id = fields
    if status not in _KNOWN_STATUSES or add_status not in _KNOWN_STATUSES:
        return None
    return AddResult(txn_id, status, ledger_id, entry_id)


if _add_codec is not None:
    _add_codec.configure(AddFrame)
    encode_add_request = _add_codec.encode_add_request
    encode_add_response = _add_codec.encode_add_response
    decode_add_request = _add_codec.decode_add_request
