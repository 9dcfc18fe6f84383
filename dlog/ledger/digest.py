"""BookKeeper's entry and explicit-LAC digest layouts (client side).

The bookie stores entry bodies opaquely; integrity is end to end, between the
writer that builds a body here and the reader that verifies it here. Keeping
the byte layout identical to BookKeeper's ``DigestManager`` lets dlog read and
write ledgers that Java clients and tools understand (formats.md section 2).

Entry body::

    ledgerId (int64 BE) | entryId (int64) | lastAddConfirmed (int64) | length (int64)
    | digest (0, 4, 8 or 20 bytes) | payload

``length`` is the total payload length of the ledger up to and including this
entry. The digest covers the 32-byte header and the payload, not itself.

Explicit-LAC body (WRITE_LAC / READ_LAC)::

    ledgerId (int64 BE) | lac (int64) | digest over those 16 bytes

Digests: CRC32 is ``java.util.zip.CRC32`` (same polynomial as :func:`zlib.crc32`)
written as an 8-byte long, so the top 4 bytes are zero; CRC32C is written as a
4-byte int; HMAC is HMAC-SHA1 (20 bytes) keyed with SHA-1(b"mac" + password);
DUMMY writes nothing and checks nothing but the framing and the ids.

Everything here is pure (no I/O) and sits on the hot path of every add and
read, so each digest type gets its own small subclass instead of branching per
call, and the payload is copied exactly once (into the outgoing body).
"""

from __future__ import annotations

import hashlib
import hmac
import struct
import zlib
from typing import NamedTuple

from crc32c import crc32c as _crc32c

from dlog.errors import DigestMismatchError, IncorrectParameterError

__all__ = [
    "CRC32",
    "CRC32C",
    "DUMMY",
    "HEADER_LENGTH",
    "HMAC",
    "LAC_HEADER_LENGTH",
    "DigestManager",
    "Entry",
    "digest_length",
    "mac_key",
    "master_key",
    "parse_header",
]

# Values of LedgerMetadataFormat.DigestType (formats.md section 3); the IntEnum
# lives in dlog.ledger.metadata, and any int or IntEnum with these values works.
CRC32 = 1
HMAC = 2
CRC32C = 3
DUMMY = 4

_TYPE_NAMES = {CRC32: "CRC32", HMAC: "HMAC", CRC32C: "CRC32C", DUMMY: "DUMMY"}
_NAME_TYPES = {name: value for value, name in _TYPE_NAMES.items()}
_DIGEST_LENGTHS = {CRC32: 8, HMAC: 20, CRC32C: 4, DUMMY: 0}

HEADER_LENGTH = 32
"""Bytes of (ledgerId, entryId, lastAddConfirmed, length) before the digest."""
LAC_HEADER_LENGTH = 16
"""Bytes of (ledgerId, lac) before the digest in an explicit-LAC body."""

_HEADER = struct.Struct(">qqqq")
_LAC_HEADER = struct.Struct(">qq")
_U32 = struct.Struct(">I")
_U64 = struct.Struct(">Q")

Buffer = bytes | bytearray | memoryview


class Entry(NamedTuple):
    """A verified entry. ``payload`` is a read-only view into the body (no copy)."""

    ledger_id: int
    entry_id: int
    last_add_confirmed: int
    length: int
    payload: memoryview


def _sha1(pad: bytes, password: bytes) -> bytes:
    h = hashlib.sha1(pad)
    h.update(password)
    return h.digest()


def master_key(password: bytes) -> bytes:
    """The 20-byte key bookies check on writes: SHA-1(b"ledger" + password).

    BookKeeper special-cases an empty password to a precomputed constant, which
    is the same value, so no special case is needed here.
    """
    return _sha1(b"ledger", bytes(password))


def mac_key(password: bytes) -> bytes:
    """The HMAC-SHA1 key of HMAC ledgers: SHA-1(b"mac" + password)."""
    return _sha1(b"mac", bytes(password))


def _coerce_type(digest_type: int | str) -> int:
    """Accept an int, an IntEnum with BookKeeper's values, or a type name."""
    if isinstance(digest_type, str):
        value = _NAME_TYPES.get(digest_type.upper())
        if value is None:
            raise IncorrectParameterError(f"unknown digest type {digest_type!r}")
        return value
    if isinstance(digest_type, bool) or not isinstance(digest_type, int):
        raise IncorrectParameterError(f"digest type must be an int, got {digest_type!r}")
    value = int(digest_type)
    if value not in _TYPE_NAMES:
        raise IncorrectParameterError(f"unknown digest type {value}")
    return value


def digest_length(digest_type: int | str) -> int:
    """Bytes the digest of ``digest_type`` occupies after the header."""
    return _DIGEST_LENGTHS[_coerce_type(digest_type)]


def _as_bytes_view(body: Buffer) -> memoryview:
    mv = memoryview(body)
    if mv.itemsize != 1 or mv.ndim != 1:
        mv = mv.cast("B")
    return mv


