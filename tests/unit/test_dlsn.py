"""DLSN: ordering, constants and DistributedLog-compatible serialization."""

from __future__ import annotations

import base64
import copy
import pickle
import struct

import pytest
from hypothesis import given
from hypothesis import strategies as st

from dlog.dlsn import (
    DLSN,
    InitialDLSN,
    InvalidDLSN,
    NonInclusiveLowerBound,
    parse_dlsn,
)
from dlog.errors import InvalidDLSNError, InvalidRecordError

INT64 = st.integers(min_value=-(2**63), max_value=2**63 - 1)
DLSNS = st.builds(DLSN, INT64, INT64, INT64)
SMALL = st.integers(min_value=-3, max_value=3)
SMALL_DLSNS = st.builds(DLSN, SMALL, SMALL, SMALL)


# ---------------------------------------------------------------------------
# Construction, constants, ordering
# ---------------------------------------------------------------------------


def test_constants_match_distributedlog() -> None:
    assert InitialDLSN == DLSN(1, 0, 0)
    assert NonInclusiveLowerBound == DLSN(1, 0, -1)
    assert InvalidDLSN == DLSN(0, -1, -1)
    assert DLSN.INITIAL is InitialDLSN
    assert DLSN.NON_INCLUSIVE_LOWER_BOUND is NonInclusiveLowerBound
    assert DLSN.INVALID is InvalidDLSN
    assert InvalidDLSN < NonInclusiveLowerBound < InitialDLSN


def test_fields_and_str() -> None:
    d = DLSN(7, 8, 9)
    assert (d.log_segment_sequence_no, d.entry_id, d.slot_id) == (7, 8, 9)
    assert str(d) == "DLSN{logSegmentSequenceNo=7, entryId=8, slotId=9}"
    assert repr(d) == "DLSN(7, 8, 9)"
    assert eval(repr(d)) == d
    with pytest.raises(AttributeError):
        d.slot_id = 3  # type: ignore[misc]


def test_next_and_next_segment() -> None:
    assert DLSN(3, 4, 5).next() == DLSN(3, 4, 6)
    assert type(DLSN(3, 4, 5).next()) is DLSN
    assert NonInclusiveLowerBound.next() == InitialDLSN
    assert DLSN(3, 4, 5).position_on_next_segment() == DLSN(4, 0, 0)


@pytest.mark.parametrize(
    "args",
    [(2**63, 0, 0), (0, -(2**63) - 1, 0), (0, 0, 2**64), (True, 0, 0), (1.0, 0, 0), ("1", 0, 0)],
)
def test_constructor_rejects_bad_fields(args: tuple) -> None:
    with pytest.raises(InvalidDLSNError):
        DLSN(*args)


def test_invalid_dlsn_error_is_a_record_error_and_value_error() -> None:
    with pytest.raises(InvalidRecordError):
        DLSN.deserialize("x")
    with pytest.raises(ValueError):
        DLSN.deserialize("x")


@given(SMALL_DLSNS, SMALL_DLSNS)
def test_ordering_is_lexicographic(a: DLSN, b: DLSN) -> None:
    ta, tb = tuple(a), tuple(b)
    assert (a < b) == (ta < tb)
    assert (a <= b) == (ta <= tb)
    assert (a > b) == (ta > tb)
    assert (a == b) == (ta == tb)
    assert (a != b) == (ta != tb)
    if a == b:
        assert hash(a) == hash(b)


@given(st.lists(DLSNS, max_size=20))
def test_sorting_matches_component_order(dlsns: list[DLSN]) -> None:
    ordered = sorted(dlsns)
    keyed = sorted(dlsns, key=lambda d: (d.log_segment_sequence_no, d.entry_id, d.slot_id))
    assert ordered == keyed
    assert all(type(d) is DLSN for d in ordered)


@given(SMALL_DLSNS)
def test_next_is_strictly_greater_and_nothing_between(d: DLSN) -> None:
    n = d.next()
    assert d < n
    assert not any(d < x < n for x in (DLSN(d[0], d[1], d[2]), n))


def test_hashable_and_pickleable() -> None:
    d = DLSN(5, 6, 7)
    assert {d: 1}[DLSN(5, 6, 7)] == 1
    assert len({d, DLSN(5, 6, 7), DLSN(5, 6, 8)}) == 2
    for clone in (pickle.loads(pickle.dumps(d)), copy.copy(d), copy.deepcopy(d)):
        assert clone == d
        assert type(clone) is DLSN


# ---------------------------------------------------------------------------
# Wire forms: known vectors
# ---------------------------------------------------------------------------


