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

Every object runs its async twin on one event loop in a background thread
(:func:`dlog.loop_thread.default_loop_thread`, or the ``loop_thread`` given
to :meth:`SyncNamespace.open`); the async object is there as ``.namespace``,
``.log``, ``.writer``, ``.reader``, ``.consumer`` or ``.store``. The
subscription twins have every public method of their async classes
(tests/unit/test_sync_parity.py checks it by introspection).

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
import os
import threading
import time
from collections import deque
from collections.abc import Awaitable, Callable, Coroutine, Iterable, Iterator, Mapping
from typing import TYPE_CHECKING, Any, Self, TypeVar

from dlog.conf.dlog import DLogConfig
from dlog.dlsn import DLSN
from dlog.errors import EndOfStreamError, IllegalStateError, ReadCancelledError
from dlog.log import LogManager
from dlog.loop_thread import LoopThread, current_pid, default_loop_thread
from dlog.namespace import Namespace as AsyncNamespace
from dlog.reader import LogReader
from dlog.record import LogRecord, LogRecordWithDLSN
from dlog.writer import LogWriter

if TYPE_CHECKING:
    from subscriptions.consumer import Consumer
    from subscriptions.format import SubscriberZnode
    from subscriptions.store import SubscriberInfo, SubscriptionsStore

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


class _Bound:
    """Common part: the loop thread an object lives on."""

    _runner: LoopThread

    def _run(self, coro: Coroutine[Any, Any, T]) -> T:
        return self._runner.run(coro)

    def _check_caller(self) -> None:
        """What LoopThread.run checks, for calls that do not go through it."""
        runner = self._runner
        if runner.pid != current_pid():
            raise RuntimeError(
                f"this {type(self).__name__} was opened in process {runner.pid}, not in this "
                f"process ({os.getpid()}): objects opened before a fork cannot be used in "
                "the child; open them again in the child"
            )
        if threading.get_ident() == runner._thread.ident:
            raise RuntimeError("a sync dlog call was made from inside its own event loop thread")

    def __reduce__(self) -> Any:
        raise TypeError(
            f"{type(self).__name__} cannot be pickled: it is bound to this process's "
            "connections; pass the namespace URI and settings and open it where it is used"
        )


# ---------------------------------------------------------------------------
# namespace
# ---------------------------------------------------------------------------


class SyncNamespace(_Bound):
    """A namespace (see :class:`dlog.namespace.Namespace`). Get one with
    ``SyncNamespace.open(uri, config)``."""

    def __init__(self, namespace: AsyncNamespace, loop_thread: LoopThread) -> None:
        self.namespace = namespace
        self._runner = loop_thread
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
        bind: bool = True,
    ) -> SyncNamespace:
        """Connect to a namespace. ``config`` is a DLogConfig or a mapping of
        settings (``{"ensemble-size": 3, ...}``) applied to the defaults;
        ``bind=False`` refuses a namespace that was never bound to bookies."""
        if config is not None and not isinstance(config, DLogConfig):
            config = DLogConfig.load(overrides=config)
        runner = loop_thread or default_loop_thread()
        return cls(runner.run(AsyncNamespace.open(uri, config, bind=bind)), runner)

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

    def create_log(self, name: str) -> None:
        self._run(self.namespace.create_log(name))

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

    def log_exists(self, name: str) -> bool:
        return self._run(self.namespace.log_exists(name))

    def get_logs(self, prefix: str | None = None) -> list[str]:
        return self._run(self.namespace.get_logs(prefix))

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

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


#: ``from dlog.sync import Namespace`` reads like the async API.
Namespace = SyncNamespace


# ---------------------------------------------------------------------------
# stream
# ---------------------------------------------------------------------------


