"""One owner appending to one ledger: the mechanism under a stream's
writer and a subscription's log-segment store.

Both keep a single owner's ledger open, append to it, and roll to a new
one from time to time; what differs is what an entry holds (a record set,
a commit position) and the metadata around the ledger (a segment znode, a
subscriber znode). The shared part lives here:

* **Creating the ledger** with the configured quorums and a BP-44 create
  context, and discarding one that never came into use. The contexts are
  hints: with ``ledgerMetadataVersion=3`` they are not stored (BookKeeper
  cannot read format 4), and nothing here depends on them.
* **Appends and their errors.** An append that fails because the ledger
  was fenced means another owner took over: it becomes the owner's own
  fenced error. Other bookie errors become BKTransmitError. Errors the
  owner raises itself pass through.
* **Publishing the LAC when idle.** An entry's LAC normally rides on the
  next entry; when no next entry comes, readers in other processes (which
  never fence) would not see the last one. Once every append has
  completed, and the owner has nothing more to send after the woken
  callers have run (checked one loop pass later), the appender sends an
  explicit LAC (BookKeeper's explicitLacInterval idea, counted in loop
  passes rather than milliseconds). A busy owner's next append carries it
  anyway, and each explicit LAC is journaled on every bookie of the ensemble.
  An eager appender (``lac_eager``, the writer's ``enableImmediateFlush``)
  publishes it as soon as each append completes, even while later ones are
  in flight (their entries carry an older LAC): readers see each entry one
  round trip sooner, for one explicit LAC in flight at a time.
* **When to roll**, as a pure function of what the ledger holds
  (:func:`roll_reason`).
"""

from __future__ import annotations

import asyncio
import dataclasses
import functools
import logging
import time
from collections.abc import Callable, Iterable
from typing import TYPE_CHECKING, Any

from dlog import failpoints
from dlog.errors import BKError, BKTransmitError, DLogError, LedgerFencedError, NoSuchLedgerError
from dlog.ledger.metadata import DigestType, LedgerCloseContext, LedgerCreateContext

if TYPE_CHECKING:
    from dlog.ledger.client import BookKeeper
    from dlog.ledger.write_handle import WriteHandle
    from dlog.tasks import BackgroundTasks

log = logging.getLogger(__name__)

__all__ = [
    "MAX_AGE",
    "MAX_BYTES",
    "MAX_ENTRIES",
    "LedgerAppender",
    "LedgerSpec",
    "RollPolicy",
    "close_context",
    "fail_futures",
    "roll_reason",
]

#: Why a ledger is rolled.
MAX_ENTRIES, MAX_BYTES, MAX_AGE = "max entries", "max bytes", "max age"

_CLOSE_CONTEXT: dict[str, Callable[..., LedgerCloseContext]] = {
    MAX_ENTRIES: LedgerCloseContext.max_entries_reached,
    MAX_BYTES: LedgerCloseContext.max_length_reached,
    MAX_AGE: LedgerCloseContext.time_rotation,
}


@dataclasses.dataclass(frozen=True)
class RollPolicy:
    """When an owner moves on to a new ledger; None: no limit."""

    max_entries: int | None = None
    max_bytes: int | None = None
    max_age: float | None = None  # seconds


def roll_reason(policy: RollPolicy, entries: int, nbytes: int, age: float) -> str | None:
    """Why a ledger holding ``entries`` entries and ``nbytes`` bytes, open
    for ``age`` seconds, should roll now (the first limit reached, checked
    in that order), or None."""
    if policy.max_entries is not None and entries >= policy.max_entries:
        return MAX_ENTRIES
    if policy.max_bytes is not None and nbytes >= policy.max_bytes:
        return MAX_BYTES
    if policy.max_age is not None and age >= policy.max_age:
        return MAX_AGE
    return None


def close_context(reason: str, *, expect_delete_after: int | None = None) -> LedgerCloseContext:
    """The BP-44 close context of a ledger rolled for ``reason`` (a roll
    reason; anything else is a client shutdown)."""
    make = _CLOSE_CONTEXT.get(reason, LedgerCloseContext.client_shutdown)
    return make(expect_delete_after=expect_delete_after)


