"""Under-replicated ledger znodes, as upstream's ZkLedgerUnderreplicationManager
lays them out: kept apart from the ZooKeeper logic that uses them.

* path: ``<ledgers root>/underreplication/ledgers/`` then the ledger id's
  four 16-bit groups in 4-digit hex (high first), then ``urL`` and the id
  in at least 10 decimal digits;
* data: an ``UnderreplicatedLedgerFormat`` in protobuf *text* format (not
  binary): ``replica`` (the missing bookies), ``ctime`` (ms since the
  epoch when marked; absent in znodes of older writers).
"""

from __future__ import annotations

from dataclasses import dataclass

from google.protobuf import text_format

from dlog.errors import MetadataSerializationError
from dlog.protocol.data_formats_pb2 import UnderreplicatedLedgerFormat

UNDER_REPLICATION_NODE = "underreplication"
#: What upstream's reader reports for a znode without ctime.
UNASSIGNED_CTIME = -1


def ledgers_path(ledgers_root: str) -> str:
    """Where the under-replicated ledger hierarchy starts."""
    return f"{ledgers_root.rstrip('/')}/{UNDER_REPLICATION_NODE}/ledgers"


def ledger_znode(ledgers_root: str, ledger_id: int) -> str:
    """The znode that marks ``ledger_id`` under-replicated."""
    groups = "/".join(f"{(ledger_id >> shift) & 0xFFFF:04x}" for shift in (48, 32, 16, 0))
    return f"{ledgers_path(ledgers_root)}/{groups}/urL{ledger_id:010d}"


@dataclass(frozen=True)
class UnderreplicatedLedger:
    """What a marker znode says: the missing replicas and when it was marked."""

    replicas: tuple[str, ...]
    ctime: int = UNASSIGNED_CTIME


def encode(info: UnderreplicatedLedger) -> bytes:
    fmt = UnderreplicatedLedgerFormat(replica=info.replicas)
    if info.ctime != UNASSIGNED_CTIME:
        fmt.ctime = info.ctime
    return text_format.MessageToString(fmt).encode()


def decode(data: bytes) -> UnderreplicatedLedger:
    fmt = UnderreplicatedLedgerFormat()
    try:
        text_format.Parse(data.decode(), fmt)
    except (text_format.ParseError, UnicodeDecodeError) as e:
        raise MetadataSerializationError(f"bad under-replicated ledger data: {e}") from e
    ctime = fmt.ctime if fmt.HasField("ctime") else UNASSIGNED_CTIME
    return UnderreplicatedLedger(tuple(fmt.replica), ctime)
