"""Ledger metadata and BookKeeper's ZooKeeper format for it (pure, no I/O).

The value of a ledger's znode is what BookKeeper's ``LedgerMetadataSerDe``
writes for metadata format 3: the ASCII header
``BookieMetadataFormatVersion\\t3\\n``, a varint32 length, then a
``LedgerMetadataFormat`` protobuf (a protobuf "delimited" message). BP-44
contexts make it format 4: same header shape and layout plus fields 100..102.
A ledger without contexts is written byte for byte as BookKeeper would, so
BookKeeper clients and tools can read what dlog writes and vice versa. No
BookKeeper release reads format 4 ("Metadata version not compatible"): a
client with ``ledgerMetadataVersion=3`` leaves the BP-44 fields out of every
write (:meth:`LedgerMetadata.in_format`).

What BookKeeper's v3 writer always writes, and so do we: quorumSize,
ensembleSize, length, lastEntryId (-1 and 0 while not closed), state, the
segments, digestType, password (possibly empty), ackQuorumSize and cToken.
ctime only when the creator chose to store it (``ctime`` not None here).
"""

from __future__ import annotations

import base64
import bisect
import dataclasses
import datetime as _dt
import enum
import logging
import math
from collections.abc import Iterable, Mapping
from typing import Any, cast

from google.protobuf.message import DecodeError, EncodeError

from dlog.errors import IncorrectParameterError, MetadataSerializationError
from dlog.protocol import data_formats_pb2 as pb

log = logging.getLogger(__name__)

__all__ = [
    "HEADER_PREFIX",
    "MAX_CONTEXT_STRING_BYTES",
    "METADATA_VERSIONS",
    "CloseReason",
    "DigestType",
    "LedgerCloseContext",
    "LedgerCreateContext",
    "LedgerMetadata",
    "LedgerOwner",
    "LedgerState",
    "deserialize",
    "serialize",
    "to_dict",
    "to_text",
]

#: Every serialized value starts with this, then the format version digits and ``\n``.
HEADER_PREFIX = b"BookieMetadataFormatVersion\t"
#: BookKeeper reads at most this many version digits.
_MAX_VERSION_DIGITS = 10
#: BP-44: data set names and abnormal-close messages are at most 256 bytes.
MAX_CONTEXT_STRING_BYTES = 256

FORMAT_V3 = 3
FORMAT_V4 = 4
#: BookKeeper's ``ledgerMetadataVersion`` values dlog can write: -1 is the
#: client's default (BookKeeper's own default value), 1 and 2 are text formats
#: dlog does not write.
METADATA_VERSIONS = (-1, FORMAT_V3, FORMAT_V4)

_INT32_MAX = 2**31 - 1
_INT64_MIN = -(2**63)
_INT64_MAX = 2**63 - 1


class DigestType(enum.IntEnum):
    """Entry digest of a ledger (``LedgerMetadataFormat.DigestType``)."""

    CRC32 = 1
    HMAC = 2
    CRC32C = 3
    DUMMY = 4


class LedgerState(enum.IntEnum):
    OPEN = 1
    IN_RECOVERY = 2
    CLOSED = 3


class CloseReason(enum.IntEnum):
    """BP-44: why the writer closed the ledger."""

    CLIENT_SHUTDOWN = 1
    MAX_LENGTH_REACHED = 2
    MAX_ENTRY_COUNT_REACHED = 3
    NO_MORE_DATA = 4
    INACTIVE = 5
    TIME_ROTATION = 6
    ABNORMAL = 7


# ---------------------------------------------------------------------------
# validation helpers
# ---------------------------------------------------------------------------


def _bad(message: str) -> IncorrectParameterError:
    return IncorrectParameterError(message)


def _check_int(name: str, value: Any, lo: int = _INT64_MIN, hi: int = _INT64_MAX) -> None:
    if isinstance(value, bool) or not isinstance(value, int):
        raise _bad(f"{name} must be an int, got {value!r}")
    if not lo <= value <= hi:
        raise _bad(f"{name}={value} is outside {lo}..{hi}")


def _check_opt_int(name: str, value: Any, lo: int = 0, hi: int = _INT64_MAX) -> None:
    if value is not None:
        _check_int(name, value, lo, hi)


def _check_opt_str(name: str, value: Any, max_bytes: int | None = None) -> None:
    if value is None:
        return
    if not isinstance(value, str):
        raise _bad(f"{name} must be a str, got {value!r}")
    if max_bytes is not None and len(value.encode("utf-8")) > max_bytes:
        raise _bad(f"{name} is longer than {max_bytes} bytes in UTF-8")


