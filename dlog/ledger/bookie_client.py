"""A pipelined connection to one bookie.

Requests are framed and written as they are made (coalesced per loop
iteration), responses are matched to their futures by ``txnId``. A lost
connection fails every pending request with a retriable error; the ledger
client decides whether to reconnect or to treat the bookie as failed.
"""

from __future__ import annotations

import asyncio
import contextvars
import itertools
import logging
from collections.abc import Callable
from typing import Any

from google.protobuf.message import DecodeError

from dlog.errors import (
    BookieHandleNotAvailableError,
    OperationTimeoutError,
    ProtocolError,
    error_for_status,
)
from dlog.protocol import availability
from dlog.protocol import messages as m
from dlog.protocol.bookkeeper_pb2 import Request, Response
from dlog.protocol.frame import DEFAULT_MAX_FRAME_SIZE, FrameDecoder, FrameTooLargeError
from dlog.singleflight import SingleFlight

_Pending = tuple["asyncio.Future[Any]", "asyncio.TimerHandle | None", bool]
#: What the pending table gives for a txn it does not hold.
_NONE: tuple[None, None, bool] = (None, None, False)

log = logging.getLogger(__name__)

EOK = 0


def split_address(address: str) -> tuple[str, int]:
    host, sep, port = address.rpartition(":")
    if not sep or not port.isdigit():
        raise ValueError(f"bookie address {address!r} is not host:port")
    return host, int(port)


class _Connection(asyncio.Protocol):
    def __init__(self, client: BookieClient) -> None:
        self.client = client
        self.decoder = FrameDecoder(client.max_frame_size)
        self.transport: asyncio.Transport | None = None

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]

    def data_received(self, data: bytes) -> None:
        try:
            frames = self.decoder.feed(data)
        except FrameTooLargeError as e:
            self.client._fail_all(
                ProtocolError(f"bookie {self.client.address} sent an oversized frame: {e}")
            )
            if self.transport is not None:
                self.transport.abort()
            return
        pending = self.client._pending
        for payload in frames:
            # An add's answer to add_entry skips protobuf (see
            # decode_add_response); anything else is protobuf's.
            added = m.decode_add_response(payload)
            result: Response | m.AddResult
            if added is not None and pending.get(added.txn_id, _NONE)[2]:
                txn, result = added.txn_id, added
            else:
                try:
                    resp = m.parse_response(payload)
                except DecodeError as e:
                    self.client._fail_all(
                        ProtocolError(
                            f"bookie {self.client.address} sent an undecodable frame: {e}"
                        )
                    )
                    if self.transport is not None:
                        self.transport.abort()
                    return
                txn, result = resp.header.txnId, resp
                if pending.get(txn, _NONE)[2]:
                    result = m.add_result(resp)
            entry = pending.pop(txn, None)
            if entry is None:
                continue  # timed out earlier
            fut, timer, _ = entry
            if timer is not None:
                timer.cancel()
            if not fut.done():
                fut.set_result(result)

    def connection_lost(self, exc: Exception | None) -> None:
        self.client._connection_lost(exc)