class SyncLogManager(_Bound):
    """One stream (see :class:`dlog.log.LogManager`)."""

    def __init__(self, log: LogManager, loop_thread: LoopThread) -> None:
        self.log = log
        self._runner = loop_thread
        self._writers: list[SyncLogWriter] = []
        self._writers_lock = threading.Lock()

    @property
    def name(self) -> str:
        return self.log.name

    def __repr__(self) -> str:
        return f"SyncLogManager({self.log.data_set!r})"

    @property
    def subscriptions(self) -> SyncSubscriptionsStore:
        """The stream's subscriptions store, blocking."""
        return SyncSubscriptionsStore(self.log.subscriptions, self._runner)

    def subscribe(self, subscriber_id: str) -> SyncConsumer:
        """A consumer reading from just after ``subscriber_id``'s last commit;
        this process becomes the subscription's owner."""
        consumer: Consumer = self._run(self.log.subscribe(subscriber_id))
        return SyncConsumer(consumer, self._runner)

    def open_writer(self) -> SyncLogWriter:
        """Become the stream's single writer (fencing any previous one)."""
        writer = SyncLogWriter(self._run(self.log.open_writer()), self._runner)
        with self._writers_lock:
            self._writers = [w for w in self._writers if not w.is_closed]
            self._writers.append(writer)
        return writer

    def open_reader(
        self, from_dlsn: DLSN | None = None, from_txid: int | None = None
    ) -> SyncLogReader:
        """A reader from ``from_dlsn`` (default: the first record) or from the
        first record whose txid is at least ``from_txid``."""
        return SyncLogReader(
            self._run(self.log.open_reader(from_dlsn=from_dlsn, from_txid=from_txid)),
            self._runner,
        )

    def get_first_dlsn(self) -> DLSN:
        return self._run(self.log.get_first_dlsn())

    def get_last_dlsn(self) -> DLSN:
        return self._run(self.log.get_last_dlsn())

    def get_last_txid(self) -> int:
        return self._run(self.log.get_last_txid())

    def get_record_count(self) -> int:
        return self._run(self.log.get_record_count())

    def truncate(self, dlsn: DLSN) -> bool:
        """Mark every record before ``dlsn`` truncated."""
        return self._run(self.log.truncate(dlsn))

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

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


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


class SyncLogWriter(_Bound):
    """The stream's writer (see :class:`dlog.writer.LogWriter`).

    ``write_nowait`` queues the record and returns a concurrent Future; the
    queue is handed to the loop in batches (one wake-up per batch, not per
    record). ``write``, ``write_bulk``, ``flush``, ``mark_end_of_stream`` and
    ``close`` see every record queued before them, from any thread.
    """

    def __init__(self, writer: LogWriter, loop_thread: LoopThread) -> None:
        self.writer = writer
        self._runner = loop_thread
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

    def __repr__(self) -> str:
        return f"SyncLogWriter({self.name!r})"

    # -- queueing -------------------------------------------------------------
    def _enqueue(self, records: Iterable[LogRecord]) -> list[concurrent.futures.Future[DLSN]]:
        self._check_caller()
        batch: list[tuple[LogRecord, concurrent.futures.Future[DLSN]]] = []
        for record in records:
            if not isinstance(record, LogRecord):
                raise TypeError(f"expected a LogRecord, got {type(record).__name__}")
            batch.append((record, concurrent.futures.Future()))
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
            source.add_done_callback(lambda s, fut=fut: _settle(fut, s), context=ctx)

    async def _submitted(self, coro: Coroutine[Any, Any, T]) -> T:
        self._submit()
        return await coro

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
        batch = list(records)
        for record in batch:
            if not isinstance(record, LogRecord):
                raise TypeError(f"expected a LogRecord, got {type(record).__name__}")
        return self._run(self._submitted(self.writer.write_bulk(batch)))

    def flush(self) -> DLSN:
        """Send what is buffered and wait until everything written so far is
        durable; returns the last DLSN."""
        return self._run(self._submitted(self.writer.flush()))

    def mark_end_of_stream(self) -> DLSN:
        """Seal the stream: readers stop after the last record."""
        return self._run(self._submitted(self.writer.mark_end_of_stream()))

    def truncate(self, dlsn: DLSN) -> bool:
        """Mark everything before ``dlsn`` truncated."""
        return self._run(self.writer.truncate(dlsn))

    def close(self) -> None:
        """Flush, complete the current segment and release the stream."""
        self._run(self._submitted(self.writer.close()))

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


# ---------------------------------------------------------------------------
# reader
# ---------------------------------------------------------------------------


