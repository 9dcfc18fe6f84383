"""The bookie's asyncio TCP server: framing, decoding and connection care.

A frame over ``nettyMaxFrameSizeBytes`` or one that does not decode closes
that connection with a logged reason; it never disturbs other connections.
A client that stops reading its responses, or a journal that falls behind
by ``journalQueueSize`` records, stops the server reading requests until
things drain: back-pressure instead of unbounded memory.
"""

from __future__ import annotations

import asyncio
import logging
from typing import TYPE_CHECKING

from google.protobuf.message import DecodeError

from dlog.bookie.request_processor import RequestProcessor
from dlog.protocol.bookkeeper_pb2 import Request, Response
from dlog.protocol.frame import FrameDecoder, FrameTooLargeError

if TYPE_CHECKING:
    from dlog.bookie.bookie import Bookie

log = logging.getLogger(__name__)

WRITE_BUFFER_HIGH = 8 * 1024 * 1024


class BookieConnection(asyncio.Protocol):
    def __init__(self, server: BookieServer) -> None:
        self.server = server
        self.processor = server.processor
        self.decoder = FrameDecoder(server.bookie.conf.netty_max_frame_size_bytes)
        self.transport: asyncio.Transport | None = None
        self.peer = "?"
        self.closed = False
        self._out: list[bytes] = []
        self._flush_handle: asyncio.Handle | None = None
        self._paused_for: set[str] = set()
        self._loop = asyncio.get_running_loop()

    # -- asyncio callbacks ---------------------------------------------------------
    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]
        peer = transport.get_extra_info("peername")
        self.peer = f"{peer[0]}:{peer[1]}" if peer else "?"
        transport.set_write_buffer_limits(high=WRITE_BUFFER_HIGH)  # type: ignore[attr-defined]
        self.server.connection_opened(self)

    def connection_lost(self, exc: Exception | None) -> None:
        self.closed = True
        self._out.clear()
        self.server.connection_closed(self)

    def data_received(self, data: bytes) -> None:
        if self.closed:
            return
        try:
            frames = self.decoder.feed(data)
        except FrameTooLargeError as e:
            self.abort("frame_too_large", str(e))
            return
        handle = self.processor.handle
        for payload in frames:
            try:
                req = Request.FromString(payload)
            except DecodeError as e:
                self.abort("undecodable", f"undecodable frame of {len(payload)} bytes: {e}")
                return
            handle(req, self)
            if self.closed:
                return
        if self.server.bookie.check_pressure():
            self.pause("journal")

    def pause_writing(self) -> None:
        self.pause("client")

    def resume_writing(self) -> None:
        self.resume("client")

    # -- output -------------------------------------------------------------------------
    def send(self, response: Response) -> None:
        self.send_bytes(response.SerializeToString())

    def send_bytes(self, data: bytes) -> None:
        """Queue an encoded Response; writes are coalesced per loop iteration."""
        if self.closed:
            return
        self._out.append(len(data).to_bytes(4, "big"))
        self._out.append(data)
        if self._flush_handle is None:
            self._flush_handle = self._loop.call_soon(self._flush)

    def _flush(self) -> None:
        self._flush_handle = None
        if self._out and not self.closed and self.transport is not None:
            out, self._out = self._out, []
            self.transport.write(b"".join(out))

    # -- control --------------------------------------------------------------------------
    def pause(self, reason: str) -> None:
        if not self._paused_for and self.transport is not None and not self.closed:
            self.transport.pause_reading()
        self._paused_for.add(reason)

    def resume(self, reason: str) -> None:
        self._paused_for.discard(reason)
        if not self._paused_for and self.transport is not None and not self.closed:
            self.transport.resume_reading()

    def abort(self, reason: str, detail: str) -> None:
        log.warning("closing connection from %s: %s", self.peer, detail)
        self.server.bookie.metrics.closed_connections.inc(labels=(reason,))
        self.closed = True
        if self.transport is not None:
            self.transport.abort()


class BookieServer:
    def __init__(self, bookie: Bookie) -> None:
        self.bookie = bookie
        self.processor = RequestProcessor(bookie)
        self.connections: set[BookieConnection] = set()
        self._server: asyncio.AbstractServer | None = None
        self.port = bookie.conf.bookie_port
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
        self.bookie.metrics.connections.set(len(self.connections))
        if self.bookie.check_pressure():
            conn.pause("journal")

    def connection_closed(self, conn: BookieConnection) -> None:
        self.connections.discard(conn)
        self.bookie.metrics.connections.set(len(self.connections))

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
                if conn.transport is not None:
                    conn._flush()
                    conn.transport.close()
            await self._server.wait_closed()
            self._server = None
