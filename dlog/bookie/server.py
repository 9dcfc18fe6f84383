"""The bookie's asyncio TCP server: framing, decoding and connection care.

No client may hold a bookie's memory or a connection slot for free:

* A frame must arrive in full within ``frameReadTimeoutMs`` of its first
  byte.
* A connection with no request for ``connectionIdleTimeoutMs`` and none
  outstanding is closed, one that never sent anything included (0, the
  default, keeps idle connections: they hold a few KiB each).
* Incomplete frames across all connections hold at most
  ``maxBufferedFrameBytes``: past it, the connections whose frames have
  waited longest are closed. Closing, not pausing: a paused connection
  keeps its buffer and cannot finish its frame, so pausing would hold the
  memory and could stall every connection at once. Oldest first, because a
  well-behaved client's frame arrives in a round trip while a stalled one
  only ages; a slow-loris must keep sending fresh bytes to stay buffered.
* At ``maxAddsInProgressLimit`` adds (or ``maxReadsInProgressLimit``
  reads) in progress the server stops reading from every connection, as
  BookKeeper does, and reads again once some complete: back-pressure, not
  errors. Requests already read wait in their connection's backlog and
  are let in one per connection in turn.
* A journal that falls behind by ``journalQueueSize`` records, or a client
  that stops reading its responses, also stops the reading of requests.

Time the server itself does not read (any pause above) does not count
against a connection's frame or idle clock.

A connection closed for a violation (oversized or undecodable frame, frame
timeout, buffer limit) first answers every good request it read before the
violation, then half-closes and discards further input, so the answers are
not lost to a reset; it is aborted if that takes longer than
:data:`CLOSE_GRACE_SECONDS`. Closes are counted by reason in
``bookie_connections_closed``.
"""

from __future__ import annotations

import asyncio
import collections
import logging
import time
from typing import TYPE_CHECKING

from google.protobuf.message import DecodeError

from dlog.bookie.request_processor import ADD, READ, RequestProcessor
from dlog.protocol.bookkeeper_pb2 import Request, Response
from dlog.protocol.frame import FrameDecoder, FrameTooLargeError
from dlog.protocol.messages import AddFrame, decode_add_request

if TYPE_CHECKING:
    from dlog.bookie.bookie import Bookie

log = logging.getLogger(__name__)

WRITE_BUFFER_HIGH = 8 * 1024 * 1024
#: Longest a closing connection waits for its outstanding answers.
CLOSE_GRACE_SECONDS = 10.0
#: Longest a connection that was sent our FIN may take to close its side.
LINGER_SECONDS = 2.0
#: Repeated close reasons are logged at most once per this many seconds.
LOG_EVERY = 10.0
#: A response part at least this large is written as it is, not joined.
LARGE_PART = 64 * 1024


def coalesce(pieces: list[bytes]) -> list[bytes]:
    """``pieces`` with each run of parts under :data:`LARGE_PART` joined:
    one write of few buffers, without copying the large ones."""
    out: list[bytes] = []
    run: list[bytes] = []
    for piece in pieces:
        if not piece:
            continue
        if len(piece) < LARGE_PART:
            run.append(piece)
            continue
        if run:
            out.append(b"".join(run))
            run = []
        out.append(piece)
    if run:
        out.append(b"".join(run))
    return out


class _CloseLog:
    """One warning per reason per :data:`LOG_EVERY`, with how many were not logged."""

    def __init__(self) -> None:
        self._last: dict[str, float] = {}
        self._skipped: dict[str, int] = {}

    def __call__(self, reason: str, peer: str, detail: str) -> None:
        now = time.monotonic()
        if now - self._last.get(reason, -LOG_EVERY) < LOG_EVERY:
            self._skipped[reason] = self._skipped.get(reason, 0) + 1
            return
        self._last[reason] = now
        skipped = self._skipped.pop(reason, 0)
        more = f" (and {skipped} more closed for {reason} since the last report)" if skipped else ""
        level = logging.INFO if reason == "idle" else logging.WARNING
        log.log(level, "closing connection from %s: %s%s", peer, detail, more)


