"""Blocking twins of the log API, for scripts, REPLs, threads and Spark.

The same names as the asyncio API, minus the ``await``::

    from dlog.sync import Namespace
    from dlog.record import LogRecord

    with Namespace.open("distributedlog://127.0.0.1:2181/messaging") as ns:
        log = ns.open_log("events")
        with log.open_writer() as writer:
            dlsn = writer.write(LogRecord(1, b"hello"))
            futures = [writer.write_nowait(LogRecord(i, b"x")) for i in range(2, 1000)]
            writer.flush()                      # or f.result() on each future
        with log.open_reader() as reader:
            for record in reader:               # tails; stops at end of stream
                print(record.dlsn, record.payload)
        with log.subscribe("billing") as consumer:  # resumes after its last commit
            for record in consumer:             # tails; stops at end of stream
                handle(record)
                consumer.commit(record)         # durable on return
        log.subscriptions.describe("billing")   # the store: acquire, reset_position ...

``Namespace.open`` opens an existing namespace; ``Namespace.create(uri)``
(or ``dlog namespace create URI``) creates one, as in DistributedLog.

Every object runs its async twin on one event loop in a background thread
(:func:`dlog.loop_thread.default_loop_thread`, or the ``loop_thread`` given
to :meth:`SyncNamespace.open`); the async object is there as ``.namespace``,
``.log``, ``.writer``, ``.reader``, ``.consumer`` or ``.store``. Each class
is declared as the twin of its async class with :mod:`dlog.blocking`, so it
has every public method of it, same names and parameters
(tests/unit/test_sync_twins.py checks it by introspection).

Threads: every method may be called from any thread, several at once (each
call hops to the loop thread, where the async objects live). Records a
thread writes keep that thread's order; :meth:`SyncLogWriter.write_nowait`
returns a :class:`concurrent.futures.Future` at once and ships queued
records to the loop in batches, so one thread can keep thousands in flight.

Processes: open the namespace in each process. A child started with
``spawn`` or ``forkserver`` starts its own loop thread; so does a child made
by ``fork`` (the inherited loop thread is detected by its pid), but objects
opened before the fork belong to the parent and fail with RuntimeError in
the child. They cannot be pickled: send the URI and settings instead.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextvars
import functools
import threading
import time
from collections import deque
from collections.abc import Awaitable, Callable, Coroutine, Iterable, Iterator, Mapping
from typing import Any, ClassVar, Protocol, TypeVar

from dlog.blocking import ClosingTwin, Twin, blocking, nowait
from dlog.conf.dlog import DLogConfig
from dlog.dlsn import DLSN
from dlog.errors import DLogError, EndOfStreamError, IllegalStateError, ReadCancelledError
from dlog.log import LogManager
from dlog.loop_thread import LoopThread, default_loop_thread, wait
from dlog.namespace import Namespace as AsyncNamespace
from dlog.reader import LogReader
from dlog.record import LogRecord, LogRecordWithDLSN
from dlog.writer import BulkOutcome, LogWriter
from subscriptions.consumer import Consumer
from subscriptions.store import SubscriptionsStore

__all__ = [
    "Namespace",
    "SyncConsumer",
    "SyncLogManager",
    "SyncLogReader",
    "SyncLogWriter",
    "SyncNamespace",
    "SyncSubscriptionsStore",
]

T = TypeVar("T")

#: Records a sync reader takes from its async reader per hop to the loop.
READ_BATCH = 1024


# ---------------------------------------------------------------------------
# writer
# ---------------------------------------------------------------------------


def _settle(target: concurrent.futures.Future[DLSN], source: asyncio.Future[DLSN]) -> None:
    try:
        if source.cancelled():
            target.set_exception(concurrent.futures.CancelledError())
            return
        exc = source.exception()
        if exc is not None:
            target.set_exception(exc)
        else:
            target.set_result(source.result())
    except concurrent.futures.InvalidStateError:
        pass  # the caller cancelled its future meanwhile


def _settle_error(target: concurrent.futures.Future[DLSN], error: BaseException) -> None:
    try:
        target.set_exception(error)
    except concurrent.futures.InvalidStateError:
        pass


class SyncLogWriter(ClosingTwin[LogWriter], wraps="writer"):
    """The stream's writer (see :class:`dlog.writer.LogWriter`).

    ``write_nowait`` queues the record and returns a concurrent Future; the
    queue is handed to the loop in batches (one wake-up per batch, not per
    record). ``write``, ``write_bulk``, ``flush``, ``mark_end_of_stream``,
    ``truncate`` and ``close`` see every record queued before them, from any
    thread.
    """

    writer: LogWriter

    def __init__(self, writer: LogWriter, loop_thread: LoopThread) -> None:
        super().__init__(writer, loop_thread)
        self._pending: list[tuple[LogRecord, concurrent.futures.Future[DLSN]]] = []
        self._lock = threading.Lock()
        self._scheduled = False

    @property
    def name(self) -> str:
        return self.writer.name

    @property
    def last_txid(self) -> int:
        return self.writer.last_txid

    @property
    def last_dlsn(self) -> DLSN:
        """DLSN of the last record known durable."""
        return self.writer.last_dlsn

    @property
    def is_closed(self) -> bool:
        return self.writer.is_closed

    @property
    def error(self) -> DLogError | None:
        """Why the writer failed, or None (see :attr:`LogWriter.error`)."""
        return self.writer.error

    def __repr__(self) -> str:
        return f"SyncLogWriter({self.name!r})"

    # -- queueing -------------------------------------------------------------
    @staticmethod
    def _records(records: Iterable[LogRecord]) -> list[LogRecord]:
        """``records`` as a list, checked before any is queued: a TypeError
        names anything that is not a LogRecord."""
        batch = list(records)
        for record in batch:
            if not isinstance(record, LogRecord):
                raise TypeError(f"expected a LogRecord, got {type(record).__name__}")
        return batch

    def _enqueue(self, records: Iterable[LogRecord]) -> list[concurrent.futures.Future[DLSN]]:
        self._check_caller()
        batch: list[tuple[LogRecord, concurrent.futures.Future[DLSN]]] = [
            (record, concurrent.futures.Future()) for record in self._records(records)
        ]
        with self._lock:
            self._pending.extend(batch)
            if self._scheduled or not self._pending:
                return [f for _, f in batch]
            self._scheduled = True
        self._runner.loop.call_soon_threadsafe(self._submit)
        return [f for _, f in batch]

    def _submit(self) -> None:
        """On the loop: hand queued records to the async writer, in order."""
        with self._lock:
            batch, self._pending = self._pending, []
            self._scheduled = False
        write = self.writer.write_nowait
        ctx = contextvars.copy_context()  # once, not per add_done_callback
        for record, fut in batch:
            # A future cancelled meanwhile does not withdraw its record: a
            # log has no gaps. (No set_running_or_notify_cancel: it costs a
            # lock round trip per record.)
            try:
                source = write(record)
            except Exception as e:
                _settle_error(fut, e)
                continue
            source.add_done_callback(functools.partial(_settle, fut), context=ctx)

    async def _submitted(self, coro: Coroutine[Any, Any, T]) -> T:
        self._submit()
        return await coro

    def _run(self, coro: Coroutine[Any, Any, T]) -> T:
        """Every blocking call first hands the loop what was queued before it."""
        return super()._run(self._submitted(coro))

    # -- writing --------------------------------------------------------------
    def write_nowait(self, record: LogRecord) -> concurrent.futures.Future[DLSN]:
        """Queue ``record``; the future resolves to its DLSN once durable (or
        to the error: TransactionIdOutOfOrderError, WriteFencedError ...).
        Cancelling the future does not withdraw the record."""
        return self._enqueue((record,))[0]

    def write(self, record: LogRecord, timeout: float | None = None) -> DLSN:
        """Write one record; returns its DLSN once it is durable."""
        return self.write_nowait(record).result(timeout)

    def write_bulk(self, records: Iterable[LogRecord]) -> list[DLSN]:
        """Write records in order (pipelined); their DLSNs once all are durable.

        One hop to the loop for the whole batch and no concurrent Future per
        record: the fastest way to write from a thread."""
        return self._run(self.writer.write_bulk(self._records(records)))

    def write_bulk_outcome_nowait(
        self, records: Iterable[LogRecord]
    ) -> concurrent.futures.Future[BulkOutcome]:
        """Queue records in order, after those queued before; the future
        resolves to a BulkOutcome (the DLSNs acknowledged and the error that
        stopped the rest, see LogWriter.write_bulk_outcome_nowait), or to
        the error raised before any record was taken."""
        batch = self._records(records)

        async def outcome() -> BulkOutcome:
            return await self.writer.write_bulk_outcome_nowait(batch)

        # As every blocking call: what write_nowait queued goes first.
        return self._start(lambda: self._submitted(outcome()))

    flush = blocking(LogWriter.flush)
    mark_end_of_stream = blocking(LogWriter.mark_end_of_stream)
    truncate = blocking(LogWriter.truncate)
    close = blocking(LogWriter.close)


# ---------------------------------------------------------------------------
# readers: a LogReader and a Consumer read the same way
# ---------------------------------------------------------------------------


class _AsyncReader(Protocol):
    """What the buffered twin needs of an async reader."""

    async def read_bulk(self, n: int, timeout: float | None = None) -> list[LogRecordWithDLSN]: ...

    async def close(self) -> None: ...


AR = TypeVar("AR", bound=_AsyncReader)


class _BufferedReads(ClosingTwin[AR]):
    """The blocking side of an async reader (:class:`SyncLogReader`,
    :class:`SyncConsumer`): the twin of ``read_bulk`` and of ``async for``.

    Records are fetched from the loop up to :data:`READ_BATCH` at a time
    and handed out one by one, so a thread pays one hop per batch, not per
    record; ``read_bulk``, the single-record read and iteration share that
    buffer, so mixing them never skips a record, and ``position`` follows the
    records handed out, not the ones read ahead. ``for record in ...`` stops
    at the end of stream or once closed (e.g. from another thread). A read
    blocked in another thread ends with the closed error on ``close``; after
    a seek (:meth:`_interrupt`) it reads on from the new position.
    """

    #: What reading a closed one raises: the error of the async reader.
    _closed_error_type: ClassVar[type[Exception]]

    def __init__(self, wrapped: AR, loop_thread: LoopThread) -> None:
        super().__init__(wrapped, loop_thread)
        self._buffer: deque[LogRecordWithDLSN] = deque()
        self._read_lock = threading.Lock()
        # Guards _buffer, _position, _closed, _seeks and _inflight together: a
        # seek or close always sees (and cancels) a fetch that got past the
        # check, and a fetch from before a seek never lands in the buffer.
        self._state_lock = threading.Lock()
        self._inflight: concurrent.futures.Future[list[LogRecordWithDLSN]] | None = None
        self._closed = False
        self._seeks = 0
        self._position: DLSN | None = None
        # On the loop: a seek or close runs after the fetch it cancelled has
        # let go of the async reader, and a later fetch after the seek.
        self._serial = asyncio.Lock()

    def _describe(self) -> str:
        """The reader, for error messages ("reader of stream 'events'")."""
        raise NotImplementedError

    def _closed_error(self) -> Exception:
        return self._closed_error_type(f"{self._describe()} is closed")

    @property
    def position(self) -> DLSN | None:
        """DLSN of the last record handed out (None before the first)."""
        return self._position

    async def _serially(self, call: Callable[[], Awaitable[T]]) -> T:
        async with self._serial:
            return await call()

    def _in_order(self, call: Callable[[], Awaitable[T]]) -> concurrent.futures.Future[T]:
        """Under _state_lock: start ``call`` on the loop, in submission order."""
        return self._start(functools.partial(self._serially, call))

    def _fetch(self, n: int, timeout: float | None) -> None:
        """Add up to ``max(n, READ_BATCH)`` records to the buffer (none on timeout)."""
        self._check_caller()
        deadline = None if timeout is None else time.monotonic() + timeout
        batch = max(n, READ_BATCH)
        while True:
            with self._state_lock:
                if self._closed:
                    raise self._closed_error()
                seeks = self._seeks
                left = None if deadline is None else max(0.0, deadline - time.monotonic())
                fut = self._in_order(functools.partial(self._wrapped.read_bulk, batch, left))
                self._inflight = fut
            records: list[LogRecordWithDLSN] = []
            error: Exception | None = None
            try:
                records = wait(fut)
            except concurrent.futures.CancelledError:
                pass  # by close or seek, handled below
            except Exception as e:
                error = e
            finally:
                with self._state_lock:
                    if self._inflight is fut:
                        self._inflight = None
            with self._state_lock:
                if self._closed:
                    raise self._closed_error() from error
                if seeks != self._seeks:
                    continue  # read before a seek: read again from its position
                if error is not None:
                    raise error
                if fut.cancelled():
                    raise ReadCancelledError(f"{self._describe()}: read cancelled")
                self._buffer.extend(records)
                return

    def _take(self, n: int) -> list[LogRecordWithDLSN]:
        with self._state_lock:
            buffer = self._buffer
            out = [buffer.popleft() for _ in range(min(n, len(buffer)))]
            if out:
                self._position = out[-1].dlsn
            return out

    def _read_one(self, timeout: float | None) -> LogRecordWithDLSN | None:
        records = self.read_bulk(1, timeout)
        return records[0] if records else None

    def read_bulk(self, n: int, timeout: float | None = None) -> list[LogRecordWithDLSN]:
        """Up to ``n`` records: waits up to ``timeout`` for the first, then
        takes what is already read ahead."""
        if n < 1:
            raise ValueError(f"n must be at least 1, got {n}")
        with self._read_lock:
            out = self._take(n)
            if not out:
                self._fetch(n, timeout)
                out = self._take(n)
            return out

    def __iter__(self) -> Iterator[LogRecordWithDLSN]:
        return self

    def __next__(self) -> LogRecordWithDLSN:
        with self._read_lock:
            while True:
                out = self._take(1)
                if out:
                    return out[0]
                if self._closed:
                    raise StopIteration
                try:
                    self._fetch(READ_BATCH, 1.0)
                except EndOfStreamError:
                    raise StopIteration from None
                except self._closed_error_type:
                    if self._closed:
                        raise StopIteration from None
                    raise

    def _interrupt(self, call: Callable[[], Awaitable[None]], *, close: bool) -> None:
        """Drop what was read ahead, cancel the fetch in flight (a read
        blocked in another thread) and run ``call`` on the async reader once
        that fetch has let go of it. ``close`` marks this closed; otherwise
        (a seek) the blocked read starts again from where ``call`` moved to."""
        self._check_caller()
        with self._state_lock:
            if close:
                self._closed = True
            elif self._closed:
                raise self._closed_error()
            else:
                self._seeks += 1
                self._position = None
            self._buffer.clear()
            if self._inflight is not None:
                self._inflight.cancel()
            fut = self._in_order(call)
        wait(fut)

    def close(self) -> None:
        """Stop reading; a read blocked in another thread ends (iteration
        stops, a read raises the closed error)."""
        self._interrupt(self._wrapped.close, close=True)


class SyncLogReader(_BufferedReads[LogReader], wraps="reader"):
    """A reader (see :class:`dlog.reader.LogReader`).

    ``for record in reader`` tails the stream and stops at its end of stream
    (or when the reader is closed, e.g. from another thread). Records are
    fetched from the loop up to :data:`READ_BATCH` at a time and handed out
    one by one; ``read_next``/``read_bulk`` and iteration share that buffer,
    so mixing them never skips a record.
    """

    reader: LogReader
    _closed_error_type = ReadCancelledError

    @property
    def name(self) -> str:
        return self.reader.name

    def __repr__(self) -> str:
        return f"SyncLogReader({self.name!r}, position={self._position!r})"

    def _describe(self) -> str:
        return f"reader of stream {self.name!r}"

    def read_next(self, timeout: float | None = None) -> LogRecordWithDLSN | None:
        """The next record, or None if none arrives within ``timeout`` seconds
        (None waits indefinitely). EndOfStreamError after the last record of
        an ended stream; ReadCancelledError once the reader is closed."""
        return self._read_one(timeout)


# ---------------------------------------------------------------------------
# subscriptions
# ---------------------------------------------------------------------------


class SyncSubscriptionsStore(Twin[SubscriptionsStore], wraps="store"):
    """A stream's subscriptions store (see :class:`subscriptions.store.SubscriptionsStore`),
    whichever of the two ``logSegmentBasedSubscriptionsStoreEnabled`` picked.
    Get it as ``log.subscriptions``; the async store is ``.store``."""

    store: SubscriptionsStore

    @property
    def format(self) -> str:
        """The znode format this store writes ("zookeeper" or "log-segment")."""
        return self.store.format

    def __repr__(self) -> str:
        return f"SyncSubscriptionsStore({self.store.stream!r}, format={self.store.format!r})"

    # positions
    advance_commit_position = blocking(SubscriptionsStore.advance_commit_position)
    advance_commit_position_nowait = nowait(SubscriptionsStore.advance_commit_position_nowait)
    get_last_commit_position = blocking(SubscriptionsStore.get_last_commit_position)
    get_last_commit_positions = blocking(SubscriptionsStore.get_last_commit_positions)
    reset_position = blocking(SubscriptionsStore.reset_position)
    # ownership
    acquire = blocking(SubscriptionsStore.acquire)
    release = blocking(SubscriptionsStore.release)
    # inspection and cleanup
    list_subscribers = blocking(SubscriptionsStore.list_subscribers)
    describe = blocking(SubscriptionsStore.describe)
    read_znode = blocking(SubscriptionsStore.read_znode)
    read_owner = blocking(SubscriptionsStore.read_owner)
    delete_subscriber = blocking(SubscriptionsStore.delete_subscriber)
    delete_all_subscribers = blocking(SubscriptionsStore.delete_all_subscribers)
    close = blocking(SubscriptionsStore.close)


class SyncConsumer(_BufferedReads[Consumer], wraps="consumer"):
    """A consumer (see :class:`subscriptions.consumer.Consumer`): a reader that
    starts after its subscription's last commit. Get one with
    ``log.subscribe(subscriber_id)``; the async consumer is ``.consumer``.

    It reads as :class:`SyncLogReader` does (the same buffering);
    ``position`` and ``commit()`` follow the records handed out, not the
    ones read ahead. ``for record in consumer`` stops at the end of stream
    or when the consumer is closed (e.g. from another thread). A read
    blocked in another thread ends with IllegalStateError on ``close`` (the
    error every call on a closed async consumer raises); on ``seek`` it
    reads on from the new position.
    """

    consumer: Consumer
    _closed_error_type = IllegalStateError

    def __init__(self, consumer: Consumer, loop_thread: LoopThread) -> None:
        super().__init__(consumer, loop_thread)
        self.subscriber_id = consumer.subscriber_id

    @property
    def stream(self) -> str:
        return self.consumer.stream

    def __repr__(self) -> str:
        return f"SyncConsumer({self.stream!r}, {self.subscriber_id!r}, position={self._position!r})"

    def _describe(self) -> str:
        return f"consumer {self.subscriber_id!r}"

    def read(self, timeout: float | None = None) -> LogRecordWithDLSN | None:
        """The next record, or None if none arrives within ``timeout`` seconds
        (None waits indefinitely). EndOfStreamError after the last record of
        an ended stream; IllegalStateError once the consumer is closed."""
        return self._read_one(timeout)

    def _to_commit(
        self, record_or_dlsn: LogRecordWithDLSN | DLSN | None
    ) -> LogRecordWithDLSN | DLSN:
        """What to commit: by default the last record handed out (the async
        consumer has read ahead of it)."""
        if record_or_dlsn is not None:
            return record_or_dlsn
        if self._position is None:
            # What the async consumer raises.
            raise IllegalStateError("nothing has been read yet, so there is nothing to commit")
        return self._position

    def commit(self, record_or_dlsn: LogRecordWithDLSN | DLSN | None = None) -> DLSN:
        """Commit a record (or DLSN; default: the last record read). Returns
        once the position is durable; committing an older one is a no-op."""
        return self._run(self.consumer.commit(self._to_commit(record_or_dlsn)))

    def commit_nowait(
        self, record_or_dlsn: LogRecordWithDLSN | DLSN | None = None
    ) -> concurrent.futures.Future[None]:
        """Start committing (as :meth:`commit`); the future resolves once the
        position is durable."""
        target = self._to_commit(record_or_dlsn)
        return self._start(lambda: self.consumer.commit_nowait(target))

    committed = blocking(Consumer.committed)

    def seek(self, dlsn: DLSN) -> None:
        """Read from ``dlsn`` on (nothing is committed by seeking); a read
        blocked in another thread continues from there."""
        self._interrupt(functools.partial(self.consumer.seek, dlsn), close=False)

    def close(self) -> None:
        """Stop reading and release the subscription (its position stays); a
        read blocked in another thread ends (iteration stops)."""
        super().close()


# ---------------------------------------------------------------------------
# stream
# ---------------------------------------------------------------------------


class SyncLogManager(ClosingTwin[LogManager], wraps="log"):
    """One stream (see :class:`dlog.log.LogManager`)."""

    log: LogManager

    def __init__(self, log: LogManager, loop_thread: LoopThread) -> None:
        super().__init__(log, loop_thread)
        self._writers: list[SyncLogWriter] = []
        self._writers_lock = threading.Lock()

    @property
    def name(self) -> str:
        return self.log.name

    @property
    def data_set(self) -> str:
        """The BP-44 data set of this stream's ledgers."""
        return self.log.data_set

    @property
    def password(self) -> bytes:
        """The password of the stream's ledgers (``bkDigestPW``)."""
        return self.log.password

    def __repr__(self) -> str:
        return f"SyncLogManager({self.log.data_set!r})"

    @property
    def subscriptions(self) -> SyncSubscriptionsStore:
        """The stream's subscriptions store, blocking."""
        return SyncSubscriptionsStore(self.log.subscriptions, self._runner)

    subscribe = blocking(LogManager.subscribe, wrap=SyncConsumer)

    def open_writer(
        self, *, owner: str | None = None, lock_timeout: float | None = None
    ) -> SyncLogWriter:
        """Become the stream's single writer (fencing any previous one); see
        :meth:`dlog.log.LogManager.open_writer`."""
        writer = SyncLogWriter(
            self._run(self.log.open_writer(owner=owner, lock_timeout=lock_timeout)), self._runner
        )
        with self._writers_lock:
            self._writers = [w for w in self._writers if not w.is_closed]
            self._writers.append(writer)
        return writer

    open_reader = blocking(LogManager.open_reader, wrap=SyncLogReader)
    get_first_dlsn = blocking(LogManager.get_first_dlsn)
    get_last_dlsn = blocking(LogManager.get_last_dlsn)
    get_last_txid = blocking(LogManager.get_last_txid)
    get_record_count = blocking(LogManager.get_record_count)
    truncate = blocking(LogManager.truncate)
    purge_expired = blocking(LogManager.purge_expired)

    def _submit_pending_writes(self) -> None:
        """On the loop: records queued by write_nowait reach their writer
        before it closes."""
        with self._writers_lock:
            writers = list(self._writers)
        for w in writers:
            w._submit()

    def close(self) -> None:
        """Close this stream's readers and writers."""

        async def close() -> None:
            self._submit_pending_writes()
            await self.log.close()

        self._run(close())