def _epoch_ms(value: int | _dt.datetime | None) -> int | None:
    """Accept epoch milliseconds or an aware datetime (BP-44 takes Instants)."""
    if value is None or isinstance(value, int):
        return value
    if isinstance(value, _dt.datetime):
        if value.tzinfo is None:
            raise _bad("datetimes must be timezone-aware")
        return int(value.timestamp() * 1000)
    raise _bad(f"expected epoch milliseconds or a datetime, got {value!r}")


# ---------------------------------------------------------------------------
# BP-44 contexts
# ---------------------------------------------------------------------------


@dataclasses.dataclass(frozen=True)
class LedgerOwner:
    """Who created a ledger (or on whose behalf), for reports and audits."""

    enterprise: str | None = None
    system: str | None = None
    service: str | None = None
    instance: str | None = None

    def __post_init__(self) -> None:
        for f in dataclasses.fields(self):
            _check_opt_str(f"owner.{f.name}", getattr(self, f.name))


@dataclasses.dataclass(frozen=True, kw_only=True)
class LedgerCreateContext:
    """BP-44 create context: ownership and lifecycle hints (never enforced)."""

    created_by: LedgerOwner | None = None
    created_on_behalf_of: LedgerOwner | None = None
    part_of_data_set: str | None = None
    expected_max_open_duration_ms: int | None = None
    expected_max_entries: int | None = None
    expected_max_length: int | None = None
    expected_average_entry_size: int | None = None
    expected_entry_size_std_dev: float | None = None
    expected_average_entry_add_rate_per_second: int | None = None
    expected_maximum_entry_add_rate_per_second: int | None = None
    follows_ledger: int | None = None
    child_of_ledger: int | None = None

    def __post_init__(self) -> None:
        for name in ("created_by", "created_on_behalf_of"):
            owner = getattr(self, name)
            if owner is not None and not isinstance(owner, LedgerOwner):
                raise _bad(f"{name} must be a LedgerOwner, got {owner!r}")
        _check_opt_str("part_of_data_set", self.part_of_data_set, MAX_CONTEXT_STRING_BYTES)
        for name in (
            "expected_max_open_duration_ms",
            "expected_max_entries",
            "expected_max_length",
            "expected_average_entry_size",
            "expected_average_entry_add_rate_per_second",
            "expected_maximum_entry_add_rate_per_second",
            "follows_ledger",
            "child_of_ledger",
        ):
            _check_opt_int(name, getattr(self, name))
        sd = self.expected_entry_size_std_dev
        if sd is not None:
            if isinstance(sd, bool) or not isinstance(sd, int | float):
                raise _bad(f"expected_entry_size_std_dev must be a number, got {sd!r}")
            if not math.isfinite(sd) or sd < 0:
                raise _bad(f"expected_entry_size_std_dev must be finite and >= 0, got {sd!r}")
            object.__setattr__(self, "expected_entry_size_std_dev", float(sd))


