"""Which streams this write proxy owns, and writing to them.

A proxy owns a stream by holding the stream's writer lock, its lock node
naming the proxy's address (``1;<shard>;<host>:<port>``). Invariants:

- **One owner.** A stream is written here only through a writer that holds
  its lock; a request for a stream locked by another proxy is answered with
  that proxy's address (``FOUND``), never written.
- **Acquire on demand.** The first request for an unowned stream takes the
  lock at once (no waiting) or learns the owner. When the client says it
  already tried the owner (``triedHosts``), the proxy waits up to
  ``lockTimeoutSeconds`` for the lock instead: that is how a stream whose
  owner died moves here once the owner's ZooKeeper session expires.
- **A failed writer is dropped.** Whatever failed it (its lock lost, its
  segment fenced, a segment roll that found too few bookies), a writer that
  failed writes nothing more: the proxy closes it, releasing the lock, and
  the next request acquires the stream again (recovering the segment) or
  learns the new owner. A failed writer is never kept as the owner.
- **Bounded.** At most ``maxAcquiredPartitionsPerProxy`` owned streams, and
  at most ``perWriterOutstandingWriteLimit`` records in flight per stream
  (``globalOutstandingWriteLimit`` across streams). A request that would go
  past a limit is refused whole (``OVER_CAPACITY``), before any of its records
  is written, unless ``outstandingWriteLimitDarkmode`` only counts it.
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
import time
from collections.abc import Sequence

from prometheus_client import CollectorRegistry, Counter, Gauge

from dlog.dlsn import DLSN
from dlog.errors import (
    DLogError,
    LockingError,
    LogExistsError,
    OverCapacityError,
    OwnershipAcquireFailedError,
    ServiceUnavailableError,
    StreamUnavailableError,
    TooManyStreamsError,
)
from dlog.lock import DistributedLock
from dlog.namespace import Namespace
from dlog.proxy.protocol import parse_owner
from dlog.record import CONTROL_RECORD_PAYLOAD, LogRecord
from dlog.writer import BulkOutcome, LogWriter

log = logging.getLogger(__name__)


@dataclasses.dataclass(eq=False)
class _Queue:
    lock: asyncio.Lock = dataclasses.field(default_factory=asyncio.Lock)
    waiting: int = 0


@dataclasses.dataclass(eq=False)
class OwnedStream:
    name: str
    writer: LogWriter
    outstanding: int = 0
    acquired_at: float = dataclasses.field(default_factory=time.time)


class ProxyMetrics:
    def __init__(self, registry: CollectorRegistry | None = None) -> None:
        r = self.registry = registry or CollectorRegistry()
        self.owned = Gauge("proxy_owned_streams", "Streams this proxy owns.", registry=r)
        self.outstanding = Gauge(
            "proxy_outstanding_writes", "Records accepted and not yet durable.", registry=r
        )
        self.records = Counter(
            "proxy_records_written", "Records written through this proxy.", registry=r
        )
        self.redirects = Counter(
            "proxy_redirects", "Requests answered FOUND (owned by another proxy).", registry=r
        )
        self.over_capacity = Counter(
            "proxy_over_capacity",
            "Requests past an outstanding-write limit (dark: counted, not refused).",
            ["dark"],
            registry=r,
        )
        self.responses = Counter(
            "proxy_responses",
            "Responses by method and status code.",
            ["method", "code"],
            registry=r,
        )


def _usable(owned: OwnedStream) -> bool:
    return not owned.writer.is_closed and owned.writer.error is None


def _why_unusable(owned: OwnedStream) -> str:
    error = owned.writer.error
    return "its writer closed" if error is None else f"its writer failed: {error}"


def host_port(owner: str) -> str | None:
    """``host:port`` of a proxy address, or None if ``owner`` is not one
    (the lock is held by a plain dlog writer)."""
    try:
        _, host, port = parse_owner(owner)
    except DLogError:
        return None
    return f"{host}:{port}"


class StreamManager:
    """The streams one proxy owns (see the module docstring)."""

    def __init__(
        self,
        namespace: Namespace,
        address: str,
        *,
        metrics: ProxyMetrics | None = None,
    ) -> None:
        conf = namespace.conf
        self.namespace = namespace
        self.address = address
        self.endpoint = host_port(address) or address
        self.metrics = metrics or ProxyMetrics()
        self.max_streams = conf.max_acquired_partitions_per_proxy
        self.per_stream_limit = conf.per_writer_outstanding_write_limit
        self.global_limit = conf.global_outstanding_write_limit
        self.dark = conf.outstanding_write_limit_darkmode
        self.lock_timeout = float(conf.lock_timeout_seconds)
        self.accepting = True
        self.closed = False
        self._streams: dict[str, OwnedStream] = {}
        #: Streams some request is acquiring: later requests queue behind it.
        self._acquiring: dict[str, _Queue] = {}
        #: stream -> the close of its failed writer, under way. A new writer
        #: waits for it: until then this proxy's own old lock node is there.
        self._closing: dict[str, asyncio.Task[None]] = {}
        self._outstanding = 0

    # -- ownership ----------------------------------------------------------------
    def owned(self) -> dict[str, str]:
        """stream -> this proxy's address, for every stream it owns."""
        return {name: self.address for name in self._streams}

    def outstanding_by_stream(self) -> dict[str, int]:
        """stream -> records accepted and not yet durable, for every owned stream."""
        return {name: o.outstanding for name, o in self._streams.items()}

    def owns(self, stream: str) -> bool:
        return stream in self._streams

    async def acquire(self, stream: str, tried_hosts: Sequence[str] = ()) -> OwnedStream:
        """The stream, owned here: OwnershipAcquireFailedError (with the
        owner) if another proxy holds it."""
        owned = self._streams.get(stream)
        if owned is not None and _usable(owned) and stream not in self._acquiring:
            return owned
        # Requests for a stream being acquired go through one at a time in
        # arrival order (asyncio.Lock is FIFO), each returning to write
        # before the next is let in: a client's pipelined writes are
        # written in the order it sent them, as DistributedLog's proxy
        # queues a stream's operations while it acquires it.
        queue = self._acquiring.get(stream)
        if queue is None:
            queue = self._acquiring[stream] = _Queue()
        queue.waiting += 1
        try:
            async with queue.lock:
                owned = self._streams.get(stream)
                if owned is not None and _usable(owned):
                    return owned
                return await self._acquire(stream, tried_hosts)
        finally:
            queue.waiting -= 1
            if not queue.waiting:
                del self._acquiring[stream]

    async def _acquire(self, stream: str, tried_hosts: Sequence[str]) -> OwnedStream:
        owned = self._streams.get(stream)
        if owned is not None:
            if _usable(owned):
                return owned
            self._lost(owned)  # failed with no write to notice it
        closing = self._closing.get(stream)
        if closing is not None:
            await asyncio.shield(closing)
        if self.closed:
            raise ServiceUnavailableError(f"proxy {self.address} is shutting down")
        if not self.accepting:
            raise ServiceUnavailableError(
                f"proxy {self.address} accepts no new streams (setAcceptNewStream false)"
            )
        if 0 <= self.max_streams <= len(self._streams):
            raise TooManyStreamsError(
                f"proxy {self.address} owns {len(self._streams)} streams, the most it may "
                f"(maxAcquiredPartitionsPerProxy={self.max_streams})"
            )
        lm = await self.namespace.open_log(stream)
        timeout = 0.0
        if tried_hosts:
            holder = await DistributedLock.holder(self.namespace.zk, lm.context.paths.lock)
            if holder is not None and host_port(holder) in tried_hosts:
                # The client could not reach the owner: wait for its session
                # to expire rather than send the client back to it.
                timeout = self.lock_timeout
        try:
            writer = await lm.open_writer(owner=self.address, lock_timeout=timeout)
        except OwnershipAcquireFailedError as e:
            self.metrics.redirects.inc()
            if e.owner is not None and host_port(e.owner) is None:
                raise LockingError(
                    f"stream {stream!r} is held by a writer that is not a proxy: {e.owner}"
                ) from None
            raise
        if self.closed or not self.accepting:
            await writer.close()
            raise ServiceUnavailableError(f"proxy {self.address} stopped accepting streams")
        owned = OwnedStream(stream, writer)
        self._streams[stream] = owned
        self.metrics.owned.set(len(self._streams))
        log.info("proxy %s owns stream %r", self.address, stream)
        return owned

    async def release(self, stream: str) -> bool:
        """Flush, close the writer and release the lock; False if not owned here."""
        owned = self._streams.get(stream)
        if owned is None:
            return False
        await self._drop(owned, "released")
        return True

    def _forget(self, owned: OwnedStream, why: str) -> None:
        if self._streams.get(owned.name) is owned:
            del self._streams[owned.name]
            self.metrics.owned.set(len(self._streams))
            log.info("proxy %s gives up stream %r: %s", self.address, owned.name, why)

    async def _drop(self, owned: OwnedStream, why: str) -> None:
        self._forget(owned, why)
        try:
            await owned.writer.close()
        except DLogError as e:
            log.warning("closing the writer of %r: %s", owned.name, e)

    def _lost(self, owned: OwnedStream) -> None:
        """If ``owned``'s writer failed (a write or an acquisition noticed),
        forget it now (the next request acquires again) and close it in the
        background, releasing the lock; a new writer waits for that close."""
        if _usable(owned) or self._streams.get(owned.name) is not owned:
            return
        self._forget(owned, _why_unusable(owned))
        task = asyncio.get_running_loop().create_task(self._drop(owned, "failed"))
        self._closing[owned.name] = task
        task.add_done_callback(lambda _: self._closing.pop(owned.name, None))

    # -- writing --------------------------------------------------------------------
    def _admit(self, owned: OwnedStream, n: int) -> None:
        over_stream = 0 <= self.per_stream_limit < owned.outstanding + n
        over_global = 0 <= self.global_limit < self._outstanding + n
        if not (over_stream or over_global):
            return
        self.metrics.over_capacity.labels(dark=str(self.dark).lower()).inc()
        if self.dark:
            return
        if over_stream:
            raise OverCapacityError(
                f"stream {owned.name!r} has {owned.outstanding} writes outstanding; "
                f"{n} more exceed perWriterOutstandingWriteLimit={self.per_stream_limit}"
            )
        raise OverCapacityError(
            f"proxy has {self._outstanding} writes outstanding; {n} more exceed "
            f"globalOutstandingWriteLimit={self.global_limit}"
        )

    def _txid(self, owned: OwnedStream) -> int:
        """DistributedLog's time sequencer: wall-clock ms, never going back."""
        return max(owned.writer.last_txid, int(time.time() * 1000))

    async def write(
        self, owned: OwnedStream, payloads: Sequence[bytes], *, record_set: bool = False
    ) -> BulkOutcome:
        """Write ``payloads`` in order: the DLSNs of those acknowledged (a
        prefix) and the error the others failed with (None if none did).
        Raises (writing nothing) when the request is refused as a whole."""
        if owned.writer.is_closed or self._streams.get(owned.name) is not owned:
            raise StreamUnavailableError(f"stream {owned.name!r} is no longer owned here")
        n = len(payloads)
        self._admit(owned, n)
        txid = self._txid(owned)
        # Built first: a record that is too large refuses the whole request.
        records = [LogRecord(txid, p, record_set=record_set) for p in payloads]
        try:
            # One future for the whole request, not one per record.
            future = owned.writer.write_bulk_outcome_nowait(records)
        except DLogError:
            # The writer had failed (or lost the stream): nothing was taken.
            self._lost(owned)
            raise
        owned.outstanding += n
        self._outstanding += n
        self.metrics.outstanding.set(self._outstanding)
        try:
            # Waited for, not awaited: a request given up on (its client
            # gone) must not cancel the writer's future.
            await asyncio.wait((future,))
        finally:
            owned.outstanding -= n
            self._outstanding -= n
            self.metrics.outstanding.set(self._outstanding)
        outcome: BulkOutcome = future.result()
        self.metrics.records.inc(len(outcome.written))
        if outcome.error is not None:
            self._lost(owned)
        return outcome

    async def heartbeat(self, owned: OwnedStream, *, to_readers: bool) -> DLSN | None:
        """With ``to_readers``, a control record readers skip but whose
        arrival tells them the stream is alive; its DLSN."""
        if not to_readers:
            return None
        record = LogRecord(self._txid(owned), CONTROL_RECORD_PAYLOAD, control=True)
        return await owned.writer.write(record)

    async def truncate(self, owned: OwnedStream, dlsn: DLSN) -> bool:
        return await owned.writer.truncate(dlsn)

    async def create(self, stream: str) -> None:
        """Create the stream's metadata; LogExistsError if it exists."""
        if await self.namespace.log_exists(stream):
            raise LogExistsError(f"stream {stream!r} already exists")
        await self.namespace.create_log(stream)

    async def delete(self, owned: OwnedStream) -> None:
        """Delete a stream owned here: its writer first, then its data."""
        await self._drop(owned, "deleted")
        await self.namespace.delete_log(owned.name)

    # -- lifecycle ------------------------------------------------------------------
    async def close(self) -> None:
        """Release every stream (flushing what was accepted)."""
        self.closed = True
        owned = list(self._streams.values())
        await asyncio.gather(*(self._drop(o, "the proxy is stopping") for o in owned))
        if self._closing:
            await asyncio.wait(list(self._closing.values()))
