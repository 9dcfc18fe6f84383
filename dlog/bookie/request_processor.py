"""Turns v3 requests into bookie operations and their results into responses.

Requests on one connection are pipelined: each is handled as it arrives
and answered when its operation completes, matched by ``txnId``. Adds and
cache-hit reads are answered without creating a task.

Adds and reads in progress (handled, not yet answered) are counted here so
the server can enforce ``maxAddsInProgressLimit`` and
``maxReadsInProgressLimit``: it asks :meth:`RequestProcessor.kind` before
handing a request over, and ``on_release`` tells it when one completes.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Protocol

from dlog.errors import EBADREQ, EIO, ENOENTRY, EOK, STATUS_NAMES
from dlog.protocol import availability
from dlog.protocol import messages as m
from dlog.protocol.bookkeeper_pb2 import Request, Response
from dlog.tasks import BackgroundTasks

if TYPE_CHECKING:
    from dlog.bookie.bookie import Bookie

log = logging.getLogger(__name__)

_OP_LABELS = {op: name.lower() for op, name in m.OP_NAMES.items()}

#: Request kinds limited by maxAddsInProgressLimit / maxReadsInProgressLimit.
ADD = "add"
READ = "read"

#: A refused request is logged at most once per this many seconds per kind:
#: any client can send them by the million (the metrics count every one).
BAD_REQUEST_LOG_EVERY = 10.0


class _RefusalLog:
    """One log line per kind of refusal per :data:`BAD_REQUEST_LOG_EVERY`,
    saying how many went unlogged since; without it, a client sending
    malformed requests fills the bookie's disk with its log."""

    def __init__(self) -> None:
        self._last: dict[str, float] = {}
        self._skipped: dict[str, int] = {}

    def __call__(self, kind: str, level: int, msg: str, *args: object) -> None:
        now = time.monotonic()
        if now - self._last.get(kind, -BAD_REQUEST_LOG_EVERY) < BAD_REQUEST_LOG_EVERY:
            self._skipped[kind] = self._skipped.get(kind, 0) + 1
            return
        self._last[kind] = now
        skipped = self._skipped.pop(kind, 0)
        if skipped:
            msg += " (and %d more since the last report)"
            args = (*args, skipped)
        log.log(level, msg, *args)


class Responder(Protocol):
    def send(self, response: Response) -> None: ...

    def send_bytes(self, data: bytes) -> None: ...

    def send_parts(self, parts: tuple[bytes, ...]) -> None: ...