class BookieClient:
    """One connection to one bookie, shared by every ledger using it."""

    def __init__(
        self,
        address: str,
        *,
        max_frame_size: int = DEFAULT_MAX_FRAME_SIZE,
        connect_timeout: float = 10.0,
        on_close: Callable[[BookieClient], None] | None = None,
    ) -> None:
        self.address = address
        self.host, self.port = split_address(address)
        self.max_frame_size = max_frame_size
        self.connect_timeout = connect_timeout
        self._on_close = on_close
        self._txn = itertools.count(1)
        #: txn -> (future, timeout timer, whether it is add_entry's: it takes an AddResult)
        self._pending: dict[int, _Pending] = {}
        self._proto: _Connection | None = None
        self._out: list[bytes] = []
        self._flush_handle: asyncio.Handle | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        #: The context of this connection's timers and writes (it lives on
        #: one loop): not a copy of the sender's context per request.
        self._context = contextvars.Context()
        self.closed = False

    @property
    def connected(self) -> bool:
        return self._proto is not None and self._proto.transport is not None and not self.closed

    async def connect(self) -> None:
        self._loop = asyncio.get_running_loop()
        try:
            # asyncio.timeout, not wait_for: Python 3.11's wait_for swallows a
            # cancellation that lands as the connection attempt ends (the
            # cancelled task then carried on, retrying a dead bookie).
            async with asyncio.timeout(self.connect_timeout):
                _, proto = await self._loop.create_connection(
                    lambda: _Connection(self), self.host, self.port
                )
        except (OSError, TimeoutError) as e:
            raise BookieHandleNotAvailableError(
                f"cannot connect to bookie {self.address}: {e}"
            ) from None
        self._proto = proto

    async def close(self) -> None:
        self._flush()  # what was sent goes out before the close
        self.closed = True
        if self._proto is not None and self._proto.transport is not None:
            self._proto.transport.close()
        self._fail_all(BookieHandleNotAvailableError(f"connection to bookie {self.address} closed"))

    def abort(self) -> None:
        self.closed = True
        if self._proto is not None and self._proto.transport is not None:
            self._proto.transport.abort()

    # -- plumbing --------------------------------------------------------------------
    def _connection_lost(self, exc: Exception | None) -> None:
        self.closed = True
        self._fail_all(
            BookieHandleNotAvailableError(
                f"lost connection to bookie {self.address}: {exc or 'closed'}"
            )
        )
        if self._on_close is not None:
            self._on_close(self)

    def _fail_all(self, error: Exception) -> None:
        pending, self._pending = self._pending, {}
        for fut, timer, _ in pending.values():
            if timer is not None:
                timer.cancel()
            if not fut.done():
                fut.set_exception(error)

    def _flush(self) -> None:
        self._flush_handle = None
        if not self._out:
            return
        out, self._out = self._out, []
        transport = self._proto.transport if self._proto is not None else None
        # A pass queued before the connection was lost finds the transport
        # closed (uvloop raises on a write then); its requests have failed.
        if transport is not None and not self.closed and not transport.is_closing():
            transport.write(b"".join(out))

    def _expire(self, txn: int) -> None:
        entry = self._pending.pop(txn, None)
        if entry is not None and not entry[0].done():
            entry[0].set_exception(
                OperationTimeoutError(f"bookie {self.address} did not answer in time")
            )

    def send(
        self, req: Request, timeout: float | None = None, *, now: bool = False
    ) -> asyncio.Future[Response]:
        """Send ``req`` (its txnId is assigned here); the future gets the
        Response. Requests are written together once per loop pass; ``now``
        writes this one (and any queued before it) at once."""
        txn = next(self._txn)
        req.header.txnId = txn
        fut: asyncio.Future[Response] = self._send_encoded(
            txn, req.SerializeToString(), timeout, now
        )
        return fut

    def _send_encoded(
        self, txn: int, data: bytes, timeout: float | None, now: bool = False, add: bool = False
    ) -> asyncio.Future[Any]:
        loop = self._loop or asyncio.get_running_loop()
        fut: asyncio.Future[Any] = loop.create_future()
        if not self.connected:
            fut.set_exception(
                BookieHandleNotAvailableError(f"not connected to bookie {self.address}")
            )
            return fut
        timer = (
            loop.call_later(timeout, self._expire, txn, context=self._context) if timeout else None
        )
        self._pending[txn] = (fut, timer, add)
        self._out.append(len(data).to_bytes(4, "big"))
        self._out.append(data)
        if now:
            self._flush()  # a pass already scheduled finds nothing left
        elif self._flush_handle is None:
            self._flush_handle = loop.call_soon(self._flush, context=self._context)
        return fut

    def send_raw(self, payload: bytes) -> None:
        """Write an arbitrary frame payload (tests of malformed input)."""
        if self._proto is not None and self._proto.transport is not None:
            self._proto.transport.write(len(payload).to_bytes(4, "big") + payload)

    @property
    def pending(self) -> int:
        return len(self._pending)

    # -- operations ---------------------------------------------------------------------
    @staticmethod
    def check(status: int, what: str) -> None:
        if status != EOK:
            raise error_for_status(status, what)

    def add_entry(
        self,
        ledger_id: int,
        entry_id: int,
        master_key: bytes,
        body: bytes,
        *,
        recovery: bool = False,
        timeout: float | None = None,
    ) -> asyncio.Future[m.AddResult]:
        """Send an add; the future gets its answer as an AddResult."""
        txn = next(self._txn)
        data = m.encode_add_request(txn, ledger_id, entry_id, master_key, body, recovery)
        fut: asyncio.Future[m.AddResult] = self._send_encoded(txn, data, timeout, add=True)
        return fut

    async def read_entry(
        self,
        ledger_id: int,
        entry_id: int,
        *,
        fence: bool = False,
        master_key: bytes | None = None,
        previous_lac: int | None = None,
        long_poll_timeout_ms: int | None = None,
        piggyback: bool = False,
        timeout: float | None = None,
    ) -> Response:
        req = m.read_request(
            0,
            ledger_id,
            entry_id,
            fence=fence,
            master_key=master_key,
            previous_lac=previous_lac,
            timeout_ms=long_poll_timeout_ms,
            piggyback=piggyback,
        )
        return await self.send(req, timeout)

    async def read_lac(self, ledger_id: int, timeout: float | None = None) -> Response:
        return await self.send(m.read_lac_request(0, ledger_id), timeout)

    def write_lac(
        self,
        ledger_id: int,
        lac: int,
        master_key: bytes,
        body: bytes,
        timeout: float | None = None,
        *,
        now: bool = False,
    ) -> asyncio.Future[Response]:
        """Sent when called (``now``: written at once, see :meth:`send`)."""
        return self.send(m.write_lac_request(0, ledger_id, lac, master_key, body), timeout, now=now)

    async def force_ledger(self, ledger_id: int, timeout: float | None = None) -> Response:
        return await self.send(m.force_ledger_request(0, ledger_id), timeout)

    async def list_of_entries(self, ledger_id: int, timeout: float | None = None) -> Response:
        return await self.send(m.list_of_entries_request(0, ledger_id), timeout)

    async def entries_of_ledger(self, ledger_id: int, timeout: float | None = None) -> list[int]:
        """Ids of the entries this bookie holds of a ledger, ascending (what
        upstream's auditor asks to find missing replicas); raises the
        status's error (NoSuchLedgerError for ENOLEDGER) on failure."""
        resp = await self.list_of_entries(ledger_id, timeout)
        self.check(resp.status, f"list the entries of ledger {ledger_id}")
        return availability.decode(
            resp.getListOfEntriesOfLedgerResponse.availabilityOfEntriesOfLedger
        )

    async def write_close(
        self, ledger_id: int, master_key: bytes, timeout: float | None = None
    ) -> Response:
        return await self.send(m.write_close_request(0, ledger_id, master_key), timeout)

    async def bookie_info(self, timeout: float | None = None) -> Response:
        return await self.send(m.bookie_info_request(0), timeout)