def parse_header(body: Buffer) -> tuple[int, int, int, int]:
    """Read (ledger_id, entry_id, lac, length) without verifying anything.

    For the bookie (which stores bodies opaquely but indexes them by the first
    16 bytes) and for tools. Raises :class:`DigestMismatchError` if the body is
    shorter than the header.
    """
    if len(body) < HEADER_LENGTH:
        raise DigestMismatchError(
            f"truncated body: {len(body)} bytes, an entry header needs {HEADER_LENGTH}"
        )
    return _HEADER.unpack_from(body)


class DigestManager:
    """Builds and verifies entry bodies of one ledger.

    ``DigestManager(ledger_id, digest_type, password)`` (or :meth:`for_type`)
    returns the subclass for ``digest_type``. Instances are immutable and safe
    to share between tasks and threads.
    """

    __slots__ = ("_min_body", "_payload_offset", "digest_type", "ledger_id", "master_key")

    digest_length: int = 0
    """Bytes of the digest between the header and the payload."""

    def __new__(
        cls, ledger_id: int, digest_type: int | str, password: bytes = b""
    ) -> DigestManager:
        if cls is DigestManager:
            cls = _IMPLEMENTATIONS[_coerce_type(digest_type)]
        return object.__new__(cls)

    def __init__(self, ledger_id: int, digest_type: int | str, password: bytes = b"") -> None:
        if isinstance(ledger_id, bool) or not isinstance(ledger_id, int):
            raise IncorrectParameterError(f"ledger id must be an int, got {ledger_id!r}")
        if not -(2**63) <= ledger_id < 2**63:
            raise IncorrectParameterError(f"ledger id {ledger_id} does not fit in an int64")
        if not isinstance(password, bytes | bytearray | memoryview):
            raise IncorrectParameterError("password must be bytes")
        self.ledger_id = ledger_id
        self.digest_type = _coerce_type(digest_type)
        self.master_key = master_key(bytes(password))
        self._payload_offset = HEADER_LENGTH + self.digest_length
        self._min_body = self._payload_offset

    @classmethod
    def for_type(
        cls, ledger_id: int, digest_type: int | str, password: bytes = b""
    ) -> DigestManager:
        """Factory: the digest manager for ``digest_type`` (1..4 or a name)."""
        return DigestManager(ledger_id, digest_type, password)

    parse_header = staticmethod(parse_header)

    @property
    def name(self) -> str:
        return _TYPE_NAMES[self.digest_type]

    def __repr__(self) -> str:
        return f"{type(self).__name__}(ledger_id={self.ledger_id}, type={self.name})"

    # -- per-type primitives -------------------------------------------------

    def _digest(self, header: Buffer, payload: Buffer) -> bytes:
        """Digest bytes over ``header`` then ``payload``."""
        raise NotImplementedError

    def _matches(self, body: memoryview, header_len: int) -> bool:
        """Whether the digest stored after ``header_len`` bytes matches the rest."""
        raise NotImplementedError

    # -- entries -------------------------------------------------------------

    def compute(
        self, entry_id: int, last_add_confirmed: int, length: int, payload: Buffer
    ) -> bytes:
        """The entry body to send to a bookie (header, digest, payload).

        The payload is copied once, into the returned body.
        """
        try:
            header = _HEADER.pack(self.ledger_id, entry_id, last_add_confirmed, length)
        except struct.error as e:
            raise IncorrectParameterError(
                f"entry header fields must be int64: entry_id={entry_id!r}, "
                f"lac={last_add_confirmed!r}, length={length!r}"
            ) from e
        return b"".join((header, self._digest(header, payload), payload))

    def verify(self, body: Buffer, expected_entry_id: int | None = None) -> Entry:
        """Check ``body`` and return its fields; raise on any doubt.

        Checks, in order: the size, the digest (so a flipped id is reported as
        corruption), the ledger id, and the entry id when ``expected_entry_id``
        is given (leave it ``None`` where any entry is acceptable, as in
        recovery's read of the last entry).
        """
        mv = _as_bytes_view(body)
        if len(mv) < self._min_body:
            raise DigestMismatchError(
                f"ledger {self.ledger_id}: truncated body: {len(mv)} bytes, a {self.name} "
                f"entry needs at least {self._min_body}"
            )
        if not self._matches(mv, HEADER_LENGTH):
            claimed_ledger, claimed_entry, _, _ = _HEADER.unpack_from(mv)
            raise DigestMismatchError(
                f"ledger {self.ledger_id} entry {_fmt_expected(expected_entry_id)}: "
                f"{self.name} digest mismatch (header claims ledger {claimed_ledger} "
                f"entry {claimed_entry})"
            )
        ledger_id, entry_id, lac, length = _HEADER.unpack_from(mv)
        if ledger_id != self.ledger_id:
            raise DigestMismatchError(
                f"wrong ledger: body is for ledger {ledger_id} entry {entry_id}, "
                f"expected ledger {self.ledger_id}"
            )
        if expected_entry_id is not None and entry_id != expected_entry_id:
            raise DigestMismatchError(
                f"ledger {self.ledger_id}: wrong entry: body holds entry {entry_id}, "
                f"expected {expected_entry_id}"
            )
        return Entry(ledger_id, entry_id, lac, length, mv[self._payload_offset :].toreadonly())

    # -- explicit LAC ----------------------------------------------------------

    def compute_lac(self, lac: int) -> bytes:
        """The WRITE_LAC body: ledgerId, lac, digest over those 16 bytes."""
        try:
            header = _LAC_HEADER.pack(self.ledger_id, lac)
        except struct.error as e:
            raise IncorrectParameterError(f"lac must be an int64, got {lac!r}") from e
        return header + self._digest(header, b"")

    def verify_lac(self, body: Buffer) -> int:
        """Check a READ_LAC body of this ledger and return the LAC in it.

        Unlike BookKeeper, trailing bytes are rejected: the digest would not
        cover them, and a well-formed LAC body never has any.
        """
        mv = _as_bytes_view(body)
        expected = LAC_HEADER_LENGTH + self.digest_length
        if len(mv) != expected:
            raise DigestMismatchError(
                f"ledger {self.ledger_id}: {'truncated' if len(mv) < expected else 'oversized'} "
                f"LAC body: {len(mv)} bytes, a {self.name} LAC body has {expected}"
            )
        if not self._matches(mv, LAC_HEADER_LENGTH):
            raise DigestMismatchError(f"ledger {self.ledger_id}: {self.name} LAC digest mismatch")
        ledger_id, lac = _LAC_HEADER.unpack_from(mv)
        if ledger_id != self.ledger_id:
            raise DigestMismatchError(
                f"wrong ledger: LAC body is for ledger {ledger_id}, expected {self.ledger_id}"
            )
        return lac