# ---------------------------------------------------------------------------
# namespace
# ---------------------------------------------------------------------------


def _config(config: DLogConfig | Mapping[str, Any] | None) -> DLogConfig | None:
    """A DLogConfig, or a mapping of settings applied to the defaults."""
    if config is None or isinstance(config, DLogConfig):
        return config
    return DLogConfig.load(overrides=config)


class SyncNamespace(ClosingTwin[AsyncNamespace], wraps="namespace"):
    """A namespace (see :class:`dlog.namespace.Namespace`). Get one with
    ``SyncNamespace.open(uri, config)`` (``SyncNamespace.create`` the first time)."""

    namespace: AsyncNamespace

    def __init__(self, namespace: AsyncNamespace, loop_thread: LoopThread) -> None:
        super().__init__(namespace, loop_thread)
        self._logs: dict[str, SyncLogManager] = {}
        self._logs_lock = threading.Lock()
        self._closed = False

    @classmethod
    def open(
        cls,
        uri: str,
        config: DLogConfig | Mapping[str, Any] | None = None,
        *,
        loop_thread: LoopThread | None = None,
        bind: bool = False,
    ) -> SyncNamespace:
        """Connect to an existing namespace (NamespaceNotFoundError if it was
        never created). ``config`` is a DLogConfig or a mapping of settings
        (``{"ensemble-size": 3, ...}``) applied to the defaults; ``bind=True``
        binds an unbound namespace first (see Namespace.open)."""
        runner = loop_thread or default_loop_thread()
        return cls(runner.run(AsyncNamespace.open(uri, _config(config), bind=bind)), runner)

    @classmethod
    def create(
        cls,
        uri: str,
        config: DLogConfig | Mapping[str, Any] | None = None,
        *,
        ledgers_uri: str | None = None,
        loop_thread: LoopThread | None = None,
    ) -> SyncNamespace:
        """Create the namespace (bind it to its bookies) and open it; see
        Namespace.create."""
        runner = loop_thread or default_loop_thread()
        coro = AsyncNamespace.create(uri, _config(config), ledgers_uri=ledgers_uri)
        return cls(runner.run(coro), runner)

    @property
    def uri(self) -> str:
        return self.namespace.uri

    @property
    def conf(self) -> DLogConfig:
        return self.namespace.conf

    @property
    def loop_thread(self) -> LoopThread:
        return self._runner

    def __repr__(self) -> str:
        return f"SyncNamespace({self.uri!r})"

    create_log = blocking(AsyncNamespace.create_log)
    log_exists = blocking(AsyncNamespace.log_exists)
    get_logs = blocking(AsyncNamespace.get_logs)

    def open_log(self, name: str) -> SyncLogManager:
        """The stream ``name``; created first if ``createStreamIfNotExists``."""
        lm = self._run(self.namespace.open_log(name))
        with self._logs_lock:
            wrapper = self._logs.get(name)
            if wrapper is None or wrapper.log is not lm:
                wrapper = self._logs[name] = SyncLogManager(lm, self._runner)
        return wrapper

    def delete_log(self, name: str) -> None:
        self._run(self.namespace.delete_log(name))
        with self._logs_lock:
            self._logs.pop(name, None)

    def close(self) -> None:
        """Close every stream's writers and readers, then the connections."""
        with self._logs_lock:
            if self._closed:
                return
            self._closed = True
            logs = list(self._logs.values())
            self._logs.clear()

        async def close() -> None:
            for lm in logs:
                lm._submit_pending_writes()
            await self.namespace.close()

        self._run(close())


#: ``from dlog.sync import Namespace`` reads like the async API.
Namespace = SyncNamespace