class BookieClientPool:
    """One pipelined connection per bookie, opened on first use and
    reopened (with backoff) after it drops."""

    def __init__(
        self, *, connect_timeout: float = 10.0, max_frame_size: int = DEFAULT_MAX_FRAME_SIZE
    ) -> None:
        self.connect_timeout = connect_timeout
        self.max_frame_size = max_frame_size
        self._clients: dict[str, BookieClient] = {}
        self._connecting: SingleFlight[BookieClient] = SingleFlight()
        self.closed = False

    def connected(self, address: str) -> BookieClient | None:
        """The open connection to ``address``, or None: the hot path sends on
        it without awaiting; :meth:`get` opens one when there is none."""
        client = self._clients.get(address)
        if client is not None and client.connected:
            return client
        return None

    async def get(self, address: str) -> BookieClient:
        """A connected client for ``address``; BookieHandleNotAvailableError
        when the bookie cannot be reached after a few quick attempts."""
        client = self.connected(address)
        if client is not None:
            return client
        if self.closed:
            from dlog.errors import ClientClosedError

            raise ClientClosedError("bookie client pool is closed")
        return await self._connecting.run(address, lambda: self._connect_and_keep(address))

    async def _connect_and_keep(self, address: str) -> BookieClient:
        client = await self._connect(address)
        self._clients[address] = client
        return client

    async def _connect(self, address: str) -> BookieClient:
        from dlog.retry import RetryPolicy

        policy = RetryPolicy(attempts=3, initial_backoff=0.05, max_backoff=0.5, jitter=0.05)

        async def attempt() -> BookieClient:
            client = BookieClient(
                address,
                connect_timeout=self.connect_timeout,
                max_frame_size=self.max_frame_size,
                on_close=self._forget,
            )
            await client.connect()
            return client

        return await policy.call(attempt, lambda e: isinstance(e, BookieHandleNotAvailableError))

    def _forget(self, client: BookieClient) -> None:
        if self._clients.get(client.address) is client:
            del self._clients[client.address]

    def drop(self, address: str) -> None:
        """Abort the connection to a bookie that misbehaved (e.g. timed out)."""
        client = self._clients.pop(address, None)
        if client is not None:
            client.abort()

    async def close(self) -> None:
        self.closed = True
        clients, self._clients = self._clients, {}
        for c in clients.values():
            await c.close()
