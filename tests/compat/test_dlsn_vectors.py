"""DistributedLog's DLSN format and test cases, as data.

Facts from upstream's ``DLSN.java`` and ``TestDLSN.java``
(apache/bookkeeper 9590a97f67c81a2964c79a92c7c58976894588f3,
stream/distributedlog/protocol/src/{main,test}/java/org/apache/distributedlog/;
the same in apache/distributedlog 083eddb9d5a255e0303255f12cd2d681e49d2f53):

* ``serializeBytes(VERSION1)``: the byte ``1`` then ``logSegmentSequenceNo``,
  ``entryId`` and ``slotId`` as big-endian longs, 25 bytes
  (``VERSION1_LEN = Long.SIZE * 3 / Byte.SIZE + 1``).
* ``serializeBytes(VERSION0)``: the byte ``0`` and the same three longs in a
  zero-filled array of ``VERSION0_LEN = Long.SIZE * 3 + Byte.SIZE`` = 200
  bytes.
* ``serialize`` is commons-codec ``Base64.encodeBase64String`` of those bytes
  (standard alphabet, ``=`` padding, no line breaks).
* ``deserializeBytes`` accepts version 0 only at 200 bytes and version 1 only
  at 25; any other version byte is rejected.
* ``InitialDLSN = (1, 0, 0)``, ``NonInclusiveLowerBound = (1, 0, -1)``,
  ``InvalidDLSN = (0, -1, -1)``; ``compareTo`` orders by segment, entry, slot
  (signed); ``getNextDLSN`` adds one to the slot; ``positionOnTheNextLedger``
  is ``(segment + 1, 0, 0)``; ``toString`` is
  ``DLSN{logSegmentSequenceNo=.., entryId=.., slotId=..}``.
* ``TestDLSN`` round-trips ``DLSN(99, 88, 77)`` through both versions and
  rejects the string ``"baddlsn"``.

The expected bytes below are written by hand from those facts.
"""

from __future__ import annotations

import base64

import pytest

from dlog.dlsn import DLSN, InitialDLSN, InvalidDLSN, NonInclusiveLowerBound
from dlog.errors import InvalidDLSNError

VERSION0 = 0
VERSION1 = 1
VERSION0_LEN = 200
VERSION1_LEN = 25

# (name, (segment, entry, slot), version 1 bytes as hex: version, segment, entry, slot;
#  version 1 base64)
VECTORS: list[tuple[str, tuple[int, int, int], str, str]] = [
    (
        "TestDLSN(99, 88, 77)",
        (99, 88, 77),
        "01 0000000000000063 0000000000000058 000000000000004d",
        "AQAAAAAAAABjAAAAAAAAAFgAAAAAAAAATQ==",
    ),
    (
        "InitialDLSN",
        (1, 0, 0),
        "01 0000000000000001 0000000000000000 0000000000000000",
        "AQAAAAAAAAABAAAAAAAAAAAAAAAAAAAAAA==",
    ),
    (
        "NonInclusiveLowerBound",
        (1, 0, -1),
        "01 0000000000000001 0000000000000000 ffffffffffffffff",
        "AQAAAAAAAAABAAAAAAAAAAD//////////w==",
    ),
    (
        "InvalidDLSN",
        (0, -1, -1),
        "01 0000000000000000 ffffffffffffffff ffffffffffffffff",
        "AQAAAAAAAAAA/////////////////////w==",
    ),
]

IDS = [v[0] for v in VECTORS]


def _v0(v1_hex: str) -> bytes:
    """Version 0 bytes: version byte 0, the same 24 bytes, zero fill to 200."""
    body = bytes.fromhex(v1_hex)[1:]
    return b"\x00" + body + bytes(VERSION0_LEN - 1 - len(body))


def test_constants() -> None:
    assert tuple(InitialDLSN) == (1, 0, 0)
    assert tuple(NonInclusiveLowerBound) == (1, 0, -1)
    assert tuple(InvalidDLSN) == (0, -1, -1)


@pytest.mark.parametrize(("name", "fields", "v1_hex", "v1_b64"), VECTORS, ids=IDS)
def test_version1(name: str, fields: tuple[int, int, int], v1_hex: str, v1_b64: str) -> None:
    dlsn = DLSN(*fields)
    data = bytes.fromhex(v1_hex)
    assert len(data) == VERSION1_LEN
    assert dlsn.serialize_bytes() == data  # CUR_VERSION is 1
    assert dlsn.serialize_bytes(VERSION1) == data
    assert dlsn.serialize() == v1_b64
    assert dlsn.serialize(VERSION1) == v1_b64
    assert DLSN.deserialize_bytes(data) == dlsn
    assert DLSN.deserialize(v1_b64) == dlsn


@pytest.mark.parametrize(("name", "fields", "v1_hex", "v1_b64"), VECTORS, ids=IDS)
def test_version0(name: str, fields: tuple[int, int, int], v1_hex: str, v1_b64: str) -> None:
    dlsn = DLSN(*fields)
    data = _v0(v1_hex)
    assert len(data) == VERSION0_LEN
    assert dlsn.serialize_bytes(VERSION0) == data
    assert dlsn.serialize(VERSION0) == base64.b64encode(data).decode("ascii")
    assert DLSN.deserialize_bytes(data) == dlsn
    assert DLSN.deserialize(base64.b64encode(data).decode("ascii")) == dlsn


def test_version0_base64_of_testdlsn() -> None:
    """TestDLSN's ``dlsnv0`` string, spelled out: 268 base64 characters."""
    text = DLSN(99, 88, 77).serialize(VERSION0)
    assert text == "AAAAAAAAAABjAAAAAAAAAFgAAAAAAAAATQ" + "A" * 233 + "="
    assert DLSN.deserialize(text) == DLSN(99, 88, 77)


REJECTED: list[tuple[str, bytes]] = [
    ("version 1 one byte short", bytes.fromhex(VECTORS[0][2])[:-1]),
    ("version 1 one byte long", bytes.fromhex(VECTORS[0][2]) + b"\x00"),
    ("version 0 at version 1 length", b"\x00" + bytes.fromhex(VECTORS[0][2])[1:]),
    ("version 0 one byte short", _v0(VECTORS[0][2])[:-1]),
    ("version 2", b"\x02" + bytes.fromhex(VECTORS[0][2])[1:]),
    ("version -1", b"\xff" + bytes.fromhex(VECTORS[0][2])[1:]),
    ("empty", b""),
]


@pytest.mark.parametrize("data", [r[1] for r in REJECTED], ids=[r[0] for r in REJECTED])
def test_deserialize_bytes_rejects(data: bytes) -> None:
    with pytest.raises(InvalidDLSNError):
        DLSN.deserialize_bytes(data)


def test_bad_dlsn_string() -> None:
    with pytest.raises(InvalidDLSNError):
        DLSN.deserialize("baddlsn")


def test_order_and_positioning() -> None:
    ordered = [
        InvalidDLSN,
        DLSN(0, 0, 0),
        NonInclusiveLowerBound,
        InitialDLSN,
        DLSN(1, 0, 1),
        DLSN(1, 1, -5),
        DLSN(2, -1, -1),
    ]
    assert sorted(reversed(ordered)) == ordered
    assert DLSN(99, 88, 77).next() == DLSN(99, 88, 78)
    assert NonInclusiveLowerBound.next() == InitialDLSN
    assert DLSN(99, 88, 77).position_on_next_segment() == DLSN(100, 0, 0)
    assert str(DLSN(99, 88, 77)) == "DLSN{logSegmentSequenceNo=99, entryId=88, slotId=77}"
