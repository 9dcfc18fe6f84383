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
* **Entry verification** (upstream's ``LedgerChecker.verifyLedgerFragment``
  with ``auditorLedgerVerificationPercentage``): with a percentage given,
  the entries check also *reads* from each bookie the first and last entry
  it stores of each final fragment, plus that percentage of the others
  (spread evenly), and checks each body against the ledger's digest
  (:func:`verify_fragment`). Upstream only checks that the reads succeed;
  dlog also verifies the digest, so a replica whose bytes rotted on disk
  (a bad digest, or EIO for a damaged entry-log record) is found although
  the bookie lists the entry. The replication worker asks the same
  function which fragments to copy, and :func:`verify_ledgers` reads every
  entry of every replica (a full scrub, e.g. at the end of a chaos run).

Which entries a bookie should hold comes from :mod:`dlog.ledger.fragments`
(the replicator's arithmetic too), cut where placement is final; the checks take
a :class:`~dlog.ledger.client.BookKeeper` and only read (marking is the
auditor's job).
"""

from __future__ import annotations

import asyncio
import logging
import random
from collections.abc import Awaitable, Callable, Collection, Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from dlog.errors import (
    ENOENTRY,
    ENOLEDGER,
    EOK,
    STATUS_NAMES,
    DigestMismatchError,
    NoSuchLedgerError,
)
from dlog.ledger import fragments as frag
from dlog.ledger.digest import DigestManager
from dlog.ledger.fragments import Fragment, stored_entries
from dlog.ledger.metadata import LedgerMetadata

if TYPE_CHECKING:
    from dlog.ledger.client import BookKeeper

log = logging.getLogger(__name__)

__all__ = [
    "BadReplica",
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
    "sample_entries",
    "verify_fragment",
    "verify_ledger",
    "verify_ledgers",
]

#: Ledgers examined at once by a full check.
DEFAULT_CONCURRENCY = 16
#: How long one GetListOfEntriesOfLedger may take (s).
DEFAULT_TIMEOUT = 30.0
#: Entry reads in flight at once for one verification (a whole check
#: shares one such budget, so a scrub never floods the bookies).
DEFAULT_READ_CONCURRENCY = 32


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
# entry verification (reads, digests)
# ---------------------------------------------------------------------------

#: Why a replica's entry is bad. The first three are judged (the fragment
#: needs a new replica); ``unreachable`` is not: the bookie could not be
#: asked (down, not registered, a timeout), which the bookie check handles.
MISSING = "missing"
UNREADABLE = "unreadable"
BAD_DIGEST = "digest"
UNREACHABLE = "unreachable"


@dataclass(frozen=True)
class BadReplica:
    """One entry a bookie should hold (per the ledger's metadata) that it
    could not serve intact."""

    fragment: Fragment
    entry_id: int
    #: :data:`MISSING` (ENOENTRY/ENOLEDGER), :data:`UNREADABLE` (another
    #: error status, e.g. EIO for a damaged entry-log record),
    #: :data:`BAD_DIGEST` or :data:`UNREACHABLE`.
    reason: str
    detail: str = field(default="", compare=False)

    @property
    def ledger_id(self) -> int:
        return self.fragment.ledger_id

    @property
    def bookie(self) -> str:
        return self.fragment.bookie

    @property
    def judged(self) -> bool:
        """The bookie answered and the entry is not intact (not a transient
        failure to ask)."""
        return self.reason != UNREACHABLE

    def __str__(self) -> str:
        return (
            f"ledger {self.ledger_id} entry {self.entry_id} on {self.bookie}: "
            f"{self.reason}{': ' + self.detail if self.detail else ''}"
        )


def sample_entries(stored: Sequence[int], percentage: int) -> list[int]:
    """The entries of one bookie's fragment to read: its first and last
    stored entries and ``percentage`` percent of the others, one picked at
    random in each of that many equal buckets (as upstream's LedgerChecker;
    random so that successive checks cover different entries). 100 (or
    more) reads them all."""
    if percentage >= 100 or len(stored) <= 2:
        return list(stored)
    middle = stored[1:-1]
    k = len(middle) * max(0, percentage) // 100
    picked = {stored[0], stored[-1]}
    bucket = len(middle) / k if k else 0.0
    for i in range(k):
        picked.add(middle[min(len(middle) - 1, int((i + random.random()) * bucket))])
    return sorted(picked)


def final_fragments(md: LedgerMetadata) -> list[Fragment]:
    """The fragments whose placement is final (closed) and that hold entries."""
    return [f for f in frag.fragments(md) if f.is_closed and not f.is_empty]


async def verify_fragment(
    bk: BookKeeper,
    md: LedgerMetadata,
    fragment: Fragment,
    *,
    percentage: int,
    skip: Collection[int] = (),
    digest: DigestManager | None = None,
    reads: asyncio.Semaphore | None = None,
) -> list[BadReplica]:
    """Read the sampled entries (:func:`sample_entries`) of ``fragment``
    from its bookie and verify each with the ledger's digest; returns the
    bad ones, ascending. Entries in ``skip`` are not read (already known
    missing). ``reads`` bounds the reads in flight (shared by a caller
    verifying many fragments). Upstream's checker only requires the read
    to succeed; this one also requires a body that passes its digest for
    the right ledger and entry."""
    entries = [e for e in sample_entries(stored_entries(md, fragment), percentage) if e not in skip]
    if not entries:
        return []
    if digest is None:
        digest = DigestManager(md.ledger_id, int(md.digest_type), md.password)
    if reads is None:
        reads = asyncio.Semaphore(DEFAULT_READ_CONCURRENCY)
    timeout = bk.conf.read_entry_timeout_sec
    try:
        conn = await bk.pool.get(fragment.bookie)
    except Exception as e:
        return [BadReplica(fragment, entries[0], UNREACHABLE, repr(e))]
    bad: list[BadReplica] = []

    async def one(entry_id: int) -> None:
        async with reads:
            try:
                resp = await conn.read_entry(md.ledger_id, entry_id, timeout=timeout)
            except Exception as e:
                bad.append(BadReplica(fragment, entry_id, UNREACHABLE, repr(e)))
                return
        if resp.status in (ENOENTRY, ENOLEDGER):
            bad.append(BadReplica(fragment, entry_id, MISSING, STATUS_NAMES[resp.status]))
            return
        if resp.status != EOK:
            name = STATUS_NAMES.get(resp.status, str(resp.status))
            bad.append(BadReplica(fragment, entry_id, UNREADABLE, name))
            return
        try:
            digest.verify(bytes(resp.readResponse.body), entry_id)
        except DigestMismatchError as e:
            bad.append(BadReplica(fragment, entry_id, BAD_DIGEST, str(e)))

    await asyncio.gather(*(one(e) for e in entries))
    bad.sort(key=lambda b: b.entry_id)
    for b in bad:
        if b.judged:
            log.warning("bad replica: %s", b)
    return bad


async def verify_ledger(
    bk: BookKeeper,
    md: LedgerMetadata,
    *,
    percentage: int = 100,
    bookies: Collection[str] | None = None,
    reads: asyncio.Semaphore | None = None,
) -> list[BadReplica]:
    """:func:`verify_fragment` for every final fragment of ``md`` (only
    those on ``bookies`` when given). A bookie that is not registered is
    not asked: its fragments are reported :data:`UNREACHABLE`."""
    digest = DigestManager(md.ledger_id, int(md.digest_type), md.password)
    if reads is None:
        reads = asyncio.Semaphore(DEFAULT_READ_CONCURRENCY)
    available = registered_bookies(bk)
    out: list[BadReplica] = []

    async def one(f: Fragment) -> None:
        if f.bookie not in available:
            first = stored_entries(md, f)
            if first:
                out.append(BadReplica(f, first[0], UNREACHABLE, "not registered"))
            return
        out.extend(
            await verify_fragment(bk, md, f, percentage=percentage, digest=digest, reads=reads)
        )

    chosen = [f for f in final_fragments(md) if bookies is None or f.bookie in bookies]
    await asyncio.gather(*(one(f) for f in chosen))
    out.sort(key=lambda b: (b.fragment, b.entry_id))
    return out


async def verify_ledgers(
    bk: BookKeeper,
    ledger_ids: Collection[int] | None = None,
    *,
    percentage: int = 100,
    concurrency: int = DEFAULT_CONCURRENCY,
    read_concurrency: int = DEFAULT_READ_CONCURRENCY,
) -> list[BadReplica]:
    """Read what each bookie should hold of each ledger (every ledger when
    ``ledger_ids`` is None) per its current metadata, and return every
    entry that is missing, unreadable, fails its digest, or whose bookie
    could not be asked; an empty list means every replica verifies.
    ``percentage`` as :func:`sample_entries` (100: every entry). Only the
    final part of a ledger is read (an open ledger's last ensemble is not).
    A ledger found bad whose metadata changed meanwhile (re-replication)
    is verified again with the new metadata; a deleted one is skipped."""
    if ledger_ids is None:
        ledger_ids = await bk.list_ledgers()
    reads = asyncio.Semaphore(read_concurrency)
    found: list[BadReplica] = []

    async def one(ledger_id: int) -> None:
        try:
            md, version = await bk.metadata_store.read(ledger_id)
            for _attempt in range(3):
                bad = await verify_ledger(bk, md, percentage=percentage, reads=reads)
                if not bad:
                    return
                md2, version2 = await bk.metadata_store.read(ledger_id)
                if version2 == version:
                    break
                md, version = md2, version2
        except NoSuchLedgerError:
            return
        found.extend(bad)

    await _bounded(ledger_ids, one, concurrency)
    found.sort(key=lambda b: (b.fragment, b.entry_id))
    return found


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
    percentage: int | None = None,
    reads: asyncio.Semaphore | None = None,
) -> dict[str, int]:
    """Bookie -> entries it lacks (-1: not registered, so all of them), for
    the bookies of ``md`` that lack any in the part of the ledger whose
    placement is final. With ``percentage`` (auditorLedgerVerificationPercentage)
    the entries :func:`verify_fragment` samples are also read and
    digest-verified; one missing, unreadable or corrupt counts as lacking.
    A registered bookie that cannot answer is left out (logged): a
    transient failure is not a lost replica."""
    upto = checked_last_entry(md)
    if available is None:
        available = registered_bookies(bk)
    if percentage is not None and reads is None:
        reads = asyncio.Semaphore(DEFAULT_READ_CONCURRENCY)
    digest = (
        DigestManager(md.ledger_id, int(md.digest_type), md.password)
        if percentage is not None
        else None
    )
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
        have = set(held)
        lacking = {e for e in expected_entries(md, bookie, upto) if e not in have}
        if percentage is not None:
            for f in final_fragments(md):
                if f.bookie != bookie:
                    continue
                bad = await verify_fragment(
                    bk, md, f, percentage=percentage, skip=lacking, digest=digest, reads=reads
                )
                lacking.update(b.entry_id for b in bad if b.judged)
        if lacking:
            out[bookie] = len(lacking)

    await asyncio.gather(*(one(b) for b in bookies_to_check(md, upto)))
    return out


async def find_ledgers_missing_entries(
    bk: BookKeeper,
    ledger_ids: Collection[int] | None = None,
    *,
    concurrency: int = DEFAULT_CONCURRENCY,
    timeout: float = DEFAULT_TIMEOUT,
    should_continue: Callable[[], bool] | None = None,
    percentage: int | None = None,
    read_concurrency: int = DEFAULT_READ_CONCURRENCY,
) -> dict[int, set[str]]:
    """Ledger -> bookies lacking entries they should hold, for every ledger
    with any; with ``percentage``, also bookies holding a sampled entry
    that is unreadable or fails its digest (see :func:`check_ledger_entries`;
    at most ``read_concurrency`` reads in flight for the whole check). A ledger whose metadata changed while it was checked (an
    ensemble replaced by re-replication, a close) is checked again with
    the new metadata before it is reported. ``should_continue`` is asked
    before each ledger; once it says no, the check stops where it is."""
    if ledger_ids is None:
        ledger_ids = await bk.list_ledgers()
    found: dict[int, set[str]] = {}
    reads = asyncio.Semaphore(read_concurrency)

    async def one(ledger_id: int) -> None:
        if should_continue is not None and not should_continue():
            return
        try:
            md, version = await bk.metadata_store.read(ledger_id)
            for _attempt in range(3):
                missing = await check_ledger_entries(
                    bk, md, timeout=timeout, percentage=percentage, reads=reads
                )
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
            "ledger %d: bookies lack (or hold bad) entries: %s",
            ledger_id,
            ", ".join(f"{b} ({'all' if n < 0 else n})" for b, n in sorted(missing.items())),
        )
        found[ledger_id] = set(missing)

    await _bounded(ledger_ids, one, concurrency)
    return found