@dataclasses.dataclass(frozen=True, kw_only=True)
class LedgerCloseContext:
    """BP-44 close context: why the ledger was closed and what comes next.

    Build one with the constructors named after BP-44's builder, e.g.
    ``LedgerCloseContext.inactive(expect_delete_after=ms)``.
    """

    reason: CloseReason | None = None
    abnormal_message: str | None = None
    expect_delete_after_ms: int | None = None
    expect_reads_until_ms: int | None = None

    def __post_init__(self) -> None:
        if self.reason is not None:
            try:
                object.__setattr__(self, "reason", CloseReason(self.reason))
            except ValueError:
                raise _bad(f"unknown close reason {self.reason!r}") from None
        _check_opt_str("abnormal_message", self.abnormal_message, MAX_CONTEXT_STRING_BYTES)
        if self.abnormal_message is not None and self.reason is not CloseReason.ABNORMAL:
            raise _bad("abnormal_message is only allowed with reason ABNORMAL")
        _check_opt_int("expect_delete_after_ms", self.expect_delete_after_ms)
        _check_opt_int("expect_reads_until_ms", self.expect_reads_until_ms)

    @classmethod
    def _because(
        cls,
        reason: CloseReason,
        expect_delete_after: int | _dt.datetime | None,
        expect_reads_until: int | _dt.datetime | None,
        abnormal_message: str | None = None,
    ) -> LedgerCloseContext:
        return cls(
            reason=reason,
            abnormal_message=abnormal_message,
            expect_delete_after_ms=_epoch_ms(expect_delete_after),
            expect_reads_until_ms=_epoch_ms(expect_reads_until),
        )

    @classmethod
    def client_shutdown(
        cls,
        *,
        expect_delete_after: int | _dt.datetime | None = None,
        expect_reads_until: int | _dt.datetime | None = None,
    ) -> LedgerCloseContext:
        return cls._because(CloseReason.CLIENT_SHUTDOWN, expect_delete_after, expect_reads_until)

    @classmethod
    def max_length_reached(
        cls,
        *,
        expect_delete_after: int | _dt.datetime | None = None,
        expect_reads_until: int | _dt.datetime | None = None,
    ) -> LedgerCloseContext:
        return cls._because(CloseReason.MAX_LENGTH_REACHED, expect_delete_after, expect_reads_until)

    @classmethod
    def max_entries_reached(
        cls,
        *,
        expect_delete_after: int | _dt.datetime | None = None,
        expect_reads_until: int | _dt.datetime | None = None,
    ) -> LedgerCloseContext:
        return cls._because(
            CloseReason.MAX_ENTRY_COUNT_REACHED, expect_delete_after, expect_reads_until
        )

    @classmethod
    def no_more_data(
        cls,
        *,
        expect_delete_after: int | _dt.datetime | None = None,
        expect_reads_until: int | _dt.datetime | None = None,
    ) -> LedgerCloseContext:
        return cls._because(CloseReason.NO_MORE_DATA, expect_delete_after, expect_reads_until)

    @classmethod
    def inactive(
        cls,
        *,
        expect_delete_after: int | _dt.datetime | None = None,
        expect_reads_until: int | _dt.datetime | None = None,
    ) -> LedgerCloseContext:
        return cls._because(CloseReason.INACTIVE, expect_delete_after, expect_reads_until)

    @classmethod
    def time_rotation(
        cls,
        *,
        expect_delete_after: int | _dt.datetime | None = None,
        expect_reads_until: int | _dt.datetime | None = None,
    ) -> LedgerCloseContext:
        return cls._because(CloseReason.TIME_ROTATION, expect_delete_after, expect_reads_until)

    @classmethod
    def abnormal(
        cls,
        message: str | None = None,
        *,
        expect_delete_after: int | _dt.datetime | None = None,
        expect_reads_until: int | _dt.datetime | None = None,
    ) -> LedgerCloseContext:
        return cls._because(CloseReason.ABNORMAL, expect_delete_after, expect_reads_until, message)


# ---------------------------------------------------------------------------
# LedgerMetadata
# ---------------------------------------------------------------------------

Ensemble = tuple[str, ...]
Ensembles = tuple[tuple[int, Ensemble], ...]


def _normalize_ensembles(value: Any) -> Ensembles:
    items: Iterable[Any] = value.items() if isinstance(value, Mapping) else value
    out: list[tuple[int, Ensemble]] = []
    for item in items:
        try:
            first, bookies = item
        except (TypeError, ValueError):
            raise _bad(f"ensembles must be (first_entry_id, bookies) pairs, got {item!r}") from None
        if isinstance(bookies, str) or not isinstance(bookies, Iterable):
            raise _bad(f"ensemble at {first!r} must be a sequence of bookie ids, got {bookies!r}")
        out.append((first, tuple(bookies)))
    return tuple(out)


