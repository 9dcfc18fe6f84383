"""Under-replicated ledger markers as upstream's ZkLedgerUnderreplicationManager
writes them: path layout and protobuf text-format data with ``ctime``
(DataFormats.proto UnderreplicatedLedgerFormat: replica = 1, ctime = 2)."""

from __future__ import annotations

import pytest
from google.protobuf import text_format
from hypothesis import given
from hypothesis import strategies as st

from dlog.errors import MetadataSerializationError
from dlog.protocol import underreplication as ur
from dlog.protocol.data_formats_pb2 import (
    AuditorVoteFormat,
    CheckAllLedgersFormat,
    LedgerRereplicationLayoutFormat,
    LockDataFormat,
    UnderreplicatedLedgerFormat,
)


def test_field_numbers_match_upstream() -> None:
    fields = UnderreplicatedLedgerFormat.DESCRIPTOR.fields_by_name
    assert fields["replica"].number == 1
    assert fields["ctime"].number == 2
    assert fields["ctime"].type == fields["ctime"].TYPE_INT64


def test_znode_path() -> None:
    # getParentZnodePath: four 16-bit groups in %04x; getUrLedgerZnode: urL%010d.
    assert (
        ur.ledger_znode("/ledgers", 1)
        == "/ledgers/underreplication/ledgers/0000/0000/0000/0001/urL0000000001"
    )
    lid = 0x0001_0002_ABCD_FFFF
    assert ur.ledger_znode("/a/ledgers/", lid) == (
        f"/a/ledgers/underreplication/ledgers/0001/0002/abcd/ffff/urL{lid}"
    )


def test_text_format_with_ctime() -> None:
    data = ur.encode(ur.UnderreplicatedLedger(("b1:3181", "b2:3181"), 1700000000123))
    assert data == b'replica: "b1:3181"\nreplica: "b2:3181"\nctime: 1700000000123\n'
    assert ur.decode(data) == ur.UnderreplicatedLedger(("b1:3181", "b2:3181"), 1700000000123)


def test_older_markers_without_ctime() -> None:
    assert ur.decode(b'replica: "b1:3181"\n') == ur.UnderreplicatedLedger(
        ("b1:3181",), ur.UNASSIGNED_CTIME
    )
    assert b"ctime" not in ur.encode(ur.UnderreplicatedLedger(("b1:3181",)))


@pytest.mark.parametrize("data", [b"\x0a\x07b1:3181", b"replica: 3", b"\xff"])
def test_rejects_binary_and_garbage(data: bytes) -> None:
    with pytest.raises(MetadataSerializationError):
        ur.decode(data)


# ---------------------------------------------------------------------------
# The other under-replication znodes (ZkLedgerUnderreplicationManager,
# ZkLedgerAuditorManager, BookKeeperConstants; DataFormats.proto).
# ---------------------------------------------------------------------------


ids = st.integers(min_value=0, max_value=2**63 - 1)
bookie_ids = st.text(min_size=1, max_size=40)


def test_other_field_numbers_match_upstream() -> None:
    layout = LedgerRereplicationLayoutFormat.DESCRIPTOR.fields_by_name
    assert (layout["type"].number, layout["version"].number) == (1, 2)
    assert LockDataFormat.DESCRIPTOR.fields_by_name["bookieId"].number == 1
    assert AuditorVoteFormat.DESCRIPTOR.fields_by_name["bookieId"].number == 1
    ctime = CheckAllLedgersFormat.DESCRIPTOR.fields_by_name["checkAllLedgersCTime"]
    assert ctime.number == 1 and ctime.type == ctime.TYPE_INT64


def test_paths() -> None:
    assert ur.layout_path("/ledgers") == "/ledgers/underreplication/LAYOUT"
    assert ur.locks_path("/ledgers/") == "/ledgers/underreplication/locks"
    assert ur.lock_znode("/ledgers", 42) == "/ledgers/underreplication/locks/urL0000000042"
    assert ur.disable_path("/l") == "/l/underreplication/disable"
    assert ur.lost_bookie_recovery_delay_path("/l") == "/l/underreplication/lostBookieRecoveryDelay"
    assert ur.check_all_ledgers_ctime_path("/l") == "/l/underreplication/checkallledgersctime"
    assert ur.election_path("/l") == "/l/underreplication/auditorelection"
    assert ur.orphan_check_interval_path("/l") == "/l/underreplication/orphanedLedgerCheckInterval"


