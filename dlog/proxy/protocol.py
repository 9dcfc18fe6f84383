"""DistributedLog's write proxy protocol (wire only, no logic): ``DistributedLogService`` over
thrift's framed transport and binary protocol.

The IDL is ``proto/distributedlog_service.thrift`` (upstream's names, field
ids and status codes; this package's ``distributedlog_service.thrift`` is a
link to it, so a wheel carries it). thriftpy2 builds the message classes from it
at import time. Everything here is a pure codec: bytes in, structs out, and
back. The server and the client (:mod:`dlog.proxy`) build the structs and
move the frames.

Wire facts kept here, from DistributedLog:

- a frame is a 4-byte big-endian length, then one binary-protocol message
  (strict: version word ``0x8001``, message type, name, sequence id);
- a method's arguments carry the ids Thrift compilers give implicit fields:
  -1, -2, ... in declaration order;
- ``WriteContext.crc32`` is a ``java.util.zip.CRC32`` of the stream name's
  UTF-8 bytes followed by the record (``write``), the serialized DLSN
  (``truncate``), or nothing else (``heartbeat``, ``release``, ``create``,
  ``delete``);
- a proxy is named by its DLSocketAddress, ``1;<shard>;<host>:<port>``,
  which is also what its stream lock nodes hold; ``FOUND`` answers carry it
  in ``ResponseHeader.location``.
"""

from __future__ import annotations

import io
import re
import struct
import zlib
from importlib import resources
from types import ModuleType
from typing import Any, NamedTuple

from thriftpy2.parser import load_fp
from thriftpy2.protocol import TCyBinaryProtocol
from thriftpy2.thrift import TApplicationException, TMessageType
from thriftpy2.transport import TCyMemoryBuffer

from dlog.dlsn import DLSN
from dlog.errors import ThriftProtocolError

__all__ = [
    "DELETE",
    "FRAME_HEADER",
    "IDL_NAME",
    "Call",
    "Reply",
    "decode_call",
    "decode_reply",
    "encode_call",
    "encode_exception",
    "encode_reply",
    "format_owner",
    "parse_owner",
    "service",
    "stream_crc32",
    "thrift",
    "truncate_crc32",
    "write_crc32",
]

IDL_NAME = "distributedlog_service.thrift"
#: The method thriftpy2 will not parse under its own name, and the name it
#: is loaded under instead.
DELETE = "delete"
_DELETE_ALIAS = "delete_"

FRAME_HEADER = struct.Struct(">i")

#: DLSocketAddress's version and separator.
_OWNER_VERSION = 1


def _load() -> ModuleType:
    text = resources.files("dlog.proxy").joinpath(IDL_NAME).read_text(encoding="utf-8")
    text, n = re.subn(rf"(WriteResponse\s+){DELETE}(\s*\()", rf"\g<1>{_DELETE_ALIAS}\g<2>", text)
    if n != 1:  # pragma: no cover - the IDL ships with the package
        raise RuntimeError(f"{IDL_NAME}: expected one method named {DELETE!r}")
    module = load_fp(io.StringIO(text), "distributedlog_service_thrift")
    svc = module.DistributedLogService
    # Serve and call it under its wire name: thriftpy2 finds a method's
    # argument and result classes as <name>_args / <name>_result and sends
    # the name as given.
    svc.delete_args = getattr(svc, f"{_DELETE_ALIAS}_args")
    svc.delete_result = getattr(svc, f"{_DELETE_ALIAS}_result")
    svc.thrift_services = [DELETE if n == _DELETE_ALIAS else n for n in svc.thrift_services]
    return module


#: The thriftpy2 module: StatusCode, ServerStatus, WriteResponse, ...
thrift: Any = _load()
#: The service: its ``<method>_args`` / ``<method>_result`` classes.
service: Any = thrift.DistributedLogService


class Call(NamedTuple):
    name: str
    seqid: int
    args: Any


class Reply(NamedTuple):
    name: str
    seqid: int
    #: The ``<method>_result`` struct, or the TApplicationException sent instead.
    result: Any


