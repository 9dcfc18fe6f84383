"""How Apache BookKeeper reads a ledger znode, as a pure function for tests.

Written from upstream's rules, independently of :mod:`dlog.ledger.metadata`
(a check that reused dlog's parser would agree with dlog's writer by
construction). Sources, apache/bookkeeper:

* ``bookkeeper-server/.../meta/LedgerMetadataSerDe.java``: ``readHeader``
  (the bytes ``BookieMetadataFormatVersion\\t``, at most 10 version characters,
  ``\\n``, ``Integer.parseInt``), versions 1..3 only (``MAXIMUM_`` and
  ``CURRENT_METADATA_FORMAT_VERSION`` are 3; anything else is "Metadata version
  not compatible"), ``readRawVarint32`` (at most 5 bytes, a Java int), then
  ``readDelimited`` (that many bytes; what follows is never read) and
  ``decodeFormat``.
* ``bookkeeper-proto/src/main/proto/DataFormats.proto``: ``LedgerMetadataFormat``
  has fields 1..12 only; required quorumSize, ensembleSize, length, state and
  Segment.firstEntryId.
* ``client/LedgerMetadataBuilder.java`` and ``LedgerMetadataImpl.java``:
  ensemble >= write quorum >= ack quorum (ack defaults to the write quorum), at
  least one ensemble, each of ensembleSize bookies, first entry ids strictly
  increasing.
* ``net/BookieId.java``: ids match ``[a-zA-Z0-9:-_.\\-]+`` (``:-_`` is a range)
  and are not ``readonly``.

Format 3 has no field numbered 100 or above; protobuf would skip such unknown
fields, but a dlog client configured for format 3 must not write them, so
:func:`check_v3` reports them separately.
"""

from __future__ import annotations

import dataclasses
import re
from typing import Any

from google.protobuf import descriptor_pb2, descriptor_pool, message_factory, unknown_fields
from google.protobuf.message import DecodeError

__all__ = ["UpstreamSerdeError", "UpstreamLedger", "check_v3", "parse_like_upstream"]

_VERSION_KEY = b"BookieMetadataFormatVersion\t"
_MAX_VERSION_DIGITS = 10
_LOWEST, _CURRENT = 1, 3
_BOOKIE_ID = re.compile(r"[a-zA-Z0-9:-_.\-]+")
_INT32_MIN, _INT32_MAX = -(2**31), 2**31 - 1


class UpstreamSerdeError(AssertionError):
    """BookKeeper would fail to read this znode (IOException or IllegalArgument)."""


@dataclasses.dataclass(frozen=True)
class UpstreamLedger:
    """What BookKeeper makes of a znode, plus what it silently skipped."""

    format_version: int
    ensemble_size: int
    write_quorum_size: int
    ack_quorum_size: int
    state: str
    ensembles: dict[int, list[str]]
    unknown_fields: frozenset[int]


def _format3_message_class() -> Any:
    """``LedgerMetadataFormat`` exactly as upstream's DataFormats.proto has it.

    Its own package, so it never meets dlog's message (which has 100..102)."""
    F = descriptor_pb2.FieldDescriptorProto
    opt, req, rep = F.LABEL_OPTIONAL, F.LABEL_REQUIRED, F.LABEL_REPEATED
    file = descriptor_pb2.FileDescriptorProto(
        name="upstream_v3_data_formats.proto", package="upstream_v3", syntax="proto2"
    )
    msg = file.message_type.add(name="LedgerMetadataFormat")
    pkg = ".upstream_v3.LedgerMetadataFormat"
    state = msg.enum_type.add(name="State")
    for name, number in (("OPEN", 1), ("IN_RECOVERY", 2), ("CLOSED", 3)):
        state.value.add(name=name, number=number)
    digest = msg.enum_type.add(name="DigestType")
    for name, number in (("CRC32", 1), ("HMAC", 2), ("CRC32C", 3), ("DUMMY", 4)):
        digest.value.add(name=name, number=number)
    segment = msg.nested_type.add(name="Segment")
    segment.field.add(name="ensembleMember", number=1, label=rep, type=F.TYPE_STRING)
    segment.field.add(name="firstEntryId", number=2, label=req, type=F.TYPE_INT64)
    entry = msg.nested_type.add(name="cMetadataMapEntry")
    entry.field.add(name="key", number=1, label=opt, type=F.TYPE_STRING)
    entry.field.add(name="value", number=2, label=opt, type=F.TYPE_BYTES)
    fields: list[tuple[str, int, int, int, str]] = [
        ("quorumSize", 1, req, F.TYPE_INT32, ""),
        ("ensembleSize", 2, req, F.TYPE_INT32, ""),
        ("length", 3, req, F.TYPE_INT64, ""),
        ("lastEntryId", 4, opt, F.TYPE_INT64, ""),
        ("state", 5, req, F.TYPE_ENUM, f"{pkg}.State"),
        ("segment", 6, rep, F.TYPE_MESSAGE, f"{pkg}.Segment"),
        ("digestType", 7, opt, F.TYPE_ENUM, f"{pkg}.DigestType"),
        ("password", 8, opt, F.TYPE_BYTES, ""),
        ("ackQuorumSize", 9, opt, F.TYPE_INT32, ""),
        ("ctime", 10, opt, F.TYPE_INT64, ""),
        ("customMetadata", 11, rep, F.TYPE_MESSAGE, f"{pkg}.cMetadataMapEntry"),
        ("cToken", 12, opt, F.TYPE_INT64, ""),
    ]
    for name, number, label, type_, type_name in fields:
        field = msg.field.add(name=name, number=number, label=label, type=type_)
        if type_name:
            field.type_name = type_name
    pool = descriptor_pool.DescriptorPool()
    pool.Add(file)
    return message_factory.GetMessageClass(pool.FindMessageTypeByName(pkg[1:]))


