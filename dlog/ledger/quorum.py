"""Where entries live in an ensemble, and when enough bookies have answered.

BookKeeper stripes entries round-robin: entry ``e`` is written to bookies
``(e + i) mod E`` for ``i < W``. Operations that ask the whole ensemble
(reading the LAC, fencing) may complete once every write-quorum window has
fewer than ``A`` bookies still unknown: no entry acknowledged by an ack
quorum can then hide from the answers.
"""

from __future__ import annotations


def write_set(entry_id: int, ensemble_size: int, write_quorum: int) -> list[int]:
    """Indices (into the ensemble) of the bookies that store ``entry_id``."""
    return [(entry_id + i) % ensemble_size for i in range(write_quorum)]


class CoverageSet:
    """Tracks which bookies answered, for ensemble-wide quorum reads."""

    def __init__(self, ensemble_size: int, write_quorum: int, ack_quorum: int) -> None:
        self.e = ensemble_size
        self.w = write_quorum
        self.a = ack_quorum
        self.known: set[int] = set()

    def add(self, bookie_index: int) -> None:
        """The bookie answered definitively (an entry, or "no such entry")."""
        self.known.add(bookie_index)

    def covered(self) -> bool:
        need = self.w - self.a + 1
        for start in range(self.e):
            window = ((start + i) % self.e for i in range(self.w))
            if sum(1 for b in window if b in self.known) < need:
                return False
        return True