def _frame(buf: TCyMemoryBuffer) -> bytes:
    payload = buf.getvalue()
    return FRAME_HEADER.pack(len(payload)) + payload


def _message(name: str, kind: int, seqid: int, body: Any) -> bytes:
    buf = TCyMemoryBuffer()
    proto = TCyBinaryProtocol(buf)
    proto.write_message_begin(name, kind, seqid)
    body.write(proto)
    proto.write_message_end()
    return _frame(buf)


def encode_call(name: str, seqid: int, args: Any) -> bytes:
    """A framed CALL of ``name`` with its ``<name>_args`` struct."""
    return _message(name, TMessageType.CALL, seqid, args)


def encode_reply(name: str, seqid: int, result: Any) -> bytes:
    """A framed REPLY carrying a ``<name>_result`` struct."""
    return _message(name, TMessageType.REPLY, seqid, result)


# -- the bulk write reply, the hot path ----------------------------------------------------
#
# A writeBulkWithContext answer holds one WriteResponse per record; built and
# read field by field, that is most of a proxy's (and a client's) time per
# record. These two functions write and read the same bytes the generic
# codec does (tests check both ways), a successful record's WriteResponse
# as one constant prefix and its DLSN.

_SUCCESS_CODE = 200
#: A WriteResponse holding header{code=SUCCESS}, up to dlsn's length.
_OK_PREFIX = (
    b"\x0c\x00\x01"  # field 1 (header): struct
    + b"\x08\x00\x01"
    + struct.pack(">i", _SUCCESS_CODE)  # field 1 (code): i32
    + b"\x00"  # end of header
    + b"\x0b\x00\x02"  # field 2 (dlsn): string
)


def _struct_bytes(value: Any) -> bytes:
    buf = TCyMemoryBuffer()
    value.write(TCyBinaryProtocol(buf))
    return bytes(buf.getvalue())


def encode_bulk_write_reply(seqid: int, header: Any, responses: list[Any]) -> bytes:
    """A framed ``writeBulkWithContext`` REPLY: ``header`` and, per record,
    its DLSN (serialized, str) or a WriteResponse struct."""
    name = b"writeBulkWithContext"
    parts = [
        struct.pack(">Ii", _VERSION_1 | TMessageType.REPLY, len(name)),
        name,
        struct.pack(">i", seqid),
        b"\x0c\x00\x00",  # result field 0 (success): BulkWriteResponse
        b"\x0c\x00\x01",
        _struct_bytes(header),
        b"\x0f\x00\x02\x0c",
        struct.pack(">i", len(responses)),
    ]
    pack_len = _I32S.pack
    for r in responses:
        if type(r) is str:
            raw = r.encode("ascii")
            parts.append(_OK_PREFIX + pack_len(len(raw)) + raw + b"\x00")
        else:
            parts.append(_struct_bytes(r))
    parts.append(b"\x00\x00")  # end of BulkWriteResponse, end of result
    payload = b"".join(parts)
    return FRAME_HEADER.pack(len(payload)) + payload


class OkWriteResponse:
    """A successful record's WriteResponse as the fast reader returns it:
    ``header.code`` SUCCESS and ``dlsn``, like the thrift struct, lighter."""

    __slots__ = ("dlsn",)
    header: Any = None  # set below: one shared ResponseHeader(code=SUCCESS)

    def __init__(self, dlsn: str) -> None:
        self.dlsn = dlsn

    def __repr__(self) -> str:
        return f"OkWriteResponse(dlsn={self.dlsn!r})"


