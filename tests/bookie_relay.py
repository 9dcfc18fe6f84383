"""A TCP relay in front of a real bookie that decodes every v3 frame both
ways: tests see exactly what a client asked and what came back, and can
make the relay act as a bookie that cannot decode some request."""

from __future__ import annotations

import asyncio
import contextlib

from dlog.protocol.bookkeeper_pb2 import Request, Response
from dlog.protocol.frame import FrameDecoder, encode_frame


class BookieRelay:
    """Listens on ``port``, forwards to the bookie on ``target_port`` and
    keeps every request and response (by txnId) it passes on."""

    def __init__(self, port: int, target_port: int) -> None:
        self.port = port
        self.target_port = target_port
        self.requests: list[Request] = []
        self.responses: dict[int, Response] = {}
        self.held: list[Request] = []
        self._server: asyncio.Server | None = None
        self._tasks: set[asyncio.Future[None]] = set()

    def forward(self, request: Request) -> bool:
        """Whether to pass ``request`` on; False drops the connection both
        ways, as a bookie that cannot decode it does."""
        return True

    def hold(self, request: Request) -> bool:
        """Whether to swallow ``request``: never forwarded, never answered,
        the connection kept (a bookie that hangs on it). Kept in ``held``."""
        return False

    async def start(self) -> None:
        self._server = await asyncio.start_server(self._serve, "127.0.0.1", self.port)

    async def stop(self) -> None:
        assert self._server is not None
        self._server.close()
        for t in self._tasks:
            t.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)

    async def _serve(self, c_reader: asyncio.StreamReader, c_writer: asyncio.StreamWriter) -> None:
        b_reader, b_writer = await asyncio.open_connection("127.0.0.1", self.target_port)

        async def upstream() -> None:
            decoder = FrameDecoder()
            while data := await c_reader.read(65536):
                for frame in decoder.feed(data):
                    request = Request.FromString(bytes(frame))
                    self.requests.append(request)
                    if not self.forward(request):
                        return
                    if self.hold(request):
                        self.held.append(request)
                        continue
                    b_writer.write(encode_frame(bytes(frame)))

        async def downstream() -> None:
            decoder = FrameDecoder()
            while data := await b_reader.read(65536):
                for frame in decoder.feed(data):
                    response = Response.FromString(bytes(frame))
                    self.responses[response.header.txnId] = response
                c_writer.write(data)

        up = asyncio.ensure_future(upstream())
        down = asyncio.ensure_future(downstream())
        self._tasks.update((up, down))
        with contextlib.suppress(Exception, asyncio.CancelledError):
            await asyncio.wait((up, down), return_when=asyncio.FIRST_COMPLETED)
        for t in (up, down):
            t.cancel()
        for w in (c_writer, b_writer):
            w.close()