_Format3 = _format3_message_class()


def _read_header(data: bytes) -> tuple[int, int]:
    for i, expected in enumerate(_VERSION_KEY):
        if i >= len(data) or data[i] != expected:
            raise UpstreamSerdeError(f"Ledger metadata header corrupt at index {i}")
    pos = len(_VERSION_KEY)
    digits = bytearray()
    while len(digits) < _MAX_VERSION_DIGITS:
        if pos >= len(data):
            break
        b = data[pos]
        pos += 1
        if b == ord("\n"):
            text = digits.decode("utf-8", "replace")
            # Integer.parseInt: an optional sign, then decimal digits, a Java int.
            if not re.fullmatch(r"[+-]?[0-9]+", text) or not (
                _INT32_MIN <= int(text) <= _INT32_MAX
            ):
                raise UpstreamSerdeError(f"Unable to parse version number from {text}")
            return int(text), pos
        digits.append(b)
    raise UpstreamSerdeError("Unable to find end of version number, metadata appears corrupt")


def _read_raw_varint32(data: bytes, pos: int) -> tuple[int, int]:
    result, shift = 0, 0
    while shift < 32:
        if pos >= len(data):
            raise UpstreamSerdeError("Unexpected EOF reading varint")
        b = data[pos]
        pos += 1
        result |= (b & 0x7F) << shift
        if not b & 0x80:
            result &= 0xFFFFFFFF  # a Java int
            return (result - 2**32 if result > _INT32_MAX else result), pos
        shift += 7
    raise UpstreamSerdeError("Malformed varint32")


def _unknown(msg: Any) -> set[int]:
    found = unknown_fields.UnknownFieldSet(msg)
    return {found[i].field_number for i in range(len(found))}


def parse_like_upstream(data: bytes) -> UpstreamLedger:
    """What ``LedgerMetadataSerDe.parseConfig`` returns for ``data``, or
    :class:`UpstreamSerdeError` where it throws. Formats 1 and 2 (text) are
    readable upstream but never written by dlog: they are reported too."""
    version, pos = _read_header(bytes(data))
    if not _LOWEST <= version <= _CURRENT:
        raise UpstreamSerdeError(
            f"Metadata version not compatible. Expected between {_LOWEST} and {_CURRENT}, "
            f"but got {version}"
        )
    if version != 3:
        raise UpstreamSerdeError(f"format {version} (text): not what a dlog client writes")
    size, pos = _read_raw_varint32(data, pos)
    if size < 0:
        raise UpstreamSerdeError(f"NegativeArraySizeException: {size}")
    if len(data) - pos < size:
        raise UpstreamSerdeError("Unexpected EOF reading delimited message")
    fmt = _Format3()
    try:
        fmt.ParseFromString(bytes(data[pos : pos + size]))
    except (DecodeError, ValueError, RuntimeError) as e:
        raise UpstreamSerdeError(f"LedgerMetadataFormat does not decode: {e}") from e
    if not fmt.IsInitialized():
        raise UpstreamSerdeError(
            "Some required fields are missing: " + ", ".join(fmt.FindInitializationErrors())
        )
    unknown = _unknown(fmt)
    if unknown & {5, 7}:
        raise UpstreamSerdeError(f"unknown State or DigestType value (fields {unknown & {5, 7}})")

    ensemble, write = fmt.ensembleSize, fmt.quorumSize
    ack = fmt.ackQuorumSize if fmt.HasField("ackQuorumSize") else write
    if not ensemble >= write:
        raise UpstreamSerdeError("Write quorum must be less or equal to ensemble size")
    if not write >= ack:
        raise UpstreamSerdeError("Write quorum must be greater or equal to ack quorum")
    ensembles: dict[int, list[str]] = {}
    for seg in fmt.segment:
        members = list(seg.ensembleMember)
        for bookie in members:
            if not _BOOKIE_ID.fullmatch(bookie) or bookie.lower() == "readonly":
                raise UpstreamSerdeError(f"BookieId {bookie} is not valid")
        if len(members) != ensemble:
            raise UpstreamSerdeError(
                "Size of passed in ensemble must match the ensembleSize of the builder"
            )
        if ensembles and seg.firstEntryId <= max(ensembles):
            raise UpstreamSerdeError(
                "New entry must have a first entry greater than any existing ensemble key"
            )
        ensembles[seg.firstEntryId] = members
    if not ensembles:
        raise UpstreamSerdeError("There must be at least one ensemble in the ledger")
    return UpstreamLedger(
        format_version=version,
        ensemble_size=ensemble,
        write_quorum_size=write,
        ack_quorum_size=ack,
        state=fmt.State.Name(fmt.state),
        ensembles=ensembles,
        unknown_fields=frozenset(unknown),
    )


def check_v3(data: bytes) -> UpstreamLedger:
    """BookKeeper reads ``data`` as format 3, and it holds nothing format 3
    lacks (no BP-44 fields 100..102 riding along as unknown fields)."""
    parsed = parse_like_upstream(data)
    if parsed.unknown_fields:
        raise UpstreamSerdeError(
            f"fields {sorted(parsed.unknown_fields)} are not in upstream's format 3"
        )
    return parsed
