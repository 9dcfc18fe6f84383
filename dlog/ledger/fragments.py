"""A ledger's fragments: which entries each bookie of each ensemble stores
(pure, no I/O).

A fragment is upstream's ``LedgerFragment`` for one bookie: the entries
``first_entry..last_entry`` of the ensemble that starts at ``first_entry``,
as stored by the bookie at ``index`` of that ensemble. With striping
(``E > W``) that bookie holds only the entries whose write set includes
``index`` (:func:`dlog.ledger.quorum.write_set`).

The last ensemble of a ledger that is not closed has no known end: its
fragments are *open* (``last_entry`` None). Its writer may still add to
them, so re-replication leaves them alone until the ledger is fenced
(upstream's ``LedgerFragment.isClosed()``).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Collection, Iterable

from dlog.ledger.metadata import LedgerMetadata
from dlog.ledger.quorum import write_set

__all__ = [
    "Fragment",
    "fragments",
    "fragments_on",
    "missing_entries",
    "stored_entries",
]


@dataclasses.dataclass(frozen=True, order=True)
class Fragment:
    """The entries of one ensemble that one of its bookies stores."""

    ledger_id: int
    first_entry: int  # the ensemble's first entry id (its key in the metadata)
    index: int  # the bookie's index in that ensemble
    bookie: str
    #: Last entry id of the ensemble; None while open (the writer may add).
    last_entry: int | None = dataclasses.field(default=None, compare=False)

    @property
    def is_closed(self) -> bool:
        return self.last_entry is not None

    @property
    def is_empty(self) -> bool:
        """Closed with no entry (an ensemble replaced before any entry
        landed on it, or a ledger closed empty)."""
        return self.last_entry is not None and self.last_entry < self.first_entry

    def __str__(self) -> str:
        end = "open" if self.last_entry is None else str(self.last_entry)
        return (
            f"ledger {self.ledger_id} entries {self.first_entry}..{end} "
            f"on {self.bookie} (index {self.index})"
        )


def stored_entries(md: LedgerMetadata, fragment: Fragment, last: int | None = None) -> list[int]:
    """Entry ids the fragment's bookie stores, ascending. An open fragment
    is cut at ``last`` (e.g. the LAC); with neither, none."""
    end = fragment.last_entry if fragment.last_entry is not None else last
    if end is None:
        return []
    e, w = md.ensemble_size, md.write_quorum_size
    return [
        entry
        for entry in range(fragment.first_entry, end + 1)
        if fragment.index in write_set(entry, e, w)
    ]


def fragments(md: LedgerMetadata) -> list[Fragment]:
    """Every fragment of the ledger, by ensemble then index. A closed
    ledger's last ensemble ends at its last entry; an open ledger's last
    ensemble is open; any other ensemble ends where the next one starts."""
    out: list[Fragment] = []
    for n, (first, ensemble) in enumerate(md.ensembles):
        if n + 1 < len(md.ensembles):
            last: int | None = md.ensembles[n + 1][0] - 1
        elif md.is_closed:
            last = md.last_entry_id
        else:
            last = None
        for index, bookie in enumerate(ensemble):
            out.append(Fragment(md.ledger_id, first, index, bookie, last))
    return out


def fragments_on(
    md: LedgerMetadata,
    bookies: Collection[str] = (),
    *,
    available: Collection[str] | None = None,
) -> list[Fragment]:
    """The fragments stored on one of ``bookies``, or (when ``available``
    is given) on a bookie not in ``available`` (not registered)."""
    return [
        f
        for f in fragments(md)
        if f.bookie in bookies or (available is not None and f.bookie not in available)
    ]


def missing_entries(md: LedgerMetadata, fragment: Fragment, present: Iterable[int]) -> list[int]:
    """The entries the fragment's bookie should store but did not list
    (``present``: its GetListOfEntriesOfLedger answer). Only closed
    fragments are checked."""
    have = set(present)
    return [e for e in stored_entries(md, fragment) if e not in have]
