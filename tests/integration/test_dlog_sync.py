"""The blocking facade of the log API (dlog.sync): plain calls, threads and
processes. Real ZooKeeper and three real bookie processes."""

from __future__ import annotations

import multiprocessing
import pickle
import threading
import time
from collections.abc import Callable, Iterator

import pytest

from dlog.conf.dlog import DLogConfig
from dlog.dlsn import DLSN, NonInclusiveLowerBound
from dlog.errors import (
    AlreadyClosedError,
    EndOfStreamError,
    IllegalStateError,
    LogNotFoundError,
    ReadCancelledError,
    TransactionIdOutOfOrderError,
)
from dlog.loop_thread import default_loop_thread
from dlog.record import LogRecord, LogRecordWithDLSN
from dlog.sync import Namespace, SyncConsumer, SyncNamespace, SyncSubscriptionsStore
from subscriptions.format import SEGMENT_FORMAT, ZK_FORMAT, SegmentSubscription, ZkPosition

SETTINGS = {
    "ensemble-size": 3,
    "write-quorum-size": 2,
    "ack-quorum-size": 2,
    "zkSessionTimeoutSeconds": 4,
    "lockTimeoutSeconds": 1,
}


def payload(i: int) -> bytes:
    return b"record-%06d-" % i + b"x" * 40


@pytest.fixture
def open_ns(  # type: ignore[no-untyped-def]
    bookie_cluster, zk_server, zk_root, ledgers_uri
) -> Iterator[Callable[..., SyncNamespace]]:
    """``open_ns(**overrides)``: a sync namespace on 3 bookie processes."""
    bookie_cluster(3)
    uri = f"distributedlog://{zk_server.connect_string}{zk_root}/ns"
    opened: list[SyncNamespace] = []

    def factory(**overrides: object) -> SyncNamespace:
        conf = DLogConfig.load(
            overrides={**SETTINGS, "bkc.metadataServiceUri": ledgers_uri, **overrides}
        )
        ns = Namespace.open(uri, conf, bind=True)
        opened.append(ns)
        return ns

    factory.uri = uri  # type: ignore[attr-defined]
    factory.settings = {**SETTINGS, "bkc.metadataServiceUri": ledgers_uri}  # type: ignore[attr-defined]
    yield factory
    for ns in opened:
        ns.close()


def test_write_read_iterate_end_of_stream(open_ns) -> None:  # type: ignore[no-untyped-def]
    assert Namespace is SyncNamespace
    with open_ns() as ns:
        assert not ns.log_exists("events")
        ns.create_log("events")
        assert ns.log_exists("events") and ns.get_logs() == ["events"]
        log = ns.open_log("events")
        assert ns.open_log("events") is log

        with log.open_writer() as writer:
            first = writer.write(LogRecord(0, payload(0)))
            assert first == DLSN(1, 0, 0)
            bulk = writer.write_bulk(LogRecord(i, payload(i)) for i in range(1, 100))
            futures = [writer.write_nowait(LogRecord(i, payload(i))) for i in range(100, 1000)]
            last = writer.flush()
            assert all(f.done() for f in futures)
            dlsns = [first, *bulk, *(f.result() for f in futures)]
            assert dlsns == sorted(dlsns) and len(set(dlsns)) == 1000
            assert last == dlsns[-1] == writer.last_dlsn
            assert writer.last_txid == 999

            # An out-of-order txid fails that record's future, not the writer.
            with pytest.raises(TransactionIdOutOfOrderError):
                writer.write_nowait(LogRecord(5, b"late")).result(10)
            # Cancelling a future does not withdraw its record: no gaps.
            writer.write_nowait(LogRecord(1000, payload(1000))).cancel()
            dlsns.append(writer.flush())
            assert log.get_first_dlsn() == first
            assert log.get_last_dlsn() == dlsns[-1]
            assert log.get_last_txid() == 1000
            assert log.get_record_count() == 1001

            with log.open_reader() as reader:
                r = reader.read_next(timeout=10)
                assert r is not None and r.txid == 0 and r.payload == payload(0)
                got = [r, *reader.read_bulk(9, timeout=10)]
                assert [x.txid for x in got] == list(range(10))
                assert reader.position == dlsns[9]
                # Iteration continues where read_next/read_bulk stopped; break
                # out of it and read_next continues from there.
                for record in reader:
                    got.append(record)
                    if record.txid == 499:
                        break
                assert reader.read_next(timeout=10).txid == 500
                rest = []
                while len(rest) < 500:
                    rest += reader.read_bulk(1000, timeout=10)
                assert [x.txid for x in rest] == list(range(501, 1001))
                assert reader.read_next(timeout=0.2) is None  # at the tail

            eos = writer.mark_end_of_stream()
            assert eos > dlsns[-1]
            with pytest.raises(EndOfStreamError):
                writer.write(LogRecord(2000, b"after the end"))
        assert writer.is_closed

        # A reader iterates to the end of the stream and stops there.
        with log.open_reader(from_dlsn=dlsns[10]) as reader:
            got = list(reader)
            assert [r.txid for r in got] == list(range(10, 1001))
            assert [r.payload for r in got] == [payload(i) for i in range(10, 1001)]
            assert [r.dlsn for r in got] == dlsns[10:]
            with pytest.raises(EndOfStreamError):
                reader.read_next(timeout=1)
        with log.open_reader(from_txid=995) as reader:
            assert [r.txid for r in reader] == list(range(995, 1001))

        assert log.truncate(dlsns[500]) is True
        ns.delete_log("events")
        assert not ns.log_exists("events")
        with pytest.raises(LogNotFoundError):
            log.open_reader()


