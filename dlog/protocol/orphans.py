"""BP-44 orphaned-ledger index: the ``ORPHANED`` znode layout (a dlog extension).

BP-44 has the auditor flag orphaned ledgers "under a separate ORPHANED
z-node" so that ``listorphaned`` needs no full metadata scan; BookKeeper
never built it, so the layout is dlog's:

* path: ``<ledgers root>/ORPHANED/<ledger id in decimal>``, one persistent
  child per orphaned ledger (``ORPHANED`` is a reserved child of the ledgers
  root, skipped by the ledger walk, see :mod:`dlog.ledger.layout`);
* data: one ASCII line ``<format version> <REASON> <argument>``, e.g.
  ``1 DELETE_OVERDUE 1615839671000`` or ``1 BROKEN_PARENT_REF 100277``:

  - ``DELETE_OVERDUE``: the argument is the close context's
    ``expectDeleteAfter`` instant, in epoch milliseconds;
  - ``BROKEN_PARENT_REF``: the argument is the missing parent ledger id
    (the create context's ``childOfLedger``).

The format version is 1. A reader refuses other versions (a newer writer
must bump it when it changes the meaning of the line), an unknown reason, or
a malformed line, with :class:`MetadataSerializationError`. Pure: no I/O.
"""

from __future__ import annotations

import dataclasses
import enum

from dlog.errors import MetadataSerializationError

__all__ = [
    "FORMAT_VERSION",
    "ORPHANED_NODE",
    "Orphan",
    "OrphanReason",
    "decode",
    "encode",
    "orphan_znode",
    "orphaned_path",
    "parse_child",
]

ORPHANED_NODE = "ORPHANED"
FORMAT_VERSION = 1
_INT64_MAX = 2**63 - 1
_INT64_MIN = -(2**63)


class OrphanReason(enum.Enum):
    """Why a ledger is orphaned (BP-44's two kinds)."""

    DELETE_OVERDUE = "DELETE_OVERDUE"
    BROKEN_PARENT_REF = "BROKEN_PARENT_REF"


@dataclasses.dataclass(frozen=True, order=True)
class Orphan:
    """One orphaned ledger: its id, the reason and the reason's argument
    (``expectDeleteAfter`` in epoch ms, or the missing parent's ledger id)."""

    ledger_id: int
    reason: OrphanReason
    argument: int

    def __post_init__(self) -> None:
        if isinstance(self.ledger_id, bool) or not isinstance(self.ledger_id, int):
            raise ValueError(f"ledger id must be an int, got {self.ledger_id!r}")
        if not 0 <= self.ledger_id <= _INT64_MAX:
            raise ValueError(f"ledger id {self.ledger_id} is outside 0..2^63-1")
        object.__setattr__(self, "reason", OrphanReason(self.reason))
        if isinstance(self.argument, bool) or not isinstance(self.argument, int):
            raise ValueError(f"argument must be an int, got {self.argument!r}")
        if not _INT64_MIN <= self.argument <= _INT64_MAX:
            raise ValueError(f"argument {self.argument} does not fit in 64 bits")


def orphaned_path(ledgers_root: str) -> str:
    """The ``ORPHANED`` znode under ``ledgers_root``."""
    root = ledgers_root.rstrip("/")
    return f"{root}/{ORPHANED_NODE}"


def orphan_znode(ledgers_root: str, ledger_id: int) -> str:
    """The child of ``ORPHANED`` that flags ``ledger_id``."""
    return f"{orphaned_path(ledgers_root)}/{ledger_id}"


def parse_child(name: str) -> int | None:
    """The ledger id a child of ``ORPHANED`` names, or None for anything else."""
    if not (name.isascii() and name.isdigit()) or (len(name) > 1 and name[0] == "0"):
        return None
    value = int(name)
    return value if value <= _INT64_MAX else None


def encode(orphan: Orphan) -> bytes:
    """The data of ``orphan``'s znode."""
    return f"{FORMAT_VERSION} {orphan.reason.value} {orphan.argument}".encode("ascii")


def decode(ledger_id: int, data: bytes) -> Orphan:
    """Parse the data of ``ORPHANED/<ledger_id>``."""
    try:
        text = bytes(data).decode("ascii")
    except UnicodeDecodeError:
        raise MetadataSerializationError(
            f"orphan record of ledger {ledger_id} is not ASCII"
        ) from None
    parts = text.strip().split(" ")
    if not parts or not parts[0].isdigit():
        raise MetadataSerializationError(
            f"orphan record of ledger {ledger_id} has no format version: {text!r}"
        )
    if int(parts[0]) != FORMAT_VERSION:
        raise MetadataSerializationError(
            f"orphan record of ledger {ledger_id} has format version {parts[0]}, "
            f"this dlog reads {FORMAT_VERSION}"
        )
    if len(parts) != 3:
        raise MetadataSerializationError(
            f"orphan record of ledger {ledger_id} is malformed: {text!r}"
        )
    try:
        reason = OrphanReason(parts[1])
    except ValueError:
        raise MetadataSerializationError(
            f"orphan record of ledger {ledger_id} has unknown reason {parts[1]!r}"
        ) from None
    arg = parts[2]
    digits = arg[1:] if arg.startswith("-") else arg
    if not (digits.isascii() and digits.isdigit()):
        raise MetadataSerializationError(
            f"orphan record of ledger {ledger_id} has a bad argument {arg!r}"
        )
    try:
        return Orphan(ledger_id, reason, int(arg))
    except ValueError as e:
        raise MetadataSerializationError(f"orphan record of ledger {ledger_id}: {e}") from None