class SyncLogReader(_Bound):
    """A reader (see :class:`dlog.reader.LogReader`).

    ``for record in reader`` tails the stream and stops at its end of stream
    (or when the reader is closed, e.g. from another thread). Records are
    fetched from the loop up to :data:`READ_BATCH` at a time and handed out
    one by one; ``read_next``/``read_bulk`` and iteration share that buffer,
    so mixing them never skips a record.
    """

    def __init__(self, reader: LogReader, loop_thread: LoopThread) -> None:
        self.reader = reader
        self._runner = loop_thread
        self._buffer: deque[LogRecordWithDLSN] = deque()
        self._read_lock = threading.Lock()
        # Guards _closed and _inflight together, so close() always sees (and
        # cancels) a read that got past the closed check.
        self._state_lock = threading.Lock()
        self._inflight: concurrent.futures.Future[list[LogRecordWithDLSN]] | None = None
        self._closed = False
        self._position: DLSN | None = None

    @property
    def name(self) -> str:
        return self.reader.name

    @property
    def position(self) -> DLSN | None:
        """DLSN of the last record returned (None before the first)."""
        return self._position

    def __repr__(self) -> str:
        return f"SyncLogReader({self.name!r}, position={self._position!r})"

    def _fetch(self, n: int, timeout: float | None) -> bool:
        """Fill the buffer with up to ``max(n, READ_BATCH)`` records; False on timeout."""
        self._check_caller()
        with self._state_lock:
            if self._closed:
                raise ReadCancelledError(f"reader of stream {self.name!r} is closed")
            fut = asyncio.run_coroutine_threadsafe(
                self.reader.read_bulk(max(n, READ_BATCH), timeout), self._runner.loop
            )
            self._inflight = fut
        try:
            records = fut.result()
        except concurrent.futures.CancelledError:
            raise ReadCancelledError(f"reader of stream {self.name!r} was closed") from None
        except BaseException:
            if not fut.done():
                fut.cancel()
            raise
        finally:
            self._inflight = None
        self._buffer.extend(records)
        return bool(records)

    def _take(self, n: int) -> list[LogRecordWithDLSN]:
        buffer = self._buffer
        k = min(n, len(buffer))
        out = [buffer.popleft() for _ in range(k)]
        if out:
            self._position = out[-1].dlsn
        return out

    def read_next(self, timeout: float | None = None) -> LogRecordWithDLSN | None:
        """The next record, or None if none arrives within ``timeout`` seconds
        (None waits indefinitely). EndOfStreamError after the last record of
        an ended stream; ReadCancelledError once the reader is closed."""
        records = self.read_bulk(1, timeout)
        return records[0] if records else None

    def read_bulk(self, n: int, timeout: float | None = None) -> list[LogRecordWithDLSN]:
        """Up to ``n`` records: waits up to ``timeout`` for the first, then
        takes what is already read ahead."""
        if n < 1:
            raise ValueError(f"n must be at least 1, got {n}")
        with self._read_lock:
            if not self._buffer:
                self._fetch(n, timeout)
            return self._take(n)

    def __iter__(self) -> Iterator[LogRecordWithDLSN]:
        return self

    def __next__(self) -> LogRecordWithDLSN:
        with self._read_lock:
            while not self._buffer:
                if self._closed:
                    raise StopIteration
                try:
                    self._fetch(READ_BATCH, 1.0)
                except EndOfStreamError:
                    raise StopIteration from None
                except ReadCancelledError:
                    if self._closed:
                        raise StopIteration from None
                    raise
            return self._take(1)[0]

    def close(self) -> None:
        """Stop reading; a read blocked in another thread ends (iteration
        stops, ``read_next`` raises ReadCancelledError)."""
        with self._state_lock:
            self._closed = True
            inflight = self._inflight
        if inflight is not None:
            inflight.cancel()
        self._run(self.reader.close())
        self._buffer.clear()

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


# ---------------------------------------------------------------------------
# subscriptions
# ---------------------------------------------------------------------------