@dataclasses.dataclass(frozen=True, kw_only=True)
class LedgerMetadata:
    """One ledger's metadata, as kept in its znode.

    ``ledger_id`` is not serialized: the znode path carries it. A ledger that
    is not closed has ``last_entry_id == -1`` and ``length == 0`` (BookKeeper's
    invariant; its reader ignores both unless the state is CLOSED).
    ``ctoken`` is the creator token BookKeeper uses to make a retried create
    idempotent; ``None`` means the field is absent (never for v3 writers).
    """

    ledger_id: int
    ensemble_size: int
    write_quorum_size: int
    ack_quorum_size: int
    ensembles: Ensembles
    state: LedgerState = LedgerState.OPEN
    last_entry_id: int = -1
    length: int = 0
    digest_type: DigestType = DigestType.CRC32C
    password: bytes = b""
    ctime: int | None = None
    custom_metadata: Mapping[str, bytes] = dataclasses.field(default_factory=dict, hash=False)
    ctoken: int | None = 0
    create_context: LedgerCreateContext | None = None
    close_context: LedgerCloseContext | None = None
    seal_time: int | None = None

    def __post_init__(self) -> None:
        _check_int("ledger_id", self.ledger_id, 0, _INT64_MAX)
        _check_int("ensemble_size", self.ensemble_size, 1, _INT32_MAX)
        _check_int("write_quorum_size", self.write_quorum_size, 1, _INT32_MAX)
        _check_int("ack_quorum_size", self.ack_quorum_size, 1, _INT32_MAX)
        if not self.ensemble_size >= self.write_quorum_size >= self.ack_quorum_size >= 1:
            raise _bad(
                "need ensemble_size >= write_quorum_size >= ack_quorum_size >= 1, got "
                f"{self.ensemble_size}/{self.write_quorum_size}/{self.ack_quorum_size}"
            )
        try:
            object.__setattr__(self, "state", LedgerState(self.state))
            object.__setattr__(self, "digest_type", DigestType(self.digest_type))
        except ValueError as e:
            raise _bad(str(e)) from None

        ensembles = _normalize_ensembles(self.ensembles)
        if not ensembles:
            raise _bad("a ledger needs at least one ensemble")
        previous = -1
        for first, bookies in ensembles:
            _check_int("ensemble first entry id", first, 0, _INT64_MAX)
            if previous == -1 and first != 0:
                raise _bad(f"the first ensemble must start at entry 0, not {first}")
            if first <= previous:
                raise _bad(
                    f"ensemble first entry ids must strictly increase ({previous} then {first})"
                )
            if len(bookies) != self.ensemble_size:
                raise _bad(
                    f"ensemble at entry {first} has {len(bookies)} bookies, "
                    f"ensemble_size is {self.ensemble_size}"
                )
            for b in bookies:
                if not isinstance(b, str) or not b:
                    raise _bad(f"bookie ids must be non-empty strings, got {b!r}")
            if len(set(bookies)) != len(bookies):
                raise _bad(f"ensemble at entry {first} lists a bookie twice: {list(bookies)}")
            previous = first
        object.__setattr__(self, "ensembles", ensembles)

        _check_int("last_entry_id", self.last_entry_id)
        _check_int("length", self.length)
        if self.state is LedgerState.CLOSED:
            if self.last_entry_id < -1:
                raise _bad(f"closed ledger has last_entry_id {self.last_entry_id} < -1")
            if self.length < 0:
                raise _bad(f"closed ledger has negative length {self.length}")
        elif self.last_entry_id != -1 or self.length != 0:
            raise _bad(
                f"a {self.state.name} ledger must have last_entry_id -1 and length 0, got "
                f"{self.last_entry_id} and {self.length}"
            )

        if not isinstance(self.password, bytes | bytearray | memoryview):
            raise _bad(f"password must be bytes, got {type(self.password).__name__}")
        object.__setattr__(self, "password", bytes(self.password))
        _check_opt_int("ctime", self.ctime, _INT64_MIN)
        _check_opt_int("ctoken", self.ctoken, _INT64_MIN)
        _check_opt_int("seal_time", self.seal_time, _INT64_MIN)

        if not isinstance(self.custom_metadata, Mapping):
            raise _bad("custom_metadata must be a mapping of str to bytes")
        custom: dict[str, bytes] = {}
        for k, v in self.custom_metadata.items():
            if not isinstance(k, str):
                raise _bad(f"custom_metadata keys must be str, got {k!r}")
            if not isinstance(v, bytes | bytearray | memoryview):
                raise _bad(f"custom_metadata[{k!r}] must be bytes, got {type(v).__name__}")
            custom[k] = bytes(v)
        object.__setattr__(self, "custom_metadata", custom)

        if self.create_context is not None and not isinstance(
            self.create_context, LedgerCreateContext
        ):
            raise _bad(f"create_context must be a LedgerCreateContext, got {self.create_context!r}")
        if self.close_context is not None and not isinstance(
            self.close_context, LedgerCloseContext
        ):
            raise _bad(f"close_context must be a LedgerCloseContext, got {self.close_context!r}")

    # -- queries ---------------------------------------------------------------
    @property
    def is_closed(self) -> bool:
        return self.state is LedgerState.CLOSED

    @property
    def format_version(self) -> int:
        """3 (BookKeeper's own) unless a BP-44 field is set, then 4."""
        if self.create_context is None and self.close_context is None and self.seal_time is None:
            return FORMAT_V3
        return FORMAT_V4

    @property
    def last_ensemble(self) -> Ensemble:
        """The ensemble new entries go to."""
        return self.ensembles[-1][1]

    @property
    def last_ensemble_start(self) -> int:
        return self.ensembles[-1][0]

    def ensemble_for(self, entry_id: int) -> Ensemble:
        """The ensemble that stores ``entry_id``: the last one starting at or before it."""
        if entry_id < 0:
            raise _bad(f"entry id must be >= 0, got {entry_id}")
        firsts = [first for first, _ in self.ensembles]
        return self.ensembles[bisect.bisect_right(firsts, entry_id) - 1][1]

    def next_ensemble_change(self, entry_id: int) -> int | None:
        """First entry id after ``entry_id`` at which another ensemble starts."""
        for first, _ in self.ensembles:
            if first > entry_id:
                return first
        return None

    def bookies(self) -> frozenset[str]:
        """Every bookie that holds (or held) part of this ledger."""
        return frozenset(b for _, ens in self.ensembles for b in ens)

    # -- copies ----------------------------------------------------------------
    def replace(self, **changes: Any) -> LedgerMetadata:
        """A validated copy with ``changes`` applied."""
        return dataclasses.replace(self, **changes)

    def in_format(self, version: int) -> LedgerMetadata:
        """This metadata as a client configured with ``ledgerMetadataVersion``
        ``version`` stores it.

        3 is BookKeeper's own format (no release reads 4), so the BP-44 fields
        (contexts, seal time) are left out: they are hints nothing in dlog
        needs to work. -1 (the default) and 4 keep them, which makes the
        ledger format 4 when it has any."""
        if version not in METADATA_VERSIONS:
            raise _bad(f"ledgerMetadataVersion {version} is not one of {METADATA_VERSIONS}")
        if version != FORMAT_V3 or self.format_version == FORMAT_V3:
            return self
        return self.replace(create_context=None, close_context=None, seal_time=None)

    def with_ensemble(self, first_entry_id: int, bookies: Iterable[str]) -> LedgerMetadata:
        """A copy whose ensemble from ``first_entry_id`` on is ``bookies``.

        Starting at the last ensemble's first entry replaces that ensemble
        (a second change before any entry landed), as BookKeeper does."""
        new = tuple(bookies)
        if first_entry_id == self.last_ensemble_start:
            ensembles = (*self.ensembles[:-1], (first_entry_id, new))
        elif first_entry_id > self.last_ensemble_start:
            ensembles = (*self.ensembles, (first_entry_id, new))
        else:
            raise _bad(
                f"an ensemble change at entry {first_entry_id} would precede the last "
                f"ensemble starting at {self.last_ensemble_start}"
            )
        return self.replace(ensembles=ensembles)