def decode_bulk_write_reply(payload: bytes) -> Reply:
    """As :func:`decode_reply`, for a ``writeBulkWithContext`` answer; each
    successful record's WriteResponse is read as its prefix and DLSN, any
    other through the generic reader."""
    r = _Reader(payload)
    name, kind, seqid = r.message_begin()
    if name != "writeBulkWithContext" or kind != TMessageType.REPLY:
        return decode_reply(payload)
    data = payload
    start = r.pos
    # The usual shape: success { header {...}, writeResponses list<struct> }.
    if data[start : start + 3] != b"\x0c\x00\x00" or data[start + 3 : start + 6] != b"\x0c\x00\x01":
        return decode_reply(payload)
    r.pos = start + 6
    header = r.struct(thrift.ResponseHeader, _MAX_DEPTH)
    if data[r.pos : r.pos + 4] != b"\x0f\x00\x02\x0c":
        return decode_reply(payload)
    r.pos += 4
    n = r.count(r.i32(), _STRUCT)
    responses: list[Any] = []
    prefix, plen = _OK_PREFIX, len(_OK_PREFIX)
    write_response = thrift.WriteResponse
    for _ in range(n):
        pos = r.pos
        if data.startswith(prefix, pos):
            r.pos = pos + plen
            dlsn = r.text()
            if data[r.pos : r.pos + 1] == b"\x00":
                r.pos += 1
                responses.append(OkWriteResponse(dlsn))
                continue
            r.pos = pos
        responses.append(r.struct(write_response, _MAX_DEPTH))
    if data[r.pos : r.pos + 2] != b"\x00\x00" or r.pos + 2 != len(data):
        return decode_reply(payload)
    result = service.writeBulkWithContext_result(
        success=thrift.BulkWriteResponse(header=header, writeResponses=responses)
    )
    return Reply(name, seqid, result)


def encode_exception(name: str, seqid: int, kind: int, message: str) -> bytes:
    """A framed EXCEPTION (a TApplicationException of ``kind``)."""
    return _message(name, TMessageType.EXCEPTION, seqid, TApplicationException(kind, message))


# -- decoding ---------------------------------------------------------------------------
#
# Not thriftpy2's readers: its Cython memory buffer pads a short read with
# nothing and goes on, so a list header claiming 2**31 elements in a
# 100-byte frame builds a list of 2**31 values (the process is killed for
# memory), and both readers skip elements of an unknown type without
# consuming a byte, so such a list spins the CPU. This reader checks every
# length and count against the bytes left and rejects unknown types: what a
# frame decodes to is bounded by the frame.

_STOP, _BOOL, _BYTE, _DOUBLE, _I16, _I32, _I64 = 0, 2, 3, 4, 6, 8, 10
_STRING, _STRUCT, _MAP, _SET, _LIST, _BINARY = 11, 12, 13, 14, 15, 18
#: The fewest bytes one value of a wire type takes.
_MIN_WIDTH = {
    _BOOL: 1,
    _BYTE: 1,
    _DOUBLE: 8,
    _I16: 2,
    _I32: 4,
    _I64: 8,
    _STRING: 4,
    _STRUCT: 1,
    _MAP: 6,
    _SET: 5,
    _LIST: 5,
}
_FIXED = {
    _BOOL: struct.Struct(">?"),
    _BYTE: struct.Struct(">b"),
    _DOUBLE: struct.Struct(">d"),
    _I16: struct.Struct(">h"),
    _I32: struct.Struct(">i"),
    _I64: struct.Struct(">q"),
}
_I8 = _FIXED[_BYTE]
_I16S = _FIXED[_I16]
_I32S = _FIXED[_I32]
_MAX_DEPTH = 32
_VERSION_MASK = 0xFFFF0000
_VERSION_1 = 0x80010000


def _wire(ttype: int) -> int:
    """thriftpy2 marks ``binary`` fields 18; on the wire they are strings."""
    return _STRING if ttype == _BINARY else ttype