class SyncSubscriptionsStore(_Bound):
    """A stream's subscriptions store (see :class:`subscriptions.store.SubscriptionsStore`),
    whichever of the two ``logSegmentBasedSubscriptionsStoreEnabled`` picked.
    Get it as ``log.subscriptions``; the async store is ``.store``."""

    def __init__(self, store: SubscriptionsStore, loop_thread: LoopThread) -> None:
        self.store = store
        self._runner = loop_thread

    @property
    def format(self) -> str:
        """The znode format this store writes ("zookeeper" or "log-segment")."""
        return self.store.format

    def __repr__(self) -> str:
        return f"SyncSubscriptionsStore({self.store.stream!r}, format={self.store.format!r})"

    # -- positions --------------------------------------------------------------
    def advance_commit_position(self, subscriber_id: str, dlsn: DLSN) -> None:
        """Move the position forward to ``dlsn`` (a no-op unless greater);
        returns once it is durable. Takes ownership on first use."""
        self._run(self.store.advance_commit_position(subscriber_id, dlsn))

    def advance_commit_position_nowait(
        self, subscriber_id: str, dlsn: DLSN
    ) -> concurrent.futures.Future[None]:
        """Start advancing the position; the future resolves once it is durable."""
        self._check_caller()
        return asyncio.run_coroutine_threadsafe(
            self.store.advance_commit_position(subscriber_id, dlsn), self._runner.loop
        )

    def get_last_commit_position(self, subscriber_id: str) -> DLSN:
        """The committed position; NonInclusiveLowerBound if never committed."""
        return self._run(self.store.get_last_commit_position(subscriber_id))

    def get_last_commit_positions(self) -> dict[str, DLSN]:
        return self._run(self.store.get_last_commit_positions())

    def reset_position(self, subscriber_id: str, dlsn: DLSN) -> None:
        """Set the position to ``dlsn``, even backwards (fences a running consumer)."""
        self._run(self.store.reset_position(subscriber_id, dlsn))

    # -- ownership --------------------------------------------------------------
    def acquire(self, subscriber_id: str) -> DLSN:
        """Become the subscription's single owner; returns its position."""
        return self._run(self.store.acquire(subscriber_id))

    def release(self, subscriber_id: str) -> None:
        """Stop owning a subscription gracefully (its position stays)."""
        self._run(self.store.release(subscriber_id))

    # -- inspection and cleanup -------------------------------------------------
    def list_subscribers(self) -> list[str]:
        return self._run(self.store.list_subscribers())

    def describe(self, subscriber_id: str) -> SubscriberInfo:
        return self._run(self.store.describe(subscriber_id))

    def read_znode(self, subscriber_id: str) -> tuple[SubscriberZnode | None, int | None]:
        return self._run(self.store.read_znode(subscriber_id))

    def read_owner(self, subscriber_id: str) -> dict[str, str] | None:
        """The live log-segment owner's registration, or None."""
        return self._run(self.store.read_owner(subscriber_id))

    def delete_subscriber(self, subscriber_id: str) -> bool:
        """Forget a subscriber (and its segments); False if it did not exist."""
        return self._run(self.store.delete_subscriber(subscriber_id))

    def delete_all_subscribers(self) -> list[str]:
        """Delete every subscriber and its segments; the ones deleted."""
        return self._run(self.store.delete_all_subscribers())

    def close(self) -> None:
        """Release every subscription this store owns."""
        self._run(self.store.close())