# ---------------------------------------------------------------------------
# serialization
# ---------------------------------------------------------------------------


def _varint(value: int) -> bytes:
    out = bytearray()
    while True:
        bits = value & 0x7F
        value >>= 7
        if value:
            out.append(bits | 0x80)
        else:
            out.append(bits)
            return bytes(out)


def _owner_to_pb(owner: LedgerOwner, target: pb.LedgerOwnerFormat) -> None:
    target.SetInParent()
    for name in ("enterprise", "system", "service", "instance"):
        value = getattr(owner, name)
        if value is not None:
            setattr(target, name, value)


def _create_context_to_pb(ctx: LedgerCreateContext, target: pb.LedgerCreateContextFormat) -> None:
    target.SetInParent()
    if ctx.created_by is not None:
        _owner_to_pb(ctx.created_by, target.createdBy)
    if ctx.created_on_behalf_of is not None:
        _owner_to_pb(ctx.created_on_behalf_of, target.createdOnBehalfOf)
    for py_name, pb_name in _CREATE_CONTEXT_SCALARS:
        value = getattr(ctx, py_name)
        if value is not None:
            setattr(target, pb_name, value)


def _close_context_to_pb(ctx: LedgerCloseContext, target: pb.LedgerCloseContextFormat) -> None:
    target.SetInParent()
    if ctx.reason is not None:
        target.reason = cast(pb.LedgerCloseContextFormat.Reason, int(ctx.reason))
    if ctx.abnormal_message is not None:
        target.abnormalMessage = ctx.abnormal_message
    if ctx.expect_delete_after_ms is not None:
        target.expectDeleteAfter = ctx.expect_delete_after_ms
    if ctx.expect_reads_until_ms is not None:
        target.expectReadsUntil = ctx.expect_reads_until_ms


_CREATE_CONTEXT_SCALARS = (
    ("part_of_data_set", "partOfDataSet"),
    ("expected_max_open_duration_ms", "expectedMaxOpenDurationMs"),
    ("expected_max_entries", "expectedMaxEntries"),
    ("expected_max_length", "expectedMaxLength"),
    ("expected_average_entry_size", "expectedAverageEntrySize"),
    ("expected_entry_size_std_dev", "expectedEntrySizeStdDev"),
    ("expected_average_entry_add_rate_per_second", "expectedAverageEntryAddRatePerSecond"),
    ("expected_maximum_entry_add_rate_per_second", "expectedMaximumEntryAddRatePerSecond"),
    ("follows_ledger", "followsLedger"),
    ("child_of_ledger", "childOfLedger"),
)