def test_initial_dlsn_known_bytes_and_base64() -> None:
    raw = InitialDLSN.serialize_bytes()
    assert raw == bytes([1]) + struct.pack(">qqq", 1, 0, 0)
    assert raw.hex() == "01" + "0000000000000001" + "00" * 16
    assert len(raw) == 25
    assert InitialDLSN.serialize() == "AQAAAAAAAAABAAAAAAAAAAAAAAAAAAAAAA=="


def test_known_vectors() -> None:
    # Standard alphabet ('+', '/'), '=' padding, no line breaks.
    assert InvalidDLSN.serialize() == "AQAAAAAAAAAA/////////////////////w=="
    assert NonInclusiveLowerBound.serialize() == "AQAAAAAAAAABAAAAAAAAAAD//////////w=="
    assert DLSN(99, 88, 77).serialize() == "AQAAAAAAAABjAAAAAAAAAFgAAAAAAAAATQ=="
    assert DLSN.deserialize("AQAAAAAAAABjAAAAAAAAAFgAAAAAAAAATQ==") == DLSN(99, 88, 77)
    big = DLSN(2**63 - 1, -(2**63), -1)
    assert big.serialize_bytes().hex() == "01" + "7f" + "ff" * 7 + "80" + "00" * 7 + "ff" * 8


def test_version0_is_200_bytes_and_readable() -> None:
    # DistributedLog sized v0 as Long.SIZE*3 + Byte.SIZE = 200 (bits as bytes).
    d = DLSN(99, 88, 77)
    raw = d.serialize_bytes(0)
    assert len(raw) == 200
    assert raw[0] == 0
    assert raw[25:] == bytes(175)
    assert DLSN.deserialize_bytes(raw) == d
    text = d.serialize(0)
    assert len(text) == 268
    assert DLSN.deserialize(text) == d
    assert parse_dlsn(text) == d


def test_version0_rejects_non_zero_padding_and_wrong_length() -> None:
    raw = bytearray(DLSN(1, 2, 3).serialize_bytes(0))
    raw[199] = 1
    with pytest.raises(InvalidDLSNError, match="non-zero"):
        DLSN.deserialize_bytes(bytes(raw))
    with pytest.raises(InvalidDLSNError, match="version 0 DLSN must be 200 bytes, got 25"):
        DLSN.deserialize_bytes(b"\x00" + bytes(24))


def test_serialize_rejects_unknown_version() -> None:
    with pytest.raises(InvalidDLSNError):
        InitialDLSN.serialize_bytes(2)


# ---------------------------------------------------------------------------
# Round trips over the full int64 range
# ---------------------------------------------------------------------------


@given(DLSNS)
def test_bytes_round_trip(d: DLSN) -> None:
    raw = d.serialize_bytes()
    assert len(raw) == 25
    assert raw[0] == 1
    assert DLSN.deserialize_bytes(raw) == d
    assert DLSN.deserialize_bytes(bytearray(raw)) == d
    assert DLSN.deserialize_bytes(memoryview(raw)) == d


@given(DLSNS)
def test_base64_round_trip(d: DLSN) -> None:
    text = d.serialize()
    assert base64.b64decode(text, validate=True) == d.serialize_bytes()
    assert DLSN.deserialize(text) == d
    assert DLSN.deserialize(text.encode("ascii")) == d  # as ZooKeeper returns it
    assert type(DLSN.deserialize(text)) is DLSN


@given(DLSNS)
def test_parse_dlsn_accepts_every_human_form(d: DLSN) -> None:
    s, e, n = d
    assert parse_dlsn(d.serialize()) == d
    assert parse_dlsn(d.serialize(0)) == d
    assert parse_dlsn(str(d)) == d
    assert parse_dlsn(f"{s}/{e}/{n}") == d
    assert parse_dlsn(f"{s}:{e}:{n}") == d
    assert parse_dlsn(f"  {s}/{e}/{n}\n") == d
    assert parse_dlsn(f"DLSN{{ logSegmentSequenceNo = {s} ,entryId={e},  slotId={n} }}") == d


@pytest.mark.parametrize(
    "d",
    [
        InitialDLSN,  # 1/0/0
        NonInclusiveLowerBound,  # 1/0/-1
        InvalidDLSN,  # 0/-1/-1
        DLSN(-1, 0, 0),  # no special value: before every record
        DLSN(-(2**63), 2**63 - 1, -1),
    ],
)
def test_parse_dlsn_reads_distributedlogs_special_and_negative_dlsns(d: DLSN) -> None:
    s, e, n = d
    forms = [d.serialize(), d.serialize(0), str(d), f"{s}/{e}/{n}", f"{s}:{e}:{n}"]
    assert [parse_dlsn(text) for text in forms] == [d] * len(forms)