def test_exact_text_formats() -> None:
    assert ur.encode_layout() == b'type: "BASIC"\nversion: 1\n'
    assert ur.encode_lock_data("host-1") == b'bookieId: "host-1"\n'
    assert ur.encode_lock_data("") == b""  # upstream without a host name
    assert ur.decode_lock_data(b"") is None
    assert ur.encode_vote("10.0.0.1:3181") == b'bookieId: "10.0.0.1:3181"\n'
    assert ur.encode_seconds(30) == b"30"
    assert ur.encode_seconds(-1) == b"-1"


def test_check_all_ledgers_ctime_is_binary() -> None:
    assert ur.encode_check_all_ledgers_ctime(1) == b"\x08\x01"
    assert ur.encode_check_all_ledgers_ctime(300) == b"\x08\xac\x02"
    assert ur.decode_check_all_ledgers_ctime(b"") == -1
    with pytest.raises(MetadataSerializationError):
        ur.decode_check_all_ledgers_ctime(b"checkAllLedgersCTime: 1")


@pytest.mark.parametrize(
    "data", [b'type: "BASIC"\n', b"version: 1\n", b"type: BASIC\nversion: 1\n", b"\xff"]
)
def test_layout_needs_both_fields(data: bytes) -> None:
    with pytest.raises(MetadataSerializationError):
        ur.decode_layout(data)


@pytest.mark.parametrize("data", [b"", b"3.5", b"ten", b"1 2", b"\xff"])
def test_bad_seconds(data: bytes) -> None:
    with pytest.raises(MetadataSerializationError):
        ur.decode_seconds(data)


def test_vote_order_is_numeric() -> None:
    votes = ["V_0000000010", "V_0000000002", "V_10000000000"]
    assert sorted(votes, key=ur.vote_sequence) == ["V_0000000002", "V_0000000010", "V_10000000000"]
    with pytest.raises(ValueError):
        ur.vote_sequence("X_1")


@given(ids)
def test_ledger_node_names_round_trip(lid: int) -> None:
    name = ur.ledger_node_name(lid)
    assert ur.parse_ledger_node_name(name) == lid
    assert ur.parse_ledger_node_name(ur.lock_znode("/l", lid)) == lid
    assert ur.ledger_znode("/l", lid).endswith("/" + name)
    assert len(name) >= 13


@given(bookie_ids)
def test_lock_and_vote_round_trip(owner: str) -> None:
    assert ur.decode_lock_data(ur.encode_lock_data(owner)) == owner
    assert ur.decode_vote(ur.encode_vote(owner)) == owner
    expected = LockDataFormat()
    text_format.Parse(ur.encode_lock_data(owner).decode(), expected)
    assert expected.bookieId == owner


@given(st.text(min_size=1, max_size=20), st.integers(min_value=-(2**31), max_value=2**31 - 1))
def test_layout_round_trip(kind: str, version: int) -> None:
    assert ur.decode_layout(ur.encode_layout(kind, version)) == (kind, version)


@given(st.integers(min_value=-(2**31), max_value=2**31 - 1))
def test_seconds_round_trip(seconds: int) -> None:
    assert ur.decode_seconds(ur.encode_seconds(seconds)) == seconds
    assert ur.encode_seconds(seconds) == str(seconds).encode()  # Integer.toString


@given(st.integers(min_value=-(2**63), max_value=2**63 - 1))
def test_check_all_ledgers_ctime_round_trip(ms: int) -> None:
    data = ur.encode_check_all_ledgers_ctime(ms)
    assert ur.decode_check_all_ledgers_ctime(data) == ms
    assert CheckAllLedgersFormat.FromString(data).checkAllLedgersCTime == ms


@given(st.lists(bookie_ids, max_size=5), st.integers(min_value=0, max_value=2**62))
def test_marker_round_trip(replicas: list[str], ctime: int) -> None:
    info = ur.UnderreplicatedLedger(tuple(replicas), ctime)
    assert ur.decode(ur.encode(info)) == info
