"""Choosing bookies for ensembles (BookKeeper's default placement policy:
random among writable bookies, avoiding those that failed recently)."""

from __future__ import annotations

import random
import time
from collections.abc import Iterable

from dlog.errors import NotEnoughBookiesError


class EnsemblePlacementPolicy:
    def __init__(self, failure_memory_seconds: float = 60.0) -> None:
        self.failure_memory = failure_memory_seconds
        self._failed_at: dict[str, float] = {}

    def record_failure(self, bookie: str) -> None:
        self._failed_at[bookie] = time.monotonic()

    def recently_failed(self, bookie: str) -> bool:
        t = self._failed_at.get(bookie)
        if t is None:
            return False
        if time.monotonic() - t > self.failure_memory:
            del self._failed_at[bookie]
            return False
        return True

    def _candidates(
        self, writable: Iterable[str], exclude: set[str]
    ) -> tuple[list[str], list[str]]:
        fresh: list[str] = []
        failed: list[str] = []
        for b in writable:
            if b in exclude:
                continue
            (failed if self.recently_failed(b) else fresh).append(b)
        random.shuffle(fresh)
        random.shuffle(failed)
        return fresh, failed

    def new_ensemble(self, size: int, writable: Iterable[str]) -> list[str]:
        """``size`` distinct bookies; recently failed ones only as a last resort."""
        writable = list(writable)
        fresh, failed = self._candidates(writable, set())
        chosen = (fresh + failed)[:size]
        if len(chosen) < size:
            raise NotEnoughBookiesError(size, len(writable))
        return chosen

    def replace_bookie(self, ensemble: list[str], index: int, writable: Iterable[str]) -> str:
        """A bookie to take the place of ``ensemble[index]``: not already in
        the ensemble, preferably not recently failed."""
        writable = list(writable)
        fresh, failed = self._candidates(writable, set(ensemble))
        candidates = fresh or failed
        if not candidates:
            usable = {b for b in writable if b != ensemble[index]} | (
                set(ensemble) - {ensemble[index]}
            )
            raise NotEnoughBookiesError(
                len(ensemble),
                len(usable),
                f"no writable bookie outside the ensemble to replace {ensemble[index]}",
            )
        return candidates[0]
