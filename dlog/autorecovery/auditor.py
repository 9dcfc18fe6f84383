"""The auditor: finds ledgers with replicas missing and marks them
under-replicated, for the replication workers to fix.

One auditor is active at a time (see :mod:`dlog.autorecovery.election`);
:class:`~dlog.autorecovery.service.AutoRecovery` starts this while elected
and stops it when the election is lost. It follows upstream's ``Auditor``:

* **Lost bookies.** It watches the bookie registrations (writable and
  read-only). A bookie gone from both is audited once
  ``lostBookieRecoveryDelay`` has passed (read from its znode, which the
  auditor creates from the configuration and watches: a change cancels the
  pending audit and schedules it again with the new delay, or runs it now
  when the delay is 0 or set to its previous value). Every bookie lost
  returning in time cancels the pending audit. Two or more bookies lost at
  once, or a delay of 0, are audited at once.
* **Periodic bookie check** every ``auditorPeriodicBookieCheckInterval``
  (0: once, at start): every ledger with a fragment on a bookie that is not
  registered is marked, with those bookies missing. Skipped while a
  delayed lost-bookie audit is pending.
* **Periodic entries check** every ``auditorPeriodicCheckInterval`` (0:
  never), first run timed from ``checkallledgersctime`` as upstream does:
  asks each bookie of each ledger which entries it holds, and reads the
  first and last entry of each of its fragments plus
  ``auditorLedgerVerificationPercentage`` percent of the others, each
  verified by the ledger's digest (upstream only checks the reads succeed;
  dlog also verifies digests, so a corrupt replica on a live bookie is
  marked) (:mod:`dlog.ledger.checker`). Skipped while a delayed audit is pending
  or replication is disabled; records ``checkallledgersctime`` when done.
* **Orphan audit** (BP-44, a dlog extension) every
  ``orphanedLedgerCheckInterval`` (znode initialized from
  ``auditorPeriodicOrphanedLedgerCheckInterval``; a change takes effect at
  once, timed from the previous run).

While replication is disabled (``underreplication/disable``) the
lost-bookie audit waits, as upstream's ``waitIfLedgerReplicationDisabled``.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Awaitable, Callable, Iterable
from typing import TYPE_CHECKING

from dlog.ledger import checker
from dlog.loop_metrics import LoopMetrics
from dlog.zk import NoNodeError, WatchedEvent

if TYPE_CHECKING:
    from dlog.conf.bookie import BookieConfig
    from dlog.ledger.client import BookKeeper
    from dlog.ledger.underreplication import UnderreplicationManager

log = logging.getLogger(__name__)

__all__ = ["Auditor", "AuditorMetrics"]

CHECK_BUCKETS = (0.01, 0.05, 0.1, 0.5, 1.0, 5.0, 10.0, 60.0, 300.0, 1800.0, 7200.0)


class AuditorMetrics:
    """The auditor's metrics, made once per process: auditors come and go
    with elections, their counts add up."""

    def __init__(self, loop_metrics: LoopMetrics | None = None) -> None:
        m = self.loop_metrics = loop_metrics if loop_metrics is not None else LoopMetrics()
        self.ledgers_marked = m.counter(
            "auditor_ledgers_marked_total",
            "Ledgers the auditor marked under-replicated, by the check that found them.",
            ["check"],
        )
        self.lost_bookies = m.counter(
            "auditor_lost_bookies_total",
            "Bookies the auditor saw leave both the writable and the read-only registrations.",
        )
        self.audits_delayed = m.counter(
            "auditor_bookie_audits_delayed_total",
            "Lost-bookie audits put off by lostBookieRecoveryDelay.",
        )
        self.audits_cancelled = m.counter(
            "auditor_delayed_bookie_audits_cancelled_total",
            "Delayed lost-bookie audits cancelled (bookies back, or the delay changed).",
        )
        self.checks_skipped = m.counter(
            "auditor_checks_skipped_total",
            "Periodic checks skipped because a delayed lost-bookie audit was pending.",
        )
        self.check_failures = m.counter(
            "auditor_check_failures_total", "Checks that failed, by check.", ["check"]
        )
        self.check_duration = {
            name: m.histogram(
                f"auditor_{name}_check_duration_seconds",
                f"How long one {name} check took.",
                CHECK_BUCKETS,
            )
            for name in ("bookie", "entries", "orphan")
        }


class Auditor:
    """Runs only while elected: :meth:`start` once, :meth:`stop` once."""

    def __init__(
        self,
        bk: BookKeeper,
        urm: UnderreplicationManager,
        conf: BookieConfig,
        *,
        metrics: AuditorMetrics | None = None,
    ) -> None:
        self.bk = bk
        self.urm = urm
        self.conf = conf
        self.metrics = metrics if metrics is not None else AuditorMetrics()

        self.lost_bookie_recovery_delay = 0
        self._delay_before_change = 0
        #: Bookies seen registered (upstream's knownBookies).
        self._known: set[str] = set()
        #: Bookies lost and not yet audited (upstream's bookiesToBeAudited).
        self._to_audit: set[str] = set()
        self._audit_task: asyncio.Task[None] | None = None
        #: One audit or check at a time, as upstream's single-threaded executor.
        self._lock = asyncio.Lock()
        self._registrations_changed = asyncio.Event()
        self._delay_changed = asyncio.Event()
        self._orphan_interval_changed = asyncio.Event()
        self._tasks: list[asyncio.Task[None]] = []
        self._started = False
        self._stopped = False

    # -- lifecycle ---------------------------------------------------------------
    async def start(self) -> None:
        if self._started:
            return
        self._started = True
        log.info("starting as the auditor")
        if await self.urm.initialize_lost_bookie_recovery_delay(
            self.conf.lost_bookie_recovery_delay
        ):
            log.info(
                "lostBookieRecoveryDelay znode initialized to %ds from the configuration",
                self.conf.lost_bookie_recovery_delay,
            )
        self.lost_bookie_recovery_delay = await self.urm.get_lost_bookie_recovery_delay()
        self._delay_before_change = self.lost_bookie_recovery_delay
        await self.urm.initialize_orphan_check_interval(
            self.conf.auditor_periodic_orphaned_ledger_check_interval
        )
        self._known = set(await self._available_bookies(watch=True))
        self.urm.watch_lost_bookie_recovery_delay(self._on_delay_changed)
        self.urm.watch_orphan_check_interval(self._on_orphan_interval_changed)
        loop = asyncio.get_running_loop()
        for coro in (
            self._watch_registrations(),
            self._watch_delay(),
            self._periodic_bookie_check(),
            self._periodic_entries_check(),
            self._periodic_orphan_audit(),
        ):
            self._tasks.append(loop.create_task(coro))

    async def stop(self) -> None:
        if self._stopped:
            return
        self._stopped = True
        tasks = list(self._tasks)
        if self._audit_task is not None:
            tasks.append(self._audit_task)
            self._audit_task = None
        for t in tasks:
            t.cancel()
        for t in tasks:
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await t
        log.info("auditor stopped")

    @property
    def audit_pending(self) -> bool:
        """A delayed lost-bookie audit is scheduled."""
        return self._audit_task is not None and not self._audit_task.done()

    # -- registrations -----------------------------------------------------------
    def _on_registration_event(self, _event: WatchedEvent) -> None:
        self._registrations_changed.set()

    async def _available_bookies(self, *, watch: bool = False) -> frozenset[str]:
        """Writable and read-only bookies, read now from ZooKeeper (with
        watches that wake :meth:`_watch_registrations`)."""
        root = self.bk.uri.ledgers_root.rstrip("/")
        cb = self._on_registration_event if watch else None
        out: set[str] = set()
        for path in (f"{root}/available", f"{root}/available/readonly"):
            try:
                children = await self.bk.zk.get_children(path, watch=cb)
            except NoNodeError:  # none registered yet: watch its creation
                await self.bk.zk.exists(path, watch=cb)
                children = []
            out.update(c for c in children if c != "readonly")
        return frozenset(out)

    async def _watch_registrations(self) -> None:
        while True:
            await self._registrations_changed.wait()
            self._registrations_changed.clear()
            try:
                await self._on_bookies_changed()
            except asyncio.CancelledError:
                raise
            except Exception:
                log.exception("auditor: handling a bookie registration change failed")
                await asyncio.sleep(1.0)
                self._registrations_changed.set()

    async def _on_bookies_changed(self) -> None:
        """Upstream's submitAuditTask."""
        await self.urm.wait_replication_enabled()
        available = await self._available_bookies(watch=True)
        self._known |= available
        if self._to_audit and self._to_audit <= self._known:
            log.info("lost bookies %s are back; no audit", sorted(self._to_audit))
            self._cancel_audit()
            self._to_audit.clear()
        lost = self._known - available
        for b in sorted(lost):
            log.info("bookie %s is gone (neither writable nor read-only)", b)
            self.metrics.lost_bookies.inc()
        self._to_audit |= lost
        if not self._to_audit:
            return
        self._known -= self._to_audit
        delay = await self.urm.get_lost_bookie_recovery_delay()
        self.lost_bookie_recovery_delay = delay
        if delay == 0:
            await self._audit_now()
            return
        if len(self._to_audit) > 1:
            log.info("several bookies lost (%s): auditing without delay", sorted(self._to_audit))
            self._cancel_audit()
            await self._audit_now()
            return
        if not self.audit_pending:
            self._schedule_audit(delay)

    def _schedule_audit(self, delay: float) -> None:
        log.info(
            "lost bookies %s: audit in %ss (lostBookieRecoveryDelay)", sorted(self._to_audit), delay
        )
        self.metrics.audits_delayed.inc()
        self._audit_task = asyncio.get_running_loop().create_task(self._delayed_audit(delay))

    async def _delayed_audit(self, delay: float) -> None:
        await asyncio.sleep(delay)
        me = asyncio.current_task()
        try:
            await self._audit_now()
        finally:
            if self._audit_task is me:
                self._audit_task = None

    def _cancel_audit(self) -> None:
        task, self._audit_task = self._audit_task, None
        if task is not None and not task.done():
            task.cancel()
            self.metrics.audits_cancelled.inc()

    async def _audit_now(self) -> None:
        try:
            await self.check_bookies()
        except asyncio.CancelledError:
            raise
        except Exception:
            log.exception("auditor: lost-bookie audit failed")
        self._to_audit.clear()

    # -- lostBookieRecoveryDelay ---------------------------------------------------
    def _on_delay_changed(self, _value: int) -> None:
        self._delay_changed.set()

    async def _watch_delay(self) -> None:
        while True:
            await self._delay_changed.wait()
            self._delay_changed.clear()
            try:
                await self._on_delay_change()
            except asyncio.CancelledError:
                raise
            except Exception:
                log.exception("auditor: handling a lostBookieRecoveryDelay change failed")

    async def _on_delay_change(self) -> None:
        """Upstream's submitLostBookieRecoveryDelayChangedEvent."""
        delay = -1
        try:
            await self.urm.wait_replication_enabled()
            delay = await self.urm.get_lost_bookie_recovery_delay()
            self.lost_bookie_recovery_delay = delay
            pending = self.audit_pending
            if pending:
                log.info("lostBookieRecoveryDelay changed: cancelling the pending audit")
                self._cancel_audit()
            if delay == 0 or delay == self._delay_before_change:
                log.info(
                    "lostBookieRecoveryDelay is %ds (before: %ds): auditing now",
                    delay,
                    self._delay_before_change,
                )
                await self._audit_now()
            elif pending:
                self._schedule_audit(delay)
        finally:
            if delay != -1:
                self._delay_before_change = delay

    # -- checks ------------------------------------------------------------------------
    async def check_bookies(self) -> int:
        """Mark every ledger with a fragment on a bookie that is not
        registered; returns how many ledgers were marked. Waits while
        replication is disabled."""
        await self.urm.wait_replication_enabled()
        async with self._lock:
            return await self._timed("bookie", self._check_bookies)

    async def _check_bookies(self) -> int:
        available = await self._available_bookies()
        found = await checker.find_ledgers_on_lost_bookies(self.bk, available=available)
        if found:
            lost = sorted({b for bs in found.values() for b in bs})
            log.info(
                "bookie check: %d ledgers have fragments on lost bookies %s",
                len(found),
                lost,
            )
        return await self._mark(found, "bookie")

    async def check_all_ledgers(self) -> int:
        """Ask each bookie of each ledger which entries it holds, read and
        digest-verify a sample of them (auditorLedgerVerificationPercentage),
        and mark the ledgers with entries missing or bad; records
        checkallledgersctime.
        Returns how many ledgers were marked (0 while replication is
        disabled: the check is skipped)."""
        if not await self.urm.is_replication_enabled():
            log.info("replication is disabled: entries check skipped")
            return 0
        async with self._lock:
            marked = await self._timed("entries", self._check_all_ledgers)
        await self.urm.set_check_all_ledgers_ctime(int(time.time() * 1000))
        return marked

    async def _check_all_ledgers(self) -> int:
        enabled = True

        async def refresh_enabled() -> None:
            nonlocal enabled
            while enabled:
                await asyncio.sleep(1.0)
                enabled = await self.urm.is_replication_enabled()

        watcher = asyncio.get_running_loop().create_task(refresh_enabled())
        try:
            found = await checker.find_ledgers_missing_entries(
                self.bk,
                should_continue=lambda: enabled,
                percentage=self.conf.auditor_ledger_verification_percentage,
            )
        finally:
            watcher.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await watcher
        if not enabled:
            log.info("replication was disabled during the entries check: stopped")
        return await self._mark(found, "entries")

    async def _mark(self, found: dict[int, set[str]], check: str) -> int:
        sem = asyncio.Semaphore(checker.DEFAULT_CONCURRENCY)

        async def one(ledger_id: int, bookies: Iterable[str]) -> None:
            async with sem:
                await self.urm.mark(ledger_id, sorted(bookies))
            log.info("ledger %d marked under-replicated (missing %s)", ledger_id, sorted(bookies))

        await asyncio.gather(*(one(lid, bs) for lid, bs in sorted(found.items())))
        if found:
            self.metrics.ledgers_marked.inc(len(found), labels=(check,))
        return len(found)

    async def _timed(self, name: str, fn: Callable[[], Awaitable[int]]) -> int:
        t0 = time.monotonic()
        log.info("starting the %s check", name)
        try:
            result = await fn()
        except asyncio.CancelledError:
            raise
        except Exception:
            self.metrics.check_failures.inc(labels=(name,))
            raise
        elapsed = time.monotonic() - t0
        self.metrics.check_duration[name].observe(elapsed)
        log.info("%s check done in %.3fs: %d ledgers marked", name, elapsed, result)
        return result

    # -- periodic tasks -------------------------------------------------------------
    async def _periodic_bookie_check(self) -> None:
        interval = self.conf.auditor_periodic_bookie_check_interval
        if interval == 0:
            log.info("periodic bookie check disabled; checking once now")
        while True:
            if self.audit_pending:
                log.info("a lost-bookie audit is pending: periodic bookie check skipped")
                self.metrics.checks_skipped.inc()
            else:
                try:
                    await self.check_bookies()
                except asyncio.CancelledError:
                    raise
                except Exception:
                    log.exception("auditor: bookie check failed")
            if interval == 0:
                return
            await asyncio.sleep(interval)

    async def _periodic_entries_check(self) -> None:
        interval = self.conf.auditor_periodic_check_interval
        if interval == 0:
            log.info("periodic entries check disabled")
            return
        try:
            last = await self.urm.get_check_all_ledgers_ctime()
        except asyncio.CancelledError:
            raise
        except Exception as e:
            log.warning("cannot read checkallledgersctime (%r); checking now", e)
            last = -1
        if last is None or last < 0:
            initial = 0.0
        else:
            since = max(0.0, time.time() - last / 1000.0)
            initial = 0.0 if since > interval else interval - since
        log.info("periodic entries check every %ds, first in %.0fs", interval, initial)
        await asyncio.sleep(initial)
        while True:
            if self.audit_pending:
                log.info("a lost-bookie audit is pending: periodic entries check skipped")
                self.metrics.checks_skipped.inc()
            else:
                try:
                    await self.check_all_ledgers()
                except asyncio.CancelledError:
                    raise
                except Exception:
                    log.exception("auditor: entries check failed")
            await asyncio.sleep(interval)

    def _on_orphan_interval_changed(self, _value: int) -> None:
        self._orphan_interval_changed.set()

    async def _orphan_interval(self) -> int:
        try:
            value = await self.urm.get_orphan_check_interval()
        except asyncio.CancelledError:
            raise
        except Exception as e:
            log.warning("cannot read orphanedLedgerCheckInterval (%r); using the configuration", e)
            value = None
        if value is None:
            return self.conf.auditor_periodic_orphaned_ledger_check_interval
        return value

    async def audit_orphans(self) -> int:
        """One BP-44 orphan audit; returns how many orphans it listed."""
        from dlog.ledger.orphans import audit_orphans

        async def run() -> int:
            orphans = await audit_orphans(
                self.bk, grace_ms=self.conf.orphaned_ledger_grace_period * 1000
            )
            return len(orphans)

        return await self._timed("orphan", run)

    async def _periodic_orphan_audit(self) -> None:
        loop = asyncio.get_running_loop()
        last_run = loop.time()
        while True:
            self._orphan_interval_changed.clear()
            interval = await self._orphan_interval()
            wait: float | None = None if interval == 0 else last_run + interval - loop.time()
            if wait is None or wait > 0:
                try:
                    async with asyncio.timeout(wait):
                        await self._orphan_interval_changed.wait()
                except TimeoutError:
                    pass
                else:
                    log.info("orphanedLedgerCheckInterval changed")
                    continue
            last_run = loop.time()
            try:
                await self.audit_orphans()
            except asyncio.CancelledError:
                raise
            except Exception:
                log.exception("auditor: orphan audit failed")