class _Reader:
    __slots__ = ("data", "pos")

    def __init__(self, data: bytes) -> None:
        self.data = data
        self.pos = 0

    def _need(self, n: int) -> None:
        if n < 0 or self.pos + n > len(self.data):
            raise ThriftProtocolError(
                f"truncated or corrupt message: needs {n} more bytes at offset {self.pos} "
                f"of {len(self.data)}"
            )

    def fixed(self, ttype: int) -> Any:
        s = _FIXED[ttype]
        self._need(s.size)
        (value,) = s.unpack_from(self.data, self.pos)
        self.pos += s.size
        return value

    def i8(self) -> int:
        self._need(1)
        (value,) = _I8.unpack_from(self.data, self.pos)
        self.pos += 1
        return int(value)

    def i32(self) -> int:
        self._need(4)
        (value,) = _I32S.unpack_from(self.data, self.pos)
        self.pos += 4
        return int(value)

    def raw(self) -> bytes:
        n = self.i32()
        self._need(n)
        value = self.data[self.pos : self.pos + n]
        self.pos += n
        return value

    def raws(self, n: int) -> list[bytes]:
        """``n`` binary values in a row (a bulk write's records): :meth:`raw`
        each, in one loop, with the same bounds checks."""
        data, pos, size = self.data, self.pos, len(self.data)
        unpack = _I32S.unpack_from
        out: list[bytes] = []
        append = out.append
        for _ in range(n):
            if pos + 4 > size:
                self.pos = pos
                self._need(4)
            (k,) = unpack(data, pos)
            pos += 4
            end = pos + k
            if k < 0 or end > size:
                self.pos = pos
                self._need(k)
            append(data[pos:end])
            pos = end
        self.pos = pos
        return out

    def text(self) -> str:
        try:
            return self.raw().decode("utf-8")
        except UnicodeDecodeError:
            raise ThriftProtocolError("a string field is not UTF-8") from None

    def count(self, n: int, *types: int) -> int:
        width = sum(_MIN_WIDTH.get(t, 0) for t in types)
        if any(t not in _MIN_WIDTH for t in types):
            raise ThriftProtocolError(f"unknown thrift type in a container: {types}")
        self._need(n * width if n >= 0 else -1)
        return n

    def message_begin(self) -> tuple[str, int, int]:
        word = self.i32() & 0xFFFFFFFF
        if word & _VERSION_MASK != _VERSION_1:
            raise ThriftProtocolError(
                f"not a strict binary-protocol message (version word {word:#010x}); "
                "expected the framed transport and the binary protocol"
            )
        name = self.text()
        return name, word & 0xFF, self.i32()

    def value(self, ttype: int, spec: Any, depth: int) -> Any:
        if ttype in _FIXED:
            return self.fixed(ttype)
        if ttype == _STRING:
            return self.raw() if spec == _BINARY else self.text()
        if depth <= 0:
            raise ThriftProtocolError("thrift message nested too deeply")
        if ttype == _STRUCT:
            return self.struct(spec, depth - 1)
        if ttype in (_LIST, _SET):
            etype, espec = (spec, None) if isinstance(spec, int) else spec
            got = self.i8()
            n = self.count(self.i32(), got)
            if got != _wire(etype):
                raise ThriftProtocolError(f"container of type {got}, expected {_wire(etype)}")
            if etype == _BINARY and ttype == _LIST:
                return self.raws(n)
            values = [
                self.value(got, espec if espec is not None else etype, depth - 1) for _ in range(n)
            ]
            return set(values) if ttype == _SET else values
        if ttype == _MAP:
            kspec, vspec = spec
            ktype, kspec2 = (kspec, None) if isinstance(kspec, int) else kspec
            vtype, vspec2 = (vspec, None) if isinstance(vspec, int) else vspec
            gk, gv = self.i8(), self.i8()
            n = self.count(self.i32(), gk, gv)
            if (gk, gv) != (_wire(ktype), _wire(vtype)):
                raise ThriftProtocolError(f"map of types {(gk, gv)}, expected {(ktype, vtype)}")
            kk = kspec2 if kspec2 is not None else ktype
            vv = vspec2 if vspec2 is not None else vtype
            return {self.value(gk, kk, depth - 1): self.value(gv, vv, depth - 1) for _ in range(n)}
        raise ThriftProtocolError(f"unknown thrift type {ttype}")

    def skip(self, ttype: int, depth: int) -> None:
        if ttype in _FIXED:
            self._need(_FIXED[ttype].size)
            self.pos += _FIXED[ttype].size
        elif ttype == _STRING:
            self.raw()
        elif depth <= 0:
            raise ThriftProtocolError("thrift message nested too deeply")
        elif ttype == _STRUCT:
            while (ftype := self.i8()) != _STOP:
                self._need(2)
                self.pos += 2
                self.skip(ftype, depth - 1)
        elif ttype in (_LIST, _SET):
            etype = self.i8()
            for _ in range(self.count(self.i32(), etype)):
                self.skip(etype, depth - 1)
        elif ttype == _MAP:
            ktype, vtype = self.i8(), self.i8()
            for _ in range(self.count(self.i32(), ktype, vtype)):
                self.skip(ktype, depth - 1)
                self.skip(vtype, depth - 1)
        else:
            raise ThriftProtocolError(f"unknown thrift type {ttype}")

    def struct(self, cls: Any, depth: int) -> Any:
        obj = cls()
        spec = cls.thrift_spec
        while (ftype := self.i8()) != _STOP:
            self._need(2)
            (fid,) = _I16S.unpack_from(self.data, self.pos)
            self.pos += 2
            field = spec.get(fid)
            if field is None or _wire(field[0]) != ftype:
                self.skip(ftype, depth)  # an unknown field, as thrift does
                continue
            if field[0] == _BINARY:
                setattr(obj, field[1], self.raw())
            else:
                # (type, name, required) or (type, name, spec, required);
                # an i32's spec is its enum class: the value stays an int.
                inner = field[2] if len(field) == 4 and field[0] != _I32 else None
                setattr(obj, field[1], self.value(ftype, inner, depth))
        return obj


