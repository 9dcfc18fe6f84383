"""Under-replicated ledger markers as upstream's ZkLedgerUnderreplicationManager
writes them: path layout and protobuf text-format data with ``ctime``
(DataFormats.proto UnderreplicatedLedgerFormat: replica = 1, ctime = 2)."""

from __future__ import annotations

import pytest

from dlog.errors import MetadataSerializationError
from dlog.protocol import underreplication as ur
from dlog.protocol.data_formats_pb2 import UnderreplicatedLedgerFormat


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