def test_a_bulk_outcome_from_a_thread_comes_after_what_was_queued_before_it(  # type: ignore[no-untyped-def]
    open_ns,
) -> None:
    with open_ns() as ns, ns.open_log("outcomes").open_writer() as writer:
        queued = [writer.write_nowait(LogRecord(i, payload(i))) for i in range(50)]
        records = (LogRecord(i, payload(i)) for i in range(50, 60))
        outcome = writer.write_bulk_outcome_nowait(records).result(30)
        assert outcome.error is None and len(outcome.written) == 10
        assert [f.result(10) for f in queued] == sorted(f.result() for f in queued)
        assert queued[-1].result() < outcome.written[0]
        with pytest.raises(TypeError, match="LogRecord"):
            writer.write_bulk_outcome_nowait([b"not a record"])  # type: ignore[list-item]


def test_tailing_reader_in_another_thread(open_ns) -> None:  # type: ignore[no-untyped-def]
    ns = open_ns()
    log = ns.open_log("tail")
    writer = log.open_writer()
    writer.write(LogRecord(0, payload(0)))
    reader = log.open_reader()
    received: list[int] = []
    errors: list[BaseException] = []

    def consume() -> None:
        try:
            for record in reader:  # blocks at the tail until the end of stream
                received.append(record.txid)
        except BaseException as e:
            errors.append(e)

    t = threading.Thread(target=consume)
    t.start()
    for i in range(1, 300):
        writer.write_nowait(LogRecord(i, payload(i)))
        if i % 50 == 0:
            writer.flush()
            time.sleep(0.05)
    writer.mark_end_of_stream()
    t.join(30)
    assert not t.is_alive() and not errors
    assert received == list(range(300))
    reader.close()
    writer.close()


