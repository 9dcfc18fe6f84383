"""BookKeeper entry / LAC digest layouts (dlog.ledger.digest).

Expected bytes are built here independently of the module under test: ints via
``int.to_bytes``, CRCs via a bit-at-a-time pure-Python CRC, HMAC via hashlib
with the RFC 2104 pads written out.
"""

from __future__ import annotations

import hashlib
import os
import time
from enum import IntEnum

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from dlog.errors import DigestMismatchError, IncorrectParameterError
from dlog.ledger.digest import (
    HEADER_LENGTH,
    DigestManager,
    digest_length,
    mac_key,
    master_key,
    parse_header,
)

INT64_MIN, INT64_MAX = -(2**63), 2**63 - 1


class DT(IntEnum):
    """Stand-in for dlog.ledger.metadata.DigestType (same values)."""

    CRC32 = 1
    HMAC = 2
    CRC32C = 3
    DUMMY = 4


CHECKED = [DT.CRC32, DT.HMAC, DT.CRC32C]
ALL = [*CHECKED, DT.DUMMY]


# ---------------------------------------------------------------------------
# Independent reference implementations
# ---------------------------------------------------------------------------


def _reflected_crc32(poly: int, data: bytes) -> int:
    crc = 0xFFFFFFFF
    for byte in data:
        crc ^= byte
        for _ in range(8):
            crc = (crc >> 1) ^ (poly if crc & 1 else 0)
    return crc ^ 0xFFFFFFFF


def ref_crc32c(data: bytes) -> int:
    return _reflected_crc32(0x82F63B78, data)


def ref_crc32(data: bytes) -> int:
    return _reflected_crc32(0xEDB88320, data)


def ref_hmac_sha1(key: bytes, msg: bytes) -> bytes:
    key = key.ljust(64, b"\0")  # 20-byte keys are shorter than SHA-1's block
    inner = hashlib.sha1(bytes(k ^ 0x36 for k in key) + msg).digest()
    return hashlib.sha1(bytes(k ^ 0x5C for k in key) + inner).digest()


def i64(v: int) -> bytes:
    return v.to_bytes(8, "big", signed=True)


def ref_digest(digest_type: int, password: bytes, covered: bytes) -> bytes:
    if digest_type == DT.CRC32C:
        return ref_crc32c(covered).to_bytes(4, "big")
    if digest_type == DT.CRC32:
        return ref_crc32(covered).to_bytes(8, "big")
    if digest_type == DT.HMAC:
        return ref_hmac_sha1(hashlib.sha1(b"mac" + password).digest(), covered)
    return b""


def ref_body(
    digest_type: int,
    password: bytes,
    ledger: int,
    entry: int,
    lac: int,
    length: int,
    payload: bytes,
) -> bytes:
    header = i64(ledger) + i64(entry) + i64(lac) + i64(length)
    return header + ref_digest(digest_type, password, header + payload) + payload


def test_reference_crcs_match_the_published_check_values() -> None:
    # The standard "123456789" check values (CRC-32/ISO-HDLC and CRC-32/ISCSI).
    assert ref_crc32(b"123456789") == 0xCBF43926
    assert ref_crc32c(b"123456789") == 0xE3069283


def test_reference_hmac_matches_rfc2202_case_2() -> None:
    assert ref_hmac_sha1(b"Jefe", b"what do ya want for nothing?").hex() == (
        "effcdf6ae5eb2fa2d27416d5f184df9c259a7c79"
    )


# ---------------------------------------------------------------------------
# Keys, types, lengths
# ---------------------------------------------------------------------------


@pytest.mark.parametrize("password", [b"", b"password", bytes(range(256))])
def test_master_key_is_sha1_of_ledger_and_password(password: bytes) -> None:
    expected = hashlib.sha1(b"ledger" + password).digest()
    assert master_key(password) == expected
    assert len(master_key(password)) == 20
    assert DigestManager(1, DT.CRC32C, password).master_key == expected


def test_master_key_known_values() -> None:
    # Literals from `printf ledgerpassword | sha1sum` etc., outside Python.
    assert master_key(b"password").hex() == "776734ff34b8278465ec6051092ee57a434bb849"
    assert mac_key(b"password").hex() == "d976f34efbf3c679a117416021db66013dcccf1c"
    # BookKeeper's EMPTY_LEDGER_KEY for an empty password is the same SHA-1("ledger").
    assert master_key(b"").hex() == "850bf1071c5e3d8c24235676f8816ae0cbe2f14f"