class BookieConnection(asyncio.Protocol):
    def __init__(self, server: BookieServer) -> None:
        self.server = server
        self.processor = server.processor
        self.decoder = FrameDecoder(server.max_frame_size)
        self.transport: asyncio.Transport | None = None
        self.peer = "?"
        self.closed = False
        #: Why the connection stopped taking requests (None while it takes them).
        self.close_reason: str | None = None
        self._out: list[bytes] = []
        self._out_large = False  # _out holds a part to write as it is (send_parts)
        self._flush_handle: asyncio.Handle | None = None
        self._paused_for: set[str] = set()
        self._loop = asyncio.get_running_loop()
        now = self._loop.time()
        self._outstanding = 0  # requests handed to the processor, not yet answered
        self._backlog: collections.deque[Request | AddFrame] = collections.deque()
        self._waiting = False  # in one of the server's waiter queues
        self._frame_started: float | None = None  # first byte of the incomplete frame
        self._last_active = now
        self._timer: asyncio.TimerHandle | None = None
        self._close_deadline = 0.0
        self._eof_sent = False
        self._peer_eof = False

    # -- asyncio callbacks ---------------------------------------------------------
    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]
        peer = transport.get_extra_info("peername")
        self.peer = f"{peer[0]}:{peer[1]}" if peer else "?"
        transport.set_write_buffer_limits(high=WRITE_BUFFER_HIGH)  # type: ignore[attr-defined]
        self.server.connection_opened(self)
        self._schedule_check()

    def connection_lost(self, exc: Exception | None) -> None:
        self.closed = True
        self._out.clear()
        self._backlog.clear()
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        self._drop_partial()
        if self.close_reason is None:
            self.close_reason = "peer"
            self.server.metrics.closed_connections.inc(labels=("peer",))
        self.server.connection_closed(self)

    def eof_received(self) -> bool | None:
        """The client will send no more: answer what it asked, then close."""
        self._peer_eof = True
        if self.close_reason is None:
            self._begin_close("peer", "")
            return True
        if self._eof_sent:
            return None  # both sides done: let the transport close
        return True

    def data_received(self, data: bytes) -> None:
        if self.closed or self.close_reason is not None:
            return  # closing: input after the violation is discarded
        old = self.decoder.buffered
        bad: FrameTooLargeError | None = None
        try:
            frames = self.decoder.feed(data)
        except FrameTooLargeError as e:
            frames, bad = e.frames, e
        now = self._loop.time()
        self._account(old, bool(frames), now)
        if frames:
            self._last_active = now
            self._process(frames)
        if bad is not None:
            self._begin_close("frame_too_large", str(bad))
            return
        if self.closed or self.close_reason is not None:
            return
        self.server.check_buffered()
        if self.server.bookie.check_pressure():
            self.pause("journal")

    def pause_writing(self) -> None:
        self.pause("client")

    def resume_writing(self) -> None:
        self.resume("client")

    # -- requests -----------------------------------------------------------------------
    def _process(self, frames: list[memoryview]) -> None:
        server = self.server
        backlog = self._backlog
        limits_on = server.limits_on
        handle = self.processor.handle
        req: Request | AddFrame | None
        for payload in frames:
            # Adds skip protobuf (see decode_add_request); the rest, and any
            # add it declines, are protobuf's.
            req = decode_add_request(payload)
            if req is None:
                try:
                    # protobuf parses any buffer; its stubs say bytes (a copy we avoid).
                    req = Request.FromString(payload)  # type: ignore[arg-type]
                except DecodeError as e:
                    self._begin_close(
                        "undecodable", f"undecodable frame of {len(payload)} bytes: {e}"
                    )
                    return
            if backlog:
                backlog.append(req)
                continue
            if limits_on:
                kind = server.limited_kind(req)
                if kind is not None and server.must_wait(kind):
                    backlog.append(req)
                    self.pause("backlog")
                    server.wait(self, kind)
                    continue
                self._outstanding += 1
                handle(req, self)
                if kind is not None:
                    server.dispatched(kind)
            else:
                self._outstanding += 1
                handle(req, self)
            if self.closed:
                return

    def drain_backlog(self) -> None:
        """Let in the head of the backlog (the server has a slot for it) and
        the requests after it up to the next one that needs a slot; that
        one queues again behind the other waiting connections."""
        server = self.server
        backlog = self._backlog
        first = True
        while backlog and not self.closed:
            req = backlog[0]
            kind = server.limited_kind(req)
            if kind is not None:
                if not first or server.at_limit(kind):
                    server.wait(self, kind)
                    return
                first = False
            backlog.popleft()
            self._outstanding += 1
            self.processor.handle(req, self)
            if kind is not None:
                server.dispatched(kind)
        if not self.closed:
            self.resume("backlog")
            self._finish_close_if_answered()

    # -- output -------------------------------------------------------------------------
    def send(self, response: Response) -> None:
        self.send_bytes(response.SerializeToString())

    def send_bytes(self, data: bytes) -> None:
        """Queue an encoded Response; writes are coalesced per loop iteration."""
        self._queue((len(data).to_bytes(4, "big"), data))

    def send_parts(self, parts: tuple[bytes, ...]) -> None:
        """Queue a Response encoded in parts (an entry between its head and
        tail): a large one is written as its parts, never joined (copied)."""
        size = sum(map(len, parts))
        if size < LARGE_PART:
            self._queue((size.to_bytes(4, "big"), b"".join(parts)))
        else:
            self._out_large = True
            self._queue((size.to_bytes(4, "big"), *parts))

    def _queue(self, pieces: tuple[bytes, ...]) -> None:
        self._outstanding = max(self._outstanding - 1, 0)
        if self.closed or self._eof_sent:
            return
        self._out.extend(pieces)
        if self._flush_handle is None:
            self._flush_handle = self._loop.call_soon(self._flush)
        if not self._outstanding:
            self._last_active = self._loop.time()
            if self.close_reason is not None:
                self._finish_close_if_answered()

    def _flush(self) -> None:
        self._flush_handle = None
        if self._out and not self.closed and not self._eof_sent and self.transport is not None:
            out, self._out = self._out, []
            if self._out_large:
                self._out_large = False
                self.transport.writelines(coalesce(out))
            else:
                self.transport.write(b"".join(out))

    # -- limits and timers --------------------------------------------------------------
    def _account(self, old: int, got_frames: bool, now: float) -> None:
        """Keep the server's count of buffered partial-frame bytes, and the
        start of the frame in progress, in step with the decoder."""
        new = self.decoder.buffered
        server = self.server
        if new != old:
            server.buffered_bytes += new - old
        partial = server.partial
        if new == 0:
            self._frame_started = None
            partial.pop(self, None)
        elif old == 0 or got_frames:  # a new frame began in this chunk
            self._frame_started = now
            partial.pop(self, None)
            partial[self] = None
            self._schedule_check()

    def _drop_partial(self) -> None:
        buffered = self.decoder.buffered
        if buffered:
            self.server.buffered_bytes -= buffered
            self.decoder = FrameDecoder(self.server.max_frame_size)
        self.server.partial.pop(self, None)
        self._frame_started = None

    def _schedule_check(self) -> None:
        when = self._next_check()
        if when is None:
            return
        timer = self._timer
        if timer is not None:
            if timer.when() <= when:
                return
            timer.cancel()
        self._timer = self._loop.call_at(when, self._check)

    def _next_check(self) -> float | None:
        if self.closed:
            return None
        if self.close_reason is not None:
            return self._close_deadline
        if self._paused_for:
            return None  # resume() restarts the clocks
        server = self.server
        when: float | None = None
        if self._frame_started is not None and server.frame_timeout:
            when = self._frame_started + server.frame_timeout
        if server.idle_timeout:
            if self._idle_candidate():
                idle_at = self._last_active + server.idle_timeout
            else:  # busy: look again later
                idle_at = self._loop.time() + server.idle_timeout
            when = idle_at if when is None else min(when, idle_at)
        return when

    def _check(self) -> None:
        self._timer = None
        if self.closed:
            return
        now = self._loop.time()
        server = self.server
        if self.close_reason is not None:
            if now >= self._close_deadline:
                self._abort()
                return
        elif not self._paused_for:
            started = self._frame_started
            ft = server.frame_timeout
            if started is not None and ft and now - started >= ft:
                self._begin_close(
                    "frame_timeout",
                    f"only {self.decoder.buffered} bytes of a frame arrived in "
                    f"frameReadTimeoutMs={round(ft * 1000)}",
                )
                return
            idle = server.idle_timeout
            if idle and self._idle_candidate() and now - self._last_active >= idle:
                self._begin_close("idle", f"idle for connectionIdleTimeoutMs={round(idle * 1000)}")
                return
        self._schedule_check()

    def _idle_candidate(self) -> bool:
        """No frame half-received, no request waiting or being answered."""
        return not self.decoder.buffered and not self._outstanding and not self._backlog

    # -- control --------------------------------------------------------------------------
    def pause(self, reason: str) -> None:
        if (
            not self._paused_for
            and self.transport is not None
            and not self.closed
            and self.close_reason is None
        ):
            self.transport.pause_reading()
        self._paused_for.add(reason)

    def resume(self, reason: str) -> None:
        if reason not in self._paused_for:
            return
        self._paused_for.discard(reason)
        if self._paused_for or self.closed or self.close_reason is not None:
            return
        if self.transport is not None:
            self.transport.resume_reading()
        # The clocks restart: the time the server did not read was not the client's.
        now = self._loop.time()
        self._last_active = now
        if self._frame_started is not None:
            self._frame_started = now
        self._schedule_check()

    def _begin_close(self, reason: str, detail: str) -> None:
        """Stop taking requests, answer the ones already read, then close."""
        if self.closed or self.close_reason is not None:
            return
        self.close_reason = reason
        self.server.metrics.closed_connections.inc(labels=(reason,))
        if reason != "peer":
            self.server.close_log(reason, self.peer, detail)
        self._drop_partial()
        self._close_deadline = self._loop.time() + CLOSE_GRACE_SECONDS
        if self._paused_for and self.transport is not None:
            self.transport.resume_reading()  # discard input: unread data would reset the close
        self._schedule_check()
        self._finish_close_if_answered()

    def _finish_close_if_answered(self) -> None:
        if self._outstanding > 0 or self._backlog or self.closed or self._eof_sent:
            return
        if self.close_reason is None or self.transport is None:
            return
        self._flush()
        self._eof_sent = True
        if self._peer_eof or not self.transport.can_write_eof():
            self.transport.close()
            return
        self.transport.write_eof()
        self._close_deadline = min(self._close_deadline, self._loop.time() + LINGER_SECONDS)
        self._schedule_check()

    def _abort(self) -> None:
        if self.transport is not None:
            self.transport.abort()

    def shutdown(self) -> None:
        """Server stop: send what is answered, close."""
        if self.close_reason is None:
            self.close_reason = "shutdown"
            self.server.metrics.closed_connections.inc(labels=("shutdown",))
        if self.transport is not None and not self.closed:
            self._flush()
            self.transport.close()


