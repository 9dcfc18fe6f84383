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


async def expire_session(zk: ZooKeeper, timeout: float = 60.0) -> None:
    """Expire ``zk``'s session from the server side (another client attaches
    to it and closes it), then wait until ``zk`` has a new session.

    Attaching moves the session to the other client, and ``zk`` reconnects
    at once; if it gets there before the close, the session moves back and
    the close fails with it (seen under load). So it is tried again until the
    session is gone."""
    old = zk.session_id
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    while True:
        cid = zk.client.client_id
        if cid is not None and cid[0] == old:
            other = KazooClient(hosts=zk.hosts, client_id=cid)
            with contextlib.suppress(Exception):
                await asyncio.to_thread(other.start)
                await asyncio.to_thread(other.stop)
            other.close()
        attempt_ends = min(deadline, loop.time() + 10.0)
        while zk.session_id in (old, None) or not zk.connected:
            if loop.time() > attempt_ends:
                break
            await asyncio.sleep(0.05)
        else:
            return
        if loop.time() > deadline:
            raise AssertionError(f"session {old:#x} did not expire and reconnect in {timeout}s")
