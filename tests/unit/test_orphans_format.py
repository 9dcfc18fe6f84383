"""The ORPHANED znode layout and its one-line record (dlog.protocol.orphans)."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from dlog.errors import MetadataSerializationError
from dlog.ledger import layout
from dlog.protocol import orphans as fmt
from dlog.protocol.orphans import Orphan, OrphanReason

IDS = st.integers(0, 2**63 - 1)
ARGS = st.integers(-(2**63), 2**63 - 1)
ORPHANS = st.builds(Orphan, IDS, st.sampled_from(list(OrphanReason)), ARGS)


@given(ORPHANS)
def test_round_trip(orphan: Orphan) -> None:
    data = fmt.encode(orphan)
    assert data.isascii() and b"\n" not in data
    assert fmt.decode(orphan.ledger_id, data) == orphan


@given(IDS)
def test_child_name_round_trip(ledger_id: int) -> None:
    path = fmt.orphan_znode("/ledgers", ledger_id)
    parent, name = path.rsplit("/", 1)
    assert parent == "/ledgers/ORPHANED"
    assert fmt.parse_child(name) == ledger_id


def test_documented_bytes() -> None:
    assert fmt.encode(Orphan(100234, OrphanReason.DELETE_OVERDUE, 1615839671000)) == (
        b"1 DELETE_OVERDUE 1615839671000"
    )
    assert fmt.encode(Orphan(100456, OrphanReason.BROKEN_PARENT_REF, 100277)) == (
        b"1 BROKEN_PARENT_REF 100277"
    )
    # a trailing newline (a hand-written znode) is accepted
    assert fmt.decode(7, b"1 BROKEN_PARENT_REF 3\n").argument == 3


def test_paths_and_reserved_name() -> None:
    assert fmt.orphaned_path("/ledgers/") == "/ledgers/ORPHANED"
    assert fmt.orphan_znode("/a/b", 12) == "/a/b/ORPHANED/12"
    assert layout.is_reserved_child(fmt.ORPHANED_NODE)


@pytest.mark.parametrize("name", ["", "x", "01", "-1", "1e3", "١٢", str(2**63)])
def test_foreign_children_are_not_ledgers(name: str) -> None:
    assert fmt.parse_child(name) is None


@pytest.mark.parametrize(
    "data",
    [
        b"",
        b"DELETE_OVERDUE 5",
        b"2 DELETE_OVERDUE 5",  # a future version is refused, not misread
        b"1 DELETE_OVERDUE",
        b"1 DELETE_OVERDUE 5 6",
        b"1 LOST 5",
        b"1 DELETE_OVERDUE five",
        b"1 DELETE_OVERDUE 99999999999999999999",
        b"1 DELETE_OVERDUE \xff",
    ],
)
def test_bad_records_are_refused(data: bytes) -> None:
    with pytest.raises(MetadataSerializationError):
        fmt.decode(1, data)


def test_orphan_validates() -> None:
    with pytest.raises(ValueError):
        Orphan(-1, OrphanReason.DELETE_OVERDUE, 0)
    with pytest.raises(ValueError):
        Orphan(1, "NOPE", 0)  # type: ignore[arg-type]
    assert Orphan(1, "DELETE_OVERDUE", 0).reason is OrphanReason.DELETE_OVERDUE  # type: ignore[arg-type]
