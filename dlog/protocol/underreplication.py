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

import re
from dataclasses import dataclass

from google.protobuf import text_format
from google.protobuf.message import DecodeError, Message

from dlog.errors import MetadataSerializationError
from dlog.protocol.data_formats_pb2 import (
    AuditorVoteFormat,
    CheckAllLedgersFormat,
    LedgerRereplicationLayoutFormat,
    LockDataFormat,
    UnderreplicatedLedgerFormat,
)

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


# ---------------------------------------------------------------------------
# The rest of upstream's under-replication znodes (ZkLedgerUnderreplicationManager,
# ZkLedgerAuditorManager, BookKeeperConstants), all under ``underreplication``:
#
# * ``LAYOUT``: LedgerRereplicationLayoutFormat, text, ``type: "BASIC"``,
#   ``version: 1``; a manager refuses any other;
# * ``locks/urL%010d``: an EPHEMERAL lock per ledger being re-replicated,
#   data LockDataFormat, text, ``bookieId`` = the holder (optional);
# * ``disable``: present (data empty) while re-replication is disabled;
# * ``lostBookieRecoveryDelay``: decimal seconds (Java ``Integer.toString``);
# * ``checkallledgersctime``: CheckAllLedgersFormat, *binary* protobuf, ms;
# * ``auditorelection/V_<seq>``: EPHEMERAL_SEQUENTIAL votes, data
#   AuditorVoteFormat, text, ``bookieId``; the winner also writes its vote
#   into ``auditorelection`` itself.
# * dlog's own: ``orphanedLedgerCheckInterval``, decimal seconds, read like
#   lostBookieRecoveryDelay.
# ---------------------------------------------------------------------------

LAYOUT_NODE = "LAYOUT"
LOCKS_NODE = "locks"
DISABLE_NODE = "disable"
LOST_BOOKIE_RECOVERY_DELAY_NODE = "lostBookieRecoveryDelay"
CHECK_ALL_LEDGERS_CTIME_NODE = "checkallledgersctime"
ELECTION_NODE = "auditorelection"
VOTE_PREFIX = "V_"
ORPHAN_CHECK_INTERVAL_NODE = "orphanedLedgerCheckInterval"
#: The only re-replication layout upstream (and dlog) knows.
LAYOUT_TYPE = "BASIC"
LAYOUT_VERSION = 1
#: A marker or lock znode's name: ``urL`` and the ledger id in decimal.
_LEDGER_NAME = re.compile(r"urL(\d+)$")


def base_path(ledgers_root: str) -> str:
    return f"{ledgers_root.rstrip('/')}/{UNDER_REPLICATION_NODE}"


def _child(ledgers_root: str, name: str) -> str:
    return f"{base_path(ledgers_root)}/{name}"


def layout_path(ledgers_root: str) -> str:
    return _child(ledgers_root, LAYOUT_NODE)


def locks_path(ledgers_root: str) -> str:
    return _child(ledgers_root, LOCKS_NODE)


def disable_path(ledgers_root: str) -> str:
    return _child(ledgers_root, DISABLE_NODE)


def lost_bookie_recovery_delay_path(ledgers_root: str) -> str:
    return _child(ledgers_root, LOST_BOOKIE_RECOVERY_DELAY_NODE)


def check_all_ledgers_ctime_path(ledgers_root: str) -> str:
    return _child(ledgers_root, CHECK_ALL_LEDGERS_CTIME_NODE)


def orphan_check_interval_path(ledgers_root: str) -> str:
    return _child(ledgers_root, ORPHAN_CHECK_INTERVAL_NODE)


def election_path(ledgers_root: str) -> str:
    return _child(ledgers_root, ELECTION_NODE)


def ledger_node_name(ledger_id: int) -> str:
    """A marker's (and its lock's) znode name: ``urL%010d``."""
    return f"urL{ledger_id:010d}"


def lock_znode(ledgers_root: str, ledger_id: int) -> str:
    """The lock a replication worker holds on ``ledger_id`` (EPHEMERAL)."""
    return f"{locks_path(ledgers_root)}/{ledger_node_name(ledger_id)}"