def test_four_threads_four_streams(open_ns) -> None:  # type: ignore[no-untyped-def]
    ns = open_ns()
    n = 3000
    results: dict[str, list[DLSN]] = {}
    errors: list[BaseException] = []
    start = threading.Barrier(4)

    def produce(k: int) -> None:
        try:
            name = f"stream-{k}"
            log = ns.open_log(name)
            with log.open_writer() as writer:
                start.wait(30)
                futures = []
                for i in range(n):
                    rec = LogRecord(i, b"%d:" % k + payload(i))
                    if i % 500 == 0:
                        futures.append(None)
                        assert writer.write(rec) is not None
                    else:
                        futures.append(writer.write_nowait(rec))
                writer.flush()
                results[name] = [f.result(30) for f in futures if f is not None]
        except BaseException as e:
            errors.append(e)

    threads = [threading.Thread(target=produce, args=(k,)) for k in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(120)
    assert not errors, errors
    assert sorted(ns.get_logs()) == [f"stream-{k}" for k in range(4)]

    # Read the four streams back from four threads too.
    read: dict[str, list[int]] = {}

    def consume(k: int) -> None:
        try:
            name = f"stream-{k}"
            with ns.open_log(name).open_reader() as reader:
                got = []
                while len(got) < n:
                    batch = reader.read_bulk(1000, timeout=10)
                    assert batch, f"{name}: stalled at {len(got)}"
                    for r in batch:
                        assert r.payload == b"%d:" % k + payload(r.txid)
                    got.extend(r.txid for r in batch)
                read[name] = got
        except BaseException as e:
            errors.append(e)

    threads = [threading.Thread(target=consume, args=(k,)) for k in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(120)
    assert not errors, errors
    for k in range(4):
        name = f"stream-{k}"
        assert read[name] == list(range(n))
        dlsns = results[name]
        assert len(dlsns) == n - n // 500 and dlsns == sorted(dlsns)
        assert ns.open_log(name).get_record_count() == n


def test_one_writer_shared_by_threads(open_ns) -> None:  # type: ignore[no-untyped-def]
    """Threads sharing one writer: each thread's records stay in its order."""
    ns = open_ns()
    log = ns.open_log("shared")
    writer = log.open_writer()
    counter = iter(range(1_000_000))
    lock = threading.Lock()
    futures: list[tuple[int, int, object]] = []

    def produce(k: int) -> None:
        for j in range(500):
            with lock:  # txids must not go backwards: take one and queue it atomically
                txid = next(counter)
                futures.append((k, j, writer.write_nowait(LogRecord(txid, b"%d/%d" % (k, j)))))

    threads = [threading.Thread(target=produce, args=(k,)) for k in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    writer.close()
    by_thread: dict[int, list[DLSN]] = {}
    for k, _, f in futures:
        by_thread.setdefault(k, []).append(f.result(10))  # type: ignore[attr-defined]
    for dlsns in by_thread.values():
        assert len(dlsns) == 500 and dlsns == sorted(dlsns)
    with log.open_reader() as reader:
        got = reader.read_bulk(2000, timeout=10)
        while len(got) < 2000:
            got += reader.read_bulk(2000, timeout=10)
    assert [r.txid for r in got] == list(range(2000))


def test_close_stops_blocked_reader_and_errors(open_ns) -> None:  # type: ignore[no-untyped-def]
    ns = open_ns()
    log = ns.open_log("close")
    writer = log.open_writer()
    writer.write(LogRecord(1, b"one"))
    reader = log.open_reader()
    assert reader.read_next(timeout=10).payload == b"one"
    # Nothing more arrives: a timed read returns None.
    assert reader.read_next(timeout=0.2) is None

    # A reader blocked (no timeout) in one thread ends when another closes it.
    outcome: list[object] = []

    def blocked_read() -> None:
        try:
            outcome.append(reader.read_next())
        except BaseException as e:
            outcome.append(e)

    t = threading.Thread(target=blocked_read)
    t.start()
    time.sleep(0.3)
    assert t.is_alive()
    reader.close()
    t.join(10)
    assert not t.is_alive() and isinstance(outcome[0], ReadCancelledError)
    with pytest.raises(ReadCancelledError):
        reader.read_next(timeout=1)
    assert list(reader) == []

    # Iteration stops when the reader is closed from another thread.
    reader2 = log.open_reader()
    seen: list[int] = []
    t = threading.Thread(target=lambda: seen.extend(r.txid for r in reader2))
    t.start()
    time.sleep(0.5)
    reader2.close()
    t.join(10)
    assert not t.is_alive() and seen == [1]

    writer.close()
    with pytest.raises(AlreadyClosedError):
        writer.write(LogRecord(2, b"closed"))
    with pytest.raises(TypeError):
        writer.write_nowait(b"not a record")  # type: ignore[arg-type]

    # Not from the loop thread itself (it would wait on itself forever).
    loop = default_loop_thread().loop
    done = threading.Event()
    caught: list[BaseException] = []

    def on_loop() -> None:
        try:
            ns.log_exists("close")
        except RuntimeError as e:
            caught.append(e)
        done.set()

    loop.call_soon_threadsafe(on_loop)
    assert done.wait(5) and caught
    with pytest.raises(TypeError, match="cannot be pickled"):
        pickle.dumps(ns)


# -- processes -----------------------------------------------------------------


def _child_write(uri: str, settings: dict[str, object], stream: str, count: int) -> None:
    """In a child process: open a namespace there and write ``count`` records."""
    with Namespace.open(uri, settings) as ns, ns.open_log(stream).open_writer() as writer:
        writer.write_bulk(LogRecord(i, b"%s-%d" % (stream.encode(), i)) for i in range(count))


def _child_use_inherited(ns: SyncNamespace, result: multiprocessing.Queue) -> None:  # type: ignore[type-arg]
    """In a forked child: the parent's namespace must fail fast, not hang."""
    try:
        ns.log_exists("x")
        result.put("no error")
    except RuntimeError as e:
        result.put(f"RuntimeError: {e}")


@pytest.mark.parametrize("method", ["fork", "spawn"])
def test_subprocesses_open_their_own_namespace(open_ns, method: str) -> None:  # type: ignore[no-untyped-def]
    ns = open_ns()
    ns.create_log("parent")  # the parent's loop thread is running when we fork
    ctx = multiprocessing.get_context(method)
    procs = [
        ctx.Process(target=_child_write, args=(open_ns.uri, open_ns.settings, f"child-{k}", 200))
        for k in range(2)
    ]
    for p in procs:
        p.start()
    for p in procs:
        p.join(120)
        assert p.exitcode == 0
    for k in range(2):
        stream = f"child-{k}"
        with ns.open_log(stream).open_reader() as reader:
            got = []
            while len(got) < 200:
                batch = reader.read_bulk(200, timeout=10)
                assert batch
                got += batch
        assert [r.payload for r in got] == [b"%s-%d" % (stream.encode(), i) for i in range(200)]

    if method == "fork":
        result = ctx.Queue()
        p = ctx.Process(target=_child_use_inherited, args=(ns, result))
        p.start()
        p.join(30)
        assert p.exitcode == 0
        message = result.get(timeout=5)
        assert message.startswith("RuntimeError") and "fork" in message


# -- subscriptions ---------------------------------------------------------------

#: ``logSegmentBasedSubscriptionsStoreEnabled`` and the format that store writes.
STORES = [pytest.param(False, ZK_FORMAT, id="zk"), pytest.param(True, SEGMENT_FORMAT, id="segment")]


def read_n(consumer: SyncConsumer, n: int) -> list[LogRecordWithDLSN]:
    """Exactly ``n`` records (read_bulk returns what is read ahead so far)."""
    got: list[LogRecordWithDLSN] = []
    while len(got) < n:
        batch = consumer.read_bulk(n - len(got), timeout=10)
        assert batch, f"stalled after {len(got)} records"
        got += batch
    return got


def write_records(ns: SyncNamespace, stream: str, txids: range) -> list[DLSN]:
    """Write ``txids`` and close the writer (a completed segment: all visible)."""
    with ns.open_log(stream).open_writer() as writer:
        return writer.write_bulk(LogRecord(i, payload(i)) for i in txids)


@pytest.mark.parametrize(("segment_store", "fmt"), STORES)
def test_consumer_commits_and_resumes_after_the_last_commit(  # type: ignore[no-untyped-def]
    open_ns, segment_store: bool, fmt: str
) -> None:
    ns = open_ns(logSegmentBasedSubscriptionsStoreEnabled=segment_store)
    dlsns = write_records(ns, "subs", range(100))
    log = ns.open_log("subs")
    store = log.subscriptions
    assert isinstance(store, SyncSubscriptionsStore) and store.format == fmt

    with log.subscribe("billing") as consumer:
        assert isinstance(consumer, SyncConsumer) and consumer.subscriber_id == "billing"
        assert consumer.position is None
        # Committing before reading: the async consumer's error, word for word.
        with pytest.raises(IllegalStateError) as sync_error:
            consumer.commit()
        with pytest.raises(IllegalStateError) as async_error:
            ns.loop_thread.run(consumer.consumer.commit())
        assert str(sync_error.value) == str(async_error.value)
        assert consumer.committed() == NonInclusiveLowerBound

        first = consumer.read(timeout=10)
        assert first is not None and first.txid == 0 and first.payload == payload(0)
        got = [first, *read_n(consumer, 9)]
        assert [r.txid for r in got] == list(range(10))
        # position follows the records handed out, not the ones read ahead.
        assert consumer.position == dlsns[9]
        assert consumer.commit() == dlsns[9]
        assert consumer.committed() == dlsns[9] == store.get_last_commit_position("billing")
        # Pipelined: futures, resolved once durable.
        futures = [consumer.commit_nowait(dlsn) for dlsn in dlsns[:9]]
        futures.append(consumer.commit_nowait())  # the last record read
        for f in futures:
            assert f.result(10) is None
        assert consumer.committed() == dlsns[9]

        for record in consumer:
            if record.txid == 49:
                break
        assert consumer.commit(record) == dlsns[49]
        assert consumer.commit(dlsns[20]) == dlsns[20]  # older: a no-op
        assert consumer.committed() == dlsns[49]
        info = store.describe("billing")
        assert info.owned_here and info.format == fmt and info.position == dlsns[49]
        # Reading on without committing does not move the committed position.
        assert [r.txid for r in read_n(consumer, 10)] == list(range(50, 60))

    # Closed: released, the position stays, every read fails like the async one.
    with pytest.raises(IllegalStateError, match="closed"):
        consumer.read(timeout=1)
    assert list(consumer) == []
    assert store.describe("billing").owned_here is False
    assert store.get_last_commit_positions() == {"billing": dlsns[49]}
    assert store.list_subscribers() == ["billing"]

    with log.subscribe("billing") as consumer:
        again = consumer.read(timeout=10)
        assert again is not None and again.txid == 50  # just after the last commit
        consumer.seek(dlsns[0])  # back to the start; nothing committed by seeking
        assert consumer.position is None
        assert [r.txid for r in read_n(consumer, 3)] == [0, 1, 2]
        assert consumer.committed() == dlsns[49]

        # Iteration stops at the end of stream.
        with log.open_writer() as writer:
            writer.write_bulk(LogRecord(i, payload(i)) for i in range(100, 120))
            writer.mark_end_of_stream()
        assert [r.txid for r in consumer] == list(range(3, 120))
        with pytest.raises(EndOfStreamError):
            consumer.read(timeout=1)
        last = consumer.commit()
        assert last == consumer.position and last > dlsns[-1]
    assert store.get_last_commit_position("billing") == last


def test_consumer_close_or_seek_from_another_thread(open_ns) -> None:  # type: ignore[no-untyped-def]
    ns = open_ns()
    dlsns = write_records(ns, "blocked", range(1))
    log = ns.open_log("blocked")
    consumer = log.subscribe("a")
    assert consumer.read(timeout=10).txid == 0  # type: ignore[union-attr]
    assert consumer.read(timeout=0.2) is None  # at the tail

    outcome: list[object] = []

    def blocked_read() -> None:
        try:
            outcome.append(consumer.read())  # no timeout
        except BaseException as e:
            outcome.append(e)

    # A seek makes a read blocked in another thread go on from the new position.
    t = threading.Thread(target=blocked_read)
    t.start()
    time.sleep(0.3)
    assert t.is_alive()
    consumer.seek(dlsns[0])
    t.join(10)
    assert not t.is_alive()
    assert isinstance(outcome[0], LogRecordWithDLSN) and outcome[0].txid == 0
    assert consumer.position == dlsns[0]

    # close() ends a read blocked in another thread.
    outcome.clear()
    t = threading.Thread(target=blocked_read)
    t.start()
    time.sleep(0.3)
    assert t.is_alive()
    consumer.close()
    t.join(10)
    assert not t.is_alive() and isinstance(outcome[0], IllegalStateError)
    with pytest.raises(IllegalStateError):
        consumer.seek(dlsns[0])
    consumer.close()  # again: a no-op

    # Iteration in another thread stops when the consumer is closed.
    other = log.subscribe("b")
    seen: list[int] = []
    t = threading.Thread(target=lambda: seen.extend(r.txid for r in other))
    t.start()
    time.sleep(0.5)
    other.close()
    t.join(10)
    assert not t.is_alive() and seen == [0]
    with pytest.raises(TypeError, match="cannot be pickled"):
        pickle.dumps(other)


@pytest.mark.parametrize(("segment_store", "fmt"), STORES)
def test_sync_store_acquire_release_reset(  # type: ignore[no-untyped-def]
    open_ns, segment_store: bool, fmt: str
) -> None:
    ns = open_ns(logSegmentBasedSubscriptionsStoreEnabled=segment_store)
    dlsns = write_records(ns, "admin", range(10))
    log = ns.open_log("admin")
    store = log.subscriptions

    assert store.list_subscribers() == []
    assert store.read_znode("ops") == (None, None)
    assert store.acquire("ops") == NonInclusiveLowerBound  # never committed
    store.advance_commit_position("ops", dlsns[5])
    store.advance_commit_position("ops", dlsns[3])  # older: a no-op
    info = store.describe("ops")
    assert info.owned_here and info.format == fmt and info.position == dlsns[5]
    znode, version = store.read_znode("ops")
    assert isinstance(version, int)
    if segment_store:
        assert isinstance(znode, SegmentSubscription) and znode.segment_id is not None
    else:
        assert isinstance(znode, ZkPosition) and znode.position == dlsns[5]

    # An admin reset goes backwards; the position survives release.
    store.reset_position("ops", dlsns[2])
    assert store.get_last_commit_position("ops") == dlsns[2]
    store.release("ops")
    assert store.describe("ops").owned_here is False
    assert store.get_last_commit_positions() == {"ops": dlsns[2]}
    assert store.read_owner("ops") is None

    with log.subscribe("ops") as consumer:
        assert consumer.read(timeout=10).txid == 3  # type: ignore[union-attr]

    pending = [store.advance_commit_position_nowait("other", d) for d in dlsns[:4]]
    for f in pending:
        assert f.result(10) is None
    assert store.get_last_commit_position("other") == dlsns[3]
    assert store.list_subscribers() == ["ops", "other"]
    assert store.delete_subscriber("ops") is True
    assert store.delete_subscriber("ops") is False
    assert store.delete_all_subscribers() == ["other"]
    assert store.list_subscribers() == []
    store.close()
