"""Which bookies are available, from their registrations in ZooKeeper.

Writable bookies are the children of ``<ledgers>/available`` (except
``readonly``); read-only ones are under ``available/readonly``. Watches
keep both sets current without polling.

Each registration's data says what the bookie understands (its
``BookieServiceInfoFormat``); it is read when a bookie appears, cached by
bookie id, re-read when a data watch fires and dropped when the bookie is
gone, as upstream's ZKRegistrationClient caches BookieServiceInfo.
"""

from __future__ import annotations

import asyncio
import logging

from dlog.protocol.bookie_service_info import BookieServiceInfo, decode_registration
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
        #: Bookie id -> what its registration publishes, and where it was read.
        self._info: dict[str, tuple[str, BookieServiceInfo]] = {}
        #: Registration paths with a data watch set (a get sets one per call).
        self._data_watched: set[str] = set()
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
        await self._sync_info()

    async def _refresh_readonly(self) -> None:
        if self._closed:
            return
        self.readonly = frozenset(await self._children(self.readonly_path, self._on_readonly_event))
        self._changed.set()
        await self._sync_info()

    # -- registration data ---------------------------------------------------------
    def _registration_path(self, bookie_id: str) -> str:
        """Where the bookie is registered now, as far as the sets know."""
        if bookie_id in self.writable or bookie_id not in self.readonly:
            return f"{self.available_path}/{bookie_id}"
        return f"{self.readonly_path}/{bookie_id}"

    async def _sync_info(self) -> None:
        """Read the data of new registrations (and of bookies that moved
        between writable and read-only); forget bookies that are gone."""
        registered = self.writable | self.readonly
        for bookie_id in list(self._info):
            if bookie_id not in registered:
                del self._info[bookie_id]
        stale = [
            b
            for b in sorted(registered)
            if b not in self._info or self._info[b][0] != self._registration_path(b)
        ]
        if stale:
            await asyncio.gather(*(self._read_info(b) for b in stale))

    async def _read_info(self, bookie_id: str) -> BookieServiceInfo | None:
        """Read the registration, writable first then read-only, as
        upstream does; None (and nothing cached) if the bookie is not
        registered at all."""
        for path in (f"{self.available_path}/{bookie_id}", f"{self.readonly_path}/{bookie_id}"):
            watch = None if path in self._data_watched else self._on_info_event
            self._data_watched.add(path)  # before awaiting: concurrent reads set one watch
            try:
                data, _ = await self.zk.get(path, watch=watch)
            except NoNodeError:
                if watch is not None:
                    self._data_watched.discard(path)  # no node, no watch left
                continue
            except BaseException:
                if watch is not None:
                    self._data_watched.discard(path)
                raise
            info = decode_registration(bookie_id, data)
            self._info[bookie_id] = (path, info)
            return info
        self._info.pop(bookie_id, None)
        return None

    def _on_info_event(self, event: WatchedEvent) -> None:
        path = event.path
        if path is None:
            # A session event (the client closing): every watch is gone.
            self._data_watched.clear()
            return
        self._data_watched.discard(path)
        bookie_id = path.rpartition("/")[2]
        if self._closed or bookie_id not in self._info:
            return
        self._tasks.spawn(self._safe(lambda: self._read_info(bookie_id)))

    async def service_info(self, bookie_id: str) -> BookieServiceInfo | None:
        """What ``bookie_id`` publishes, from the cache or else read now
        (an ensemble may name a bookie not yet seen); None when it is not
        registered."""
        cached = self._info.get(bookie_id)
        if cached is not None:
            return cached[1]
        return await self._read_info(bookie_id)

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
                async with asyncio.timeout(remaining):
                    await self._changed.wait()
            except TimeoutError:
                break
        return self.writable