def parse_ledger_node_name(name: str) -> int | None:
    """The ledger id of a ``urL<digits>`` znode name (or path); None otherwise."""
    m = _LEDGER_NAME.search(name)
    return int(m.group(1)) if m else None


def _parse_text(msg: Message, data: bytes, what: str) -> None:
    try:
        text_format.Parse(data.decode(), msg)
    except (text_format.ParseError, UnicodeDecodeError) as e:
        raise MetadataSerializationError(f"bad {what} data: {e}") from e


def encode_layout(layout_type: str = LAYOUT_TYPE, version: int = LAYOUT_VERSION) -> bytes:
    return text_format.MessageToString(
        LedgerRereplicationLayoutFormat(type=layout_type, version=version)
    ).encode()


def decode_layout(data: bytes) -> tuple[str, int]:
    """``(type, version)`` of a LAYOUT znode (both fields are required)."""
    fmt = LedgerRereplicationLayoutFormat()
    _parse_text(fmt, data, "re-replication layout")
    if not (fmt.HasField("type") and fmt.HasField("version")):
        raise MetadataSerializationError(
            f"bad re-replication layout data: type and version are required: {data!r}"
        )
    return fmt.type, fmt.version


def _encode_bookie_id(msg: LockDataFormat | AuditorVoteFormat, bookie_id: str | None) -> bytes:
    if bookie_id:
        msg.bookieId = bookie_id
    return text_format.MessageToString(msg).encode()


def encode_lock_data(owner: str | None) -> bytes:
    """A lock's data; upstream leaves ``bookieId`` out when it has no host name."""
    return _encode_bookie_id(LockDataFormat(), owner)


def decode_lock_data(data: bytes) -> str | None:
    """The lock holder, or None when the lock does not say."""
    fmt = LockDataFormat()
    _parse_text(fmt, data, "under-replication lock")
    return fmt.bookieId if fmt.HasField("bookieId") else None


def encode_vote(bookie_id: str) -> bytes:
    return _encode_bookie_id(AuditorVoteFormat(), bookie_id)


def decode_vote(data: bytes) -> str | None:
    """The candidate of a vote (or of ``auditorelection``'s own data)."""
    fmt = AuditorVoteFormat()
    _parse_text(fmt, data, "auditor vote")
    return fmt.bookieId if fmt.HasField("bookieId") else None


def vote_sequence(name: str) -> int:
    """A vote's sequence number (``V_0000000012`` -> 12), by which votes
    are ordered; upstream parses what follows ``V_`` as a long."""
    if not name.startswith(VOTE_PREFIX):
        raise ValueError(f"not an auditor vote: {name!r}")
    return int(name[len(VOTE_PREFIX) :])


def encode_seconds(seconds: int) -> bytes:
    """lostBookieRecoveryDelay and orphanedLedgerCheckInterval: a decimal int."""
    return str(int(seconds)).encode()


def decode_seconds(data: bytes, what: str = "interval") -> int:
    try:
        text = data.decode().strip()
        if not re.fullmatch(r"[+-]?\d+", text):
            raise ValueError(text)
        return int(text)
    except (UnicodeDecodeError, ValueError) as e:
        raise MetadataSerializationError(f"bad {what} data: {data!r}") from e


def encode_check_all_ledgers_ctime(ctime_ms: int) -> bytes:
    """checkallledgersctime: a *binary* CheckAllLedgersFormat."""
    return CheckAllLedgersFormat(checkAllLedgersCTime=ctime_ms).SerializeToString()


def decode_check_all_ledgers_ctime(data: bytes) -> int:
    """The time (ms) of the last full check, or -1 when it does not say."""
    fmt = CheckAllLedgersFormat()
    try:
        fmt.ParseFromString(data)
    except DecodeError as e:
        raise MetadataSerializationError(f"bad checkallledgersctime data: {e}") from e
    return fmt.checkAllLedgersCTime if fmt.HasField("checkAllLedgersCTime") else UNASSIGNED_CTIME
