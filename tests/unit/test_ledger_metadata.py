"""Ledger metadata: BookKeeper's v3 bytes, the BP-44 v4 extension, validation,
and the hierarchical znode layout."""

from __future__ import annotations

import datetime as dt
import json
import string

import pytest
from hypothesis import assume, given, settings
from hypothesis import strategies as st

from dlog.errors import IncorrectParameterError, MetadataSerializationError
from dlog.ledger import layout
from dlog.ledger.metadata import (
    CloseReason,
    DigestType,
    LedgerCloseContext,
    LedgerCreateContext,
    LedgerMetadata,
    LedgerOwner,
    LedgerState,
    deserialize,
    serialize,
    to_dict,
    to_text,
)
from dlog.protocol import data_formats_pb2 as pb

INT64 = st.integers(-(2**63), 2**63 - 1)
NON_NEG64 = st.integers(0, 2**63 - 1)


def make_md(**overrides) -> LedgerMetadata:
    fields = dict(
        ledger_id=1234,
        ensemble_size=3,
        write_quorum_size=2,
        ack_quorum_size=2,
        ensembles=((0, ("a:1", "b:2", "c:3")),),
        digest_type=DigestType.CRC32C,
        password=b"pw",
        ctoken=7,
    )
    fields.update(overrides)
    return LedgerMetadata(**fields)


# ---------------------------------------------------------------------------
# strategies
# ---------------------------------------------------------------------------

bookie_ids = st.builds(
    lambda host, port: f"{host}:{port}",
    st.text(string.ascii_lowercase + string.digits + ".-", min_size=1, max_size=12),
    st.integers(1, 65535),
)
short_text = st.text(max_size=20)


@st.composite
def ensembles(draw, size: int):
    count = draw(st.integers(1, 4))
    firsts = [0] + sorted(
        draw(st.sets(st.integers(1, 2**40), min_size=count - 1, max_size=count - 1))
    )
    return tuple(
        (first, tuple(draw(st.lists(bookie_ids, min_size=size, max_size=size, unique=True))))
        for first in firsts
    )


owners = st.builds(
    LedgerOwner,
    st.none() | short_text,
    st.none() | short_text,
    st.none() | short_text,
    st.none() | short_text,
)
opt_non_neg = st.none() | NON_NEG64
create_contexts = st.builds(
    LedgerCreateContext,
    created_by=st.none() | owners,
    created_on_behalf_of=st.none() | owners,
    part_of_data_set=st.none() | st.text(max_size=64),
    expected_max_open_duration_ms=opt_non_neg,
    expected_max_entries=opt_non_neg,
    expected_max_length=opt_non_neg,
    expected_average_entry_size=opt_non_neg,
    expected_entry_size_std_dev=st.none()
    | st.floats(min_value=0, allow_nan=False, allow_infinity=False),
    expected_average_entry_add_rate_per_second=opt_non_neg,
    expected_maximum_entry_add_rate_per_second=opt_non_neg,
    follows_ledger=opt_non_neg,
    child_of_ledger=opt_non_neg,
)


@st.composite
def close_contexts(draw):
    reason = draw(st.none() | st.sampled_from(CloseReason))
    message = draw(st.none() | st.text(max_size=80)) if reason is CloseReason.ABNORMAL else None
    return LedgerCloseContext(
        reason=reason,
        abnormal_message=message,
        expect_delete_after_ms=draw(opt_non_neg),
        expect_reads_until_ms=draw(opt_non_neg),
    )


@st.composite
def metadatas(draw, bp44: bool | None = None):
    e = draw(st.integers(1, 5))
    wq = draw(st.integers(1, e))
    aq = draw(st.integers(1, wq))
    state = draw(st.sampled_from(LedgerState))
    closed = state is LedgerState.CLOSED
    with_contexts = draw(st.booleans()) if bp44 is None else bp44
    md = LedgerMetadata(
        ledger_id=draw(NON_NEG64),
        ensemble_size=e,
        write_quorum_size=wq,
        ack_quorum_size=aq,
        ensembles=draw(ensembles(e)),
        state=state,
        last_entry_id=draw(st.integers(-1, 2**62)) if closed else -1,
        length=draw(st.integers(0, 2**62)) if closed else 0,
        digest_type=draw(st.sampled_from(DigestType)),
        password=draw(st.binary(max_size=24)),
        ctime=draw(st.none() | NON_NEG64),
        custom_metadata=draw(st.dictionaries(short_text, st.binary(max_size=16), max_size=4)),
        ctoken=draw(st.none() | INT64),
    )
    if with_contexts:
        md = md.replace(
            create_context=draw(st.none() | create_contexts),
            close_context=draw(st.none() | close_contexts()),
            seal_time=draw(st.none() | NON_NEG64),
        )
        if md.format_version == 3:
            md = md.replace(seal_time=draw(NON_NEG64))
    return md


