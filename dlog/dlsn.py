"""DLSN: the position of a record in a log, compatible with DistributedLog.

A DLSN is ``(log_segment_sequence_no, entry_id, slot_id)``, ordered
lexicographically. It is a ``tuple`` subclass because readers create millions
of them: construction, comparison and hashing then run in C (measured 2-4x
faster than a ``__slots__`` class with Python ``__lt__``/``__hash__``). The
price is that a DLSN compares equal to the plain tuple of its three fields.

Wire forms, as in DistributedLog's ``DLSN.java``:

* version 1 (current): 25 bytes, the version byte ``1`` then three big-endian
  int64; its string form is standard base64 with ``=`` padding, no line
  breaks (commons-codec ``Base64.encodeBase64String``).
* version 0 (legacy, read-only here): DistributedLog sized the array as
  ``Long.SIZE * 3 + Byte.SIZE`` = 200 *bytes* (a bits/bytes slip), so a v0
  DLSN is the version byte ``0``, three big-endian int64 and 175 zero bytes.
  DistributedLog still reads it; so do we, insisting on the zero padding.
"""

from __future__ import annotations

import base64
import binascii
import re
import struct
from operator import index, itemgetter
from typing import Any, ClassVar

from dlog.errors import InvalidDLSNError

__all__ = [
    "DLSN",
    "InitialDLSN",
    "InvalidDLSN",
    "NonInclusiveLowerBound",
    "parse_dlsn",
    "serialize_slots",
]

VERSION0 = 0
VERSION1 = 1
CURRENT_VERSION = VERSION1

_INT64_MIN = -(1 << 63)
_INT64_MAX = (1 << 63) - 1

_V1 = struct.Struct(">bqqq")
VERSION1_LEN = _V1.size  # 25
VERSION0_LEN = 200
_V0_PADDING = bytes(VERSION0_LEN - VERSION1_LEN)

_tuple_new = tuple.__new__


def _field(value: Any, name: str) -> int:
    if type(value) is not int:
        if isinstance(value, bool):
            raise InvalidDLSNError(f"DLSN {name} must be an int, not bool")
        try:
            value = index(value)
        except TypeError:
            raise InvalidDLSNError(
                f"DLSN {name} must be an int, not {type(value).__name__}"
            ) from None
    if not _INT64_MIN <= value <= _INT64_MAX:
        raise InvalidDLSNError(f"DLSN {name} {value} is outside the int64 range")
    return value


class DLSN(tuple):
    """DistributedLog sequence number: (segment sequence no, entry id, slot id)."""

    __slots__ = ()

    INITIAL: ClassVar[DLSN]
    NON_INCLUSIVE_LOWER_BOUND: ClassVar[DLSN]
    INVALID: ClassVar[DLSN]

    def __new__(cls, log_segment_sequence_no: int, entry_id: int, slot_id: int) -> DLSN:
        if (
            type(log_segment_sequence_no) is int
            and type(entry_id) is int
            and type(slot_id) is int
            and _INT64_MIN <= log_segment_sequence_no <= _INT64_MAX
            and _INT64_MIN <= entry_id <= _INT64_MAX
            and _INT64_MIN <= slot_id <= _INT64_MAX
        ):  # the common case, checked inline (half the cost of the general one)
            return _tuple_new(cls, (log_segment_sequence_no, entry_id, slot_id))
        return _tuple_new(
            cls,
            (
                _field(log_segment_sequence_no, "log_segment_sequence_no"),
                _field(entry_id, "entry_id"),
                _field(slot_id, "slot_id"),
            ),
        )

    log_segment_sequence_no: int = property(itemgetter(0))  # type: ignore[assignment]
    entry_id: int = property(itemgetter(1))  # type: ignore[assignment]
    slot_id: int = property(itemgetter(2))  # type: ignore[assignment]

    def __getnewargs__(self) -> tuple[int, int, int]:  # pickle / copy
        return (self[0], self[1], self[2])

    def __repr__(self) -> str:
        return f"DLSN({self[0]}, {self[1]}, {self[2]})"

    def __str__(self) -> str:
        # DistributedLog's DLSN.toString(), so logs and tools read the same.
        return f"DLSN{{logSegmentSequenceNo={self[0]}, entryId={self[1]}, slotId={self[2]}}}"

    # -- positioning ------------------------------------------------------

    def next(self) -> DLSN:
        """The smallest DLSN after this one (DistributedLog's getNextDLSN)."""
        return _tuple_new(DLSN, (self[0], self[1], self[2] + 1))

    def position_on_next_segment(self) -> DLSN:
        """The first DLSN of the next segment (DistributedLog's positionOnTheNextLedger)."""
        return _tuple_new(DLSN, (self[0] + 1, 0, 0))

    # -- serialization ----------------------------------------------------

    def serialize_bytes(self, version: int = CURRENT_VERSION) -> bytes:
        """25 bytes: version 1 then three big-endian int64 (200 bytes for version 0)."""
        if version == VERSION1:
            return _V1.pack(VERSION1, self[0], self[1], self[2])
        if version == VERSION0:
            return _V1.pack(VERSION0, self[0], self[1], self[2]) + _V0_PADDING
        raise InvalidDLSNError(f"cannot serialize a DLSN as version {version}")

    def serialize(self, version: int = CURRENT_VERSION) -> str:
        """Base64 of :meth:`serialize_bytes`, as DistributedLog stores it in ZooKeeper."""
        return base64.b64encode(self.serialize_bytes(version)).decode("ascii")

    @classmethod
    def deserialize_bytes(cls, data: bytes | bytearray | memoryview) -> DLSN:
        """Strict inverse of :meth:`serialize_bytes` (versions 1 and 0)."""
        if not isinstance(data, (bytes, bytearray, memoryview)):
            raise InvalidDLSNError(f"serialized DLSN must be bytes, not {type(data).__name__}")
        data = bytes(data)
        n = len(data)
        if n == 0:
            raise InvalidDLSNError("serialized DLSN is empty")
        version = data[0]
        if version == VERSION1:
            if n != VERSION1_LEN:
                raise InvalidDLSNError(
                    f"version 1 DLSN must be {VERSION1_LEN} bytes, got {n}: {data[:64].hex()}"
                )
        elif version == VERSION0:
            if n != VERSION0_LEN:
                raise InvalidDLSNError(
                    f"version 0 DLSN must be {VERSION0_LEN} bytes, got {n}: {data[:64].hex()}"
                )
            if data[VERSION1_LEN:] != _V0_PADDING:
                raise InvalidDLSNError("version 0 DLSN has non-zero bytes after its three fields")
        else:
            raise InvalidDLSNError(
                f"unknown DLSN version {version} (expected 0 or 1): {data[:64].hex()}"
            )
        _, seq, entry, slot = _V1.unpack_from(data)
        return _tuple_new(cls, (seq, entry, slot))

    @classmethod
    def deserialize(cls, text: str | bytes) -> DLSN:
        """Strict inverse of :meth:`serialize`.

        Only canonical padded standard base64 is accepted: no whitespace, no
        URL-safe alphabet, no missing padding, no non-zero trailing bits.
        ``bytes`` holding ASCII are accepted because ZooKeeper hands us bytes.
        """
        if isinstance(text, (bytes, bytearray)):
            try:
                text = bytes(text).decode("ascii")
            except UnicodeDecodeError:
                raise InvalidDLSNError("serialized DLSN is not ASCII") from None
        elif not isinstance(text, str):
            raise InvalidDLSNError(f"serialized DLSN must be a str, not {type(text).__name__}")
        if not text:
            raise InvalidDLSNError("serialized DLSN is empty")
        if len(text) > 400:
            raise InvalidDLSNError(f"serialized DLSN is too long ({len(text)} characters)")
        try:
            raw = text.encode("ascii")
            data = base64.b64decode(raw, validate=True)
        except (UnicodeEncodeError, binascii.Error, ValueError):
            raise InvalidDLSNError(f"serialized DLSN {text!r} is not valid base64") from None
        if base64.b64encode(data) != raw:
            raise InvalidDLSNError(f"serialized DLSN {text!r} is not canonical base64")
        return cls.deserialize_bytes(data)


