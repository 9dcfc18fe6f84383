"""Where BookKeeper keeps ledger metadata in ZooKeeper (pure, no I/O).

BookKeeper's default ``HierarchicalLedgerManager`` is a hybrid: ids below
``Integer.MAX_VALUE`` (2**31 - 1) use the legacy 2-4-4 split, every larger id
the long 3-4-4-4-4 split; both trees live side by side under the same root
and are told apart by the width of the top-level node (2 vs 3 digits). The
last level is the node ``L`` + the last four digits, e.g. ledger 1234 ->
``<root>/00/0000/L1234``. Mirrors ``StringUtils.getHybridHierarchicalLedgerPath``.
"""

from __future__ import annotations

import re

from dlog.errors import IncorrectParameterError

__all__ = [
    "IDGEN_LONG_ZNODE",
    "IDGEN_ZNODE",
    "INT_MAX",
    "LAYOUT_DATA",
    "LAYOUT_ZNODE",
    "LEDGER_ID_GEN_PREFIX",
    "LEDGER_NODE_PREFIX",
    "LONG_MAX",
    "RESERVED_CHILDREN",
    "is_reserved_child",
    "ledger_relative_path",
    "ledger_path",
    "parse_ledger_path",
]

#: Java's Integer.MAX_VALUE: the first id that takes the long layout.
INT_MAX = 2**31 - 1
#: Java's Long.MAX_VALUE: ledger ids are non-negative signed 64-bit.
LONG_MAX = 2**63 - 1

LEDGER_NODE_PREFIX = "L"
IDGEN_ZNODE = "idgen"  # LegacyHierarchicalLedgerManager.IDGEN_ZNODE
IDGEN_LONG_ZNODE = "idgen-long"  # LongHierarchicalLedgerManager.IDGEN_ZNODE
LEDGER_ID_GEN_PREFIX = "ID-"  # ZkLedgerIdGenerator.LEDGER_ID_GEN_PREFIX
LAYOUT_ZNODE = "LAYOUT"

#: Children of the ledgers root that are not ledger buckets
#: (AbstractZkLedgerManager.isSpecialZnode, plus BP-44's auditor node).
RESERVED_CHILDREN: frozenset[str] = frozenset(
    {
        "available",  # bookie registrations (available/readonly inside)
        "cookies",
        "underreplication",
        LAYOUT_ZNODE,
        "INSTANCEID",
        IDGEN_ZNODE,
        IDGEN_LONG_ZNODE,
        "ORPHANED",  # dlog: BP-44 auditor's orphaned-ledger index
    }
)

#: Bytes of ``<root>/LAYOUT`` for the hierarchical ledger manager factory:
#: LedgerLayout format version 2, then ``<factory class>:<manager version>``.
LAYOUT_DATA = b"2\norg.apache.bookkeeper.meta.HierarchicalLedgerManagerFactory:1"

_LEGACY_RE = re.compile(r"([0-9]{2})/([0-9]{4})/L([0-9]{4})")
_LONG_RE = re.compile(r"([0-9]{3})/([0-9]{4})/([0-9]{4})/([0-9]{4})/L([0-9]{4})")


def is_reserved_child(name: str) -> bool:
    """True for a child of the ledgers root that never holds ledgers
    (an ``ID-`` prefix is a sequential id node when idgen has no own znode)."""
    return name in RESERVED_CHILDREN or name.startswith(LEDGER_ID_GEN_PREFIX)


def _check_root(ledgers_root: str) -> str:
    if not ledgers_root.startswith("/") or (ledgers_root != "/" and ledgers_root.endswith("/")):
        raise IncorrectParameterError(f"invalid ledgers root {ledgers_root!r}")
    return "" if ledgers_root == "/" else ledgers_root


def _check_id(ledger_id: int) -> None:
    if isinstance(ledger_id, bool) or not isinstance(ledger_id, int):
        raise IncorrectParameterError(f"ledger id must be an int, got {ledger_id!r}")
    if not 0 <= ledger_id <= LONG_MAX:
        raise IncorrectParameterError(f"ledger id {ledger_id} is outside 0..2**63-1")


def ledger_relative_path(ledger_id: int) -> str:
    """The part of a ledger's znode path below the ledgers root, without a leading slash."""
    _check_id(ledger_id)
    if ledger_id < INT_MAX:
        s = f"{ledger_id:010d}"
        return f"{s[0:2]}/{s[2:6]}/{LEDGER_NODE_PREFIX}{s[6:10]}"
    s = f"{ledger_id:019d}"
    return f"{s[0:3]}/{s[3:7]}/{s[7:11]}/{s[11:15]}/{LEDGER_NODE_PREFIX}{s[15:19]}"


def ledger_path(ledgers_root: str, ledger_id: int) -> str:
    """Znode path of ``ledger_id`` under ``ledgers_root`` (e.g. ``/ledgers``)."""
    return f"{_check_root(ledgers_root)}/{ledger_relative_path(ledger_id)}"


def parse_ledger_path(ledgers_root: str, path: str) -> int:
    """The ledger id whose canonical znode is ``path``.

    Strict: only the exact path :func:`ledger_path` would produce is accepted,
    so a legacy-shaped path for a long id (or the reverse) is rejected."""
    root = _check_root(ledgers_root)
    prefix = root + "/"
    if not path.startswith(prefix):
        raise IncorrectParameterError(f"{path!r} is not under ledgers root {ledgers_root!r}")
    rest = path[len(prefix) :]
    m = _LEGACY_RE.fullmatch(rest) or _LONG_RE.fullmatch(rest)
    if m is None:
        raise IncorrectParameterError(f"{path!r} is not a hierarchical ledger path")
    ledger_id = int("".join(m.groups()))
    if ledger_id > LONG_MAX or ledger_relative_path(ledger_id) != rest:
        raise IncorrectParameterError(f"{path!r} is not the canonical path of ledger {ledger_id}")
    return ledger_id
