"""A client of DistributedLog write proxies (``dlog proxy``).

::

    async with Client("10.0.0.1:8000,10.0.0.2:8000") as client:
        dlsn = await client.write("events", b"hello")
        dlsns = await client.write_bulk("events", [b"a", b"b"])

Routing follows DistributedLog's client: the handshake tells which proxy
owns which stream; a stream nobody is known to own goes to a proxy picked
by a hash of its name; a ``FOUND`` answer names the owner and the request
follows it. A proxy that cannot be reached, is shutting down, takes no new
streams or owns too many is added to the request's ``triedHosts`` and the
next proxy is asked; the proxy that finds the owner among them waits for
the owner's lock instead of sending the client back (that is how a
stream's ownership moves when its proxy dies).

A write is sent again only when it certainly was not processed (the
connection could not be opened, or the answer says it was not taken). When
a connection drops after a write was sent, its outcome is unknown: the
call fails with :class:`~dlog.errors.WriteOutcomeUnknownError` rather than
risk writing the record twice. Everything else (truncate, release, create,
delete, heartbeat) is safe to repeat and is retried.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import logging
import random
import zlib
from collections.abc import Callable, Sequence
from typing import Any

from dlog.dlsn import DLSN
from dlog.errors import (
    DLogError,
    LogError,
    ServiceUnavailableError,
    ThriftProtocolError,
    WriteOutcomeUnknownError,
)
from dlog.proxy import protocol as wire

log = logging.getLogger(__name__)

T = wire.thrift
_CODES = T.StatusCode
#: Answers meaning "not taken here, ask another proxy".
_ELSEWHERE = frozenset(
    {
        _CODES.SERVICE_UNAVAILABLE,
        _CODES.STREAM_UNAVAILABLE,
        _CODES.TOO_MANY_STREAMS,
        _CODES.REGION_UNAVAILABLE,
    }
)
#: Answers meaning "not taken yet, ask again".
_AGAIN = frozenset({_CODES.STREAM_NOT_READY})
_MAX_FRAME = 64 * 1024 * 1024


def _error_classes() -> dict[int, type[LogError]]:
    """DistributedLog status code -> the LogError class that carries it
    (the most general one where several share a code)."""
    out: dict[int, type[LogError]] = {}
    stack: list[type[LogError]] = [LogError]
    while stack:
        cls = stack.pop(0)
        out.setdefault(cls.code, cls)
        stack.extend(cls.__subclasses__())
    return out


_ERRORS = _error_classes()


def error_for(header: Any) -> LogError:
    """The error a non-SUCCESS ResponseHeader reports."""
    name = T.StatusCode._VALUES_TO_NAMES.get(header.code, str(header.code))
    cls = _ERRORS.get(header.code, LogError)
    message = header.errMsg or name
    return cls(f"{message} ({name})")


class BulkWriteError(LogError):
    """Some records of a bulk write failed. ``results`` has, per record in
    order, its DLSN or its error; ``code`` is the first failure's."""

    def __init__(self, message: str, results: list[DLSN | LogError]) -> None:
        super().__init__(message)
        self.results = results
        first = next(r for r in results if isinstance(r, LogError))
        self.code = first.code  # type: ignore[misc]


class _NotSent(Exception):
    """The request never left: safe to send elsewhere."""