# ---------------------------------------------------------------------------
# round trips and headers
# ---------------------------------------------------------------------------


@settings(max_examples=300)
@given(metadatas())
def test_round_trip(md: LedgerMetadata) -> None:
    data = serialize(md)
    back = deserialize(data, md.ledger_id)
    assert back == md
    assert serialize(back) == data


@given(metadatas(bp44=False))
def test_without_contexts_it_is_plain_v3(md: LedgerMetadata) -> None:
    data = serialize(md)
    assert md.format_version == 3
    assert data.startswith(b"BookieMetadataFormatVersion\t3\n")
    # A v3 reader (the generated v3 fields only) sees every byte as known.
    body = _body(data)
    fmt = pb.LedgerMetadataFormat.FromString(body)
    for name in ("createContext", "closeContext", "sealTime"):
        assert not fmt.HasField(name)


@given(metadatas(bp44=True))
def test_with_contexts_it_is_v4(md: LedgerMetadata) -> None:
    assert md.format_version == 4
    assert serialize(md).startswith(b"BookieMetadataFormatVersion\t4\n")


def _body(data: bytes) -> bytes:
    header_end = data.index(b"\n") + 1
    size, pos = _varint(data, header_end)
    assert pos + size == len(data)
    return data[pos:]


def test_byte_exact_v3_matches_bookkeeper_writer() -> None:
    """Every field BookKeeper's v3 writer emits, in field-number order, nothing else."""
    data = serialize(make_md())
    body = (
        b"\x08\x02"  # quorumSize (write quorum) = 2
        b"\x10\x03"  # ensembleSize = 3
        b"\x18\x00"  # length = 0
        b"\x20" + b"\xff" * 9 + b"\x01"  # lastEntryId = -1 (always written)
        b"\x28\x01"  # state = OPEN
        b"\x32\x11"  # segment, 17 bytes
        b"\x0a\x03a:1\x0a\x03b:2\x0a\x03c:3"  # ensembleMember x3
        b"\x10\x00"  # firstEntryId = 0
        b"\x38\x03"  # digestType = CRC32C
        b"\x42\x02pw"  # password
        b"\x48\x02"  # ackQuorumSize = 2
        b"\x60\x07"  # cToken = 7
    )
    assert data == b"BookieMetadataFormatVersion\t3\n" + bytes([len(body)]) + body


def test_empty_password_and_ctime_and_custom_metadata_bytes() -> None:
    md = make_md(password=b"", ctime=1, custom_metadata={"k": b"v"}, ctoken=None)
    body = _body(serialize(md))
    assert b"\x42\x00" in body  # empty password still written, as BookKeeper does
    assert body.endswith(b"\x50\x01\x5a\x06\x0a\x01k\x12\x01v")  # ctime, customMetadata
    assert b"\x60" not in body[-3:]  # no cToken when None


def test_long_message_uses_multibyte_length() -> None:
    md = make_md(custom_metadata={"k": b"x" * 300})
    data = serialize(md)
    header = b"BookieMetadataFormatVersion\t3\n"
    assert data[len(header)] & 0x80  # varint32 continues
    assert deserialize(data, 1234) == md


# ---------------------------------------------------------------------------
# rejection
# ---------------------------------------------------------------------------


def test_every_truncation_is_rejected() -> None:
    md = make_md(
        state=LedgerState.CLOSED,
        last_entry_id=9,
        length=99,
        close_context=LedgerCloseContext.inactive(expect_delete_after=5),
    )
    data = serialize(md)
    for cut in range(len(data)):
        with pytest.raises(MetadataSerializationError):
            deserialize(data[:cut], 1)


def test_trailing_bytes_are_rejected() -> None:
    with pytest.raises(MetadataSerializationError, match="unexpected bytes"):
        deserialize(serialize(make_md()) + b"\x00", 1)


