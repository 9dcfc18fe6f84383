"""What an entry log holds, per ledger: the garbage collector's view of it.

A sealed log carries its ledgers map (ledgerId -> bytes); an unsealed one
(a crash before sealing) is scanned. As ledgers are deleted their bytes stop
counting: a log with none left is removed whole, and one whose live fraction
(``usage``) falls below a compaction threshold is rewritten. Pure data: no
I/O here.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Iterable


@dataclasses.dataclass
class EntryLogMetadata:
    log_id: int
    #: Bytes of each ledger still counted live (size prefixes included).
    ledgers: dict[int, int]
    #: Bytes of every entry the log was written with.
    total: int

    @classmethod
    def from_ledgers(cls, log_id: int, ledgers: dict[int, int]) -> EntryLogMetadata:
        return cls(log_id, dict(ledgers), sum(ledgers.values()))

    @property
    def remaining(self) -> int:
        return sum(self.ledgers.values())

    @property
    def usage(self) -> float:
        """The live fraction of the log's entry bytes (0 for an empty log)."""
        return self.remaining / self.total if self.total else 0.0

    @property
    def empty(self) -> bool:
        return not self.ledgers

    def drop_dead(self, live: Callable[[int], bool]) -> int:
        """Stop counting ledgers that are not live; returns the bytes dropped."""
        dead = [lid for lid in self.ledgers if not live(lid)]
        return sum(self.ledgers.pop(lid) for lid in dead)


def compaction_candidates(
    metas: Iterable[EntryLogMetadata], threshold: float
) -> list[EntryLogMetadata]:
    """Logs worth rewriting at ``threshold``, emptiest first (they free the
    most per byte rewritten). Empty logs are removed whole, not compacted;
    a threshold of 0 disables compaction."""
    if threshold <= 0:
        return []
    out = [m for m in metas if not m.empty and m.usage < threshold]
    return sorted(out, key=lambda m: (m.usage, m.log_id))