class BookieServer:
    def __init__(self, bookie: Bookie) -> None:
        self.bookie = bookie
        conf = bookie.conf
        self.metrics = bookie.metrics
        self.processor = RequestProcessor(bookie)
        self.connections: set[BookieConnection] = set()
        self._server: asyncio.AbstractServer | None = None
        self.port = conf.bookie_port
        self.max_frame_size = conf.netty_max_frame_size_bytes
        self.frame_timeout = conf.frame_read_timeout_ms / 1000.0
        self.idle_timeout = conf.connection_idle_timeout_ms / 1000.0
        self.max_buffered = conf.max_buffered_frame_bytes
        #: Bytes of incomplete frames across connections, and the connections
        #: holding one, oldest frame first (a dict keeps insertion order).
        self.buffered_bytes = 0
        self.partial: dict[BookieConnection, None] = {}
        self.close_log = _CloseLog()
        self._limit = {ADD: conf.max_adds_in_progress_limit, READ: conf.max_reads_in_progress_limit}
        # Resume reading a little below the limit, not at every completion.
        self._resume_at = {k: v - max(1, v // 10) for k, v in self._limit.items()}
        self._limited = {ADD: False, READ: False}
        self._waiters: dict[str, collections.deque[BookieConnection]] = {
            ADD: collections.deque(),
            READ: collections.deque(),
        }
        self._wake_handle: asyncio.Handle | None = None
        self.limits_on = any(self._limit.values())
        if self.limits_on:
            self.processor.on_release = self._released
        p = self.processor
        self.metrics.adds_in_progress.set_function(lambda: p.adds_in_progress)
        self.metrics.reads_in_progress.set_function(lambda: p.reads_in_progress)
        self.metrics.buffered_frame_bytes.set_function(lambda: self.buffered_bytes)
        bookie.add_pressure_listener(self._pressure)

    async def start(self) -> None:
        loop = asyncio.get_running_loop()
        host = self.bookie.conf.advertised_address or None
        self._server = await loop.create_server(
            lambda: BookieConnection(self),
            host=host,
            port=self.port,
            reuse_address=True,
            backlog=1024,
        )
        self.port = self._server.sockets[0].getsockname()[1]

    def connection_opened(self, conn: BookieConnection) -> None:
        self.connections.add(conn)
        self.metrics.connections.set(len(self.connections))
        if self.bookie.check_pressure():
            conn.pause("journal")
        for kind, on in self._limited.items():
            if on:
                conn.pause(kind)

    def connection_closed(self, conn: BookieConnection) -> None:
        self.connections.discard(conn)
        self.metrics.connections.set(len(self.connections))
        if conn._waiting:
            for q in self._waiters.values():
                if conn in q:
                    q.remove(conn)
            conn._waiting = False
            self._schedule_wake()

    # -- incomplete frames --------------------------------------------------------------
    def check_buffered(self) -> None:
        """Past ``maxBufferedFrameBytes``, close the connections whose frames
        have waited longest until the rest fit (see the module docstring)."""
        cap = self.max_buffered
        if not cap or self.buffered_bytes <= cap:
            return
        while self.buffered_bytes > cap and self.partial:
            oldest = next(iter(self.partial))
            oldest._begin_close(
                "buffer_limit",
                f"its incomplete frame ({oldest.decoder.buffered} bytes) is the oldest and "
                f"incomplete frames hold {self.buffered_bytes} bytes > maxBufferedFrameBytes={cap}",
            )
            oldest._drop_partial()

    # -- adds and reads in progress -------------------------------------------------------
    def _in_progress(self, kind: str) -> int:
        p = self.processor
        return p.adds_in_progress if kind == ADD else p.reads_in_progress

    def limited_kind(self, req: Request | AddFrame) -> str | None:
        """The kind of ``req`` when a limit applies to it."""
        kind = RequestProcessor.kind(req)
        if kind is None or not self._limit[kind]:
            return None
        return kind

    def at_limit(self, kind: str) -> bool:
        return self._in_progress(kind) >= self._limit[kind]

    def must_wait(self, kind: str) -> bool:
        """A new ``kind`` request waits: no slot, or others queued first."""
        return bool(self._waiters[kind]) or self._in_progress(kind) >= self._limit[kind]

    def dispatched(self, kind: str) -> None:
        """At a limit, stop reading from every connection (BookKeeper's
        ``maxAddsInProgressLimit`` / ``maxReadsInProgressLimit``)."""
        if self._limited[kind] or self._in_progress(kind) < self._limit[kind]:
            return
        self._limited[kind] = True
        self.metrics.in_progress_pauses.inc(labels=(kind,))
        for conn in list(self.connections):
            conn.pause(kind)

    def wait(self, conn: BookieConnection, kind: str) -> None:
        """``conn``'s next request needs a ``kind`` slot: queue it for one."""
        if not conn._waiting:
            conn._waiting = True
            self._waiters[kind].append(conn)
        if self._in_progress(kind) < self._limit[kind]:
            self._schedule_wake()

    def _released(self) -> None:
        if self._wake_handle is None and (
            self._limited[ADD] or self._limited[READ] or self._waiters[ADD] or self._waiters[READ]
        ):
            self._wake_handle = asyncio.get_running_loop().call_soon(self._wake)

    def _schedule_wake(self) -> None:
        if self._wake_handle is None:
            self._wake_handle = asyncio.get_running_loop().call_soon(self._wake)

    def _wake(self) -> None:
        """Hand free slots to waiting connections, one request each in turn,
        then read from every connection again once below the limit."""
        self._wake_handle = None
        for kind in (ADD, READ):
            limit = self._limit[kind]
            q = self._waiters[kind]
            while q and self._in_progress(kind) < limit:
                conn = q.popleft()
                conn._waiting = False
                conn.drain_backlog()
            if self._limited[kind] and not q and self._in_progress(kind) <= self._resume_at[kind]:
                self._limited[kind] = False
                for conn in list(self.connections):
                    conn.resume(kind)

    def _pressure(self, on: bool) -> None:
        for conn in list(self.connections):
            if on:
                conn.pause("journal")
            else:
                conn.resume("journal")

    async def stop(self) -> None:
        if self._server is not None:
            self._server.close()
            for conn in list(self.connections):
                conn.shutdown()
            await self._server.wait_closed()
            self._server = None
        if self._wake_handle is not None:
            self._wake_handle.cancel()
            self._wake_handle = None
