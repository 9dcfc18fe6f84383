"""Writing a ledger: pipelined appends replicated to a write quorum.

Each append gets the next entry id and is sent at once to its write set,
``(entryId + i) mod E``. It completes when an ack quorum of its write set
acknowledged it *and* every earlier entry completed, so completions arrive
in entry order and the last add confirmed (LAC) only moves forward.

When a bookie of the ensemble fails (an error, a timeout, a lost
connection), the handle replaces it: it stops sending new entries, picks a
replacement, compare-and-sets the metadata with a new ensemble starting at
LAC + 1, then re-sends every unacknowledged entry whose write set included
the failed bookie. Acknowledged entries already had their ack quorum, so
none is lost; responses from a replaced bookie are ignored, so none is
counted twice.

A failure counts even when it arrives after the entry completed at its ack
quorum (W > A): the entry stays on fewer bookies than its write quorum, and
so would every later one, so the bookie is replaced all the same, as
BookKeeper's PendingAddOp does.

When no writable bookie outside the ensemble can replace a failed one, the
client's ``delayEnsembleChange`` decides (BookKeeper's setting): false, the
default, fails the handle with NotEnoughBookiesError naming the ledger and
the bookie; true keeps the failed bookie in the ensemble but sends it
nothing more, and writing goes on while every entry's write set still has
an ack quorum of other bookies (an entry that cannot reach A bookies fails
the handle). Such a skipped bookie is replaced as soon as a writable bookie
outside the ensemble shows up (checked on each append), and the auditor
restores the entries written without it. Either way the handle logs a
warning naming the ledger and the bookie, and the client counts it in
``ledger_client_ensemble_change_unavailable``.

A bookie answering EFENCED (another client is recovering the ledger) fails
the handle at once: that is never a reason to change the ensemble. And when
a change fails (no bookie to replace the failed one, ZooKeeper errors), the
handle reads the metadata before giving up: a ledger that another client is
recovering or closed fails with LedgerFencedError, the real cause, not with
whatever the change ran into first.
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import contextvars
import functools
import logging
import time
from collections.abc import Awaitable, Iterable
from typing import TYPE_CHECKING

from dlog.errors import (
    EFENCED,
    EOK,
    EUA,
    STATUS_NAMES,
    BKError,
    ClientClosedError,
    LedgerClosedError,
    LedgerFencedError,
    MetadataVersionError,
    NoSuchLedgerError,
    NotEnoughBookiesError,
    UnauthorizedAccessError,
    WriteError,
)
from dlog.ledger.digest import DigestManager
from dlog.ledger.metadata import LedgerCloseContext, LedgerMetadata, LedgerState
from dlog.ledger.quorum import write_set
from dlog.tasks import BackgroundTasks

if TYPE_CHECKING:
    from dlog.ledger.context import LedgerContext
    from dlog.protocol.messages import AddResult

log = logging.getLogger(__name__)


class PendingAdd:
    __slots__ = ("entry_id", "body", "length", "future", "acked", "write_set", "sent_gen", "done")

    def __init__(
        self, entry_id: int, body: bytes, length: int, ws: list[int], future: asyncio.Future[int]
    ) -> None:
        self.entry_id = entry_id
        self.body = body
        self.length = length
        self.future = future
        self.acked: set[int] = set()
        self.write_set = ws
        self.sent_gen: dict[int, int] = {}  # ensemble index -> generation it was sent to
        self.done = False


class WriteHandle:
    """An open ledger that this process writes. Not thread safe: use it from
    the event loop that created it."""

    def __init__(
        self,
        client: LedgerContext,
        metadata: LedgerMetadata,
        version: int,
        password: bytes,
        *,
        recovery: bool = False,
        last_add_confirmed: int = -1,
        length: int = 0,
    ) -> None:
        self.client = client
        # Cached: asyncio.get_running_loop() costs a getpid() system call on
        # Python 3.11, too much to pay once per append.
        self._loop = asyncio.get_running_loop()
        self.ledger_id = metadata.ledger_id
        self._md = metadata
        self._md_version = version
        self.digest = DigestManager(metadata.ledger_id, int(metadata.digest_type), password)
        self.master_key = self.digest.master_key
        self.ensemble: list[str] = list(metadata.last_ensemble)
        self._gen = [0] * len(self.ensemble)
        self.E = metadata.ensemble_size
        self.W = metadata.write_quorum_size
        self.A = metadata.ack_quorum_size
        self._recovery = recovery
        self._lac = last_add_confirmed
        self._last_pushed = last_add_confirmed
        self._length_pushed = length
        self._length_confirmed = length
        self._pending: collections.deque[PendingAdd] = collections.deque()
        self._failed: dict[int, int] = {}  # ensemble index -> generation that failed
        # delayEnsembleChange: ensemble index -> failed bookie nothing is sent
        # to any more, for want of a replacement
        self._skipped: dict[int, str] = {}
        self._delay_ensemble_change = client.conf.delay_ensemble_change
        self._changing = False
        self._change_task: asyncio.Task[None] | None = None
        self._error: BKError | None = None
        self._closing = False
        self._closed = False
        self._timeout = client.conf.add_entry_timeout_sec
        #: The context the bookies' answers are handled in: this handle's
        #: own, not a copy of whatever context each add was sent from (a
        #: copy per add and bookie otherwise; the handle lives on one loop).
        self._context = contextvars.Context()
        self._tasks = BackgroundTasks(self._loop)
        self._drained: list[asyncio.Future[None]] = []
        self.ensemble_changes = 0
        self._lac_published = -1
        self.sealed_by_me = False

    # ------------------------------------------------------------------
    # properties
    # ------------------------------------------------------------------
    @property
    def metadata(self) -> LedgerMetadata:
        return self._md

    @property
    def last_add_confirmed(self) -> int:
        return self._lac

    @property
    def last_add_pushed(self) -> int:
        return self._last_pushed

    @property
    def lac_published(self) -> int:
        """The LAC last sent explicitly (WRITE_LAC)."""
        return self._lac_published

    @property
    def length(self) -> int:
        """Bytes of payload confirmed so far."""
        return self._length_confirmed

    @property
    def is_closed(self) -> bool:
        return self._closed

    @property
    def pending(self) -> int:
        return len(self._pending)

    @property
    def metadata_version(self) -> int:
        return self._md_version

    @property
    def skipped_bookies(self) -> dict[int, str]:
        """Failed bookies still in the ensemble that this handle writes
        without (delayEnsembleChange, no replacement yet): index -> bookie."""
        return dict(self._skipped)

    @property
    def error(self) -> BKError | None:
        """Why appends fail, once one has (they all fail from then on)."""
        return self._error

    def __repr__(self) -> str:
        return f"WriteHandle(ledger={self.ledger_id}, lac={self._lac}, ensemble={self.ensemble})"

    # ------------------------------------------------------------------
    # appends
    # ------------------------------------------------------------------
    def _check_writable(self) -> None:
        if self._error is not None:
            raise self._error.clone()
        if self._closed or self._closing:
            raise LedgerClosedError(f"ledger {self.ledger_id} is closed")
        if self.client.closed:
            raise ClientClosedError("the BookKeeper client is closed")

    def append_nowait(self, data: bytes) -> asyncio.Future[int]:
        """Start appending ``data``; the future resolves to its entry id once
        it is durable on an ack quorum (and every earlier entry is)."""
        self._check_writable()
        entry_id = self._last_pushed + 1
        self._last_pushed = entry_id
        self._length_pushed += len(data)
        body = self.digest.compute(entry_id, self._lac, self._length_pushed, data)
        fut: asyncio.Future[int] = self._loop.create_future()
        op = PendingAdd(
            entry_id, body, self._length_pushed, write_set(entry_id, self.E, self.W), fut
        )
        self._pending.append(op)
        if self._skipped and not self._changing and not self._replace_skipped():
            self._check_ack_quorum(op)
        if not self._changing and self._error is None:
            self._send(op, op.write_set)
        return fut

    async def append(self, data: bytes) -> int:
        """Append ``data`` and wait until it is durable; returns its entry id."""
        return await self.append_nowait(data)

    def _send(self, op: PendingAdd, indices: Iterable[int]) -> None:
        pool = self.client.pool
        skipped = self._skipped
        for idx in indices:
            if skipped and idx in skipped:
                continue
            gen = self._gen[idx]
            op.sent_gen[idx] = gen
            bookie = self.ensemble[idx]
            conn = pool.connected(bookie)
            if conn is not None:
                self._dispatch(conn, op, idx, gen, bookie)
            else:
                self._tasks.spawn(self._connect_and_send(op, idx, gen, bookie))

    def _dispatch(self, conn, op: PendingAdd, idx: int, gen: int, bookie: str) -> None:  # type: ignore[no-untyped-def]
        fut = conn.add_entry(
            self.ledger_id,
            op.entry_id,
            self.master_key,
            op.body,
            recovery=self._recovery,
            timeout=self._timeout,
        )
        fut.add_done_callback(
            functools.partial(self._on_response, op, idx, gen, bookie), context=self._context
        )

    async def _connect_and_send(self, op: PendingAdd, idx: int, gen: int, bookie: str) -> None:
        try:
            conn = await self.client.pool.get(bookie)
        except Exception as e:
            # Even when ``op`` completed meanwhile at its ack quorum: the
            # bookie is gone for the entries after it too.
            if self._gen[idx] == gen:
                self._bookie_failed(idx, gen, bookie, f"cannot connect: {e}")
            return
        if self._error is not None or self._gen[idx] != gen or (self._closed and not op.done):
            return
        # An entry that completed at its ack quorum meanwhile still goes to
        # the rest of its write quorum, even once the handle is closed (as
        # BookKeeper's queued sends do): a writer that closes right after
        # its acks otherwise left every entry sent while this connection came
        # up one replica short, for the auditor to find and copy.
        self._dispatch(conn, op, idx, gen, bookie)

    def _on_response(
        self, op: PendingAdd, idx: int, gen: int, bookie: str, fut: asyncio.Future[AddResult]
    ) -> None:
        if self._gen[idx] != gen or self._error is not None or self._closed:
            if not fut.cancelled():
                fut.exception()  # a late failure is moot, and must not be logged as unretrieved
            return  # the bookie was replaced meanwhile, or the handle is done
        # A failure after ``op`` completed at its ack quorum still counts
        # (BookKeeper's PendingAddOp does the same): ignoring it would leave
        # this entry and every later one short of their write quorum,
        # silently.
        exc = fut.exception()
        if exc is not None:
            self._bookie_failed(idx, gen, bookie, str(exc))
            return
        status = fut.result().status
        if status == EOK:
            op.acked.add(idx)
            if not op.done and len(op.acked) >= self.A:
                self._complete_ready()
        elif status == EFENCED:
            self._fail(
                LedgerFencedError(
                    f"ledger {self.ledger_id} was fenced by another client ({bookie})"
                )
            )
        elif status == EUA:
            self._fail(
                UnauthorizedAccessError(
                    f"bookie {bookie} refused the master key of ledger {self.ledger_id}"
                )
            )
        else:
            self._bookie_failed(idx, gen, bookie, f"answered {STATUS_NAMES.get(status, status)}")

    def _complete_ready(self) -> None:
        pending = self._pending
        A = self.A
        while pending and len(pending[0].acked) >= A:
            op = pending.popleft()
            op.done = True
            self._lac = op.entry_id
            self._length_confirmed = op.length
            if not op.future.done():
                op.future.set_result(op.entry_id)
        if not pending:
            self._notify_drained()

    def _notify_drained(self) -> None:
        drained, self._drained = self._drained, []
        for f in drained:
            if not f.done():
                f.set_result(None)

    def _fail(self, error: BKError) -> None:
        """Unrecoverable: fail every pending and future append with ``error``."""
        if self._error is None:
            self._error = error
            log.warning("ledger %d: writes failed: %s", self.ledger_id, error)
        pending, self._pending = self._pending, collections.deque()
        for op in pending:
            op.done = True
            if not op.future.done():
                op.future.set_exception(error.clone())
                op.future.exception()  # a caller that stopped waiting must not warn
        self._notify_drained()

    # ------------------------------------------------------------------
    # ensemble change
    # ------------------------------------------------------------------
    def _bookie_failed(self, idx: int, gen: int, bookie: str, reason: str) -> None:
        if self._gen[idx] != gen or self._error is not None:
            return
        if self._failed.get(idx) == gen:
            return  # already being replaced; one warning per failed bookie is enough
        if idx in self._skipped:
            return  # known: written without until a bookie can replace it
        if self._closing and not self._pending:
            # Every entry is confirmed and the ledger is being sealed: no
            # entry is left to write to a new ensemble.
            log.warning(
                "ledger %d: bookie %s (index %d) failed while the ledger closes: %s; "
                "its last entries may be short of their write quorum until the auditor "
                "re-replicates them",
                self.ledger_id,
                bookie,
                idx,
                reason,
            )
            return
        log.warning(
            "ledger %d: bookie %s (index %d) failed: %s", self.ledger_id, bookie, idx, reason
        )
        self.client.placement.record_failure(bookie)
        if "timed out" in reason or "did not answer" in reason:
            self.client.pool.drop(bookie)
        self._failed[idx] = gen
        self._start_change()

    def _start_change(self) -> None:
        if not self._changing:
            self._changing = True
            self._change_task = self._tasks.spawn(self._change_ensemble())

    def _replace_skipped(self) -> bool:
        """With bookies skipped for want of a replacement: start replacing
        them if a writable bookie outside the ensemble exists now. True if
        it started."""
        ensemble = self.ensemble
        if not any(b not in ensemble for b in self.client.watcher.writable):
            return False
        for idx in self._skipped:
            self._failed[idx] = self._gen[idx]
        self._start_change()
        return True

    def _check_ack_quorum(self, op: PendingAdd) -> bool:
        """Fail the handle if ``op`` cannot reach an ack quorum without the
        skipped bookies (delayEnsembleChange). True if it still can."""
        if len(op.acked) >= self.A:
            return True
        skipped = [i for i in op.write_set if i in self._skipped]
        if len(op.write_set) - len(skipped) >= self.A:
            return True
        self._fail(
            NotEnoughBookiesError(
                self.A,
                len(op.write_set) - len(skipped),
                f"ledger {self.ledger_id}: entry {op.entry_id} cannot reach an ack quorum of "
                f"{self.A}: bookie(s) {', '.join(self._skipped[i] for i in skipped)} of its "
                "write set failed and no writable bookie can replace them",
            )
        )
        return False

    def _no_replacement(self, idx: int, bookie: str, cause: NotEnoughBookiesError) -> None:
        """``bookie`` failed and none can replace it: warn, count, and fail
        the handle (the default) or write on without it (delayEnsembleChange)."""
        self.client.ensemble_change_unavailable.inc()
        if not self._delay_ensemble_change:
            log.warning(
                "ledger %d: bookie %s (index %d) of its ensemble failed and no writable bookie "
                "can replace it; failing the ledger's writes (delayEnsembleChange=false)",
                self.ledger_id,
                bookie,
                idx,
            )
            raise NotEnoughBookiesError(
                cause.needed,
                cause.found,
                f"ledger {self.ledger_id}: bookie {bookie} of its ensemble failed and no "
                "writable bookie outside the ensemble can replace it",
            )
        log.warning(
            "ledger %d: bookie %s (index %d) of its ensemble failed and no writable bookie "
            "can replace it; writing on without it at the ack quorum (%d of write quorum %d, "
            "delayEnsembleChange=true) until one can; the auditor restores full replication",
            self.ledger_id,
            bookie,
            idx,
            self.A,
            self.W,
        )
        self._skipped[idx] = bookie

    async def _change_ensemble(self) -> None:
        try:
            while self._error is None:
                # Only failures of the bookies currently in the ensemble count:
                # a replaced bookie's late failures are old news.
                failed = sorted(i for i, g in self._failed.items() if g == self._gen[i])
                self._failed.clear()
                if not failed:
                    break
                new = list(self.ensemble)
                writable = self.client.watcher.writable
                replaced: list[int] = []
                for idx in failed:
                    try:
                        new[idx] = self.client.placement.replace_bookie(new, idx, writable)
                    except NotEnoughBookiesError as e:
                        if idx not in self._skipped:  # else: still none, already told
                            self._no_replacement(idx, self.ensemble[idx], e)
                        continue
                    replaced.append(idx)
                if not replaced:
                    # Skipped now: complete what the ack quorum allows, fail an
                    # entry that cannot reach one.
                    for op in list(self._pending):
                        if not self._check_ack_quorum(op):
                            break
                    self._complete_ready()
                    continue
                failed = replaced
                start = self._lac + 1
                await self._write_ensemble(start, new)
                old = self.ensemble
                self.ensemble = new
                self.ensemble_changes += 1
                for idx in failed:
                    self._gen[idx] += 1
                    self._skipped.pop(idx, None)
                log.info(
                    "ledger %d: ensemble changed at entry %d: %s -> %s",
                    self.ledger_id,
                    start,
                    [old[i] for i in failed],
                    [new[i] for i in failed],
                )
                # Re-send what the replaced bookies held but was not yet confirmed.
                for op in list(self._pending):
                    if op.done:
                        continue
                    resend = [i for i in failed if i in op.write_set]
                    for i in resend:
                        op.acked.discard(i)
                    unsent = [i for i in op.write_set if i not in op.sent_gen]
                    self._send(op, sorted(set(resend) | set(unsent)))
        except Exception as e:
            error = (
                e
                if isinstance(e, BKError)  # e.g. no bookie to replace the failed one
                else WriteError(f"ledger {self.ledger_id}: ensemble change failed: {e!r}")
            )
            if self._error is None:
                # A writer that stalled (a GC pause) or lost its network sees
                # its adds time out, and with no spare bookie the change fails
                # here, before its compare-and-set could learn the truth:
                # another client is recovering the ledger. That is the cause.
                error = await self._fenced_by_recovery() or error
            self._fail(error)
        finally:
            self._changing = False
        # Entries appended while the metadata update was in flight.
        if self._error is None:
            for op in list(self._pending):
                if self._skipped and not self._check_ack_quorum(op):
                    break
                unsent = [i for i in op.write_set if i not in op.sent_gen]
                if unsent:
                    self._send(op, unsent)

    async def _fenced_by_recovery(self) -> LedgerFencedError | None:
        """LedgerFencedError if another client is recovering this ledger or
        closed it, from its metadata: recovery marks it IN_RECOVERY before
        it fences a single bookie, so the metadata knows before any bookie
        says EFENCED. Read errors are retried until ZooKeeper answers (a
        session being replaced after expiry takes a moment), for up to the
        ZooKeeper session timeout; None if the question stays open."""
        store = self.client.metadata_store
        loop = self._loop
        deadline = loop.time() + max(self._timeout, self.client.conf.zk_timeout / 1000.0)
        delay = 0.05
        while True:
            try:
                async with asyncio.timeout(max(0.0, deadline - loop.time())):
                    current, _ = await store.read(self.ledger_id)
            except NoSuchLedgerError:
                return None
            except Exception as e:
                if loop.time() + delay >= deadline:
                    log.warning(
                        "ledger %d: could not read its metadata to tell whether it was fenced: %r",
                        self.ledger_id,
                        e,
                    )
                    return None
                await asyncio.sleep(delay)
                delay = min(1.0, delay * 2)
                continue
            if current.is_closed or (
                current.state == LedgerState.IN_RECOVERY and not self._recovery
            ):
                state = "closed" if current.is_closed else "being recovered"
                return LedgerFencedError(
                    f"ledger {self.ledger_id} was fenced: it is {state} by another client"
                )
            return None

    async def _write_ensemble(self, start: int, ensemble: list[str]) -> None:
        store = self.client.metadata_store
        while True:
            md = self._md.with_ensemble(start, ensemble)
            try:
                self._md_version = await store.write(md, self._md_version)
                self._md = md
                return
            except MetadataVersionError:
                current, version = await store.read(self.ledger_id)
                if current.is_closed or (
                    current.state == LedgerState.IN_RECOVERY and not self._recovery
                ):
                    raise LedgerFencedError(
                        f"ledger {self.ledger_id} is being recovered or was closed by another client"
                    ) from None
                self._md, self._md_version = current, version

    # ------------------------------------------------------------------
    # force, explicit LAC
    # ------------------------------------------------------------------
    async def force(self) -> int:
        """Wait until every entry appended so far is durable on every bookie
        of the current ensemble (FORCE_LEDGER); returns the LAC."""
        await self.wait_pending()
        self._check_writable()
        lac = self._lac
        conns = [await self.client.pool.get(b) for b in self.ensemble]
        responses = await asyncio.gather(
            *(c.force_ledger(self.ledger_id, timeout=self._timeout) for c in conns)
        )
        for bookie, r in zip(self.ensemble, responses, strict=True):
            if r.status != EOK:
                raise BKError(
                    f"force on bookie {bookie} answered {STATUS_NAMES.get(r.status, r.status)}"
                )
        return lac

    async def write_lac(self) -> None:
        """Tell the ensemble the current LAC explicitly (WRITE_LAC), so readers
        see the last entry without waiting for the next one."""
        sent = self.send_lac()
        if sent is not None:
            await sent

    def send_lac(self) -> asyncio.Future[list[object]] | None:
        """:meth:`write_lac`'s sending half: the WRITE_LACs to connected
        bookies are written before this returns (a caller on the loop gets
        them out ahead of any work queued there). Returns a future done once
        every bookie answered or failed, or None when this LAC was sent
        already."""
        lac = self._lac
        if lac < 0 or lac <= self._lac_published:
            return None
        self._lac_published = lac
        body = self.digest.compute_lac(lac)

        async def one(bookie: str) -> None:
            conn = await self.client.pool.get(bookie)
            await conn.write_lac(self.ledger_id, lac, self.master_key, body, timeout=self._timeout)

        # Written now, not on the next loop pass: tailing readers wait for it
        # (the caller's own work queued meanwhile would go first otherwise).
        pool = self.client.pool
        sent: list[Awaitable[object]] = []
        for bookie in list(self.ensemble):
            conn = pool.connected(bookie)
            if conn is not None:
                sent.append(
                    conn.write_lac(
                        self.ledger_id, lac, self.master_key, body, timeout=self._timeout, now=True
                    )
                )
            else:
                sent.append(one(bookie))
        return asyncio.gather(*sent, return_exceptions=True)

    async def wait_pending(self, timeout: float | None = None) -> None:
        """Wait until every append issued so far completed or failed."""
        if not self._pending:
            return
        fut: asyncio.Future[None] = self._loop.create_future()
        self._drained.append(fut)
        async with asyncio.timeout(timeout):
            await fut

    # ------------------------------------------------------------------
    # close
    # ------------------------------------------------------------------
    async def close(self, close_context: LedgerCloseContext | None = None) -> None:
        """Wait for pending appends, then seal the ledger at the LAC in its
        metadata. Afterwards tell the bookies (BP-32), without waiting."""
        if self._closed:
            return
        self._closing = True
        try:
            await self.wait_pending(timeout=max(2 * self._timeout, 5))
        except TimeoutError:
            self._fail(
                LedgerClosedError(f"ledger {self.ledger_id} closed with appends still pending")
            )
        # An ensemble change started by a failure after the last entry
        # completed: let it write its metadata before the seal does.
        change = self._change_task
        if change is not None and not change.done():
            with contextlib.suppress(Exception):
                async with asyncio.timeout(max(2 * self._timeout, 5)):
                    await asyncio.shield(change)
        self._fail_leftovers()
        if isinstance(self._error, LedgerFencedError):
            self._closed = True
            md, _ = await self.client.metadata_store.read(self.ledger_id)
            if md.is_closed and md.last_entry_id >= self._lac:
                return  # recovered by its new owner; everything we confirmed is in it
            raise LedgerFencedError(
                f"ledger {self.ledger_id} was fenced; it is closed by its recoverer"
            )
        await self._seal(close_context)
        self._closed = True
        self.client.send_write_close(self.ledger_id, self.master_key, list(self.ensemble))

    async def seal_recovered(self) -> None:
        """Seal a recovery's handle: every entry it re-added is confirmed;
        close the ledger at its LAC. The recoverer tells the bookies."""
        await self._seal(None)
        self._closed = True

    def _fail_leftovers(self) -> None:
        if self._pending:
            self._fail(LedgerClosedError(f"ledger {self.ledger_id} was closed"))

    async def _seal(self, close_context: LedgerCloseContext | None) -> None:
        store = self.client.metadata_store
        while True:
            md = self._md.replace(
                state=LedgerState.CLOSED,
                last_entry_id=self._lac,
                length=self._length_confirmed,
                close_context=close_context,
                seal_time=int(time.time() * 1000)
                if close_context is not None or self._md.create_context
                else None,
            ).in_format(store.format_version)  # as stored: the handle shows what is there
            try:
                self._md_version = await store.write(md, self._md_version)
                self._md = md
                self.sealed_by_me = True
                return
            except MetadataVersionError:
                current, version = await store.read(self.ledger_id)
                if current.is_closed:
                    if current.last_entry_id == self._lac:
                        self._md, self._md_version = current, version
                        return
                    raise LedgerFencedError(
                        f"ledger {self.ledger_id} was closed by another client at entry "
                        f"{current.last_entry_id}, this writer confirmed {self._lac}"
                    ) from None
                if current.state == LedgerState.IN_RECOVERY and not self._recovery:
                    raise LedgerFencedError(
                        f"ledger {self.ledger_id} is being recovered by another client"
                    ) from None
                self._md, self._md_version = current, version
