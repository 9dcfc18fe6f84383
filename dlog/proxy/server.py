"""``dlog proxy``: DistributedLog's write proxy service.

Serves ``DistributedLogService`` (thrift, framed transport, binary
protocol: :mod:`dlog.proxy.protocol`) on asyncio TCP, in front of a
:class:`~dlog.namespace.Namespace`. Ownership, limits and writing live in
:mod:`dlog.proxy.streams`; this module moves frames and turns outcomes
into ``ResponseHeader`` status codes.

A connection may pipeline requests: each is handled as it arrives and the
answers go back in request order (finagle's thrift clients expect that).
A frame that is not a well-formed call (a length past
``server_max_frame_bytes``, garbage, a truncated message) closes that one
connection; the proxy goes on serving every other.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import re
import socket
from collections.abc import Awaitable, Callable
from typing import Any

from dlog.dlsn import DLSN
from dlog.errors import (
    ChecksumFailedError,
    DLogError,
    LogNotFoundError,
    OwnershipAcquireFailedError,
    StreamUnavailableError,
    ThriftProtocolError,
)
from dlog.lock import DistributedLock
from dlog.namespace import Namespace
from dlog.proxy import protocol as wire
from dlog.proxy.streams import OwnedStream, ProxyMetrics, StreamManager, host_port

log = logging.getLogger(__name__)

T = wire.thrift
SUCCESS = T.StatusCode.SUCCESS
_STATUS_CODES = frozenset(T.StatusCode._VALUES_TO_NAMES)
#: Requests read ahead of their answers on one connection.
PIPELINE_DEPTH = 256
_UNKNOWN_METHOD = 1  # TApplicationException.UNKNOWN_METHOD
_INTERNAL_ERROR = 6


def header_for(error: BaseException) -> Any:
    """The ResponseHeader that reports ``error``."""
    if isinstance(error, OwnershipAcquireFailedError) and error.owner is not None:
        return T.ResponseHeader(code=T.StatusCode.FOUND, errMsg=str(error), location=error.owner)
    if isinstance(error, DLogError):
        code = error.code if error.code in _STATUS_CODES else T.StatusCode.INTERNAL_SERVER_ERROR
        if error.code < 0:  # a BookKeeper error under the writer
            code = T.StatusCode.BK_TRANSMIT_ERROR
        return T.ResponseHeader(code=code, errMsg=str(error))
    return T.ResponseHeader(
        code=T.StatusCode.INTERNAL_SERVER_ERROR, errMsg=f"{type(error).__name__}: {error}"
    )


def _ok(dlsn: DLSN | None = None, location: str | None = None) -> Any:
    return T.WriteResponse(
        header=T.ResponseHeader(code=SUCCESS, location=location),
        dlsn=None if dlsn is None else dlsn.serialize(),
    )


def _check_crc(ctx: Any, expected: Callable[[], int], what: str) -> None:
    if ctx is not None and ctx.crc32 is not None and ctx.crc32 != expected():
        raise ChecksumFailedError(f"crc32 {ctx.crc32} does not match the {what}")


def _check_stream_crc(ctx: Any, stream: str) -> None:
    _check_crc(ctx, lambda: wire.stream_crc32(stream), "stream name")


def _owned_by(stream: str, holder: str) -> OwnershipAcquireFailedError:
    return OwnershipAcquireFailedError(f"stream {stream!r} is owned by {holder}", owner=holder)


def _tried(ctx: Any) -> tuple[str, ...]:
    return tuple(ctx.triedHosts) if ctx is not None and ctx.triedHosts else ()


class ProxyServer:
    """One write proxy. ``await start()``, then ``await stop()``."""

    def __init__(
        self,
        namespace: Namespace,
        *,
        host: str = "127.0.0.1",
        port: int | None = None,
        advertised_host: str | None = None,
        metrics: ProxyMetrics | None = None,
    ) -> None:
        conf = namespace.conf
        self.namespace = namespace
        self.host = host
        self.port = conf.server_port if port is None else port
        self.shard = conf.server_shard
        self.max_frame = conf.server_max_frame_bytes
        self.graceful_shutdown = conf.server_graceful_shutdown_period_ms / 1000.0
        self.advertised_host = advertised_host or _advertised(host)
        self.metrics = metrics or ProxyMetrics()
        self.address = ""
        self.streams: StreamManager | None = None
        self.status = T.ServerStatus.WRITE_AND_ACCEPT
        self._status_listeners: list[Callable[[int], None]] = []
        self._server: asyncio.Server | None = None
        self._connections: set[asyncio.Task[None]] = set()
        self._handlers: dict[str, Callable[..., Awaitable[Any]]] = {
            "handshake": self.handshake,
            "handshakeWithClientInfo": self.handshakeWithClientInfo,
            "heartbeat": self.heartbeat,
            "heartbeatWithOptions": self.heartbeatWithOptions,
            "write": self.write,
            "writeWithContext": self.writeWithContext,
            "writeBulkWithContext": self.writeBulkWithContext,
            "truncate": self.truncate,
            "release": self.release,
            "create": self.create,
            wire.DELETE: self.delete,
            "getOwner": self.getOwner,
            "setAcceptNewStream": self.setAcceptNewStream,
        }

    # -- lifecycle ------------------------------------------------------------------
    async def start(self) -> None:
        self._server = await asyncio.start_server(
            self._serve, self.host, self.port, limit=2**20, reuse_address=True
        )
        self.port = self._server.sockets[0].getsockname()[1]
        self.address = wire.format_owner(self.advertised_host, self.port, self.shard)
        self.streams = StreamManager(self.namespace, self.address, metrics=self.metrics)
        log.info("write proxy %s serving on %s:%d", self.address, self.host, self.port)

    @property
    def endpoint(self) -> str:
        """``host:port`` clients connect to."""
        return f"{self.advertised_host}:{self.port}"

    def on_status(self, listener: Callable[[int], None]) -> None:
        """Called with the new ServerStatus whenever it changes."""
        self._status_listeners.append(listener)

    def _set_status(self, status: int) -> None:
        if status != self.status:
            self.status = status
            log.info(
                "write proxy %s is now %s", self.address, T.ServerStatus._VALUES_TO_NAMES[status]
            )
            for listener in self._status_listeners:
                listener(status)

    async def stop(self) -> None:
        """Stop taking streams, wait ``server_graceful_shutdown_period_ms``
        (clients move away), then flush and release every stream."""
        if self.status == T.ServerStatus.DOWN:
            return
        self._set_status(T.ServerStatus.DOWN)
        if self.streams is not None:
            self.streams.accepting = False
        if self.graceful_shutdown > 0:
            await asyncio.sleep(self.graceful_shutdown)
        if self._server is not None:
            self._server.close()
        if self.streams is not None:
            await self.streams.close()
        for task in list(self._connections):
            task.cancel()
        await asyncio.gather(*self._connections, return_exceptions=True)
        if self._server is not None:
            await self._server.wait_closed()

    # -- connections ----------------------------------------------------------------
    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        task = asyncio.current_task()
        assert task is not None
        self._connections.add(task)
        peer = writer.get_extra_info("peername")
        answers: asyncio.Queue[asyncio.Future[bytes | None] | None] = asyncio.Queue(PIPELINE_DEPTH)
        sender = asyncio.create_task(self._send_answers(answers, writer))
        try:
            while True:
                try:
                    header = await reader.readexactly(4)
                except (asyncio.IncompleteReadError, ConnectionError):
                    break
                (size,) = wire.FRAME_HEADER.unpack(header)
                if size <= 0 or size > self.max_frame:
                    log.warning(
                        "proxy: closing the connection from %s: a frame of %d bytes "
                        "(server_max_frame_bytes=%d); is it speaking framed thrift?",
                        peer,
                        size,
                        self.max_frame,
                    )
                    break
                try:
                    payload = await reader.readexactly(size)
                except (asyncio.IncompleteReadError, ConnectionError):
                    break
                try:
                    call = wire.decode_call(payload)
                except ThriftProtocolError as e:
                    log.warning("proxy: closing the connection from %s: %s", peer, e)
                    break
                await answers.put(asyncio.ensure_future(self._answer(call)))
        except asyncio.CancelledError:
            pass
        finally:
            with contextlib.suppress(asyncio.CancelledError):
                await answers.put(None)
                await sender
            writer.close()
            with contextlib.suppress(Exception, asyncio.CancelledError):
                await writer.wait_closed()
            self._connections.discard(task)

    @staticmethod
    async def _send_answers(
        answers: asyncio.Queue[asyncio.Future[bytes | None] | None], writer: asyncio.StreamWriter
    ) -> None:
        try:
            while (answer := await answers.get()) is not None:
                frame = await answer
                if frame is not None:
                    writer.write(frame)
                    if answers.empty():
                        await writer.drain()
        except (ConnectionError, asyncio.CancelledError):
            pass

    async def _answer(self, call: wire.Call) -> bytes | None:
        if call.args is None:
            return wire.encode_exception(
                call.name, call.seqid, _UNKNOWN_METHOD, f"unknown method {call.name!r}"
            )
        handler = self._handlers[call.name]
        result = getattr(wire.service, f"{call.name}_result")()
        try:
            args = [getattr(call.args, spec[1]) for spec in call.args.thrift_spec.values()]
            try:
                success = await handler(*args)
            except DLogError as e:
                # A WriteResponse or BulkWriteResponse carries the error in
                # its header; other answers (ServerInfo, void) cannot.
                response = result.thrift_spec.get(0, (None, None, None))[2]
                if response not in (T.WriteResponse, T.BulkWriteResponse):
                    raise
                success = response(header=header_for(e))
        except Exception as e:
            log.exception("proxy: %s failed", call.name)
            return wire.encode_exception(call.name, call.seqid, _INTERNAL_ERROR, str(e))
        if 0 in result.thrift_spec:  # not a void method
            result.success = success
            header = getattr(success, "header", None)
            if header is not None:
                self.metrics.responses.labels(method=call.name, code=str(header.code)).inc()
            if call.name == "writeBulkWithContext" and success.writeResponses is not None:
                # Successful records are their serialized DLSNs here.
                return wire.encode_bulk_write_reply(
                    call.seqid, success.header, success.writeResponses
                )
        return wire.encode_reply(call.name, call.seqid, result)

    # -- the service ------------------------------------------------------------------
    def _streams(self) -> StreamManager:
        assert self.streams is not None, "start() the proxy first"
        return self.streams

    async def _owned(self, stream: str, ctx: Any) -> OwnedStream:
        return await self._streams().acquire(stream, _tried(ctx))

    async def handshake(self) -> Any:
        return await self.handshakeWithClientInfo(None)

    async def handshakeWithClientInfo(self, client_info: Any) -> Any:
        info = T.ServerInfo(serverStatus=self.status)
        if client_info is not None and client_info.getOwnerships is False:
            return info
        owned = self._streams().owned()
        if client_info is not None and client_info.streamNameRegex:
            try:
                pattern = re.compile(client_info.streamNameRegex)
            except re.error as e:
                raise ValueError(f"streamNameRegex: {e}") from None
            owned = {k: v for k, v in owned.items() if pattern.fullmatch(k)}
        info.ownerships = owned
        return info

    async def heartbeat(self, stream: str, ctx: Any) -> Any:
        return await self.heartbeatWithOptions(stream, ctx, None)

    async def heartbeatWithOptions(self, stream: str, ctx: Any, options: Any) -> Any:
        _check_stream_crc(ctx, stream)
        owned = await self._owned(stream, ctx)
        to_readers = bool(options is not None and options.sendHeartBeatToReader)
        return _ok(await self._streams().heartbeat(owned, to_readers=to_readers))

    async def write(self, stream: str, data: bytes) -> Any:
        return await self.writeWithContext(stream, data, None)

    async def writeWithContext(self, stream: str, data: bytes, ctx: Any) -> Any:
        data = data or b""
        _check_crc(ctx, lambda: wire.write_crc32(stream, data), "stream name and record")
        owned = await self._owned(stream, ctx)
        record_set = bool(ctx is not None and ctx.isRecordSet)
        written, error = await self._streams().write(owned, [data], record_set=record_set)
        if error is not None and not written:
            raise error
        return _ok(written[0])

    async def writeBulkWithContext(self, stream: str, data: list[bytes] | None, ctx: Any) -> Any:
        # WriteContext.crc32 is not defined over a bulk (DistributedLog
        # checks it for single writes only).
        owned = await self._owned(stream, ctx)
        record_set = bool(ctx is not None and ctx.isRecordSet)
        records = data or []
        written, error = await self._streams().write(owned, records, record_set=record_set)
        if error is not None and not written:
            raise error  # nothing was written: the failure is the request's
        # A successful record's response is its serialized DLSN (the reply
        # is encoded by wire.encode_bulk_write_reply); those after the last
        # acknowledged one failed with the writer.
        responses: list[Any] = written.serialized()
        if error is not None:
            responses += [T.WriteResponse(header=header_for(error))] * (len(records) - len(written))
        return T.BulkWriteResponse(header=T.ResponseHeader(code=SUCCESS), writeResponses=responses)

    async def truncate(self, stream: str, dlsn: str, ctx: Any) -> Any:
        position = DLSN.deserialize(dlsn or "")
        _check_crc(ctx, lambda: wire.truncate_crc32(stream, position), "stream name and DLSN")
        owned = await self._owned(stream, ctx)
        await self._streams().truncate(owned, position)
        return _ok()

    async def release(self, stream: str, ctx: Any) -> Any:
        _check_stream_crc(ctx, stream)
        if not await self._streams().release(stream):
            holder = await self._holder(stream)
            if holder is not None:  # owned by another proxy: it must release
                raise _owned_by(stream, holder)
        return _ok()

    async def create(self, stream: str, ctx: Any) -> Any:
        _check_stream_crc(ctx, stream)
        await self._streams().create(stream)
        return _ok()

    async def delete(self, stream: str, ctx: Any) -> Any:
        _check_stream_crc(ctx, stream)
        owned = await self._owned(stream, ctx)
        await self._streams().delete(owned)
        return _ok()

    async def getOwner(self, stream: str, ctx: Any) -> Any:
        _check_stream_crc(ctx, stream)
        if self._streams().owns(stream):
            return _ok(location=self.address)
        if not await self.namespace.log_exists(stream):
            raise LogNotFoundError(f"stream {stream!r} does not exist")
        holder = await self._holder(stream)
        if holder is None:
            raise StreamUnavailableError(f"no proxy owns stream {stream!r}")
        raise _owned_by(stream, holder)

    async def _holder(self, stream: str) -> str | None:
        """The address of the other proxy holding ``stream``'s lock, if one does."""
        if not await self.namespace.log_exists(stream):
            return None
        lm = await self.namespace.open_log(stream)
        holder = await DistributedLock.holder(self.namespace.zk, lm.context.paths.lock)
        if holder is None or holder == self.address or host_port(holder) is None:
            return None
        return holder

    async def setAcceptNewStream(self, enabled: bool) -> None:
        if self.status == T.ServerStatus.DOWN:
            return
        self._streams().accepting = bool(enabled)
        self._set_status(T.ServerStatus.WRITE_AND_ACCEPT if enabled else T.ServerStatus.WRITE_ONLY)


def _advertised(host: str) -> str:
    """The address other proxies and clients reach this one at."""
    if host in ("", "0.0.0.0", "::"):
        return socket.gethostbyname(socket.gethostname())
    return host
