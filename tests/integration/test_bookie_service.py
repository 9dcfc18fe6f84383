"""BookieService: the bookie, then its server, then its registration, and
back in reverse. Clients rely on the order: a bookie found in ZooKeeper
answers on its port, and the port answers only once the bookie can serve."""

from __future__ import annotations

import asyncio

import pytest

from dlog.bookie.bookie import Bookie
from dlog.bookie.registration import BookieRegistration
from dlog.bookie.server import BookieServer
from dlog.bookie.service import BookieService
from dlog.ledger.bookie_client import BookieClient
from dlog.sandbox.bookies import bookie_config
from dlog.sandbox.ports import free_port
from dlog.zk import ZooKeeper


async def answers(port: int) -> bool:
    """The port answers GET_BOOKIE_INFO."""
    client = BookieClient(f"127.0.0.1:{port}", connect_timeout=1.0)
    try:
        await client.connect()
        return (await client.bookie_info(timeout=2.0)).status == 0
    except Exception:
        return False
    finally:
        await client.close()


async def refuses(port: int) -> bool:
    try:
        _, writer = await asyncio.open_connection("127.0.0.1", port)
    except OSError:
        return True
    writer.close()
    return False


async def test_start_and_stop_in_order(
    make_bookie, zk: ZooKeeper, zk_root: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    events: list[tuple[str, bool]] = []
    servers: list[BookieServer] = []
    server_start, server_stop = BookieServer.start, BookieServer.stop
    register, unregister = BookieRegistration.register, BookieRegistration.unregister
    core_stop = Bookie.stop

    def path(bookie_id: str) -> str:
        return f"{zk_root}/ledgers/available/{bookie_id}"

    async def spy_server_start(self: BookieServer) -> None:
        core = self.bookie
        ready = core.storage is not None and core.disk is not None and bool(core.journals)
        events.append(("server started on a started bookie", ready))
        servers.append(self)
        await server_start(self)

    async def spy_register(self: BookieRegistration, read_only: bool = False) -> None:
        events.append(("registered once the port answers", await answers(servers[-1].port)))
        await register(self, read_only)

    async def spy_unregister(self: BookieRegistration) -> None:
        events.append(("unregistered while the port answers", await answers(servers[-1].port)))
        await unregister(self)

    async def spy_server_stop(self: BookieServer) -> None:
        gone = await zk.exists(path(self.bookie.bookie_id)) is None
        events.append(("server stopped after unregistering", gone))
        await server_stop(self)

    async def spy_core_stop(self: Bookie) -> None:
        events.append(("bookie stopped after its server", await refuses(servers[-1].port)))
        await core_stop(self)

    monkeypatch.setattr(BookieServer, "start", spy_server_start)
    monkeypatch.setattr(BookieServer, "stop", spy_server_stop)
    monkeypatch.setattr(BookieRegistration, "register", spy_register)
    monkeypatch.setattr(BookieRegistration, "unregister", spy_unregister)
    monkeypatch.setattr(Bookie, "stop", spy_core_stop)

    bookie = await make_bookie()
    assert await zk.exists(path(bookie.bookie_id)) is not None
    await bookie.stop()
    assert bookie.stopped
    assert events == [
        ("server started on a started bookie", True),
        ("registered once the port answers", True),
        ("unregistered while the port answers", True),
        ("server stopped after unregistering", True),
        ("bookie stopped after its server", True),
    ]


async def test_a_bookie_that_must_stop_itself_leaves_zookeeper_and_its_port(
    tmp_path, ledgers_uri: str, zk: ZooKeeper, zk_root: str
) -> None:
    """readOnlyModeEnabled=false: a full disk stops the bookie, and with it
    its registration and server (the bookie asks its owner to stop), and
    the stop runs to its end: ``stopped`` is set, so ``dlog bookie`` exits
    (the stop runs in one of the bookie's own tasks, and once cancelled it)."""
    conf = bookie_config(
        tmp_path / "b0",
        port=free_port(),
        metadata_service_uri=ledgers_uri,
        readOnlyModeEnabled=False,
    )
    bookie = BookieService(conf)
    await bookie.start()
    assert bookie.server is not None and bookie.core.disk is not None
    port = bookie.server.port
    path = f"{zk_root}/ledgers/available/{bookie.bookie_id}"
    assert await zk.exists(path) is not None and await answers(port)
    bookie.core.disk.threshold, bookie.core.disk.lwm = 0.00001, 0.0
    bookie.core.disk.check()
    for _ in range(100):
        if await zk.exists(path) is None and await refuses(port):
            break
        await asyncio.sleep(0.05)
    assert await zk.exists(path) is None
    assert await zk.exists(f"{zk_root}/ledgers/available/readonly/{bookie.bookie_id}") is None
    assert await refuses(port)
    await asyncio.wait_for(bookie.core.wait_stopped(), 10)
    assert bookie.stopped