class RequestProcessor:
    def __init__(self, bookie: Bookie) -> None:
        self.bookie = bookie
        self.metrics = bookie.metrics
        self._labels: dict[tuple[int, int], tuple[str, str]] = {}
        self._tasks = BackgroundTasks()
        self._refusal_log = _RefusalLog()
        self.adds_in_progress = 0
        self.reads_in_progress = 0
        #: High-water marks since start: a limit that was ever exceeded shows here.
        self.max_adds_in_progress = 0
        self.max_reads_in_progress = 0
        #: Called after an add or read completes (the server wakes blocked connections).
        self.on_release: Callable[[], None] | None = None

    @staticmethod
    def kind(req: Request | m.AddFrame) -> str | None:
        """ADD or READ for a request that counts against an in-progress
        limit, else None. Long polls only wait for the LAC; counting them
        would let idle tailing readers starve real reads."""
        if type(req) is m.AddFrame:
            return ADD
        assert isinstance(req, Request)
        op = req.header.operation
        if op == m.ADD_ENTRY:
            return ADD
        if op == m.READ_LAC or (op == m.READ_ENTRY and not req.readRequest.HasField("previousLAC")):
            return READ
        return None

    def _read_started(self) -> None:
        n = self.reads_in_progress = self.reads_in_progress + 1
        if n > self.max_reads_in_progress:
            self.max_reads_in_progress = n

    def _read_done(self) -> None:
        self.reads_in_progress -= 1
        if self.on_release is not None:
            self.on_release()

    def _count(self, op: int, status: int) -> None:
        key = (op, status)
        labels = self._labels.get(key)
        if labels is None:
            labels = self._labels[key] = (
                _OP_LABELS.get(op, str(op)),
                STATUS_NAMES.get(status, str(status)),
            )
        self.metrics.requests.inc(labels=labels)

    def handle(self, req: Request | m.AddFrame, conn: Responder) -> None:
        if type(req) is m.AddFrame:
            self._add(req, conn)
            return
        assert isinstance(req, Request)
        problem = m.request_problem(req)
        if problem is not None:
            self._refusal_log(
                "bad", logging.WARNING, "bad request (txn %d): %s", req.header.txnId, problem
            )
            self._count(req.header.operation, EBADREQ)
            conn.send(m.error_response(req, EBADREQ))
            return
        op = req.header.operation
        try:
            if op == m.ADD_ENTRY:
                self._add(m.add_frame(req), conn)
            elif op == m.READ_ENTRY:
                self._read(req, conn)
            elif op == m.READ_LAC:
                self._read_started()
                self._tasks.spawn(self._read_lac(req, conn))
            elif op == m.WRITE_LAC:
                self._write_lac(req, conn)
            elif op == m.FORCE_LEDGER:
                self._force(req, conn)
            elif op == m.WRITE_CLOSE:
                self._write_close(req, conn)
            elif op == m.GET_BOOKIE_INFO:
                self._bookie_info(req, conn)
            elif op == m.GET_LIST_OF_ENTRIES_OF_LEDGER:
                self._tasks.spawn(self._list_of_entries(req, conn))
            else:
                self._refusal_log(
                    "unsupported",
                    logging.INFO,
                    "unsupported operation %s (txn %d)",
                    m.OP_NAMES.get(op, op),
                    req.header.txnId,
                )
                self._count(op, EBADREQ)
                conn.send(m.error_response(req, EBADREQ))
        except Exception:
            log.exception("request %s failed", m.OP_NAMES.get(op, op))
            self._count(op, EIO)
            conn.send(m.error_response(req, EIO))

    # -- operations -------------------------------------------------------------
    def _add(self, add: m.AddFrame, conn: Responder) -> None:
        txn, lid, eid = add.txn_id, add.ledger_id, add.entry_id
        t0 = time.monotonic()
        latency = self.metrics.add_latency
        answered = False

        def respond(status: int) -> None:
            nonlocal answered
            if answered:
                return
            answered = True
            if status == EIO:
                self._rotate_first(lid)
            conn.send_bytes(m.encode_add_response(txn, status, lid, eid))
            latency.observe(time.monotonic() - t0)
            self._count(m.ADD_ENTRY, status)
            self.adds_in_progress -= 1
            if self.on_release is not None:
                self.on_release()

        n = self.adds_in_progress = self.adds_in_progress + 1
        if n > self.max_adds_in_progress:
            self.max_adds_in_progress = n
        try:
            self.bookie.add_entry(lid, eid, add.master_key, add.body, add.recovery, respond)
        except Exception:
            log.exception("add of ledger %d entry %d failed", lid, eid)
            respond(EIO)

    def _read(self, req: Request, conn: Responder) -> None:
        rr = req.readRequest
        flag = rr.flag if rr.HasField("flag") else 0
        if rr.HasField("previousLAC"):
            self._tasks.spawn(self._long_poll(req, conn, flag))
            return
        if flag != m.FENCE_LEDGER:
            hit = self.bookie.cached_read(rr.ledgerId, rr.entryId)
            if hit is not None:
                status, body, lac = hit
                conn.send_parts(
                    m.encode_read_response(
                        req.header.txnId, status, rr.ledgerId, rr.entryId, body, lac
                    )
                )
                self._count(m.READ_ENTRY, status)
                self._read_started()
                self._read_done()
                return
        self._read_started()
        self._tasks.spawn(self._read_async(req, conn, flag))

    async def _long_poll(self, req: Request, conn: Responder, flag: int) -> None:
        rr = req.readRequest
        txn = req.header.txnId
        lid, eid = rr.ledgerId, rr.entryId
        try:
            status, lac = await self.bookie.wait_for_lac(lid, rr.previousLAC, rr.timeOut)
            body = None
            # Upstream's clients piggyback with entryId -1 and get entry
            # previousLAC + 1, its id in the response when it is there (as
            # LongPollReadEntryProcessorV3); dlog's name the entry.
            want = rr.previousLAC + 1 if eid == m.LAST_ADD_CONFIRMED else eid
            if status == EOK and flag == m.ENTRY_PIGGYBACK and lac >= want >= 0:
                s2, body, _ = await self.bookie.read_entry(lid, want)
                if s2 == EOK:
                    eid = want
                else:
                    body = None
            conn.send_parts(m.encode_read_response(txn, status, lid, eid, body, lac))
            self._count(m.READ_ENTRY, status)
        except Exception:
            log.exception("long poll of ledger %d entry %d failed", lid, eid)
            conn.send_parts(m.encode_read_response(txn, EIO, lid, eid))
            self._count(m.READ_ENTRY, EIO)

    async def _read_async(self, req: Request, conn: Responder, flag: int) -> None:
        rr = req.readRequest
        txn = req.header.txnId
        lid, eid = rr.ledgerId, rr.entryId
        t0 = time.monotonic()
        try:
            fence = flag == m.FENCE_LEDGER
            status, body, lac = await self.bookie.read_entry(
                lid, eid, fence=fence, master_key=rr.masterKey if rr.HasField("masterKey") else None
            )
            if fence and status in (EOK, ENOENTRY):
                self._write_close_fenced(lid)
            # A read of entry -1 answers entryId -1 whatever entry it
            # returns, as upstream's ReadEntryProcessorV3 does (the entry's
            # own id is in its body).
            conn.send_parts(
                m.encode_read_response(txn, status, lid, eid, body if status == EOK else None, lac)
            )
            self.metrics.read_latency.observe(time.monotonic() - t0)
            self._count(m.READ_ENTRY, status)
        except Exception:
            log.exception("read of ledger %d entry %d failed", lid, eid)
            conn.send_parts(m.encode_read_response(txn, EIO, lid, eid))
            self._count(m.READ_ENTRY, EIO)
        finally:
            self._read_done()

    async def _read_lac(self, req: Request, conn: Responder) -> None:
        lid = req.readLacRequest.ledgerId
        try:
            status, lac_body, last = await self.bookie.read_lac(lid)
        except Exception:
            log.exception("read LAC of ledger %d failed", lid)
            status, lac_body, last = EIO, None, None
        try:
            conn.send(m.read_lac_response(req.header.txnId, status, lid, lac_body, last))
            self._count(m.READ_LAC, status)
        finally:
            self._read_done()

    async def _list_of_entries(self, req: Request, conn: Responder) -> None:
        lid = req.getListOfEntriesOfLedgerRequest.ledgerId
        try:
            status, ids = await self.bookie.entries_of_ledger(lid)
            data = availability.encode(ids) if status == EOK else None
        except Exception:
            log.exception("listing the entries of ledger %d failed", lid)
            status, data = EIO, None
        conn.send(m.list_of_entries_response(req.header.txnId, status, lid, data))
        self._count(m.GET_LIST_OF_ENTRIES_OF_LEDGER, status)

    def _write_lac(self, req: Request, conn: Responder) -> None:
        wr = req.writeLacRequest
        txn = req.header.txnId
        lid = wr.ledgerId

        def respond(status: int) -> None:
            conn.send(m.write_lac_response(txn, status, lid))
            self._count(m.WRITE_LAC, status)

        self.bookie.write_lac(lid, wr.lac, wr.masterKey, wr.body, respond)

    def _force(self, req: Request, conn: Responder) -> None:
        txn = req.header.txnId
        lid = req.forceLedgerRequest.ledgerId

        def respond(status: int) -> None:
            conn.send(m.force_ledger_response(txn, status, lid))
            self._count(m.FORCE_LEDGER, status)

        self.bookie.force_ledger(lid, respond)

    # -- BP-32 on the bookie's own initiative ---------------------------------
    def _rotate_first(self, ledger_id: int) -> None:
        """An add failed here (journal or storage): the client will move the
        ledger to another bookie, so its entry log stops taking its entries
        before the error goes out (BP-32's "rotate first"; with per-ledger
        logs it is sealed at the next flush)."""
        storage = self.bookie.storage
        if storage is not None:
            storage.storage_for(ledger_id).manager.rotate_ledger(ledger_id)

    def _write_close_fenced(self, ledger_id: int) -> None:
        """A fence read succeeded: the writer is gone (a recovery), so the
        ledger is write-closed here, as a WRITE_CLOSE would. Also when it
        was fenced before: the hint does not survive a restart, and
        recovery adds may have reopened a log since."""
        storage = self.bookie.storage
        if storage is not None:
            storage.write_close(ledger_id)

    def _write_close(self, req: Request, conn: Responder) -> None:
        wc = req.writeCloseRequest
        status = self.bookie.write_close(wc.ledgerId, wc.masterKey)
        conn.send(m.write_close_response(req.header.txnId, status, wc.ledgerId))
        self._count(m.WRITE_CLOSE, status)

    def _bookie_info(self, req: Request, conn: Responder) -> None:
        gb = req.getBookieInfoRequest
        requested = (
            gb.requested if gb.HasField("requested") else m.TOTAL_DISK_CAPACITY | m.FREE_DISK_SPACE
        )
        total, free = self.bookie.disk_capacity()
        conn.send(
            m.bookie_info_response(
                req.header.txnId,
                EOK,
                total if requested & m.TOTAL_DISK_CAPACITY else None,
                free if requested & m.FREE_DISK_SPACE else None,
            )
        )
        self._count(m.GET_BOOKIE_INFO, EOK)