@pytest.mark.parametrize(
    ("data", "match"),
    [
        (b"", "header corrupt"),
        (b"garbage", "header corrupt"),
        (b"BookieMetadataFormatVersion\t", "format version"),
        (b"BookieMetadataFormatVersion\tx\n\x00", "format version"),
        (b"BookieMetadataFormatVersion\t12345678901\n", "format version"),
        (b"BookieMetadataFormatVersion\t5\n\x00", "version 5 is not supported"),
        (b"BookieMetadataFormatVersion\t1\n2\n3\n0\n0\ta:1\tb:2\tc:3\n", "version 1"),
        (
            b"BookieMetadataFormatVersion\t2\nquorumSize: 2\nensembleSize: 3\nlength: 0\n"
            b'state: OPEN\nsegment {\n  ensembleMember: "a:1"\n  firstEntryId: 0\n}\n',
            "version 2",
        ),
        (b"BookieMetadataFormatVersion\t3\n\xff\xff\xff\xff\xff\xff", "varint"),
        (b"BookieMetadataFormatVersion\t3\n\xff\xff\xff\xff\x7f", "varint"),
        (b"BookieMetadataFormatVersion\t3\n\x80", "varint"),
        (b"BookieMetadataFormatVersion\t3\n\x05\x08\x02", "truncated"),
        (b"BookieMetadataFormatVersion\t3\n\x03\xff\xff\xff", "does not decode"),
        (b"BookieMetadataFormatVersion\t3\n\x02\x08\x02", "required"),
        (  # a bookie id that is not UTF-8
            b"BookieMetadataFormatVersion\t3\n\x0f\x08\x01\x10\x01\x18\x00\x28\x01"
            b"\x32\x05\x0a\x01\xff\x10\x00",
            "not valid",
        ),
    ],
)
def test_bad_input_is_rejected(data: bytes, match: str) -> None:
    with pytest.raises(MetadataSerializationError, match=match):
        deserialize(data, 1)


def _reframe(body: bytes, version: int = 3) -> bytes:
    return b"BookieMetadataFormatVersion\t%d\n%s%s" % (version, bytes([len(body)]), body)


def test_unknown_state_or_digest_is_rejected() -> None:
    body = _body(serialize(make_md()))
    with pytest.raises(MetadataSerializationError, match="state"):
        deserialize(_reframe(body.replace(b"\x28\x01", b"\x28\x09")), 1)
    with pytest.raises(MetadataSerializationError, match="digestType"):
        deserialize(_reframe(body.replace(b"\x38\x03", b"\x38\x09")), 1)


def test_v3_header_with_v4_fields_is_rejected() -> None:
    data = serialize(make_md(seal_time=5))
    body = _body(data)
    with pytest.raises(MetadataSerializationError, match="BP-44"):
        deserialize(_reframe(body, 3), 1)


def test_decoded_but_invalid_metadata_is_rejected() -> None:
    fmt = pb.LedgerMetadataFormat(quorumSize=3, ensembleSize=2, length=0, state=1)
    seg = fmt.segment.add(firstEntryId=0)
    seg.ensembleMember.extend(["a:1", "b:2"])
    with pytest.raises(MetadataSerializationError, match="not valid"):
        deserialize(_reframe(fmt.SerializeToString()), 1)
    closed = pb.LedgerMetadataFormat(quorumSize=1, ensembleSize=1, length=0, state=3)
    closed.segment.add(firstEntryId=0).ensembleMember.append("a:1")
    with pytest.raises(MetadataSerializationError, match="lastEntryId"):
        deserialize(_reframe(closed.SerializeToString()), 1)


@settings(max_examples=300)
@given(st.binary(max_size=80))
def test_garbage_body_never_yields_an_unexpected_error(body: bytes) -> None:
    data = b"BookieMetadataFormatVersion\t3\n" + bytes([len(body)]) + body
    try:
        md = deserialize(data, 1)
    except MetadataSerializationError:
        return
    # Whatever decodes must be valid metadata that round-trips.
    assert deserialize(serialize(md), 1) == md


