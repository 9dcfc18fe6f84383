"""dlog.zk against a real ZooKeeper whose connection is cut mid-call.

A relay between the client and the server swallows ZooKeeper's answers and
then drops the connection: the call was sent (and a write applied) but its
answer is lost, the client sees a real connection loss and reconnects, as
when a network or a server fails under it."""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

import pytest

from dlog.errors import LogExistsError, SubscriptionFencedError
from dlog.ledger.metadata import LedgerMetadata, LedgerState
from dlog.ledger.metadata_store import LedgerMetadataStore
from dlog.log_metadata import LogMetadataStore
from dlog.sandbox.zookeeper import ZooKeeperServer
from dlog.zk import (
    BadVersionError,
    ConnectionLossError,
    NodeExistsError,
    NoNodeError,
    Retry,
    TransactionOp,
    ZooKeeper,
    ZooKeeperClosedError,
    first_error,
)

pytestmark = pytest.mark.integration


class Relay:
    """A TCP relay to ZooKeeper that can hold back answers and cut connections."""

    def __init__(self, host: str, port: int) -> None:
        self.target = (host, port)
        self.swallow_answers = False
        self.connections = 0
        self._writers: set[asyncio.StreamWriter] = set()
        self._server: asyncio.Server | None = None

    @property
    def connect_string(self) -> str:
        assert self._server is not None
        return f"127.0.0.1:{self._server.sockets[0].getsockname()[1]}"

    async def start(self) -> None:
        self._server = await asyncio.start_server(self._serve, "127.0.0.1", 0)

    async def _pump(
        self, src: asyncio.StreamReader, dst: asyncio.StreamWriter, answers: bool
    ) -> None:
        with contextlib.suppress(OSError):
            while data := await src.read(65536):
                if answers and self.swallow_answers:
                    continue
                dst.write(data)
                await dst.drain()
        dst.close()

    async def _serve(self, client_r: asyncio.StreamReader, client_w: asyncio.StreamWriter) -> None:
        self.connections += 1
        server_r, server_w = await asyncio.open_connection(*self.target)
        self._writers |= {client_w, server_w}
        try:
            await asyncio.gather(
                self._pump(client_r, server_w, False), self._pump(server_r, client_w, True)
            )
        finally:
            self._writers -= {client_w, server_w}

    def cut(self) -> None:
        """Drop every connection at once; answers held back are lost."""
        self.swallow_answers = False
        for w in list(self._writers):
            w.transport.abort()

    async def stop(self) -> None:
        self.cut()
        if self._server is not None:
            self._server.close()
            await self._server.wait_closed()


@pytest.fixture
async def relay(zk_server: ZooKeeperServer) -> AsyncIterator[Relay]:
    r = Relay(zk_server.host, zk_server.port)
    await r.start()
    yield r
    await r.stop()


@pytest.fixture
async def client(relay: Relay) -> AsyncIterator[ZooKeeper]:
    """A session through the relay (``zk`` talks to the server directly)."""
    c = ZooKeeper(relay.connect_string)
    await c.start()
    yield c
    await c.stop()


async def answer_lost(
    relay: Relay, call: Awaitable[Any], landed: Callable[[], Awaitable[bool]]
) -> Any:
    """Start ``call`` with its answer held back, wait until ``landed``
    says ZooKeeper applied it, cut the connection, and return the outcome."""
    relay.swallow_answers = True
    task = asyncio.ensure_future(call)
    try:
        for _ in range(200):
            if await landed():
                break
            await asyncio.sleep(0.02)
        else:
            raise AssertionError("the call never reached ZooKeeper")
    finally:
        relay.cut()
    return await asyncio.wait_for(task, 30)


async def version_of(zk: ZooKeeper, path: str) -> int:
    stat = await zk.exists(path)
    return -1 if stat is None else stat.version


async def test_a_read_is_retried_after_a_connection_loss(
    client: ZooKeeper, zk: ZooKeeper, zk_root: str, relay: Relay, caplog: pytest.LogCaptureFixture
) -> None:
    await zk.create(zk_root, b"v")

    async def sent() -> bool:
        await asyncio.sleep(0.2)  # long enough for the request to go out
        return True

    connections = relay.connections
    with caplog.at_level(logging.DEBUG, logger="dlog.retry"):
        data, stat = await answer_lost(relay, client.get(zk_root), sent)
    assert data == b"v" and stat.version == 0
    assert relay.connections > connections  # answered on a new connection
    assert "ConnectionLossError" in caplog.text  # it was lost, then retried

    with pytest.raises(ConnectionLossError) as lost:
        await answer_lost(relay, client.get(zk_root, retry=False), sent)
    assert lost.value.zk_code == -4 and lost.value.attempts == 1


async def test_a_retried_write_says_it_may_have_landed(
    client: ZooKeeper, zk: ZooKeeper, zk_root: str, relay: Relay
) -> None:
    await zk.create(zk_root, b"v0")

    async def set_landed() -> bool:
        return await version_of(zk, zk_root) == 1

    with pytest.raises(BadVersionError) as e:
        await answer_lost(relay, client.set(zk_root, b"v1", version=0), set_landed)
    assert e.value.attempts == 2 and e.value.zk_code == -103
    assert await zk.get(zk_root) == (b"v1", (await zk.get(zk_root))[1])

    path = f"{zk_root}/child"

    async def create_landed() -> bool:
        return await version_of(zk, path) == 0

    with pytest.raises(NodeExistsError) as e2:
        await answer_lost(relay, client.create(path, b"c"), create_landed)
    assert e2.value.attempts == 2 and e2.value.zk_code == -110