def decode_call(payload: bytes) -> Call:
    """The CALL in one frame's payload. Raises ThriftProtocolError for
    anything else; an unknown method decodes with ``args`` None (the server
    answers UNKNOWN_METHOD)."""
    r = _Reader(payload)
    name, kind, seqid = r.message_begin()
    if kind not in (TMessageType.CALL, TMessageType.ONEWAY):
        raise ThriftProtocolError(f"expected a CALL, got message type {kind}")
    if name not in service.thrift_services:
        return Call(name, seqid, None)
    args = r.struct(getattr(service, f"{name}_args"), _MAX_DEPTH)
    return Call(name, seqid, args)


def decode_reply(payload: bytes) -> Reply:
    """The REPLY or EXCEPTION in one frame's payload."""
    r = _Reader(payload)
    name, kind, seqid = r.message_begin()
    if kind == TMessageType.EXCEPTION:
        return Reply(name, seqid, r.struct(TApplicationException, _MAX_DEPTH))
    if kind != TMessageType.REPLY or name not in service.thrift_services:
        raise ThriftProtocolError(f"unexpected message {name!r} of type {kind}")
    return Reply(name, seqid, r.struct(getattr(service, f"{name}_result"), _MAX_DEPTH))


# -- request checksums (DistributedLog's ProtocolUtils) ------------------------------


def write_crc32(stream: str, data: bytes) -> int:
    return zlib.crc32(data, zlib.crc32(stream.encode("utf-8")))


def truncate_crc32(stream: str, dlsn: DLSN) -> int:
    return zlib.crc32(dlsn.serialize_bytes(), zlib.crc32(stream.encode("utf-8")))


def stream_crc32(stream: str) -> int:
    return zlib.crc32(stream.encode("utf-8"))


# -- proxy addresses (DistributedLog's DLSocketAddress) --------------------------------


def format_owner(host: str, port: int, shard: int = -1) -> str:
    """``1;<shard>;<host>:<port>``: how a proxy names itself."""
    return f"{_OWNER_VERSION};{shard};{host}:{port}"


def parse_owner(text: str) -> tuple[int, str, int]:
    """``(shard, host, port)`` of a DLSocketAddress; ThriftProtocolError if
    it is not one."""
    parts = text.split(";")
    try:
        if len(parts) != 3 or int(parts[0]) != _OWNER_VERSION:
            raise ValueError
        shard = int(parts[1])
        host, _, port = parts[2].rpartition(":")
        if not host:
            raise ValueError
        return shard, host, int(port)
    except ValueError:
        raise ThriftProtocolError(
            f"{text!r} is not a proxy address (1;<shard>;<host>:<port>)"
        ) from None


OkWriteResponse.header = thrift.ResponseHeader(code=_SUCCESS_CODE)
