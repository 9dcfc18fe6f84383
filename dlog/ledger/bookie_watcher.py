"""Which bookies are available, from their registrations in ZooKeeper.

Writable bookies are the children of ``<ledgers>/available`` (except
``readonly``); read-only ones are under ``available/readonly``. Watches
keep both sets current without polling.
"""

from __future__ import annotations

import asyncio
import logging

from dlog.tasks import BackgroundTasks
from dlog.zk import NoNodeError, WatchedEvent, ZooKeeper

log = logging.getLogger(__name__)


class BookieWatcher:
    def __init__(self, zk: ZooKeeper, ledgers_root: str) -> None:
        self.zk = zk
        self.available_path = f"{ledgers_root}/available"
        self.readonly_path = f"{ledgers_root}/available/readonly"
        self.writable: frozenset[str] = frozenset()
        self.readonly: frozenset[str] = frozenset()
        self._changed = asyncio.Event()
        self._closed = False
        self._tasks = BackgroundTasks()

    async def start(self) -> None:
        await self._refresh_writable()
        await self._refresh_readonly()

    def close(self) -> None:
        self._closed = True
        self._tasks.cancel_all()  # a refresh may be retrying in a sleep

    async def _children(self, path: str, watch) -> list[str]:  # type: ignore[no-untyped-def]
        try:
            return await self.zk.get_children(path, watch=watch)
        except NoNodeError:
            # Not created yet: watch for its creation instead.
            await self.zk.exists(path, watch=watch)
            return []

    async def _refresh_writable(self) -> None:
        if self._closed:
            return
        children = await self._children(self.available_path, self._on_writable_event)
        self.writable = frozenset(c for c in children if c != "readonly")
        self._changed.set()

    async def _refresh_readonly(self) -> None:
        if self._closed:
            return
        self.readonly = frozenset(await self._children(self.readonly_path, self._on_readonly_event))
        self._changed.set()

    def _on_writable_event(self, _event: WatchedEvent) -> None:
        self._tasks.spawn(self._safe(self._refresh_writable))

    def _on_readonly_event(self, _event: WatchedEvent) -> None:
        self._tasks.spawn(self._safe(self._refresh_readonly))

    async def _safe(self, fn) -> None:  # type: ignore[no-untyped-def]
        for attempt in range(20):
            try:
                await fn()
                return
            except Exception as e:
                if self._closed:
                    return
                log.debug("bookie list refresh failed (%r); retrying", e)
                await asyncio.sleep(min(2.0, 0.05 * 2**attempt))

    async def wait_for(self, count: int, timeout: float) -> frozenset[str]:
        """Wait until at least ``count`` bookies are writable."""
        deadline = asyncio.get_running_loop().time() + timeout
        while len(self.writable) < count:
            remaining = deadline - asyncio.get_running_loop().time()
            if remaining <= 0:
                break
            self._changed.clear()
            try:
                await asyncio.wait_for(self._changed.wait(), remaining)
            except TimeoutError:
                break
        return self.writable