# ---------------------------------------------------------------------------
# Rejection of malformed input
# ---------------------------------------------------------------------------

VALID = InitialDLSN.serialize()


@pytest.mark.parametrize(
    ("text", "reason"),
    [
        ("", "empty"),
        ("baddlsn", "not valid base64"),
        (VALID[:-1], "not valid base64"),  # missing padding
        (VALID[:-2], "not valid base64"),
        (" " + VALID, "not valid base64"),
        (VALID + "\n", "not valid base64"),
        (VALID[:10] + "\n" + VALID[10:], "not valid base64"),
        (VALID[:-3] + "B==", "not canonical"),  # non-zero trailing bits
        (VALID.replace("A", "-", 1), "not valid base64"),  # URL-safe alphabet
        ("AQAAAAAAAAABAAAAAAAAAAAAAAAAAAAAAA==AA==", "not valid base64"),
        ("ÄQAAAAAAAAABAAAAAAAAAAAAAAAAAAAAAA==", "not valid base64"),
        (base64.b64encode(InitialDLSN.serialize_bytes() + b"\0").decode(), "must be 25 bytes"),
        (base64.b64encode(InitialDLSN.serialize_bytes()[:-1]).decode(), "must be 25 bytes"),
        (base64.b64encode(b"\x02" + bytes(24)).decode(), "unknown DLSN version 2"),
        ("A" * 1000, "too long"),
    ],
)
def test_deserialize_rejects(text: str, reason: str) -> None:
    with pytest.raises(InvalidDLSNError, match=reason):
        DLSN.deserialize(text)


@pytest.mark.parametrize("value", [None, 1, 1.5, ["AQ=="], object()])
def test_deserialize_rejects_wrong_types(value: object) -> None:
    with pytest.raises(InvalidDLSNError, match="must be"):
        DLSN.deserialize(value)  # type: ignore[arg-type]
    with pytest.raises(InvalidDLSNError, match="must be"):
        DLSN.deserialize_bytes(value)  # type: ignore[arg-type]
    with pytest.raises(InvalidDLSNError, match="must be"):
        parse_dlsn(value)  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("data", "reason"),
    [
        (b"", "empty"),
        (b"\x01", "must be 25 bytes, got 1"),
        (InitialDLSN.serialize_bytes() + b"\x00", "must be 25 bytes, got 26"),
        (b"\xff" + bytes(24), "unknown DLSN version 255"),
    ],
)
def test_deserialize_bytes_rejects(data: bytes, reason: str) -> None:
    with pytest.raises(InvalidDLSNError, match=reason):
        DLSN.deserialize_bytes(data)


@pytest.mark.parametrize(
    "text",
    [
        "1/2",
        "1/2/3/4",
        "1/2:3",
        "1 / 2 / 3",
        "a/b/c",
        "1/2/9223372036854775808",
        "DLSN{logSegmentSequenceNo=1, entryId=2}",
        "DLSN{entryId=2, logSegmentSequenceNo=1, slotId=3}",
        "DLSN(1, 2, 3)",
        "１/２/３",  # non-ASCII digits
        "   ",
    ],
)
def test_parse_dlsn_rejects(text: str) -> None:
    with pytest.raises(InvalidDLSNError):
        parse_dlsn(text)


@given(st.text(max_size=80))
def test_random_text_only_raises_invalid_dlsn(text: str) -> None:
    for parse in (DLSN.deserialize, parse_dlsn):
        try:
            result = parse(text)
        except InvalidDLSNError:
            continue
        assert type(result) is DLSN


@given(st.binary(max_size=260))
def test_random_bytes_only_raise_invalid_dlsn(data: bytes) -> None:
    for parse in (DLSN.deserialize_bytes, DLSN.deserialize):
        try:
            result = parse(data)
        except InvalidDLSNError:
            continue
        assert type(result) is DLSN
        assert result.serialize_bytes(data[0]) == data


@given(DLSNS, st.data())
def test_mutated_base64_only_raises_invalid_dlsn(d: DLSN, data: st.DataObject) -> None:
    text = d.serialize()
    i = data.draw(st.integers(0, len(text) - 1))
    c = data.draw(st.characters(codec="ascii"))
    mutated = text[:i] + c + text[i + 1 :]
    try:
        result = DLSN.deserialize(mutated)
    except InvalidDLSNError:
        return
    # A valid mutation must still decode to the bytes it spells.
    assert result.serialize() == mutated
