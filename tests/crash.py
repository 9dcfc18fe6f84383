"""In-process stand-ins for kill -9 and for a ZooKeeper session expiring,
for tests that run several owners on one event loop."""

from __future__ import annotations

import asyncio
import contextlib

from kazoo.client import KazooClient

from dlog.namespace import Namespace
from dlog.zk import ZooKeeper


async def crash(ns: Namespace) -> None:
    """What kill -9 does to a namespace's process: its subscriptions stores
    stop on the spot, its bookie connections drop and its ZooKeeper session
    ends (so its ephemeral znodes go, as after the session timeout). Nothing
    is released or closed gracefully, then or later."""
    stores = [lm._subscriptions for lm in ns._logs.values() if lm._subscriptions is not None]
    ns._logs.clear()  # a later ns.close() must not release anything
    for store in stores:
        store.closed = True
        tasks = getattr(store, "_tasks", None)
        if tasks is not None:
            tasks.cancel_all()
    ns.bk.closed = True
    ns.bk.watcher.close()
    await ns.bk.pool.close()
    with contextlib.suppress(Exception):
        await ns.zk.stop()


async def expire_session(zk: ZooKeeper, timeout: float = 30.0) -> None:
    """Expire ``zk``'s session from the server side (another client attaches
    to it and closes it), then wait until ``zk`` has a new session."""
    old = zk.session_id
    session_id, password = zk.client.client_id
    other = KazooClient(hosts=zk.hosts, client_id=(session_id, password))
    await asyncio.to_thread(other.start)
    await asyncio.to_thread(other.stop)
    other.close()
    deadline = asyncio.get_running_loop().time() + timeout
    while zk.session_id in (old, None) or not zk.connected:
        if asyncio.get_running_loop().time() > deadline:
            raise AssertionError(f"session {old:#x} did not expire and reconnect in {timeout}s")
        await asyncio.sleep(0.05)