def serialize(md: LedgerMetadata) -> bytes:
    """The znode value for ``md``: BookKeeper's format v3, or v4 with BP-44 fields."""
    fmt = pb.LedgerMetadataFormat()
    # Field order on the wire is by field number, as protobuf-java writes it.
    fmt.quorumSize = md.write_quorum_size
    fmt.ensembleSize = md.ensemble_size
    fmt.length = md.length
    fmt.lastEntryId = md.last_entry_id
    fmt.state = cast(pb.LedgerMetadataFormat.State, int(md.state))
    for first, bookies in md.ensembles:
        seg = fmt.segment.add()
        seg.ensembleMember.extend(bookies)
        seg.firstEntryId = first
    fmt.digestType = cast(pb.LedgerMetadataFormat.DigestType, int(md.digest_type))
    fmt.password = md.password
    fmt.ackQuorumSize = md.ack_quorum_size
    if md.ctime is not None:
        fmt.ctime = md.ctime
    for key in sorted(md.custom_metadata):  # sorted: one value, one byte string
        entry = fmt.customMetadata.add()
        entry.key = key
        entry.value = md.custom_metadata[key]
    if md.ctoken is not None:
        fmt.cToken = md.ctoken
    version = md.format_version
    if md.create_context is not None:
        _create_context_to_pb(md.create_context, fmt.createContext)
    if md.close_context is not None:
        _close_context_to_pb(md.close_context, fmt.closeContext)
    if md.seal_time is not None:
        fmt.sealTime = md.seal_time
    try:
        body = fmt.SerializeToString(deterministic=True)
    except (EncodeError, ValueError) as e:
        raise MetadataSerializationError(f"ledger {md.ledger_id}: cannot serialize: {e}") from e
    return b"%s%d\n%s%s" % (HEADER_PREFIX, version, _varint(len(body)), body)


def _read_header(data: bytes, ledger_id: int) -> tuple[int, int]:
    """(format version, offset after the header line)."""
    if not data.startswith(HEADER_PREFIX):
        raise MetadataSerializationError(
            f"ledger {ledger_id}: metadata header corrupt "
            f"(expected {HEADER_PREFIX!r}, got {data[: len(HEADER_PREFIX)]!r})"
        )
    start = len(HEADER_PREFIX)
    end = data.find(b"\n", start, start + _MAX_VERSION_DIGITS + 1)
    digits = data[start:end] if end >= 0 else b""
    if end < 0 or not digits or not digits.isdigit():
        raise MetadataSerializationError(
            f"ledger {ledger_id}: cannot find the metadata format version in the header"
        )
    return int(digits), end + 1


def _read_varint32(data: bytes, pos: int, ledger_id: int) -> tuple[int, int]:
    result = 0
    for shift in range(0, 35, 7):
        if pos >= len(data):
            raise MetadataSerializationError(
                f"ledger {ledger_id}: truncated metadata: the length varint is cut short"
            )
        b = data[pos]
        pos += 1
        result |= (b & 0x7F) << shift
        if not b & 0x80:
            if result > _INT32_MAX:
                raise MetadataSerializationError(
                    f"ledger {ledger_id}: malformed metadata length varint ({result})"
                )
            return result, pos
    raise MetadataSerializationError(
        f"ledger {ledger_id}: malformed metadata length varint (longer than 5 bytes)"
    )


def _unknown_field_numbers(msg: Any) -> set[int]:
    from google.protobuf import unknown_fields

    fields = unknown_fields.UnknownFieldSet(msg)  # indexable, not iterable (its stubs)
    return {fields[i].field_number for i in range(len(fields))}


def _owner_from_pb(o: pb.LedgerOwnerFormat) -> LedgerOwner:
    return LedgerOwner(
        enterprise=o.enterprise if o.HasField("enterprise") else None,
        system=o.system if o.HasField("system") else None,
        service=o.service if o.HasField("service") else None,
        instance=o.instance if o.HasField("instance") else None,
    )


def _create_context_from_pb(c: pb.LedgerCreateContextFormat) -> LedgerCreateContext:
    kwargs: dict[str, Any] = {
        py: getattr(c, name) for py, name in _CREATE_CONTEXT_SCALARS if c.HasField(name)
    }
    if c.HasField("createdBy"):
        kwargs["created_by"] = _owner_from_pb(c.createdBy)
    if c.HasField("createdOnBehalfOf"):
        kwargs["created_on_behalf_of"] = _owner_from_pb(c.createdOnBehalfOf)
    return LedgerCreateContext(**kwargs)