def test_bookkeeper_reader_semantics_for_open_ledgers_and_missing_ack_quorum() -> None:
    fmt = pb.LedgerMetadataFormat(
        quorumSize=2, ensembleSize=2, length=77, lastEntryId=5, state=LedgerState.IN_RECOVERY
    )
    fmt.segment.add(firstEntryId=0).ensembleMember.extend(["a:1", "b:2"])
    md = deserialize(_reframe(fmt.SerializeToString()), 9)
    # Non-closed: lastEntryId/length ignored; absent ackQuorumSize = write quorum.
    assert (md.last_entry_id, md.length, md.ack_quorum_size) == (-1, 0, 2)
    assert md.ctoken is None and md.ctime is None


# ---------------------------------------------------------------------------
# validation
# ---------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("overrides", "match"),
    [
        (
            dict(ensemble_size=2, write_quorum_size=3, ensembles=((0, ("a:1", "b:2")),)),
            "ensemble_size >= write_quorum",
        ),
        (dict(write_quorum_size=1, ack_quorum_size=2), "write_quorum_size >= ack_quorum"),
        (dict(ack_quorum_size=0), "ack_quorum_size"),
        (dict(ensembles=((0, ("a:1", "b:2")),)), "has 2 bookies"),
        (dict(ensembles=((1, ("a:1", "b:2", "c:3")),)), "start at entry 0"),
        (dict(ensembles=()), "at least one ensemble"),
        (
            dict(ensembles=((0, ("a:1", "b:2", "c:3")), (0, ("a:1", "b:2", "d:4")))),
            "strictly increase",
        ),
        (
            dict(
                ensembles=(
                    (0, ("a:1", "b:2", "c:3")),
                    (5, ("a:1", "b:2", "d:4")),
                    (4, ("e:1", "b:2", "c:3")),
                )
            ),
            "strictly increase",
        ),
        (dict(ensembles=((0, ("a:1", "a:1", "c:3")),)), "twice"),
        (dict(ensembles=((0, ("a:1", "", "c:3")),)), "non-empty"),
        (dict(state=LedgerState.CLOSED, last_entry_id=-2), "last_entry_id -2"),
        (dict(state=LedgerState.CLOSED, length=-1), "negative length"),
        (dict(last_entry_id=3), "OPEN ledger must have"),
        (dict(state=LedgerState.IN_RECOVERY, length=3), "IN_RECOVERY ledger must have"),
        (dict(ledger_id=-1), "ledger_id"),
        (dict(ledger_id=2**63), "ledger_id"),
        (dict(password="pw"), "password"),
        (dict(custom_metadata={"k": "v"}), "custom_metadata"),
        (dict(digest_type=9), "DigestType"),
    ],
)
def test_validation(overrides: dict, match: str) -> None:
    with pytest.raises(IncorrectParameterError, match=match):
        make_md(**overrides)


def test_context_validation() -> None:
    LedgerCreateContext(part_of_data_set="é" * 128)  # 256 bytes: fine
    with pytest.raises(IncorrectParameterError, match="256 bytes"):
        LedgerCreateContext(part_of_data_set="é" * 128 + "x")
    with pytest.raises(IncorrectParameterError, match="256 bytes"):
        LedgerCloseContext.abnormal("x" * 257)
    with pytest.raises(IncorrectParameterError, match="only allowed with reason ABNORMAL"):
        LedgerCloseContext(reason=CloseReason.INACTIVE, abnormal_message="boom")
    with pytest.raises(IncorrectParameterError, match="expected_max_entries"):
        LedgerCreateContext(expected_max_entries=-1)
    with pytest.raises(IncorrectParameterError, match="std_dev"):
        LedgerCreateContext(expected_entry_size_std_dev=float("nan"))
    with pytest.raises(IncorrectParameterError, match="LedgerOwner"):
        LedgerCreateContext(created_by=("a", "b", "c", "d"))  # type: ignore[arg-type]