class _Connection:
    """One framed connection to a proxy; requests are pipelined and matched
    to answers by sequence id."""

    def __init__(self, endpoint: str, connect_timeout: float) -> None:
        self.endpoint = endpoint
        self.connect_timeout = connect_timeout
        self._writer: asyncio.StreamWriter | None = None
        self._reader_task: asyncio.Task[None] | None = None
        self._pending: dict[int, asyncio.Future[wire.Reply]] = {}
        self._seq = itertools.count(1)
        self._connecting: asyncio.Lock = asyncio.Lock()
        self.closed = False

    async def _connect(self) -> asyncio.StreamWriter:
        async with self._connecting:
            if self._writer is not None and not self._writer.is_closing():
                return self._writer
            host, _, port = self.endpoint.rpartition(":")
            try:
                async with asyncio.timeout(self.connect_timeout):
                    reader, writer = await asyncio.open_connection(host, int(port))
            except (OSError, TimeoutError, ValueError) as e:
                raise _NotSent(f"cannot connect to proxy {self.endpoint}: {e}") from None
            self._writer = writer
            self._reader_task = asyncio.create_task(self._read(reader))
            return writer

    async def _read(self, reader: asyncio.StreamReader) -> None:
        error: Exception = ConnectionError(f"connection to proxy {self.endpoint} closed")
        try:
            while True:
                (size,) = wire.FRAME_HEADER.unpack(await reader.readexactly(4))
                if not 0 < size <= _MAX_FRAME:
                    raise ThriftProtocolError(f"proxy {self.endpoint} sent a frame of {size} bytes")
                reply = wire.decode_bulk_write_reply(await reader.readexactly(size))
                fut = self._pending.pop(reply.seqid, None)
                if fut is not None and not fut.done():
                    fut.set_result(reply)
        except (asyncio.IncompleteReadError, ConnectionError, OSError) as e:
            error = ConnectionError(f"connection to proxy {self.endpoint} lost: {e}")
        except ThriftProtocolError as e:
            error = e
        finally:
            writer, self._writer = self._writer, None
            if writer is not None:
                writer.close()
            pending, self._pending = self._pending, {}
            for fut in pending.values():
                if not fut.done():
                    fut.set_exception(error)

    async def call(self, method: str, args: Any) -> Any:
        """The method's result struct; _NotSent if it never left,
        ConnectionError if the connection dropped after it did."""
        writer = await self._connect()
        seqid = next(self._seq) & 0x7FFFFFFF
        fut: asyncio.Future[wire.Reply] = asyncio.get_running_loop().create_future()
        self._pending[seqid] = fut
        try:
            writer.write(wire.encode_call(method, seqid, args))
        except (ConnectionError, RuntimeError) as e:
            self._pending.pop(seqid, None)
            raise _NotSent(str(e)) from None
        reply = await fut
        if isinstance(reply.result, Exception):  # TApplicationException
            raise LogError(f"proxy {self.endpoint} failed {method}: {reply.result}")
        return reply.result

    async def close(self) -> None:
        self.closed = True
        if self._writer is not None:
            self._writer.close()
        if self._reader_task is not None:
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await self._reader_task