def _close_context_from_pb(c: pb.LedgerCloseContextFormat, ledger_id: int) -> LedgerCloseContext:
    if 1 in _unknown_field_numbers(c):
        raise MetadataSerializationError(f"ledger {ledger_id}: unknown close reason")
    return LedgerCloseContext(
        reason=CloseReason(c.reason) if c.HasField("reason") else None,
        abnormal_message=c.abnormalMessage if c.HasField("abnormalMessage") else None,
        expect_delete_after_ms=c.expectDeleteAfter if c.HasField("expectDeleteAfter") else None,
        expect_reads_until_ms=c.expectReadsUntil if c.HasField("expectReadsUntil") else None,
    )


def deserialize(data: bytes, ledger_id: int) -> LedgerMetadata:
    """Parse a znode value written by BookKeeper (format 3) or dlog (3 or 4).

    Raises :class:`MetadataSerializationError` naming the problem for anything
    else: the text formats 1 and 2, a corrupt header, a bad or lying length,
    trailing bytes, an undecodable or incomplete message, or values that do not
    make valid metadata."""
    data = bytes(data)
    version, pos = _read_header(data, ledger_id)
    if version in (1, 2):
        raise MetadataSerializationError(
            f"ledger {ledger_id}: metadata format version {version} (text, written by "
            "BookKeeper before 4.9) is not supported; rewrite it with a BookKeeper >= 4.9 client"
        )
    if version not in (FORMAT_V3, FORMAT_V4):
        raise MetadataSerializationError(
            f"ledger {ledger_id}: metadata format version {version} is not supported "
            f"(expected {FORMAT_V3} or {FORMAT_V4})"
        )
    size, pos = _read_varint32(data, pos, ledger_id)
    available = len(data) - pos
    if size > available:
        raise MetadataSerializationError(
            f"ledger {ledger_id}: truncated metadata: length says {size} bytes, "
            f"only {available} present"
        )
    if size < available:
        raise MetadataSerializationError(
            f"ledger {ledger_id}: {available - size} unexpected bytes after the "
            f"{size}-byte metadata message"
        )

    fmt = pb.LedgerMetadataFormat()
    try:
        fmt.ParseFromString(data[pos:])
    except (DecodeError, ValueError, RuntimeError) as e:
        raise MetadataSerializationError(
            f"ledger {ledger_id}: metadata message does not decode: {e}"
        ) from e
    if not fmt.IsInitialized():
        # types-protobuf leaves FindInitializationErrors out of Message.
        missing = ", ".join(fmt.FindInitializationErrors())  # type: ignore[attr-defined]
        raise MetadataSerializationError(
            f"ledger {ledger_id}: metadata message lacks required fields: {missing}"
        )
    unknown = _unknown_field_numbers(fmt)
    if unknown & {5, 7}:
        raise MetadataSerializationError(
            f"ledger {ledger_id}: unknown enum value for "
            + ", ".join({5: "state", 7: "digestType"}[n] for n in sorted(unknown & {5, 7}))
        )
    if unknown:
        log.warning("ledger %d: ignoring unknown metadata fields %s", ledger_id, sorted(unknown))
    has_v4_fields = any(fmt.HasField(n) for n in ("createContext", "closeContext", "sealTime"))
    if version == FORMAT_V3 and has_v4_fields:
        raise MetadataSerializationError(
            f"ledger {ledger_id}: format 3 header but BP-44 (format 4) fields present"
        )

    try:
        if len({e.key for e in fmt.customMetadata}) != len(fmt.customMetadata):
            raise MetadataSerializationError(f"ledger {ledger_id}: duplicate customMetadata keys")
        state = LedgerState(fmt.state)
        closed = state is LedgerState.CLOSED
        if closed and not fmt.HasField("lastEntryId"):
            raise MetadataSerializationError(
                f"ledger {ledger_id}: closed ledger without lastEntryId"
            )
        if not fmt.HasField("password"):
            # Only pre-4.2 writers left it out; BookKeeper then has no digest info.
            log.debug("ledger %d: metadata carries no password", ledger_id)
        return LedgerMetadata(
            ledger_id=ledger_id,
            ensemble_size=fmt.ensembleSize,
            write_quorum_size=fmt.quorumSize,
            ack_quorum_size=fmt.ackQuorumSize if fmt.HasField("ackQuorumSize") else fmt.quorumSize,
            ensembles=tuple((seg.firstEntryId, tuple(seg.ensembleMember)) for seg in fmt.segment),
            state=state,
            last_entry_id=fmt.lastEntryId if closed else -1,
            length=fmt.length if closed else 0,
            digest_type=DigestType(fmt.digestType),
            password=fmt.password,
            ctime=fmt.ctime if fmt.HasField("ctime") else None,
            custom_metadata={e.key: e.value for e in fmt.customMetadata},
            ctoken=fmt.cToken if fmt.HasField("cToken") else None,
            create_context=(
                _create_context_from_pb(fmt.createContext)
                if fmt.HasField("createContext")
                else None
            ),
            close_context=(
                _close_context_from_pb(fmt.closeContext, ledger_id)
                if fmt.HasField("closeContext")
                else None
            ),
            seal_time=fmt.sealTime if fmt.HasField("sealTime") else None,
        )
    except IncorrectParameterError as e:
        raise MetadataSerializationError(
            f"ledger {ledger_id}: metadata is not valid: {e.message}"
        ) from e