def test_close_context_constructors() -> None:
    when = dt.datetime(2021, 3, 15, 20, 21, 11, tzinfo=dt.UTC)
    cases = {
        LedgerCloseContext.client_shutdown(): CloseReason.CLIENT_SHUTDOWN,
        LedgerCloseContext.max_length_reached(): CloseReason.MAX_LENGTH_REACHED,
        LedgerCloseContext.max_entries_reached(): CloseReason.MAX_ENTRY_COUNT_REACHED,
        LedgerCloseContext.no_more_data(): CloseReason.NO_MORE_DATA,
        LedgerCloseContext.inactive(): CloseReason.INACTIVE,
        LedgerCloseContext.time_rotation(): CloseReason.TIME_ROTATION,
        LedgerCloseContext.abnormal(): CloseReason.ABNORMAL,
    }
    for ctx, reason in cases.items():
        assert ctx.reason is reason
    ctx = LedgerCloseContext.inactive(expect_delete_after=when, expect_reads_until=1000)
    assert ctx.expect_delete_after_ms == 1615839671000
    assert ctx.expect_reads_until_ms == 1000
    assert LedgerCloseContext.abnormal("disk on fire").abnormal_message == "disk on fire"
    with pytest.raises(IncorrectParameterError, match="timezone"):
        LedgerCloseContext.inactive(expect_delete_after=dt.datetime(2021, 1, 1))


def test_enum_values_equal_the_proto() -> None:
    assert {e.name: e.value for e in DigestType} == dict(pb.LedgerMetadataFormat.DigestType.items())
    assert {e.name: e.value for e in LedgerState} == dict(pb.LedgerMetadataFormat.State.items())
    assert {e.name: e.value for e in CloseReason} == dict(
        pb.LedgerCloseContextFormat.Reason.items()
    )


# ---------------------------------------------------------------------------
# helpers
# ---------------------------------------------------------------------------


def test_ensemble_helpers() -> None:
    md = make_md(
        ensembles={
            0: ["a:1", "b:2", "c:3"],
            10: ["a:1", "d:4", "c:3"],
            25: ["e:5", "d:4", "c:3"],
        }
    )
    assert md.ensembles[1] == (10, ("a:1", "d:4", "c:3"))
    assert md.ensemble_for(0) == ("a:1", "b:2", "c:3")
    assert md.ensemble_for(9) == ("a:1", "b:2", "c:3")
    assert md.ensemble_for(10) == ("a:1", "d:4", "c:3")
    assert md.ensemble_for(24) == ("a:1", "d:4", "c:3")
    assert md.ensemble_for(10**12) == ("e:5", "d:4", "c:3")
    assert md.last_ensemble == ("e:5", "d:4", "c:3")
    assert md.next_ensemble_change(9) == 10 and md.next_ensemble_change(25) is None
    assert md.bookies() == {"a:1", "b:2", "c:3", "d:4", "e:5"}
    with pytest.raises(IncorrectParameterError):
        md.ensemble_for(-1)

    appended = md.with_ensemble(30, ["f:6", "d:4", "c:3"])
    assert appended.ensembles[-1] == (30, ("f:6", "d:4", "c:3"))
    replaced = md.with_ensemble(25, ["g:7", "d:4", "c:3"])
    assert len(replaced.ensembles) == 3 and replaced.last_ensemble[0] == "g:7"
    with pytest.raises(IncorrectParameterError):
        md.with_ensemble(20, ["g:7", "d:4", "c:3"])
    assert md.ensembles[-1][0] == 25  # original untouched


def test_replace_validates_and_format_version() -> None:
    md = make_md()
    assert md.format_version == 3 and not md.is_closed
    closed = md.replace(state=LedgerState.CLOSED, last_entry_id=3, length=40)
    assert closed.is_closed and closed.format_version == 3
    assert closed.replace(seal_time=1).format_version == 4
    assert closed.replace(close_context=LedgerCloseContext()).format_version == 4
    assert md.replace(create_context=LedgerCreateContext()).format_version == 4
    with pytest.raises(IncorrectParameterError):
        md.replace(last_entry_id=5)
    hash(closed)  # frozen and hashable


def test_to_dict_and_to_text() -> None:
    md = make_md(
        state=LedgerState.CLOSED,
        last_entry_id=3,
        length=40,
        ctime=1615815339000,
        custom_metadata={"app": b"\x00\x01"},
        create_context=LedgerCreateContext(
            created_by=LedgerOwner("Company X", "System y", "service.z", "host1"),
            part_of_data_set="persistent://public/default/t",
        ),
        close_context=LedgerCloseContext.inactive(expect_delete_after=1615839671000),
        seal_time=1615827501000,
    )
    d = to_dict(md)
    json.dumps(d)
    assert d["state"] == "CLOSED" and d["digest_type"] == "CRC32C"
    assert d["password"] is None and to_dict(md, include_password=True)["password"] == "cHc="
    assert d["custom_metadata"] == {"app": "AAE="}
    assert d["ensembles"] == [{"first_entry_id": 0, "bookies": ["a:1", "b:2", "c:3"]}]
    assert d["create_context"]["created_by"]["enterprise"] == "Company X"
    assert d["close_context"]["reason"] == "INACTIVE"
    assert d["seal_time"] == 1615827501000 and d["format_version"] == 4
    text = to_text(md)
    assert "ledgerID: 1234" in text and "state: CLOSED" in text
    assert "  0: [a:1, b:2, c:3]" in text and "password: OMITTED" in text
    assert "lastEntryId: 3" in text and "reason: INACTIVE" in text
    assert "2021-03-15T13:35:39.000Z" in text  # ctime rendered readable


