"""Which ledgers have replicas missing: the auditor's two checks.

* **Bookie check** (upstream's ``AuditorBookieCheckTask`` with its
  ``BookieLedgerIndexer``): every ledger's ensembles give a bookie -> ledgers
  index; a ledger with a fragment on a bookie that is registered neither as
  writable nor as read-only is under-replicated, with those bookies missing.
* **Entries check** (what upstream's replicas check asks of each bookie):
  each bookie of each ledger is asked once for the entries it holds
  (``GetListOfEntriesOfLedger``), and those are compared with the entries
  it should hold: entry ``e`` of a fragment lives on ensemble indices
  ``(e + i) mod E`` for ``i < W``.

  What a bookie should hold is only known where the ledger's end is: up
  to the last entry of a closed ledger; for an open (or in-recovery)
  ledger only in the fragments before the last ensemble, which no writer
  adds to any more. The open tail is never judged: entries there may still
  be on their way, and recovery settles it.

Which entries a bookie should hold comes from :mod:`dlog.ledger.fragments`
(the replicator's arithmetic too), cut where placement is final; the checks take
a :class:`~dlog.ledger.client.BookKeeper` and only read (marking is the
auditor's job).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable, Collection, Iterable, Iterator
from dataclasses import dataclass
from typing import TYPE_CHECKING

from dlog.errors import NoSuchLedgerError
from dlog.ledger.fragments import Fragment, stored_entries
from dlog.ledger.metadata import LedgerMetadata

if TYPE_CHECKING:
    from dlog.ledger.client import BookKeeper

log = logging.getLogger(__name__)

__all__ = [
    "EnsembleRange",
    "bookie_ledger_index",
    "check_ledger_entries",
    "checked_last_entry",
    "count_expected",
    "expected_entries",
    "find_ledgers_on_lost_bookies",
    "find_ledgers_missing_entries",
    "fragments",
    "missing_count",
]

#: Ledgers examined at once by a full check.
DEFAULT_CONCURRENCY = 16
#: How long one GetListOfEntriesOfLedger may take (s).
DEFAULT_TIMEOUT = 30.0


# ---------------------------------------------------------------------------
# fragment arithmetic (pure)
# ---------------------------------------------------------------------------


@dataclass(frozen=True)
class EnsembleRange:
    """Entries ``first..last`` (inclusive; empty when ``last < first``) on ``ensemble``."""

    first: int
    last: int
    ensemble: tuple[str, ...]

    @property
    def empty(self) -> bool:
        return self.last < self.first


def checked_last_entry(md: LedgerMetadata) -> int:
    """The last entry whose placement is final: the last entry of a closed
    ledger; for an open or in-recovery one, the entry before its last
    ensemble starts (-1 when it has a single ensemble)."""
    if md.is_closed:
        return md.last_entry_id
    return md.last_ensemble_start - 1


def fragments(md: LedgerMetadata, upto: int | None = None) -> list[EnsembleRange]:
    """The ledger's ensembles as entry ranges, cut at ``upto`` (default
    :func:`checked_last_entry`)."""
    if upto is None:
        upto = checked_last_entry(md)
    out: list[EnsembleRange] = []
    ensembles = md.ensembles
    for i, (first, ensemble) in enumerate(ensembles):
        end = ensembles[i + 1][0] - 1 if i + 1 < len(ensembles) else upto
        out.append(EnsembleRange(first, min(end, upto), tuple(ensemble)))
    return out


def expected_entries(md: LedgerMetadata, bookie: str, upto: int | None = None) -> Iterator[int]:
    """Every entry ``bookie`` should hold up to ``upto``, ascending (each
    range's share by :func:`dlog.ledger.fragments.stored_entries`)."""
    for r in fragments(md, upto):
        if r.empty or bookie not in r.ensemble:
            continue
        share = Fragment(md.ledger_id, r.first, r.ensemble.index(bookie), bookie, r.last)
        yield from stored_entries(md, share)


def count_expected(md: LedgerMetadata, bookie: str, upto: int | None = None) -> int:
    """How many entries ``bookie`` should hold."""
    return sum(1 for _ in expected_entries(md, bookie, upto))


def missing_count(
    md: LedgerMetadata, bookie: str, held: Iterable[int], upto: int | None = None
) -> int:
    """How many entries ``bookie`` should hold but are not in ``held`` (as
    the bookie lists them). Entries it holds beyond what it should are
    ignored."""
    have = set(held)
    return sum(1 for e in expected_entries(md, bookie, upto) if e not in have)


def bookies_to_check(md: LedgerMetadata, upto: int | None = None) -> list[str]:
    """Bookies that should hold at least one entry up to ``upto``."""
    seen: dict[str, None] = {}
    for r in fragments(md, upto):
        for bookie in r.ensemble:
            if bookie not in seen and next(expected_entries(md, bookie, upto), None) is not None:
                seen[bookie] = None
    return list(seen)


# ---------------------------------------------------------------------------
# checks against the cluster
# ---------------------------------------------------------------------------


def registered_bookies(bk: BookKeeper) -> frozenset[str]:
    """Bookies registered as writable or read-only (both serve reads)."""
    return bk.watcher.writable | bk.watcher.readonly


async def _bounded(
    items: Iterable[int], fn: Callable[[int], Awaitable[None]], concurrency: int
) -> None:
    """Run ``await fn(item)`` for every item, at most ``concurrency`` at once."""
    queue = list(items)
    queue.reverse()

    async def worker() -> None:
        while queue:
            item = queue.pop()
            await fn(item)

    await asyncio.gather(*(worker() for _ in range(max(1, min(concurrency, len(queue))))))


async def bookie_ledger_index(
    bk: BookKeeper,
    ledger_ids: Collection[int] | None = None,
) -> dict[str, set[int]]:
    """Bookie id -> the ledgers with a fragment on it, from every ledger's
    metadata (upstream's BookieLedgerIndexer: every bookie of every
    ensemble). A ledger deleted while listing is left out."""
    if ledger_ids is None:
        ledger_ids = await bk.list_ledgers()
    index: dict[str, set[int]] = {}
    for md in await bk.metadata_store.read_existing(ledger_ids):
        for bookie in md.bookies():
            index.setdefault(bookie, set()).add(md.ledger_id)
    return index


async def find_ledgers_on_lost_bookies(
    bk: BookKeeper,
    *,
    available: Collection[str] | None = None,
) -> dict[int, set[str]]:
    """Ledger -> its bookies that are not registered (writable or
    read-only), for every ledger that has any."""
    index = await bookie_ledger_index(bk)
    if available is None:
        available = registered_bookies(bk)
    lost: dict[int, set[str]] = {}
    for bookie, ledgers in index.items():
        if bookie in available:
            continue
        for ledger_id in ledgers:
            lost.setdefault(ledger_id, set()).add(bookie)
    return lost


async def check_ledger_entries(
    bk: BookKeeper,
    md: LedgerMetadata,
    *,
    timeout: float = DEFAULT_TIMEOUT,
    available: Collection[str] | None = None,
) -> dict[str, int]:
    """Bookie -> entries it lacks (-1: not registered, so all of them), for
    the bookies of ``md`` that lack any in the part of the ledger whose
    placement is final. A registered bookie that cannot answer is left out
    (logged): a transient failure is not a lost replica."""
    upto = checked_last_entry(md)
    if available is None:
        available = registered_bookies(bk)
    out: dict[str, int] = {}

    async def one(bookie: str) -> None:
        if bookie not in available:
            out[bookie] = -1
            return
        try:
            client = await bk.pool.get(bookie)
            held = await client.entries_of_ledger(md.ledger_id, timeout=timeout)
        except NoSuchLedgerError:
            held = []
        except Exception as e:  # unreachable or failing: not judged this time
            log.warning(
                "ledger %d: cannot list the entries bookie %s holds (%r); not checked",
                md.ledger_id,
                bookie,
                e,
            )
            return
        missing = missing_count(md, bookie, held, upto)
        if missing:
            out[bookie] = missing

    await asyncio.gather(*(one(b) for b in bookies_to_check(md, upto)))
    return out


async def find_ledgers_missing_entries(
    bk: BookKeeper,
    ledger_ids: Collection[int] | None = None,
    *,
    concurrency: int = DEFAULT_CONCURRENCY,
    timeout: float = DEFAULT_TIMEOUT,
    should_continue: Callable[[], bool] | None = None,
) -> dict[int, set[str]]:
    """Ledger -> bookies lacking entries they should hold, for every ledger
    with any. A ledger whose metadata changed while it was checked (an
    ensemble replaced by re-replication, a close) is checked again with
    the new metadata before it is reported. ``should_continue`` is asked
    before each ledger; once it says no, the check stops where it is."""
    if ledger_ids is None:
        ledger_ids = await bk.list_ledgers()
    found: dict[int, set[str]] = {}

    async def one(ledger_id: int) -> None:
        if should_continue is not None and not should_continue():
            return
        try:
            md, version = await bk.metadata_store.read(ledger_id)
            for _attempt in range(3):
                missing = await check_ledger_entries(bk, md, timeout=timeout)
                if not missing:
                    return
                md2, version2 = await bk.metadata_store.read(ledger_id)
                if version2 == version:
                    break
                md, version = md2, version2
            else:
                return  # still changing: the next check will see it settled
        except NoSuchLedgerError:
            return  # deleted meanwhile
        log.info(
            "ledger %d: bookies lack entries: %s",
            ledger_id,
            ", ".join(f"{b} ({'all' if n < 0 else n})" for b, n in sorted(missing.items())),
        )
        found[ledger_id] = set(missing)

    await _bounded(ledger_ids, one, concurrency)
    return found