def test_digest_lengths() -> None:
    assert {t: digest_length(t) for t in ALL} == {
        DT.CRC32: 8,
        DT.HMAC: 20,
        DT.CRC32C: 4,
        DT.DUMMY: 0,
    }
    for t in ALL:
        assert DigestManager(1, t).digest_length == digest_length(t)


@pytest.mark.parametrize("spelling", [3, DT.CRC32C, "CRC32C", "crc32c"])
def test_digest_type_accepts_int_intenum_and_name(spelling: object) -> None:
    dm = DigestManager(5, spelling)  # type: ignore[arg-type]
    assert dm.digest_type == 3 and dm.name == "CRC32C" and dm.digest_length == 4
    assert DigestManager.for_type(5, spelling).digest_type == 3  # type: ignore[arg-type]


@pytest.mark.parametrize("bad", [0, 5, -1, "md5", True, 3.0, None])
def test_unknown_digest_type_is_rejected(bad: object) -> None:
    with pytest.raises(IncorrectParameterError):
        DigestManager(1, bad)  # type: ignore[arg-type]


def test_bad_parameters_are_rejected() -> None:
    with pytest.raises(IncorrectParameterError):
        DigestManager(2**63, DT.CRC32C)
    with pytest.raises(IncorrectParameterError):
        DigestManager(1, DT.CRC32C, "text-password")  # type: ignore[arg-type]
    dm = DigestManager(1, DT.CRC32C)
    with pytest.raises(IncorrectParameterError):
        dm.compute(2**63, 0, 0, b"")
    with pytest.raises(IncorrectParameterError):
        dm.compute(0, 0, "1", b"")  # type: ignore[arg-type]
    with pytest.raises(IncorrectParameterError):
        dm.compute_lac(INT64_MIN - 1)


# ---------------------------------------------------------------------------
# Known vectors
# ---------------------------------------------------------------------------


@pytest.mark.parametrize("digest_type", ALL)
def test_entry_body_layout_matches_hand_built_body(digest_type: DT) -> None:
    payload = b"hello, bookie"
    dm = DigestManager(0x0102030405060708, digest_type, b"pw")
    body = dm.compute(9, 8, 1000 + len(payload), payload)
    assert body == ref_body(digest_type, b"pw", 0x0102030405060708, 9, 8, 1013, payload)
    assert body[:8] == bytes([1, 2, 3, 4, 5, 6, 7, 8])
    assert body[-len(payload) :] == payload
    assert len(body) == HEADER_LENGTH + dm.digest_length + len(payload)


def test_crc32c_literal_vector() -> None:
    # ledger 1, entry 0, lac -1 (nothing confirmed yet), length 3, payload "abc".
    header = bytes.fromhex("00000000000000010000000000000000ffffffffffffffff0000000000000003")
    crc = ref_crc32c(header + b"abc")
    body = DigestManager(1, DT.CRC32C).compute(0, -1, 3, b"abc")
    assert body == header + crc.to_bytes(4, "big") + b"abc"


def test_crc32_is_written_as_a_long_with_a_zero_high_half() -> None:
    body = DigestManager(1, DT.CRC32).compute(0, -1, 3, b"abc")
    digest = body[HEADER_LENGTH : HEADER_LENGTH + 8]
    assert digest[:4] == b"\0\0\0\0"
    assert int.from_bytes(digest, "big") == ref_crc32(body[:HEADER_LENGTH] + b"abc")


def test_hmac_depends_on_the_password() -> None:
    body = DigestManager(1, DT.HMAC, b"right").compute(0, -1, 3, b"abc")
    DigestManager(1, DT.HMAC, b"right").verify(body)
    with pytest.raises(DigestMismatchError, match="digest mismatch"):
        DigestManager(1, DT.HMAC, b"wrong").verify(body)


@pytest.mark.parametrize("digest_type", ALL)
def test_lac_body_layout(digest_type: DT) -> None:
    dm = DigestManager(77, digest_type, b"pw")
    body = dm.compute_lac(-1)
    header = i64(77) + i64(-1)
    assert body == header + ref_digest(digest_type, b"pw", header)
    assert dm.verify_lac(body) == -1


# ---------------------------------------------------------------------------
# Round trips
# ---------------------------------------------------------------------------

ids = st.integers(min_value=0, max_value=INT64_MAX)
lacs = st.integers(min_value=-1, max_value=INT64_MAX)
payloads = st.binary(max_size=2048)