def _fmt_expected(entry_id: int | None) -> str:
    return "?" if entry_id is None else str(entry_id)


class _Crc32cDigestManager(DigestManager):
    """CRC32C (Castagnoli) written as a 4-byte big-endian int."""

    __slots__ = ()
    digest_length = 4

    def _digest(self, header: Buffer, payload: Buffer) -> bytes:
        return _U32.pack(_crc32c(payload, _crc32c(header)))

    def _matches(self, body: memoryview, header_len: int) -> bool:
        crc = _crc32c(body[header_len + 4 :], _crc32c(body[:header_len]))
        return _U32.unpack_from(body, header_len)[0] == crc


class _Crc32DigestManager(DigestManager):
    """CRC32 (zlib's polynomial) written as an 8-byte long: 4 zero bytes, then the CRC."""

    __slots__ = ()
    digest_length = 8

    def _digest(self, header: Buffer, payload: Buffer) -> bytes:
        return _U64.pack(zlib.crc32(payload, zlib.crc32(header)))

    def _matches(self, body: memoryview, header_len: int) -> bool:
        crc = zlib.crc32(body[header_len + 8 :], zlib.crc32(body[:header_len]))
        # Comparing all 8 bytes also rejects a non-zero high half, as BookKeeper does.
        return _U64.unpack_from(body, header_len)[0] == crc


class _HmacDigestManager(DigestManager):
    """HMAC-SHA1 keyed with SHA-1(b"mac" + password), 20 bytes."""

    __slots__ = ("_mac",)
    digest_length = 20

    def __init__(self, ledger_id: int, digest_type: int | str, password: bytes = b"") -> None:
        super().__init__(ledger_id, digest_type, password)
        # Keying costs two SHA-1 blocks; copy a keyed prototype per call instead.
        self._mac = hmac.new(mac_key(bytes(password)), digestmod=hashlib.sha1)

    def _digest(self, header: Buffer, payload: Buffer) -> bytes:
        mac = self._mac.copy()
        mac.update(header)
        mac.update(payload)
        return mac.digest()

    def _matches(self, body: memoryview, header_len: int) -> bool:
        mac = self._mac.copy()
        mac.update(body[:header_len])
        mac.update(body[header_len + 20 :])
        return hmac.compare_digest(mac.digest(), body[header_len : header_len + 20])


class _DummyDigestManager(DigestManager):
    """No digest: only the framing and the ids are checked."""

    __slots__ = ()
    digest_length = 0

    def _digest(self, header: Buffer, payload: Buffer) -> bytes:
        return b""

    def _matches(self, body: memoryview, header_len: int) -> bool:
        return True


_IMPLEMENTATIONS: dict[int, type[DigestManager]] = {
    CRC32: _Crc32DigestManager,
    HMAC: _HmacDigestManager,
    CRC32C: _Crc32cDigestManager,
    DUMMY: _DummyDigestManager,
}