async def test_a_call_under_retry_is_retried_as_a_whole(
    client: ZooKeeper, zk: ZooKeeper, zk_root: str, relay: Relay
) -> None:
    await zk.create(zk_root, b"v0")
    retry = Retry(client.retry_policy)

    async def landed() -> bool:
        return await version_of(zk, zk_root) == 1

    with pytest.raises(BadVersionError) as e:
        await answer_lost(relay, retry(client.set, zk_root, b"v1", version=0), landed)
    assert retry.attempts == 2 and e.value.attempts == 2


async def test_stores_recognise_their_own_write_after_a_real_connection_loss(
    client: ZooKeeper, zk: ZooKeeper, zk_root: str, relay: Relay
) -> None:
    root = f"{zk_root}/ledgers"
    await zk.ensure_path(root)
    store = LedgerMetadataStore(client, root)
    md = LedgerMetadata(
        ledger_id=5,
        ensemble_size=1,
        write_quorum_size=1,
        ack_quorum_size=1,
        ensembles={0: ["127.0.0.1:3181"]},
        password=b"pw",
    )
    md, version = await store.create(md)
    closed = md.replace(state=LedgerState.CLOSED, last_entry_id=-1, length=0)

    async def landed() -> bool:
        return await version_of(zk, store.ledger_path(5)) == 1

    assert await answer_lost(relay, store.write(closed, version), landed) == 1
    assert await store.read(5) == (closed, 1)

    logs = LogMetadataStore(client, f"{zk_root}/ns")
    await logs.create_log("warmup")  # the namespace exists: one transaction remains

    async def log_landed() -> bool:
        return await version_of(zk, logs.paths("s").ledgers) == 0

    with pytest.raises(LogExistsError, match="earlier attempt"):
        await answer_lost(relay, logs.create_log("s"), log_landed)


async def test_a_stopped_client_fails_at_once_with_a_dlog_error(zk_server: ZooKeeperServer) -> None:
    c = ZooKeeper(zk_server.connect_string)
    await c.start()
    await c.stop()
    loop = asyncio.get_running_loop()
    started = loop.time()
    with pytest.raises(ZooKeeperClosedError):
        await c.get("/")
    assert loop.time() - started < 1.0  # not retried


async def test_answers_from_a_real_server_are_dlog_errors(zk: ZooKeeper, zk_root: str) -> None:
    with pytest.raises(NoNodeError) as e:
        await zk.get(f"{zk_root}/missing")
    assert e.value.zk_code == -101 and e.value.path == f"{zk_root}/missing"
    results = await zk.transaction(
        [
            ("create", (zk_root, b""), {}),
            ("set_data", (f"{zk_root}/missing", b""), {}),
            ("create", (f"{zk_root}/x", b""), {}),
        ]
    )
    assert [type(r).__name__ for r in results] == [
        "RolledBackError",
        "NoNodeError",
        "RolledBackError",
    ]
    assert await zk.exists(zk_root) is None


async def test_subscription_stores_recognise_their_own_write_after_a_connection_loss(
    client: ZooKeeper, zk: ZooKeeper, zk_root: str, relay: Relay
) -> None:
    """A log-segment owner's compare-and-set whose answer is lost, retried
    onto its own write, is a success, not "changed by another owner"; the
    the same for converting one to the ZooKeeper format."""
    from dlog.conf.dlog import DLogConfig
    from dlog.dlsn import DLSN
    from dlog.stream import StreamContext
    from subscriptions.format import SegmentSubscription
    from subscriptions.log_segment import LogSegmentSubscriptionsStore
    from subscriptions.zk_store import ZKSubscriptionsStore

    metadata = LogMetadataStore(client, f"{zk_root}/ns")
    await metadata.create_log("s")
    ctx = StreamContext(
        name="s",
        conf=DLogConfig(),
        zk=client,
        bk=None,  # type: ignore[arg-type]  # no ledger is touched here
        metadata=metadata,
        namespace_uri="distributedlog://test/ns",
        data_set=f"{zk_root}/ns/s",
    )
    store = LogSegmentSubscriptionsStore(ctx)
    await zk.ensure_path(ctx.paths.subscribers)
    path = store.znode("sub")
    sub = SegmentSubscription(name="sub", segment_id=7, last_commit=DLSN(1, 2, 3))

    async def created() -> bool:
        return await version_of(zk, path) == 0

    assert await answer_lost(relay, store._cas("sub", sub, None), created) == 0

    moved = sub.replace(last_commit=DLSN(1, 5, 0))

    async def set_landed() -> bool:
        return await version_of(zk, path) == 1

    assert await answer_lost(relay, store._cas("sub", moved, 0), set_landed) == 1
    # Someone else's write is still a fence.
    with pytest.raises(SubscriptionFencedError):
        await store._cas("sub", sub, 0)

    # ZooKeeper's store converting it: its compare-and-set lands, the answer
    # is lost, the retry meets its own write.
    zk_store = ZKSubscriptionsStore(ctx)
    from subscriptions.format import encode_zk_position

    data = encode_zk_position(DLSN(1, 5, 0))

    async def converted() -> bool:
        return await version_of(zk, path) == 2

    ops: list[TransactionOp] = [
        ("set_data", (path, data), {"version": 1}),
        ("delete", (store.record_znode("sub"),), {}),
    ]
    e = await answer_lost(relay, _failed_transaction(client, ops), converted)
    assert isinstance(e, BadVersionError) and e.attempts == 2
    assert await zk_store._landed("sub", e, 2, data, None)
    assert not await zk_store._landed("sub", e, 2, b"other", None)
    assert not await zk_store._landed("sub", e, 2, data, b"a record")


async def _failed_transaction(client: ZooKeeper, ops: list[TransactionOp]) -> BaseException:
    error = first_error(await client.transaction(ops))
    assert error is not None
    return error