@given(
    digest_type=st.sampled_from(ALL),
    ledger=ids,
    entry=ids,
    lac=lacs,
    length=ids,
    payload=payloads,
    password=st.binary(max_size=40),
)
def test_round_trip(
    digest_type: DT, ledger: int, entry: int, lac: int, length: int, payload: bytes, password: bytes
) -> None:
    dm = DigestManager(ledger, digest_type, password)
    body = dm.compute(entry, lac, length, payload)
    assert body == ref_body(digest_type, password, ledger, entry, lac, length, payload)
    for received in (body, bytearray(body), memoryview(body)):
        got = dm.verify(received, entry)
        assert (got.ledger_id, got.entry_id, got.last_add_confirmed, got.length) == (
            ledger,
            entry,
            lac,
            length,
        )
        assert bytes(got.payload) == payload
        assert dm.verify(received).entry_id == entry
    assert parse_header(body) == (ledger, entry, lac, length)


@given(digest_type=st.sampled_from(ALL), ledger=ids, lac=lacs, password=st.binary(max_size=40))
def test_lac_round_trip(digest_type: DT, ledger: int, lac: int, password: bytes) -> None:
    dm = DigestManager(ledger, digest_type, password)
    assert dm.verify_lac(dm.compute_lac(lac)) == lac


@pytest.mark.parametrize("digest_type", CHECKED)
def test_payload_may_be_any_buffer(digest_type: DT) -> None:
    dm = DigestManager(3, digest_type, b"k")
    expected = dm.compute(1, 0, 5, b"12345")
    assert dm.compute(1, 0, 5, bytearray(b"12345")) == expected
    assert dm.compute(1, 0, 5, memoryview(b"xx12345")[2:]) == expected


def test_returned_payload_is_read_only() -> None:
    dm = DigestManager(3, DT.CRC32C)
    entry = dm.verify(bytearray(dm.compute(1, 0, 5, b"12345")))
    with pytest.raises(TypeError):
        entry.payload[0] = 0  # type: ignore[index]


# ---------------------------------------------------------------------------
# Corruption
# ---------------------------------------------------------------------------


