"""Re-replication: copy a ledger's fragments off lost (or leaving) bookies.

What upstream's ``LedgerFragmentReplicator`` and
``BookKeeperAdmin.replicateLedgerFragment`` do, for one ledger at a time:

1. The fragments to copy are those stored on one of the given bookies (a
   mark's missing replicas, a bookie being decommissioned), on a bookie
   that is not registered (neither writable nor read-only), and optionally
   those whose bookie lacks entries it should have
   (GetListOfEntriesOfLedger) or, with a verification percentage
   (``auditorLedgerVerificationPercentage``), serves a sampled entry that
   is unreadable or fails its digest
   (:func:`dlog.ledger.checker.verify_fragment`, the auditor's own check):
   such a corrupt replica on a live bookie is replaced like a lost one.
2. The last ensemble of a ledger that is not closed is *open*: its writer
   may still add to it, so it is left alone unless ``fence_open`` is set;
   then the ledger is recovered first (fenced and closed), as upstream's
   worker does after ``openLedgerRereplicationGracePeriod``. Earlier
   ensembles of an open ledger are final and are copied without fencing.
3. For each ensemble with such fragments, the placement policy chooses a
   new bookie for each affected index (writable, not in the ensemble, not
   one being replaced). Every entry that index stores is read from a
   surviving replica of its write set, its digest verified (a corrupt or
   missing replica is skipped for the next one; a corrupt entry is never
   copied), and added to the new bookie with the recovery flag, in batches
   of ``batch_size`` (``rereplicationEntryBatchSize``). The stored body is
   copied as is, digest and piggybacked LAC included.
4. The ensemble is then updated by compare-and-set: re-read, replace the
   old bookie at that index of that ensemble if it is still there, write at
   the read version, retry on a version conflict (a writer's ensemble
   change, another worker). Nothing else of the metadata changes: state,
   last entry, length and BP-44 contexts stay as stored (the write keeps
   the ledger's own format whatever this client's ``ledgerMetadataVersion``).
5. The bookie that lost the replica gets a BP-32 write close (advisory,
   only where it is registered and advertises it), unless it still belongs
   to the ensemble an open ledger's writer writes to.

No ledger is created by re-replication.
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
import weakref
from collections.abc import Collection, Sequence
from typing import TYPE_CHECKING

from dlog.errors import (
    ENOENTRY,
    ENOLEDGER,
    EOK,
    STATUS_NAMES,
    BKError,
    DigestMismatchError,
    MetadataVersionError,
    NoSuchEntryError,
    NoSuchLedgerError,
    ReadError,
    error_for_status,
)
from dlog.ledger import checker
from dlog.ledger.digest import DigestManager
from dlog.ledger.fragments import Fragment, fragments_on, missing_entries, stored_entries
from dlog.ledger.metadata import LedgerMetadata
from dlog.ledger.metadata_store import LedgerMetadataStore
from dlog.ledger.quorum import write_set
from dlog.loop_metrics import LoopCounter

if TYPE_CHECKING:
    from dlog.ledger.client import BookKeeper

log = logging.getLogger(__name__)

__all__ = ["ReplicationOutcome", "find_fragments", "replicate_ledger"]


@dataclasses.dataclass
class ReplicationOutcome:
    """What :func:`replicate_ledger` did to one ledger."""

    ledger_id: int
    #: The ledger does not exist (deleted meanwhile): nothing to replicate.
    deleted: bool = False
    #: The ledger was open and this call recovered (fenced and closed) it.
    fenced: bool = False
    #: Fragments copied and swapped in the metadata, with their new bookie.
    replicated: list[tuple[Fragment, str]] = dataclasses.field(default_factory=list)
    #: Fragments of the open last ensemble, left alone (not fencing).
    open_fragments: list[Fragment] = dataclasses.field(default_factory=list)
    #: Fragments that could not be replicated, and why.
    failed: list[tuple[Fragment, str]] = dataclasses.field(default_factory=list)
    entries_copied: int = 0
    bytes_copied: int = 0

    @property
    def fully_replicated(self) -> bool:
        """Nothing left to do: every affected fragment now has all its replicas."""
        return self.deleted or (not self.failed and not self.open_fragments)


class _Metrics:
    def __init__(self, bk: BookKeeper) -> None:
        m = bk.metrics
        self.entries: LoopCounter = m.counter(
            "replication_worker_entries_copied", "Entries copied to a new bookie by re-replication."
        )
        self.bytes: LoopCounter = m.counter(
            "replication_worker_bytes_copied",
            "Bytes (stored entry bodies) copied to a new bookie by re-replication.",
        )
        self.fragments: LoopCounter = m.counter(
            "replication_worker_fragments",
            "Ledger fragments re-replicated, by outcome.",
            ["outcome"],
        )
        self.fenced: LoopCounter = m.counter(
            "replication_worker_ledgers_fenced",
            "Open ledgers recovered (fenced) to replicate their last fragment.",
        )


_METRICS: weakref.WeakKeyDictionary[BookKeeper, _Metrics] = weakref.WeakKeyDictionary()


def replication_metrics(bk: BookKeeper) -> _Metrics:
    """The client's re-replication counters, made on first use: a process
    that exports them (AutoRecovery) makes them at start, so a scrape has
    them before the first copy."""
    m = _METRICS.get(bk)
    if m is None:
        m = _METRICS[bk] = _Metrics(bk)
    return m


def _available(bk: BookKeeper) -> frozenset[str]:
    return bk.watcher.writable | bk.watcher.readonly


async def find_fragments(
    bk: BookKeeper,
    md: LedgerMetadata,
    bookies: Collection[str] = (),
    *,
    check_entries: bool = False,
    verify_percentage: int | None = None,
) -> list[Fragment]:
    """The fragments of ``md`` that need copying: on one of ``bookies``, on
    an unregistered bookie, or (``check_entries``) closed fragments whose
    registered bookie does not list every entry it should store, or (with
    ``verify_percentage`` too) serves a sampled entry that is missing,
    unreadable or fails its digest (a bookie that cannot be asked is not
    judged)."""
    available = _available(bk)
    bad = set(fragments_on(md, bookies, available=available))
    reads = asyncio.Semaphore(checker.DEFAULT_READ_CONCURRENCY)
    if check_entries:
        timeout = bk.conf.read_entry_timeout_sec
        listed: dict[str, list[int] | None] = {}
        for f in fragments_on(md, (), available=()):
            if f in bad or not f.is_closed or f.is_empty:
                continue
            if f.bookie not in listed:
                try:
                    conn = await bk.pool.get(f.bookie)
                    listed[f.bookie] = await conn.entries_of_ledger(md.ledger_id, timeout)
                except NoSuchLedgerError:
                    listed[f.bookie] = []
                except BKError as e:
                    log.info("ledger %d: cannot list entries on %s: %s", md.ledger_id, f.bookie, e)
                    listed[f.bookie] = None
            present = listed[f.bookie]
            if present is None:
                continue
            if missing_entries(md, f, present):
                bad.add(f)
            elif verify_percentage is not None:
                found = await checker.verify_fragment(
                    bk, md, f, percentage=verify_percentage, reads=reads
                )
                if any(b.judged for b in found):
                    bad.add(f)
    return sorted(bad)


async def replicate_ledger(
    bk: BookKeeper,
    ledger_id: int,
    *,
    bookies: Collection[str] | None = None,
    batch_size: int = 10,
    fence_open: bool = False,
    check_entries: bool = False,
    verify_percentage: int | None = None,
) -> ReplicationOutcome:
    """Copy every fragment of ``ledger_id`` that lives on one of ``bookies``
    or on an unregistered bookie (and with ``check_entries``, whose bookie
    misses entries or, with ``verify_percentage``, serves a bad one; see
    :func:`find_fragments`) to a new bookie, and point the metadata at it.

    Errors copying one ensemble's fragments are recorded in the outcome
    (``failed``) and the others still go ahead; the caller checks
    :attr:`ReplicationOutcome.fully_replicated`."""
    outcome = ReplicationOutcome(ledger_id)
    metrics = replication_metrics(bk)
    targets = frozenset(bookies or ())
    # Writes keep the ledger's own format (-1): contexts are never dropped here.
    store = LedgerMetadataStore(bk.zk, bk.metadata_store.ledgers_root, -1)
    try:
        md, _ = await store.read(ledger_id)
        bad = await find_fragments(
            bk, md, targets, check_entries=check_entries, verify_percentage=verify_percentage
        )
        if fence_open and any(not f.is_closed for f in bad):
            log.warning(
                "ledger %d: its open last ensemble lost a replica; recovering (fencing) it",
                ledger_id,
            )
            rh = await bk.open_ledger(ledger_id, md.password, recovery=True)
            await rh.close()
            outcome.fenced = rh.recovered_by_me
            if outcome.fenced:
                metrics.fenced.inc()
            md, _ = await store.read(ledger_id)
            bad = await find_fragments(
                bk, md, targets, check_entries=check_entries, verify_percentage=verify_percentage
            )
    except NoSuchLedgerError:
        outcome.deleted = True
        return outcome

    outcome.open_fragments = [f for f in bad if not f.is_closed]
    by_ensemble: dict[int, list[Fragment]] = {}
    for f in bad:
        if f.is_closed:
            by_ensemble.setdefault(f.first_entry, []).append(f)
    for first, group in sorted(by_ensemble.items()):
        try:
            done = await _replicate_ensemble(
                bk, store, md, first, group, targets, batch_size, outcome
            )
        except NoSuchLedgerError:
            outcome.deleted = True
            return outcome
        except BKError as e:
            log.warning("ledger %d: re-replicating entries from %d failed: %s", ledger_id, first, e)
            for f in group:
                outcome.failed.append((f, str(e)))
                metrics.fragments.inc(labels=("failed",))
            continue
        outcome.replicated.extend(done)
        metrics.fragments.inc(len(done), labels=("replicated",))
    if outcome.open_fragments:
        log.info(
            "ledger %d is open: its last fragment(s) on %s wait for the ledger to be fenced",
            ledger_id,
            ", ".join(sorted({f.bookie for f in outcome.open_fragments})),
        )
    return outcome


async def _replicate_ensemble(
    bk: BookKeeper,
    store: LedgerMetadataStore,
    md: LedgerMetadata,
    first: int,
    group: Sequence[Fragment],
    targets: frozenset[str],
    batch_size: int,
    outcome: ReplicationOutcome,
) -> list[tuple[Fragment, str]]:
    """Copy the fragments of the ensemble starting at ``first`` to new
    bookies, then swap them into the metadata. Returns the fragments whose
    swap landed (one replaced meanwhile by someone else is not listed)."""
    ensemble = list(dict(md.ensembles)[first])
    leaving = {f.bookie for f in group} | targets
    writable = [b for b in bk.watcher.writable if b not in leaving]
    replacement: dict[int, tuple[Fragment, str]] = {}
    for f in group:
        new = bk.placement.replace_bookie(ensemble, f.index, writable)
        ensemble[f.index] = new
        replacement[f.index] = (f, new)
    digest = DigestManager(md.ledger_id, int(md.digest_type), md.password)
    for f, new in replacement.values():
        await _copy_fragment(bk, md, f, new, leaving, digest, max(1, batch_size), outcome)
    return await _swap_in(bk, store, md.ledger_id, first, list(replacement.values()), digest)


async def _copy_fragment(
    bk: BookKeeper,
    md: LedgerMetadata,
    f: Fragment,
    new: str,
    leaving: Collection[str],
    digest: DigestManager,
    batch_size: int,
    outcome: ReplicationOutcome,
) -> None:
    entries = stored_entries(md, f)
    if not entries:
        log.info("%s: no entries to copy; replacing it by %s", f, new)
        return
    log.info("%s: copying %d entries to %s", f, len(entries), new)
    metrics = replication_metrics(bk)
    ensemble = dict(md.ensembles)[f.first_entry]
    available = _available(bk)
    timeout = bk.conf.add_entry_timeout_sec
    target = await bk.pool.get(new)

    def sources(entry_id: int) -> list[str]:
        """The other replicas, those not leaving first; unregistered ones never."""
        others = [
            ensemble[i]
            for i in write_set(entry_id, md.ensemble_size, md.write_quorum_size)
            if i != f.index and ensemble[i] in available
        ]
        return [b for b in others if b not in leaving] + [b for b in others if b in leaving]

    async def copy(entry_id: int) -> None:
        body = await _read_verified(bk, md.ledger_id, entry_id, sources(entry_id), digest)
        resp = await target.add_entry(
            md.ledger_id, entry_id, digest.master_key, body, recovery=True, timeout=timeout
        )
        if resp.status != EOK:
            raise error_for_status(
                resp.status, f"add entry {entry_id} of ledger {md.ledger_id} to {new}"
            )
        outcome.entries_copied += 1
        outcome.bytes_copied += len(body)
        metrics.entries.inc()
        metrics.bytes.inc(len(body))

    for start in range(0, len(entries), batch_size):
        await asyncio.gather(*(copy(e) for e in entries[start : start + batch_size]))


async def _read_verified(
    bk: BookKeeper, ledger_id: int, entry_id: int, sources: Sequence[str], digest: DigestManager
) -> bytes:
    """The stored body of an entry from the first of ``sources`` whose copy
    passes its digest check."""
    errors: list[str] = []
    missing = corrupt = 0
    for bookie in sources:
        try:
            conn = await bk.pool.get(bookie)
            resp = await conn.read_entry(
                ledger_id, entry_id, timeout=bk.conf.read_entry_timeout_sec
            )
        except BKError as e:
            errors.append(f"{bookie}: {e}")
            continue
        if resp.status != EOK:
            missing += resp.status in (ENOENTRY, ENOLEDGER)
            errors.append(f"{bookie}: {STATUS_NAMES.get(resp.status, resp.status)}")
            continue
        body = bytes(resp.readResponse.body)
        try:
            digest.verify(body, entry_id)
        except DigestMismatchError as e:
            corrupt += 1
            log.warning(
                "ledger %d entry %d: corrupt replica on %s, not copied: %s",
                ledger_id,
                entry_id,
                bookie,
                e,
            )
            errors.append(f"{bookie}: {e}")
            continue
        return body
    detail = "; ".join(errors) or "no surviving replica"
    what = f"ledger {ledger_id} entry {entry_id}"
    if corrupt:
        raise DigestMismatchError(f"{what}: no replica with a valid digest ({detail})")
    if errors and missing == len(errors):
        raise NoSuchEntryError(f"{what} is on no surviving replica ({detail})")
    raise ReadError(f"{what}: no surviving replica could be read ({detail})")


async def _swap_in(
    bk: BookKeeper,
    store: LedgerMetadataStore,
    ledger_id: int,
    first: int,
    replaced: list[tuple[Fragment, str]],
    digest: DigestManager,
) -> list[tuple[Fragment, str]]:
    """Compare-and-set the ensemble starting at ``first``: each old bookie
    still at its index gives way to its new one. Returns those swapped."""
    while True:
        current, version = await store.read(ledger_id)
        ensembles = dict(current.ensembles)
        ensemble = ensembles.get(first)
        if ensemble is None:
            raise MetadataVersionError(
                f"ledger {ledger_id}: the ensemble at entry {first} was replaced meanwhile"
            )
        new_ensemble = list(ensemble)
        swapped = []
        for f, new in replaced:
            if new_ensemble[f.index] == f.bookie and new not in new_ensemble:
                new_ensemble[f.index] = new
                swapped.append((f, new))
        if not swapped:
            log.info("ledger %d: ensemble at %d already changed by someone else", ledger_id, first)
            return []
        ensembles[first] = tuple(new_ensemble)
        updated = current.replace(ensembles=tuple(sorted(ensembles.items())))
        try:
            await store.write(updated, version)
        except MetadataVersionError:
            continue  # a writer's ensemble change, a close, another worker: re-read, re-check
        break
    for f, new in swapped:
        log.info("ledger %d: ensemble at %d: %s -> %s", ledger_id, first, f.bookie, new)
    writer_ensemble = () if updated.is_closed else updated.last_ensemble
    closing = [f.bookie for f, _ in swapped if f.bookie not in writer_ensemble]
    if closing:
        bk.send_write_close(ledger_id, digest.master_key, closing)
    return swapped