# ---------------------------------------------------------------------------
# an independent decoder, from the field numbers in formats.md section 3
# ---------------------------------------------------------------------------


def _varint(buf: bytes, pos: int) -> tuple[int, int]:
    result = shift = 0
    while True:
        b = buf[pos]
        pos += 1
        result |= (b & 0x7F) << shift
        if b < 0x80:
            return result, pos
        shift += 7


def _fields(buf: bytes) -> list[tuple[int, int | bytes]]:
    """(field number, value) pairs; varints as ints, length-delimited as bytes."""
    out: list[tuple[int, int | bytes]] = []
    pos = 0
    while pos < len(buf):
        key, pos = _varint(buf, pos)
        number, wire = key >> 3, key & 7
        if wire == 0:
            value, pos = _varint(buf, pos)
            out.append((number, value))
        elif wire == 2:
            size, pos = _varint(buf, pos)
            out.append((number, buf[pos : pos + size]))
            pos += size
        elif wire == 1:
            out.append((number, buf[pos : pos + 8]))
            pos += 8
        else:
            raise AssertionError(f"unexpected wire type {wire}")
    return out


def _signed64(v: int) -> int:
    return v - 2**64 if v >= 2**63 else v


def _decode(data: bytes) -> tuple[int, list[tuple[int, int | bytes]]]:
    prefix = b"BookieMetadataFormatVersion\t"
    assert data.startswith(prefix)
    nl = data.index(b"\n")
    version = int(data[len(prefix) : nl])
    size, pos = _varint(data, nl + 1)
    assert len(data) - pos == size
    return version, _fields(data[pos:])


def test_independent_decoder_reads_v3_and_v4() -> None:
    md = make_md(
        state=LedgerState.CLOSED,
        last_entry_id=41,
        length=4096,
        ensembles={0: ["a:1", "b:2", "c:3"], 20: ["a:1", "d:4", "c:3"]},
        digest_type=DigestType.HMAC,
        password=b"secret",
        ctime=1700000000123,
        custom_metadata={"owner": b"dlog", "z": b"\xff"},
        ctoken=99,
    )
    version, fields = _decode(serialize(md))
    assert version == 3
    numbers = [n for n, _ in fields]
    assert numbers == sorted(numbers)  # protobuf-java writes in field-number order
    assert max(numbers) <= 12
    f = {}
    for n, v in fields:
        f.setdefault(n, []).append(v)
    assert f[1] == [2] and f[2] == [3] and f[9] == [2]  # write quorum, ensemble, ack quorum
    assert f[3] == [4096] and _signed64(f[4][0]) == 41 and f[5] == [3]  # length, last, CLOSED
    segments = []
    for seg in f[6]:
        sf = _fields(seg)
        segments.append(
            (
                next(v for n, v in sf if n == 2),
                [v.decode() for n, v in sf if n == 1],
            )
        )
    assert segments == [(0, ["a:1", "b:2", "c:3"]), (20, ["a:1", "d:4", "c:3"])]
    assert f[7] == [2] and f[8] == [b"secret"] and f[10] == [1700000000123] and f[12] == [99]
    custom = {dict(_fields(e))[1].decode(): dict(_fields(e))[2] for e in f[11]}
    assert custom == {"owner": b"dlog", "z": b"\xff"}

    v4 = md.replace(
        create_context=LedgerCreateContext(
            created_by=LedgerOwner("X", "Y", "z", "h"), part_of_data_set="ds", follows_ledger=7
        ),
        close_context=LedgerCloseContext.abnormal("boom", expect_delete_after=123),
        seal_time=1700000009999,
    )
    version, fields4 = _decode(serialize(v4))
    assert version == 4
    assert [x for x in fields4 if x[0] <= 12] == fields  # the v3 part is unchanged
    extra = {n: v for n, v in fields4 if n > 12}
    assert sorted(extra) == [100, 101, 102]
    assert extra[102] == 1700000009999
    create = dict(_fields(extra[100]))
    assert create[3] == b"ds" and create[11] == 7
    assert [v.decode() for _, v in _fields(create[1])] == ["X", "Y", "z", "h"]
    close = dict(_fields(extra[101]))
    assert close == {1: CloseReason.ABNORMAL.value, 2: b"boom", 3: 123}