@settings(suppress_health_check=[HealthCheck.too_slow])
@given(
    digest_type=st.sampled_from(CHECKED),
    entry=ids,
    lac=lacs,
    payload=payloads,
    data=st.data(),
)
def test_any_single_bit_flip_is_caught(
    digest_type: DT, entry: int, lac: int, payload: bytes, data: st.DataObject
) -> None:
    dm = DigestManager(11, digest_type, b"secret")
    body = bytearray(dm.compute(entry, lac, len(payload), payload))
    bit = data.draw(st.integers(min_value=0, max_value=len(body) * 8 - 1), label="bit")
    body[bit // 8] ^= 1 << (bit % 8)
    with pytest.raises(DigestMismatchError, match="digest mismatch|wrong"):
        dm.verify(bytes(body))
    with pytest.raises(DigestMismatchError):
        dm.verify(bytes(body), entry)


@pytest.mark.parametrize("digest_type", CHECKED)
def test_every_bit_of_a_small_body_is_covered(digest_type: DT) -> None:
    dm = DigestManager(11, digest_type, b"secret")
    body = dm.compute(4, 3, 100, b"payload!")
    for bit in range(len(body) * 8):
        corrupt = bytearray(body)
        corrupt[bit // 8] ^= 1 << (bit % 8)
        with pytest.raises(DigestMismatchError, match="digest mismatch"):
            dm.verify(bytes(corrupt), 4)


@given(
    digest_type=st.sampled_from(CHECKED),
    payload=payloads,
    data=st.data(),
)
def test_truncation_and_extension_are_caught(
    digest_type: DT, payload: bytes, data: st.DataObject
) -> None:
    dm = DigestManager(11, digest_type, b"secret")
    body = dm.compute(5, 4, 4096, payload)
    cut = data.draw(st.integers(min_value=0, max_value=len(body) - 1), label="cut")
    with pytest.raises(DigestMismatchError, match="truncated|digest mismatch"):
        dm.verify(body[:cut], 5)
    extra = data.draw(st.binary(min_size=1, max_size=16), label="extra")
    with pytest.raises(DigestMismatchError, match="digest mismatch"):
        dm.verify(body + extra, 5)


@pytest.mark.parametrize("digest_type", ALL)
def test_body_shorter_than_header_and_digest_is_truncated(digest_type: DT) -> None:
    dm = DigestManager(11, digest_type, b"secret")
    body = dm.compute(5, 4, 0, b"")
    dm.verify(body, 5)
    for cut in range(len(body)):
        with pytest.raises(DigestMismatchError, match="truncated"):
            dm.verify(body[:cut], 5)


@pytest.mark.parametrize("digest_type", ALL)
def test_wrong_ledger_is_detected(digest_type: DT) -> None:
    body = DigestManager(11, digest_type, b"pw").compute(5, 4, 3, b"abc")
    with pytest.raises(DigestMismatchError, match="wrong ledger"):
        DigestManager(12, digest_type, b"pw").verify(body, 5)


@pytest.mark.parametrize("digest_type", ALL)
def test_wrong_entry_is_detected(digest_type: DT) -> None:
    dm = DigestManager(11, digest_type, b"pw")
    body = dm.compute(5, 4, 3, b"abc")
    with pytest.raises(DigestMismatchError, match="wrong entry"):
        dm.verify(body, 6)
    assert dm.verify(body, 5).entry_id == 5


def test_other_digest_type_is_a_mismatch() -> None:
    body = DigestManager(11, DT.CRC32C).compute(5, 4, 3, b"abc")
    with pytest.raises(DigestMismatchError):
        DigestManager(11, DT.CRC32).verify(body)
    with pytest.raises(DigestMismatchError):
        DigestManager(11, DT.HMAC).verify(body)


@given(
    ledger=ids,
    entry=ids,
    lac=st.integers(min_value=INT64_MIN, max_value=INT64_MAX),
    length=st.integers(min_value=INT64_MIN, max_value=INT64_MAX),
    rest=st.binary(max_size=256),
)
def test_dummy_accepts_anything_well_formed(
    ledger: int, entry: int, lac: int, length: int, rest: bytes
) -> None:
    body = i64(ledger) + i64(entry) + i64(lac) + i64(length) + rest
    got = DigestManager(ledger, DT.DUMMY).verify(body, entry)
    assert (got.ledger_id, got.entry_id, got.last_add_confirmed, got.length) == (
        ledger,
        entry,
        lac,
        length,
    )
    assert bytes(got.payload) == rest


def test_dummy_still_checks_size_and_ids() -> None:
    dm = DigestManager(1, DT.DUMMY)
    body = dm.compute(2, 1, 3, b"abc")
    with pytest.raises(DigestMismatchError, match="truncated"):
        dm.verify(body[:31])
    with pytest.raises(DigestMismatchError, match="wrong entry"):
        dm.verify(body, 3)
    with pytest.raises(DigestMismatchError, match="wrong ledger"):
        DigestManager(2, DT.DUMMY).verify(body)


@pytest.mark.parametrize("digest_type", CHECKED)
def test_lac_corruption_is_caught(digest_type: DT) -> None:
    dm = DigestManager(21, digest_type, b"pw")
    body = dm.compute_lac(1234)
    for bit in range(len(body) * 8):
        corrupt = bytearray(body)
        corrupt[bit // 8] ^= 1 << (bit % 8)
        with pytest.raises(DigestMismatchError, match="LAC digest mismatch"):
            dm.verify_lac(bytes(corrupt))
    for cut in range(len(body)):
        with pytest.raises(DigestMismatchError, match="truncated"):
            dm.verify_lac(body[:cut])
    with pytest.raises(DigestMismatchError, match="oversized"):
        dm.verify_lac(body + b"\0")


@pytest.mark.parametrize("digest_type", ALL)
def test_lac_of_another_ledger_is_rejected(digest_type: DT) -> None:
    body = DigestManager(21, digest_type, b"pw").compute_lac(7)
    with pytest.raises(DigestMismatchError, match="wrong ledger"):
        DigestManager(22, digest_type, b"pw").verify_lac(body)


# ---------------------------------------------------------------------------
# parse_header
# ---------------------------------------------------------------------------


def test_parse_header_does_not_verify() -> None:
    dm = DigestManager(9, DT.CRC32C)
    body = bytearray(dm.compute(3, 2, 10, b"0123456789"))
    body[-1] ^= 0xFF  # corrupt the payload: parse_header does not care
    assert parse_header(body) == (9, 3, 2, 10)
    assert dm.parse_header(memoryview(body)) == (9, 3, 2, 10)
    with pytest.raises(DigestMismatchError):
        dm.verify(body)
    with pytest.raises(DigestMismatchError, match="truncated"):
        parse_header(bytes(body[:31]))


# ---------------------------------------------------------------------------
# Speed guard (very lax: measured ~300k compute+verify pairs/s on 2 cores)
# ---------------------------------------------------------------------------


def test_crc32c_is_fast_enough_for_the_writer() -> None:
    dm = DigestManager(1, DT.CRC32C)
    payload = os.urandom(1024)
    n = 10_000
    start = time.perf_counter()
    for i in range(n):
        dm.verify(dm.compute(i, i - 1, (i + 1) * 1024, payload), i)
    elapsed = time.perf_counter() - start
    assert n / elapsed > 10_000, f"only {n / elapsed:.0f} compute+verify/s"
