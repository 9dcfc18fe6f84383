"""asyncio face of kazoo.

kazoo is thread based; its ``*_async`` calls return results completed on
kazoo's own threads. This module turns those into asyncio futures and
watches into loop callbacks, so the rest of dlog awaits ZooKeeper like any
other I/O, while scripts can still use the plain kazoo client underneath.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Sequence
from typing import Any

from kazoo.client import KazooClient, KazooState
from kazoo.exceptions import (
    BadVersionError,
    ConnectionLoss,
    KazooException,
    NodeExistsError,
    NoNodeError,
    NotEmptyError,
    OperationTimeoutError,
    SessionExpiredError,
)
from kazoo.handlers.threading import KazooTimeoutError
from kazoo.protocol.states import EventType, WatchedEvent, ZnodeStat

log = logging.getLogger(__name__)

__all__ = [
    "BadVersionError",
    "ConnectionLoss",
    "EventType",
    "KazooException",
    "KazooState",
    "NoNodeError",
    "NodeExistsError",
    "NotEmptyError",
    "SessionExpiredError",
    "WatchedEvent",
    "ZnodeStat",
    "ZooKeeper",
    "RETRIABLE_ZK_ERRORS",
]

#: Errors after which the same ZooKeeper call may simply be tried again.
RETRIABLE_ZK_ERRORS: tuple[type[BaseException], ...] = (
    ConnectionLoss,
    OperationTimeoutError,
    KazooTimeoutError,
)


def _settle(fut: asyncio.Future[Any], value: Any, exc: BaseException | None) -> None:
    if fut.done():
        return
    if exc is not None:
        fut.set_exception(exc)
    else:
        fut.set_result(value)


class ZooKeeper:
    """An asyncio wrapper around one :class:`KazooClient` session."""

    def __init__(
        self,
        hosts: str,
        timeout: float = 10.0,
        *,
        read_only: bool = False,
        client: KazooClient | None = None,
    ) -> None:
        self.hosts = hosts
        self.client = client or KazooClient(
            hosts=hosts, timeout=timeout, read_only=read_only, logger=logging.getLogger("kazoo")
        )
        self._loop: asyncio.AbstractEventLoop | None = None
        self._state_listeners: list[Callable[[str], Any]] = []
        self.client.add_listener(self._on_state)

    # -- lifecycle -----------------------------------------------------------
    @property
    def loop(self) -> asyncio.AbstractEventLoop:
        if self._loop is None:
            self._loop = asyncio.get_running_loop()
        return self._loop

    async def start(self, timeout: float = 15.0) -> None:
        self._loop = asyncio.get_running_loop()
        try:
            await self.loop.run_in_executor(None, lambda: self.client.start(timeout=timeout))
        except KazooTimeoutError:
            from dlog.errors import ZooKeeperError

            raise ZooKeeperError(
                f"could not connect to ZooKeeper at {self.hosts} within {timeout}s"
            ) from None

    async def stop(self) -> None:
        def _stop() -> None:
            try:
                self.client.stop()
            finally:
                self.client.close()

        await asyncio.get_running_loop().run_in_executor(None, _stop)

    @property
    def connected(self) -> bool:
        return self.client.connected

    @property
    def session_id(self) -> int | None:
        sid = self.client.client_id
        return sid[0] if sid else None

    def add_state_listener(self, listener: Callable[[str], Any]) -> None:
        """Call ``listener(state)`` on the loop for LOST/SUSPENDED/CONNECTED."""
        self._state_listeners.append(listener)

    def remove_state_listener(self, listener: Callable[[str], Any]) -> None:
        if listener in self._state_listeners:
            self._state_listeners.remove(listener)

    def _on_state(self, state: str) -> None:
        loop = self._loop
        if loop is None or loop.is_closed():
            return
        for listener in list(self._state_listeners):
            try:
                loop.call_soon_threadsafe(listener, state)
            except RuntimeError:
                pass

    # -- bridging -------------------------------------------------------------
    def _wrap(self, async_result: Any) -> asyncio.Future[Any]:
        loop = self.loop
        fut: asyncio.Future[Any] = loop.create_future()

        def done(ar: Any) -> None:
            try:
                value, exc = ar.get(block=False), None
            except BaseException as e:
                value, exc = None, e
            try:
                loop.call_soon_threadsafe(_settle, fut, value, exc)
            except RuntimeError:
                pass  # loop closed; nobody is waiting

        async_result.rawlink(done)
        return fut

    def _watch(
        self, watch: Callable[[WatchedEvent], Any] | None
    ) -> Callable[[WatchedEvent], None] | None:
        if watch is None:
            return None
        loop = self.loop

        def fire(event: WatchedEvent) -> None:
            try:
                loop.call_soon_threadsafe(watch, event)
            except RuntimeError:
                pass

        return fire

    # -- operations -----------------------------------------------------------
    async def get(
        self, path: str, watch: Callable[[WatchedEvent], Any] | None = None
    ) -> tuple[bytes, ZnodeStat]:
        return await self._wrap(self.client.get_async(path, watch=self._watch(watch)))

    async def exists(
        self, path: str, watch: Callable[[WatchedEvent], Any] | None = None
    ) -> ZnodeStat | None:
        return await self._wrap(self.client.exists_async(path, watch=self._watch(watch)))

    async def get_children(
        self, path: str, watch: Callable[[WatchedEvent], Any] | None = None
    ) -> list[str]:
        return await self._wrap(self.client.get_children_async(path, watch=self._watch(watch)))

    async def create(
        self,
        path: str,
        value: bytes = b"",
        *,
        ephemeral: bool = False,
        sequence: bool = False,
        makepath: bool = False,
    ) -> str:
        return await self._wrap(
            self.client.create_async(
                path, value, ephemeral=ephemeral, sequence=sequence, makepath=makepath
            )
        )

    async def set(self, path: str, value: bytes, version: int = -1) -> ZnodeStat:
        return await self._wrap(self.client.set_async(path, value, version=version))

    async def delete(self, path: str, version: int = -1) -> None:
        await self._wrap(self.client.delete_async(path, version=version))

    async def delete_recursive(self, path: str) -> None:
        """Delete ``path`` and everything under it; a missing node is fine."""
        try:
            children = await self.get_children(path)
        except NoNodeError:
            return
        for child in children:
            await self.delete_recursive(f"{path.rstrip('/')}/{child}")
        try:
            await self.delete(path)
        except NoNodeError:
            pass

    async def ensure_path(self, path: str) -> None:
        """Create ``path`` and its parents if absent; safe against races."""
        if await self.exists(path) is not None:
            return
        parts = [p for p in path.split("/") if p]
        current = ""
        for part in parts:
            current += "/" + part
            try:
                await self.create(current)
            except NodeExistsError:
                pass

    async def transaction(
        self, ops: Sequence[tuple[str, tuple[Any, ...], dict[str, Any]]]
    ) -> list[Any]:
        """Run ``[(op, args, kwargs), ...]`` atomically, ops being kazoo
        TransactionRequest method names (create, delete, set_data, check).
        Returns kazoo's per-op results (exceptions for failed ops)."""
        t = self.client.transaction()
        for name, args, kwargs in ops:
            getattr(t, name)(*args, **kwargs)
        return await self._wrap(t.commit_async())

    async def sync(self, path: str) -> None:
        await self._wrap(self.client.sync_async(path))


def first_error(results: Sequence[Any]) -> BaseException | None:
    """The first real error in a transaction's results (kazoo reports the
    ops that were rolled back as RolledBackError)."""
    from kazoo.exceptions import RolledBackError

    for r in results:
        if isinstance(r, BaseException) and not isinstance(r, RolledBackError):
            return r
    for r in results:
        if isinstance(r, BaseException):
            return r
    return None