InitialDLSN = DLSN(1, 0, 0)
NonInclusiveLowerBound = DLSN(1, 0, -1)
InvalidDLSN = DLSN(0, -1, -1)

DLSN.INITIAL = InitialDLSN
DLSN.NON_INCLUSIVE_LOWER_BOUND = NonInclusiveLowerBound
DLSN.INVALID = InvalidDLSN

_NUM = r"(-?\d{1,19})"
_TOSTRING_RE = re.compile(
    r"DLSN\s*\{\s*logSegmentSequenceNo\s*=\s*"
    + _NUM
    + r"\s*,\s*entryId\s*=\s*"
    + _NUM
    + r"\s*,\s*slotId\s*=\s*"
    + _NUM
    + r"\s*\}",
    re.ASCII,
)
_TRIPLE_RE = re.compile(_NUM + r"([/:])" + _NUM + r"\2" + _NUM, re.ASCII)


def serialize_slots(segment: int, entry: int, slots: range) -> list[str]:
    """``DLSN(segment, entry, s).serialize()`` for each slot ``s``, without a
    DLSN per record: the records of one entry of a bulk write, which the
    write proxy answers one string each."""
    pack, b64 = _V1.pack, binascii.b2a_base64
    return [b64(pack(VERSION1, segment, entry, s), newline=False).decode("ascii") for s in slots]


def parse_dlsn(text: str) -> DLSN:
    """Parse a DLSN typed by a human or printed by a tool.

    Accepts the base64 form, DistributedLog's ``toString`` form
    ``DLSN{logSegmentSequenceNo=1, entryId=2, slotId=3}``, ``1/2/3`` and
    ``1:2:3``. Surrounding whitespace is ignored here (and only here).
    Fields may be negative, as DistributedLog's own ``InvalidDLSN``
    (0/-1/-1) and ``NonInclusiveLowerBound`` (1/0/-1) are. The forms never
    overlap: base64 of a DLSN always ends in ``=``. This is the one parser
    of human-typed DLSNs; the CLI reaches it through ``dlsn_option``.
    """
    if not isinstance(text, str):
        raise InvalidDLSNError(f"DLSN text must be a str, not {type(text).__name__}")
    s = text.strip()
    if not s:
        raise InvalidDLSNError("DLSN text is empty")
    m = _TRIPLE_RE.fullmatch(s)
    if m is not None:
        return DLSN(int(m.group(1)), int(m.group(3)), int(m.group(4)))
    m = _TOSTRING_RE.fullmatch(s)
    if m is not None:
        return DLSN(int(m.group(1)), int(m.group(2)), int(m.group(3)))
    try:
        return DLSN.deserialize(s)
    except InvalidDLSNError as e:
        raise InvalidDLSNError(
            f"cannot parse {text[:100]!r} as a DLSN: expected base64, "
            f"'DLSN{{logSegmentSequenceNo=S, entryId=E, slotId=N}}', 'S/E/N' or 'S:E:N' ({e})"
        ) from None