def fail_futures(futures: Iterable[asyncio.Future[Any]], error: DLogError) -> None:
    """Fail every future not done yet with its own copy of ``error``. Each
    is marked retrieved: a caller that stopped waiting must not warn."""
    for fut in futures:
        if not fut.done():
            fut.set_exception(error.clone())
            fut.exception()


@dataclasses.dataclass(frozen=True)
class LedgerSpec:
    """How an owner's ledgers are created."""

    ensemble_size: int
    write_quorum_size: int
    ack_quorum_size: int
    digest_type: DigestType | int | str
    password: bytes


class LedgerAppender:
    """Appends to one open ledger for its single owner.

    ``fenced`` builds the owner's error for "another owner took over" (the
    errors in ``fenced_by``); ``passthrough`` lists the owner's errors
    reported as they are; ``name`` prefixes every other error;
    ``lac_wanted`` tells whether the owner would rather send more entries
    than an explicit LAC (it is asked one loop pass after the appends went
    idle, or at once when ``lac_eager``). ``lac_failpoint`` names a
    failpoint reached before publishing."""

    __slots__ = (
        "_fenced",
        "_fenced_by",
        "_lac_eager",
        "_lac_failpoint",
        "_lac_wanted",
        "_loop",
        "_passthrough",
        "_tasks",
        "bytes",
        "clock",
        "entries",
        "handle",
        "lac_check",
        "lac_task",
        "name",
        "policy",
        "started",
    )

    def __init__(
        self,
        handle: WriteHandle,
        *,
        name: str,
        tasks: BackgroundTasks,
        fenced: Callable[[], DLogError],
        fenced_by: tuple[type[BaseException], ...] = (LedgerFencedError,),
        passthrough: tuple[type[BaseException], ...] = (),
        policy: RollPolicy = RollPolicy(),
        lac_wanted: Callable[[], bool] = lambda: True,
        lac_failpoint: str | None = None,
        lac_eager: bool = False,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.handle = handle
        self.name = name
        self.policy = policy
        self.clock = clock
        self.entries = 0
        self.bytes = 0
        self.started = clock()
        #: A LAC publish: due (checked on the next loop pass), then running.
        self.lac_check = False
        self.lac_task: asyncio.Task[None] | None = None
        self._tasks = tasks
        self._fenced = fenced
        self._fenced_by = fenced_by
        self._passthrough = passthrough
        self._lac_wanted = lac_wanted
        self._lac_failpoint = lac_failpoint
        self._lac_eager = lac_eager
        self._loop: asyncio.AbstractEventLoop | None = None

    # -- creating and discarding ---------------------------------------------
    @classmethod
    async def create(
        cls,
        bk: BookKeeper,
        spec: LedgerSpec,
        context: LedgerCreateContext,
        *,
        ledger_id: int | None = None,
        **kwargs: object,
    ) -> LedgerAppender:
        """A new ledger (with id ``ledger_id`` if given, reserved earlier)
        and its appender; ``kwargs`` go to the constructor."""
        handle = await bk.create_ledger(
            spec.ensemble_size,
            spec.write_quorum_size,
            spec.ack_quorum_size,
            spec.digest_type,
            spec.password,
            create_context=context,
            ledger_id=ledger_id,
        )
        return cls(handle, **kwargs)  # type: ignore[arg-type]

    async def discard(
        self, bk: BookKeeper, why: str, *, expect_delete_after: int | None = None
    ) -> None:
        """Close and delete a ledger that never came into use (its metadata
        or znode could not be written). Never raises: a ledger left behind
        is logged with its id, and its BP-44 create context (unless format 3)
        names its owner."""
        try:
            await self.handle.close(
                LedgerCloseContext.abnormal(why, expect_delete_after=expect_delete_after)
            )
        except Exception:
            pass
        try:
            await bk.delete_ledger(self.handle.ledger_id)
        except NoSuchLedgerError:
            pass
        except Exception as e:
            log.warning("%s: could not delete unused ledger %d: %s", self.name, self.ledger_id, e)

    # -- state ---------------------------------------------------------------
    @property
    def ledger_id(self) -> int:
        return self.handle.ledger_id

    def roll_reason(self) -> str | None:
        """Why this ledger should roll now, or None (see :func:`roll_reason`)."""
        return roll_reason(self.policy, self.entries, self.bytes, self.clock() - self.started)

    # -- appending -----------------------------------------------------------
    def map_error(self, exc: BaseException) -> DLogError:
        """What the owner reports for a failed append: its fenced error when
        another owner took over, its own errors as they are, anything else
        (the bookies' errors included) as BKTransmitError."""
        if isinstance(exc, self._fenced_by):
            return self._fenced()
        if isinstance(exc, self._passthrough) and not isinstance(exc, BKError):
            return exc  # type: ignore[return-value]
        detail = str(exc) if isinstance(exc, DLogError) else repr(exc)
        return BKTransmitError(f"{self.name}: writing to bookies failed: {detail}")

    def append(self, data: bytes, done: Callable[[asyncio.Future[int]], object]) -> None:
        """Send ``data`` as the next entry; ``done(future)`` runs once it
        completes (the future holds its entry id or the bookies' error; map
        that with :meth:`map_error`). Raises the mapped error when the
        ledger refuses the append at once."""
        try:
            fut = self.handle.append_nowait(data)
        except BKError as e:
            raise self.map_error(e) from None
        self.entries += 1
        self.bytes += len(data)
        fut.add_done_callback(functools.partial(self._completed, done))

    def _completed(
        self, done: Callable[[asyncio.Future[int]], object], fut: asyncio.Future[int]
    ) -> None:
        done(fut)
        if self._lac_eager:
            if (
                self.lac_task is None
                and not fut.cancelled()
                and fut.exception() is None
                and self._lac_wanted()
            ):
                self._start_lac()
            return
        if (
            self.handle.pending == 0
            and not self.lac_check
            and self.lac_task is None
            and not fut.cancelled()
            and fut.exception() is None
        ):
            # After the callers just woken have run: if one appends again at
            # once, that entry carries this LAC and none is sent.
            self.lac_check = True
            loop = self._loop
            if loop is None:
                loop = self._loop = asyncio.get_running_loop()
            loop.call_soon(self._lac_due)

    # -- explicit LAC --------------------------------------------------------
    def _lac_due(self) -> None:
        self.lac_check = False
        if self.lac_task is None and self.handle.pending == 0 and self._lac_wanted():
            self._start_lac()

    def _start_lac(self) -> None:
        """Publish the LAC. It is sent here and now, ahead of the work the
        woken callers queued on the loop (a caller building its next batch
        would otherwise hold back what tailing readers wait for); a task
        waits for the answers and sends again if the LAC moved meanwhile.
        An armed failpoint is reached first, in the task."""
        point = self._lac_failpoint
        if point is not None and failpoints.is_set(point):
            self.lac_task = self._tasks.spawn(self._publish_lac(None))
            return
        try:
            sent = self.handle.send_lac()
        except Exception as e:
            log.debug("%s: explicit LAC failed: %s", self.name, e)
            return
        if sent is not None:
            self.lac_task = self._tasks.spawn(self._publish_lac(sent))

    async def _publish_lac(self, sent: asyncio.Future[list[object]] | None) -> None:
        """Wait for ``sent`` (None: reach the failpoint), then publish until
        the last entry's LAC is out."""
        handle = self.handle
        try:
            if sent is not None:
                await sent
            elif self._lac_failpoint is not None:
                await failpoints.afailpoint(self._lac_failpoint)
            # Entries that complete while a publish is in flight are covered
            # by the next round, so the last entry is always published.
            while handle.last_add_confirmed > handle.lac_published and not handle.is_closed:
                await handle.write_lac()
        except Exception as e:
            log.debug("%s: explicit LAC failed: %s", self.name, e)
        finally:
            self.lac_task = None

    async def lac_settled(self) -> None:
        """Wait until no LAC publish is due or running (for tests and tools
        that want the LAC readers see to have caught up)."""
        for _ in range(10_000):
            task = self.lac_task
            if task is not None:
                await asyncio.wait([task])
            elif self.lac_check or self.handle.pending:
                await asyncio.sleep(0.001)
            else:
                return

    # -- closing -------------------------------------------------------------
    async def close(self, context: LedgerCloseContext) -> None:
        """Seal the ledger (after its pending appends) with a BP-44 close context."""
        await self.handle.close(context)