# ---------------------------------------------------------------------------
# renderings for the shell
# ---------------------------------------------------------------------------


def _b64(value: bytes) -> str:
    return base64.b64encode(value).decode("ascii")


def _iso(ms: int | None) -> str:
    if ms is None:
        return "-"
    try:
        t = _dt.datetime.fromtimestamp(ms / 1000, tz=_dt.UTC)
    except (OverflowError, OSError, ValueError):
        return str(ms)
    return f"{ms} ({t.isoformat(timespec='milliseconds').replace('+00:00', 'Z')})"


def _context_dict(ctx: Any) -> dict[str, Any] | None:
    if ctx is None:
        return None
    out: dict[str, Any] = {}
    for f in dataclasses.fields(ctx):
        value = getattr(ctx, f.name)
        if isinstance(value, LedgerOwner):
            value = dataclasses.asdict(value)
        elif isinstance(value, enum.Enum):
            value = value.name
        out[f.name] = value
    return out


def to_dict(md: LedgerMetadata, *, include_password: bool = False) -> dict[str, Any]:
    """JSON-ready view: bytes in base64, enums by name, times in epoch ms.

    The password is the ledger's access secret, so it is left out unless
    asked for (BookKeeper's ``toSafeString`` does the same)."""
    return {
        "ledger_id": md.ledger_id,
        "format_version": md.format_version,
        "ensemble_size": md.ensemble_size,
        "write_quorum_size": md.write_quorum_size,
        "ack_quorum_size": md.ack_quorum_size,
        "state": md.state.name,
        "last_entry_id": md.last_entry_id,
        "length": md.length,
        "digest_type": md.digest_type.name,
        "password": _b64(md.password) if include_password else None,
        "ctime": md.ctime,
        "ctoken": md.ctoken,
        "ensembles": [
            {"first_entry_id": first, "bookies": list(bookies)} for first, bookies in md.ensembles
        ],
        "custom_metadata": {k: _b64(v) for k, v in sorted(md.custom_metadata.items())},
        "create_context": _context_dict(md.create_context),
        "close_context": _context_dict(md.close_context),
        "seal_time": md.seal_time,
    }


def to_text(md: LedgerMetadata, *, include_password: bool = False) -> str:
    """Multi-line rendering in the spirit of ``bookkeeper shell ledgermetadata``."""
    lines = [
        f"ledgerID: {md.ledger_id}",
        f"formatVersion: {md.format_version}",
        f"ensembleSize: {md.ensemble_size}",
        f"writeQuorumSize: {md.write_quorum_size}",
        f"ackQuorumSize: {md.ack_quorum_size}",
        f"state: {md.state.name}",
    ]
    if md.is_closed:
        lines += [f"lastEntryId: {md.last_entry_id}", f"length: {md.length}"]
    lines += [
        f"digestType: {md.digest_type.name}",
        f"password: {'base64:' + _b64(md.password) if include_password else 'OMITTED'}",
        f"ctime: {_iso(md.ctime)}",
        f"cToken: {md.ctoken if md.ctoken is not None else '-'}",
        "ensembles:",
    ]
    lines += [f"  {first}: [{', '.join(bookies)}]" for first, bookies in md.ensembles]
    if md.custom_metadata:
        lines.append("customMetadata:")
        lines += [f"  {k}: base64:{_b64(v)}" for k, v in sorted(md.custom_metadata.items())]
    for title, ctx in (("createContext", md.create_context), ("closeContext", md.close_context)):
        if ctx is None:
            continue
        lines.append(f"{title}:")
        for key, value in (_context_dict(ctx) or {}).items():
            if value is None:
                continue
            if isinstance(value, dict):
                value = ", ".join(f"{k}={v}" for k, v in value.items() if v is not None)
            elif key.endswith("_ms") and key.startswith("expect_"):
                value = _iso(value)
            lines.append(f"  {key}: {value}")
    if md.seal_time is not None:
        lines.append(f"sealTime: {_iso(md.seal_time)}")
    return "\n".join(lines)