class Client:
    """Writes to streams through write proxies (see the module docstring).

    ``hosts``: ``host:port`` of one or more proxies (a list, or one
    comma-separated string). ``timeout``: how long one call may take,
    retries and redirects included."""

    def __init__(
        self,
        hosts: str | Sequence[str],
        *,
        timeout: float = 60.0,
        connect_timeout: float = 5.0,
        max_redirects: int = 8,
    ) -> None:
        if isinstance(hosts, str):
            hosts = [h.strip() for h in hosts.split(",") if h.strip()]
        if not hosts:
            raise ValueError("Client needs at least one proxy host:port")
        for h in hosts:
            host, _, port = h.rpartition(":")
            if not host or not port.isdigit():
                raise ValueError(f"proxy address {h!r} is not host:port")
        self.hosts: list[str] = list(dict.fromkeys(hosts))
        self.timeout = timeout
        self.connect_timeout = connect_timeout
        self.max_redirects = max_redirects
        self._connections: dict[str, _Connection] = {}
        #: stream -> host:port of its owner, as last learned.
        self.owners: dict[str, str] = {}
        self.closed = False

    async def __aenter__(self) -> Client:
        await self.start()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    async def start(self) -> None:
        """Handshake with every proxy to learn who owns what; fails if none
        answers."""
        answers = await asyncio.gather(*(self._handshake(h) for h in self.hosts))
        if not any(answers):
            raise ServiceUnavailableError(f"no write proxy answered: {', '.join(self.hosts)}")

    async def _handshake(self, endpoint: str) -> bool:
        try:
            info = await self._conn(endpoint).call(
                "handshakeWithClientInfo",
                wire.service.handshakeWithClientInfo_args(
                    clientInfo=T.ClientInfo(getOwnerships=True)
                ),
            )
        except (_NotSent, ConnectionError, DLogError) as e:
            log.info("handshake with proxy %s failed: %s", endpoint, e)
            return False
        for stream, owner in (info.success.ownerships or {}).items():
            with contextlib.suppress(DLogError):
                _, host, port = wire.parse_owner(owner)
                self.owners[stream] = f"{host}:{port}"
        return True

    async def close(self) -> None:
        self.closed = True
        conns, self._connections = self._connections, {}
        await asyncio.gather(*(c.close() for c in conns.values()))

    def _conn(self, endpoint: str) -> _Connection:
        conn = self._connections.get(endpoint)
        if conn is None:
            conn = self._connections[endpoint] = _Connection(endpoint, self.connect_timeout)
        return conn

    def _route(self, stream: str) -> str:
        owner = self.owners.get(stream)
        if owner is not None:
            return owner
        return self.hosts[zlib.crc32(stream.encode("utf-8")) % len(self.hosts)]

    # -- the retry loop ----------------------------------------------------------------
    async def _request(
        self,
        stream: str,
        method: str,
        make_args: Callable[[Any], Any],
        *,
        repeatable: bool,
    ) -> Any:
        """Send ``method`` for ``stream`` to its owner, following FOUND and
        moving past proxies that cannot take it. Returns the response
        struct whose header is SUCCESS; raises the error any other reports."""
        if self.closed:
            raise ServiceUnavailableError("the proxy client is closed")
        loop = asyncio.get_running_loop()
        deadline = loop.time() + self.timeout
        tried: set[str] = set()
        endpoint = self._route(stream)
        redirects = 0
        backoff = 0.05
        last: Exception | None = None
        while True:
            ctx = T.WriteContext(triedHosts=set(tried) or None)
            try:
                remaining = deadline - loop.time()
                if remaining <= 0:
                    raise TimeoutError
                async with asyncio.timeout(remaining):
                    response = await self._conn(endpoint).call(method, make_args(ctx))
            except TimeoutError:
                raise ServiceUnavailableError(
                    f"{method} of stream {stream!r} did not complete within {self.timeout:g}s"
                    + (f"; last error: {last}" if last else "")
                ) from None
            except _NotSent as e:
                last = e
                response = None
            except ConnectionError as e:
                if not repeatable:
                    raise WriteOutcomeUnknownError(
                        f"{method} to stream {stream!r}: {e}; the write may or may not have "
                        "been made (not retried, so as never to write it twice)"
                    ) from None
                last = e
                response = None
            if response is not None:
                header = response.success.header
                if header.code == _CODES.SUCCESS:
                    self.owners[stream] = endpoint
                    return response.success
                if header.code == _CODES.FOUND and header.location:
                    with contextlib.suppress(DLogError):
                        _, host, port = wire.parse_owner(header.location)
                        owner = f"{host}:{port}"
                        redirects += 1
                        if owner not in tried and redirects <= self.max_redirects:
                            self.owners[stream] = owner
                            endpoint = owner
                            continue
                    last = error_for(header)
                elif header.code in _AGAIN:
                    last = error_for(header)
                    await asyncio.sleep(min(backoff, max(0.0, deadline - loop.time())))
                    backoff = min(backoff * 2, 1.0)
                    continue
                elif header.code not in _ELSEWHERE:
                    raise error_for(header)
                else:
                    last = error_for(header)
            # Not taken there: remember it, and ask the next proxy.
            tried.add(endpoint)
            if self.owners.get(stream) == endpoint:
                del self.owners[stream]
            candidates = [h for h in self.hosts if h not in tried]
            if candidates:
                endpoint = random.choice(candidates)
                continue
            # Every proxy said no: wait a little and go round again, still
            # telling them whom we tried.
            await asyncio.sleep(min(backoff, max(0.0, deadline - loop.time())))
            backoff = min(backoff * 2, 1.0)
            endpoint = random.choice(self.hosts)
            redirects = 0

    # -- the API --------------------------------------------------------------------------
    async def write(self, stream: str, data: bytes) -> DLSN:
        """Write one record; its DLSN once durable. The request carries the
        CRC32 DistributedLog checks."""
        crc = wire.write_crc32(stream, data)

        def args(ctx: Any) -> Any:
            ctx.crc32 = crc
            return wire.service.writeWithContext_args(stream=stream, data=data, ctx=ctx)

        response = await self._request(stream, "writeWithContext", args, repeatable=False)
        return DLSN.deserialize(response.dlsn)

    async def write_bulk(self, stream: str, records: Sequence[bytes]) -> list[DLSN]:
        """Write ``records`` in order, in one request; their DLSNs. If some
        failed, BulkWriteError has each record's DLSN or error."""
        data = list(records)
        if not data:
            return []
        response = await self._request(
            stream,
            "writeBulkWithContext",
            lambda ctx: wire.service.writeBulkWithContext_args(stream=stream, data=data, ctx=ctx),
            repeatable=False,
        )
        results: list[DLSN | LogError] = [
            DLSN.deserialize(r.dlsn) if r.header.code == _CODES.SUCCESS else error_for(r.header)
            for r in response.writeResponses or []
        ]
        if len(results) != len(data):
            raise LogError(
                f"the proxy answered {len(results)} results for a bulk of {len(data)} records"
            )
        failed = [r for r in results if isinstance(r, LogError)]
        if failed:
            raise BulkWriteError(
                f"{len(failed)} of {len(data)} records failed, the first with: {failed[0]}",
                results,
            )
        return results  # type: ignore[return-value]

    async def heartbeat(self, stream: str, *, to_readers: bool = False) -> DLSN | None:
        """Check the stream is owned and writable; with ``to_readers``,
        write a control record readers see; its DLSN."""
        crc = wire.stream_crc32(stream)

        def args(ctx: Any) -> Any:
            ctx.crc32 = crc
            return wire.service.heartbeatWithOptions_args(
                stream=stream, ctx=ctx, options=T.HeartbeatOptions(sendHeartBeatToReader=to_readers)
            )

        response = await self._request(stream, "heartbeatWithOptions", args, repeatable=True)
        return DLSN.deserialize(response.dlsn) if response.dlsn else None

    async def truncate(self, stream: str, dlsn: DLSN) -> None:
        """Delete the stream's segments wholly before ``dlsn``."""
        crc = wire.truncate_crc32(stream, dlsn)
        text = dlsn.serialize()

        def args(ctx: Any) -> Any:
            ctx.crc32 = crc
            return wire.service.truncate_args(stream=stream, dlsn=text, ctx=ctx)

        await self._request(stream, "truncate", args, repeatable=True)

    async def _stream_op(self, stream: str, method: str) -> None:
        crc = wire.stream_crc32(stream)
        cls = getattr(wire.service, f"{method}_args")

        def args(ctx: Any) -> Any:
            ctx.crc32 = crc
            return cls(stream=stream, ctx=ctx)

        await self._request(stream, method, args, repeatable=True)

    async def release(self, stream: str) -> None:
        """Ask the owner to flush, close and give up the stream."""
        await self._stream_op(stream, "release")
        self.owners.pop(stream, None)

    async def create(self, stream: str) -> None:
        """Create the stream (LogExistsError if it exists)."""
        await self._stream_op(stream, "create")

    async def delete(self, stream: str) -> None:
        """Delete the stream and its data."""
        await self._stream_op(stream, wire.DELETE)
        self.owners.pop(stream, None)
