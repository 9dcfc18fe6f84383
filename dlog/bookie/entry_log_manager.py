"""Which entry log an entry goes to.

The ledger storage picks one :class:`EntryLogManager` when it starts
(``entryLogPerLedgerEnabled`` selects the implementation in one place:
:func:`create_entry_log_manager`) and calls only this interface, so the
single-active-log manager and the log-per-ledger manager are
interchangeable without flags anywhere else.

The storage flush thread calls :meth:`add_entry` and :meth:`flush`; the
event loop calls :meth:`write_close`, :meth:`rotate_ledger` and
:meth:`rotate_all`, which only record the request (no lock: a flush may
hold it across an fsync) for the next add, flush or checkpoint to apply
under the lock.

A storage flush is bracketed by :meth:`begin_flush` and, if any write or
sync in it fails, :meth:`rollback`: every log it touched goes back to where
it stood (see :class:`dlog.bookie.entry_log.Savepoint`), so no location
computed during the failed attempt can be mistaken for a later entry's.
"""

from __future__ import annotations

import abc
import logging
import threading
import time
from collections import OrderedDict
from collections.abc import Callable

from dlog.bookie.entry_log import EntryLogFile, EntryLogger, Savepoint

log = logging.getLogger(__name__)


class EntryLogManager(abc.ABC):
    """Routes entries to entry logs and decides when logs rotate."""

    def __init__(self, logger: EntryLogger, log_size_limit: int) -> None:
        self.logger = logger
        self.log_size_limit = log_size_limit
        self._lock = threading.RLock()
        # Rotated logs that are not yet sealed and synced.
        self._rotated: list[EntryLogFile] = []
        self.write_closed: set[int] = set()
        # Ledgers whose log must rotate before their next entry (an add
        # failed on the bookie): filled from the event loop, drained under
        # the lock by :meth:`_apply_rotations`.
        self._rotate_requested: set[int] = set()
        self._rotate_everything = False
        # Where each open log stood when the current flush began.
        self._savepoints: dict[int, Savepoint] = {}

    @abc.abstractmethod
    def _log_for(self, ledger_id: int, size: int) -> EntryLogFile:
        """The open log that takes the next entry of ``ledger_id``."""

    @abc.abstractmethod
    def active_logs(self) -> list[EntryLogFile]:
        """Logs currently open for writing."""

    def add_entry(self, ledger_id: int, entry: bytes) -> int:
        """Append ``entry``; returns its location. Durable only after :meth:`flush`."""
        return self.add_entries(ledger_id, [entry])[0]

    def add_entries(self, ledger_id: int, entries: list[bytes]) -> list[int]:
        """Append a ledger's entries in order; returns their locations. A
        batch that would overflow a log continues in the next one."""
        locations: list[int] = []
        limit = self.log_size_limit
        with self._lock:
            self._apply_rotations()
            i = 0
            while i < len(entries):
                f = self._log_for(ledger_id, len(entries[i]))
                room = f.room(limit)
                j = i
                while j < len(entries) and room >= len(entries[j]) + 4:
                    room -= len(entries[j]) + 4
                    j += 1
                j = max(j, i + 1)  # _log_for guaranteed the first one fits
                locations += f.add_batch(ledger_id, entries[i:j])
                i = j
        return locations

    def begin_flush(self) -> None:
        """Remember where every open log stands (see :meth:`rollback`)."""
        with self._lock:
            self._savepoints = {f.log_id: f.savepoint() for f in self.active_logs() + self._rotated}

    def rollback(self) -> None:
        """Undo what the failed flush added to every log it touched: logs
        opened since :meth:`begin_flush` go back to empty. Logs it sealed
        keep their (never indexed) entries."""
        with self._lock:
            for f in self.active_logs() + self._rotated:
                f.rollback(self._savepoints.get(f.log_id))

    def flush(self) -> None:
        """Sync every open log and seal the rotated ones (a log leaves the
        rotated list only once it is sealed, so a failure is retried)."""
        with self._lock:
            self._apply_rotations()
            for f in self.active_logs():
                f.flush()
            while self._rotated:
                self._rotated[0].seal()
                self._rotated.pop(0)

    def checkpoint(self) -> None:  # noqa: B027 - an optional hook
        """Checkpoint hook (after :meth:`flush`): rotate what should rotate."""

    def write_close(self, ledger_id: int) -> None:
        """BP-32 advisory hint: no more entries will come for ``ledger_id``.
        Called on the event loop, so it takes no lock (a flush may hold it
        across an fsync): adding to a set is atomic, and the checkpoint
        takes the hints with :meth:`_take_write_closed`."""
        self.write_closed.add(ledger_id)

    def _take_write_closed(self) -> set[int]:
        """The hints received so far, removed (atomic set operations: a hint
        arriving meanwhile is kept for the next checkpoint)."""
        taken = set(self.write_closed)
        self.write_closed.difference_update(taken)
        return taken

    def rotate_ledger(self, ledger_id: int) -> None:
        """BP-32 "rotate first": an add of ``ledger_id`` failed on this
        bookie, so the client will likely move the ledger elsewhere; its
        log stops taking entries before anything else is written to it and
        is sealed at the next flush. Callable from the event loop."""
        self._rotate_requested.add(ledger_id)

    def _apply_rotations(self) -> None:
        """Under the lock: carry out :meth:`rotate_ledger` and
        :meth:`rotate_all` requests."""
        if self._rotate_everything:
            self._rotate_everything = False
            for f in self.active_logs():
                self._rotate(f)
            self._close_active()
        while self._rotate_requested:
            self._rotate_ledger_now(self._rotate_requested.pop())

    def _rotate_ledger_now(self, ledger_id: int) -> None:  # noqa: B027 - an optional hook
        """Rotate the log ``ledger_id`` writes to, if it has one of its own."""

    def rotate_all(self) -> None:
        """Every open log stops taking entries (its directory is full: new
        logs go to writable directories); sealed at the next flush.
        Callable from the event loop, as :meth:`rotate_ledger`."""
        self._rotate_everything = True

    def abandon_open_logs(self) -> None:
        """A flush failed with ENOSPC and was rolled back: close every open
        log as it is, unsealed (sealing writes too; an unsealed log is read
        by scanning), so that the retry writes to new logs in writable
        directories."""
        with self._lock:
            for f in self._rotated + self.active_logs():
                f.abandon()
                log.warning("entry log %s closed unsealed: its disk is full", f.path.name)
            self._rotated = []
            self._savepoints = {}
            self._close_active()

    def _rotate(self, f: EntryLogFile) -> None:
        self._rotated.append(f)

    def open_log_ids(self) -> set[int]:
        """Logs still being written or sealed: not for the garbage collector."""
        with self._lock:
            return {f.log_id for f in self.active_logs() + self._rotated}

    @property
    def least_unflushed_log_id(self) -> int:
        """Logs with a smaller id are sealed and durable: GC may consider them."""
        with self._lock:
            ids = [f.log_id for f in self._rotated] + [f.log_id for f in self.active_logs()]
        return min(ids) if ids else self.logger.last_log_id + 1

    def close(self) -> None:
        """Sync and seal everything (clean shutdown). A log that cannot be
        sealed (a full disk) is closed as it is: an unsealed log is read by
        scanning, and what was not flushed is still in the journal."""
        with self._lock:
            for f in self._rotated + self.active_logs():
                try:
                    f.seal()
                except OSError as e:
                    log.error("entry log %s: not sealed at shutdown: %s", f.path.name, e)
                    f.abandon()
            self._rotated = []
            self._close_active()

    @abc.abstractmethod
    def _close_active(self) -> None: ...


