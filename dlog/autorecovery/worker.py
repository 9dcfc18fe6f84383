"""The replication worker: takes under-replicated ledgers one at a time and
restores their replicas (upstream's ``ReplicationWorker``).

Its loop: wait for a marked ledger nobody holds and lock it
(:meth:`UnderreplicationManager.acquire`, which also waits while
re-replication is disabled), then :func:`~dlog.ledger.replicator.replicate_ledger`:

* fully replicated (or the ledger was deleted meanwhile): the mark is
  removed and the lock released;
* something failed: the lock is kept for ``lockReleaseOfFailedLedgerGracePeriod``
  (no worker retries it in a loop meanwhile), and this worker backs off
  ``rwRereplicateBackoffMs`` before taking the next ledger;
* the ledger is open and its last fragment lost a replica: the worker keeps
  the lock, leaves the writer ``openLedgerRereplicationGracePeriod`` to
  finish (or to change its ensemble itself), then fences the ledger and
  replicates the rest, in the background while it takes other ledgers.

Like upstream's worker it does not trust the mark's list of bookies: the
fragments to copy are those on unregistered bookies and those whose live
bookie misses entries (GetListOfEntriesOfLedger) or serves a sampled entry
that is unreadable or fails its digest (``auditorLedgerVerificationPercentage``,
the auditor's own verification; so a corrupt replica on a live bookie is
replaced); a mark nothing backs any longer (the bookie came back with its
data) is simply removed. The worker samples as its own configuration says:
give it the auditor's percentage, or a bad middle entry the auditor found
may not be found again and the mark is dropped.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable
from typing import TYPE_CHECKING

from dlog.ledger.replicator import ReplicationOutcome, replicate_ledger, replication_metrics
from dlog.tasks import BackgroundTasks

if TYPE_CHECKING:
    from dlog.conf.bookie import BookieConfig
    from dlog.ledger.client import BookKeeper
    from dlog.ledger.underreplication import UnderreplicationManager

log = logging.getLogger(__name__)

__all__ = ["ReplicationWorker"]


class ReplicationWorker:
    """One replication worker (run one per AutoRecovery daemon)."""

    def __init__(self, bk: BookKeeper, urm: UnderreplicationManager, conf: BookieConfig) -> None:
        self.bk = bk
        self.urm = urm
        self.batch_size = conf.rereplication_entry_batch_size
        self.open_grace = conf.open_ledger_rereplication_grace_period / 1000.0
        self.failed_grace = conf.lock_release_of_failed_ledger_grace_period / 1000.0
        self.backoff = conf.rw_rereplicate_backoff_ms / 1000.0
        self.verify_percentage = conf.auditor_ledger_verification_percentage
        self._task: asyncio.Task[None] | None = None
        self._deferred = BackgroundTasks()
        self._current: int | None = None
        replication_metrics(bk)  # exported from the start, not the first copy
        m = bk.metrics
        self.ledgers_replicated = m.counter(
            "replication_worker_ledgers_replicated",
            "Under-replicated ledgers this worker restored (mark removed).",
        )
        self.ledgers_failed = m.counter(
            "replication_worker_ledgers_failed",
            "Attempts that left a ledger under-replicated (lock kept for the grace period).",
        )
        self.ledgers_deferred = m.counter(
            "replication_worker_ledgers_deferred",
            "Open ledgers whose last fragment waited for the writer before fencing.",
        )

    @property
    def running(self) -> bool:
        return self._task is not None and not self._task.done()

    async def start(self) -> None:
        if self._task is None:
            self._task = asyncio.get_running_loop().create_task(
                self._run(), name="replication worker"
            )

    async def stop(self) -> None:
        """Stop taking ledgers; the one in hand is released (its mark stays)."""
        task, self._task = self._task, None
        if task is not None:
            task.cancel()
            try:
                await task
            except asyncio.CancelledError:
                pass
            except Exception:
                log.exception("replication worker failed")
        leftovers = self._deferred.cancel_all()
        if leftovers:
            await asyncio.gather(*leftovers, return_exceptions=True)
        for lid in list(self.urm.held):
            try:
                await self.urm.release(lid)
            except Exception as e:  # the lock is ephemeral: it goes with the session
                log.info("could not release the lock of ledger %d: %s", lid, e)

    async def _run(self) -> None:
        while True:
            try:
                lid = await self.urm.acquire(wait=True)
            except asyncio.CancelledError:
                raise
            except Exception as e:
                log.warning("replication worker: cannot take a ledger: %s", e)
                await asyncio.sleep(max(self.backoff, 0.1))
                continue
            if lid is None:
                continue
            if not await self._attempt(lid, self.replicate(lid)):
                await asyncio.sleep(self.backoff)

    async def _attempt(self, ledger_id: int, work: Awaitable[bool]) -> bool:
        """Run one attempt on a ledger; an error in it fails the attempt,
        never the worker. A ZooKeeper error after the copy (the session
        expired while the mark was being removed, say) leaves the ledger
        marked, and its lock goes with the session or after the failed
        grace, so the ledger is taken again; a worker task that died of it
        would leave every marked ledger unrepaired while AutoRecovery runs on."""
        try:
            return await work
        except asyncio.CancelledError:
            raise
        except Exception as e:
            log.warning("ledger %d: re-replication did not finish: %s", ledger_id, e)
            self.ledgers_failed.inc()
            try:
                await self.urm.release(ledger_id, delay=self.failed_grace)
            except Exception as release_error:  # the lock is ephemeral: it goes with the session
                log.info("could not release the lock of ledger %d: %s", ledger_id, release_error)
            return False

    async def replicate(self, ledger_id: int) -> bool:
        """Re-replicate a ledger whose lock this worker holds; True when its
        mark was removed. An error fails the attempt (see :meth:`_attempt`)."""
        self._current = ledger_id
        try:
            outcome = await replicate_ledger(
                self.bk,
                ledger_id,
                batch_size=self.batch_size,
                check_entries=True,
                verify_percentage=self.verify_percentage,
            )
        finally:
            self._current = None
        if outcome.open_fragments and not outcome.failed:
            log.info(
                "ledger %d: open, its last fragment waits %.1fs for the writer before fencing",
                ledger_id,
                self.open_grace,
            )
            self.ledgers_deferred.inc()
            self._deferred.spawn(self._fence_later(ledger_id))
            return False
        return await self._finish(ledger_id, outcome)

    async def _finish(self, ledger_id: int, outcome: ReplicationOutcome) -> bool:
        if outcome.fully_replicated:
            log.info(
                "ledger %d replicated%s: %d fragments, %d entries copied",
                ledger_id,
                " (deleted meanwhile)" if outcome.deleted else "",
                len(outcome.replicated),
                outcome.entries_copied,
            )
            await self.urm.mark_replicated(ledger_id)
            self.ledgers_replicated.inc()
            return True
        for f, why in outcome.failed:
            log.warning("%s: not replicated: %s", f, why)
        self.ledgers_failed.inc()
        await self.urm.release(ledger_id, delay=self.failed_grace)
        return False

    async def _fence_later(self, ledger_id: int) -> None:
        await asyncio.sleep(self.open_grace)

        async def fence_and_finish() -> bool:
            outcome = await replicate_ledger(
                self.bk,
                ledger_id,
                batch_size=self.batch_size,
                fence_open=True,
                check_entries=True,
                verify_percentage=self.verify_percentage,
            )
            return await self._finish(ledger_id, outcome)

        await self._attempt(ledger_id, fence_and_finish())