class SyncConsumer(_Bound):
    """A consumer (see :class:`subscriptions.consumer.Consumer`): a reader that
    starts after its subscription's last commit. Get one with
    ``log.subscribe(subscriber_id)``; the async consumer is ``.consumer``.

    Like :class:`SyncLogReader`, it fetches up to :data:`READ_BATCH` records
    per hop to the loop and hands them out one by one; ``position`` and
    ``commit()`` follow the records handed out, not the ones read ahead.
    ``for record in consumer`` stops at the end of stream or when the consumer
    is closed (e.g. from another thread). A read blocked in another thread
    ends with IllegalStateError on ``close`` (the error every call on a
    closed async consumer raises); on ``seek`` it reads on from the new
    position.
    """

    def __init__(self, consumer: Consumer, loop_thread: LoopThread) -> None:
        self.consumer = consumer
        self.subscriber_id = consumer.subscriber_id
        self._runner = loop_thread
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
        # let go of the async consumer, and a later fetch after the seek.
        self._serial = asyncio.Lock()

    @property
    def position(self) -> DLSN | None:
        """DLSN of the last record read (not necessarily committed)."""
        return self._position

    def __repr__(self) -> str:
        return (
            f"SyncConsumer({self.consumer.log.name!r}, {self.subscriber_id!r}, "
            f"position={self._position!r})"
        )

    def _closed_error(self) -> IllegalStateError:
        return IllegalStateError(f"consumer {self.subscriber_id!r} is closed")

    async def _serially(self, call: Callable[[], Awaitable[T]]) -> T:
        async with self._serial:
            return await call()

    def _submit(self, call: Callable[[], Awaitable[T]]) -> concurrent.futures.Future[T]:
        """Under _state_lock: start ``call`` on the loop, in submission order."""
        return asyncio.run_coroutine_threadsafe(self._serially(call), self._runner.loop)

    @staticmethod
    def _wait(fut: concurrent.futures.Future[T]) -> T:
        try:
            return fut.result()
        except BaseException:
            if not fut.done():
                fut.cancel()  # KeyboardInterrupt: do not leave it running
            raise

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
                fut = self._submit(functools.partial(self.consumer.read_bulk, batch, left))
                self._inflight = fut
            records: list[LogRecordWithDLSN] = []
            error: Exception | None = None
            try:
                records = self._wait(fut)
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
                    raise ReadCancelledError(f"consumer {self.subscriber_id!r}: read cancelled")
                self._buffer.extend(records)
                return

    def _take(self, n: int) -> list[LogRecordWithDLSN]:
        with self._state_lock:
            buffer = self._buffer
            out = [buffer.popleft() for _ in range(min(n, len(buffer)))]
            if out:
                self._position = out[-1].dlsn
            return out

    def read(self, timeout: float | None = None) -> LogRecordWithDLSN | None:
        """The next record, or None if none arrives within ``timeout`` seconds
        (None waits indefinitely). EndOfStreamError after the last record of
        an ended stream; IllegalStateError once the consumer is closed."""
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
                except IllegalStateError:
                    if self._closed:
                        raise StopIteration from None
                    raise

    def commit(self, record_or_dlsn: LogRecordWithDLSN | DLSN | None = None) -> DLSN:
        """Commit a record (or DLSN; default: the last record read). Returns
        once the position is durable; committing an older one is a no-op."""
        if record_or_dlsn is None:
            record_or_dlsn = self._position
            if record_or_dlsn is None:
                # What the async consumer raises (it has read ahead of us).
                raise IllegalStateError("nothing has been read yet, so there is nothing to commit")
        return self._run(self.consumer.commit(record_or_dlsn))

    def commit_nowait(
        self, record_or_dlsn: LogRecordWithDLSN | DLSN | None = None
    ) -> concurrent.futures.Future[None]:
        """Start committing (as :meth:`commit`); the future resolves once the
        position is durable."""
        if record_or_dlsn is None:
            record_or_dlsn = self._position
            if record_or_dlsn is None:
                raise IllegalStateError("nothing has been read yet, so there is nothing to commit")
        self._check_caller()
        target = record_or_dlsn

        async def commit() -> None:
            await self.consumer.commit_nowait(target)

        return asyncio.run_coroutine_threadsafe(commit(), self._runner.loop)

    def committed(self) -> DLSN:
        """The durable committed position."""
        return self._run(self.consumer.committed())

    def seek(self, dlsn: DLSN) -> None:
        """Read from ``dlsn`` on (nothing is committed by seeking); a read
        blocked in another thread continues from there."""
        self._check_caller()
        with self._state_lock:
            if self._closed:
                raise self._closed_error()
            self._seeks += 1
            self._buffer.clear()
            self._position = None
            if self._inflight is not None:
                self._inflight.cancel()
            fut = self._submit(lambda: self.consumer.seek(dlsn))
        self._wait(fut)

    def close(self) -> None:
        """Stop reading and release the subscription (its position stays); a
        read blocked in another thread ends (iteration stops)."""
        self._check_caller()
        with self._state_lock:
            self._closed = True
            self._buffer.clear()
            if self._inflight is not None:
                self._inflight.cancel()
            fut = self._submit(self.consumer.close)
        self._wait(fut)

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