class SingleActiveEntryLogManager(EntryLogManager):
    """BookKeeper's default: every ledger shares one active log, rotated
    when it would exceed ``logSizeLimit``. Write-close hints only let the
    next checkpoint forget the ledger; the shared log is not rotated for it."""

    def __init__(self, logger: EntryLogger, log_size_limit: int) -> None:
        super().__init__(logger, log_size_limit)
        self._current: EntryLogFile | None = None

    def _log_for(self, ledger_id: int, size: int) -> EntryLogFile:
        cur = self._current
        if cur is not None and cur.can_fit(size, self.log_size_limit):
            return cur
        if cur is not None:
            self._rotate(cur)
        self._current = self.logger.create_log()
        return self._current

    def active_logs(self) -> list[EntryLogFile]:
        return [self._current] if self._current is not None else []

    def checkpoint(self) -> None:
        self._take_write_closed()

    # _rotate_ledger_now stays a no-op: the shared log holds every other
    # ledger's entries too, and one failing ledger must not make a storm of
    # tiny logs for all of them.

    def _close_active(self) -> None:
        self._current = None


class EntryLogManagerForEntryLogPerLedger(EntryLogManager):
    """Each ledger writes to its own entry log, so a ledger's data is
    contiguous and a deleted ledger frees whole files.

    A ledger's log is rotated when it is full, when the ledger is
    write-closed (BP-32, at the next checkpoint), when it has not been
    written for ``entrylogMapAccessExpiryTimeInSeconds`` (at a checkpoint),
    or when more than ``maximumNumberOfActiveEntryLogs`` logs are open (the
    least recently written one), and before the ledger's next entry when an
    add of it failed on the bookie (BP-32's "rotate first")."""

    def __init__(
        self,
        logger: EntryLogger,
        log_size_limit: int,
        *,
        max_active_logs: int = 500,
        expiry_seconds: float = 300.0,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        super().__init__(logger, log_size_limit)
        self.max_active_logs = max_active_logs
        self.expiry_seconds = expiry_seconds
        self._clock = clock
        self._logs: OrderedDict[int, tuple[EntryLogFile, float]] = OrderedDict()

    def _log_for(self, ledger_id: int, size: int) -> EntryLogFile:
        now = self._clock()
        current = self._logs.pop(ledger_id, None)
        if current is not None:
            f = current[0]
            if f.can_fit(size, self.log_size_limit):
                self._logs[ledger_id] = (f, now)
                return f
            self._rotate(f)
        while len(self._logs) >= self.max_active_logs:
            _, (victim, _) = self._logs.popitem(last=False)
            self._rotate(victim)
        f = self.logger.create_log()
        self._logs[ledger_id] = (f, now)
        return f

    def active_logs(self) -> list[EntryLogFile]:
        return [f for f, _ in self._logs.values()]

    def _rotate_ledger_now(self, ledger_id: int) -> None:
        current = self._logs.pop(ledger_id, None)
        if current is not None:
            self._rotate(current[0])
            log.info(
                "ledger %d: entry log %s rotated after a failed add",
                ledger_id,
                current[0].path.name,
            )

    def checkpoint(self) -> None:
        with self._lock:
            now = self._clock()
            closed = self._take_write_closed()
            victims = [lid for lid in closed if lid in self._logs]
            victims += [
                lid
                for lid, (_, access) in self._logs.items()
                if now - access >= self.expiry_seconds and lid not in closed
            ]
            for lid in victims:
                f, _ = self._logs.pop(lid)
                # The checkpoint has just flushed: nothing is buffered, seal
                # now (or at the next flush, if this fails).
                self._rotated.append(f)
            self.flush()
            if victims:
                log.info("rotated entry logs of %d ledgers at checkpoint", len(victims))

    def _close_active(self) -> None:
        self._logs.clear()


def create_entry_log_manager(
    logger: EntryLogger,
    *,
    log_size_limit: int,
    per_ledger: bool = False,
    max_active_logs: int = 500,
    expiry_seconds: float = 300.0,
) -> EntryLogManager:
    """The one place that maps configuration to a manager implementation."""
    if per_ledger:
        return EntryLogManagerForEntryLogPerLedger(
            logger, log_size_limit, max_active_logs=max_active_logs, expiry_seconds=expiry_seconds
        )
    return SingleActiveEntryLogManager(logger, log_size_limit)