# ---------------------------------------------------------------------------
# layout
# ---------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("ledger_id", "path"),
    [
        (0, "/ledgers/00/0000/L0000"),
        (1234, "/ledgers/00/0000/L1234"),
        (12345678, "/ledgers/00/1234/L5678"),
        (2**31 - 2, "/ledgers/21/4748/L3646"),
        (2**31 - 1, "/ledgers/000/0000/0021/4748/L3647"),  # Integer.MAX_VALUE: long layout
        (2**32, "/ledgers/000/0000/0042/9496/L7296"),
        (2**63 - 1, "/ledgers/922/3372/0368/5477/L5807"),
    ],
)
def test_ledger_path_examples(ledger_id: int, path: str) -> None:
    assert layout.ledger_path("/ledgers", ledger_id) == path
    assert layout.parse_ledger_path("/ledgers", path) == ledger_id


def test_ledger_path_rejects_bad_ids_and_roots() -> None:
    for bad in (-1, 2**63, True, "1"):
        with pytest.raises(IncorrectParameterError):
            layout.ledger_path("/ledgers", bad)  # type: ignore[arg-type]
    for root in ("ledgers", "/ledgers/"):
        with pytest.raises(IncorrectParameterError):
            layout.ledger_path(root, 1)
    assert layout.ledger_path("/", 1) == "/00/0000/L0001"
    assert layout.ledger_path("/a/b", 1) == "/a/b/00/0000/L0001"


@given(st.integers(0, 2**63 - 1))
def test_parse_ledger_path_round_trip(ledger_id: int) -> None:
    path = layout.ledger_path("/x/ledgers", ledger_id)
    assert layout.parse_ledger_path("/x/ledgers", path) == ledger_id


@pytest.mark.parametrize(
    "path",
    [
        "/other/00/0000/L1234",
        "/ledgers",
        "/ledgers/",
        "/ledgers/00/0000/1234",
        "/ledgers/00/0000/L123",
        "/ledgers/00/0000/L12345",
        "/ledgers/0/00000/L1234",
        "/ledgers/00/0000/L1234/x",
        "/ledgers//00/0000/L1234",
        "/ledgers/00/000a/L1234",
        "/ledgers/00/0000/L١٢٣٤",  # non-ASCII digits
        "/ledgers/000/0000/0000/0000/L1234",  # long layout for a short id
        "/ledgers/21/4748/L3647",  # legacy layout for Integer.MAX_VALUE
        "/ledgers/999/9999/9999/9999/L9999",  # beyond Long.MAX_VALUE
        "/ledgers/available",
        "/ledgersx/00/0000/L1234",
    ],
)
def test_parse_ledger_path_rejects(path: str) -> None:
    with pytest.raises(IncorrectParameterError):
        layout.parse_ledger_path("/ledgers", path)


def test_reserved_children_and_layout_data() -> None:
    for name in (
        "available",
        "cookies",
        "underreplication",
        "LAYOUT",
        "INSTANCEID",
        "idgen",
        "idgen-long",
        "ORPHANED",
    ):
        assert name in layout.RESERVED_CHILDREN and layout.is_reserved_child(name)
    assert layout.is_reserved_child("ID-0000000001")
    assert not layout.is_reserved_child("00") and not layout.is_reserved_child("000")
    assert layout.LAYOUT_DATA == b"2\norg.apache.bookkeeper.meta.HierarchicalLedgerManagerFactory:1"


@given(st.text(max_size=30))
def test_parse_ledger_path_never_crashes(rest: str) -> None:
    assume("\x00" not in rest)
    try:
        layout.parse_ledger_path("/ledgers", "/ledgers/" + rest)
    except IncorrectParameterError:
        pass
