"""asyncio face of kazoo, and dlog's one boundary with it.

kazoo is thread based; its ``*_async`` calls return results completed on
kazoo's own threads. This module turns those into asyncio futures and
watches into loop callbacks, so the rest of dlog awaits ZooKeeper like any
other I/O, while scripts can still use the plain kazoo client underneath.

It is the only dlog module that imports kazoo, so nothing else depends on
kazoo's classes:

- Every kazoo exception becomes a :class:`dlog.errors.ZooKeeperError`
  (:func:`translate`), raised or in a transaction's results alike; its
  ``zk_code`` is ZooKeeper's KeeperException code.
- Every operation retries connection loss and timeouts under
  :data:`dlog.retry.ZK_POLICY` (what kazoo leaves to ``KazooRetry``). A
  write tried more than once may meet its own earlier attempt, applied
  although its answer was lost: the error it then raises says so
  (``attempts > 1``). Callers that must know that on success too, or want
  several calls retried as one, run them under :class:`Retry`.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import logging
import threading
from collections.abc import Awaitable, Callable, Sequence
from contextvars import ContextVar
from typing import Any, TypeVar

import kazoo.exceptions as kz
from kazoo.client import KazooClient, KazooState
from kazoo.handlers.threading import KazooTimeoutError
from kazoo.protocol.states import EventType, WatchedEvent, ZnodeStat

from dlog.errors import (
    BadVersionError,
    ConnectionLossError,
    NodeExistsError,
    NoNodeError,
    NotEmptyError,
    RolledBackError,
    SessionExpiredError,
    ZooKeeperClosedError,
    ZooKeeperError,
    ZooKeeperTimeoutError,
)
from dlog.retry import ZK_POLICY, RetryPolicy, retry_zk

log = logging.getLogger(__name__)

T = TypeVar("T")

#: One op of :meth:`ZooKeeper.transaction`: a kazoo TransactionRequest
#: method name, its positional and its keyword arguments.
TransactionOp = tuple[str, tuple[Any, ...], dict[str, Any]]

__all__ = [
    "BadVersionError",
    "ConnectionLossError",
    "EventType",
    "KazooState",
    "NoNodeError",
    "NodeExistsError",
    "NotEmptyError",
    "Retry",
    "RolledBackError",
    "SessionExpiredError",
    "TransactionOp",
    "WatchedEvent",
    "ZnodeStat",
    "ZooKeeper",
    "ZooKeeperClosedError",
    "ZooKeeperError",
    "ZooKeeperTimeoutError",
    "first_error",
    "translate",
]

#: kazoo's exceptions and the dlog errors they become; a kazoo class not
#: listed (nor any of its bases) becomes a plain ZooKeeperError.
_ERRORS: dict[type[BaseException], type[ZooKeeperError]] = {
    kz.ConnectionLoss: ConnectionLossError,
    kz.ConnectionDropped: ConnectionLossError,
    kz.OperationTimeoutError: ZooKeeperTimeoutError,
    KazooTimeoutError: ZooKeeperTimeoutError,
    kz.SessionExpiredError: SessionExpiredError,
    kz.ConnectionClosedError: ZooKeeperClosedError,
    kz.ZookeeperStoppedError: ZooKeeperClosedError,
    kz.NoNodeError: NoNodeError,
    kz.NodeExistsError: NodeExistsError,
    kz.BadVersionError: BadVersionError,
    kz.NotEmptyError: NotEmptyError,
    kz.RolledBackError: RolledBackError,
}

#: In a failed transaction's results the ops before the failed one answer
#: OK (kazoo's RolledBackError) and those after it RUNTIMEINCONSISTENCY:
#: neither was applied, and neither is the cause.
_RESULT_ERRORS: dict[type[BaseException], type[ZooKeeperError]] = {
    **_ERRORS,
    kz.RuntimeInconsistency: RolledBackError,
}

#: Set while :class:`Retry` runs a call: the ZooKeeper operations it makes
#: are single attempts, so that the whole is retried and counted once.
_single_attempt: ContextVar[bool] = ContextVar("dlog_zk_single_attempt", default=False)


def translate(
    exc: BaseException,
    what: str = "",
    path: str | None = None,
    *,
    in_transaction: bool = False,
) -> BaseException:
    """The :class:`ZooKeeperError` for a kazoo exception (one of a
    transaction's results if ``in_transaction``); any other exception (a
    dlog error already, a TypeError for bad arguments, cancellation) is
    returned as it is."""
    if not isinstance(exc, (kz.KazooException, KazooTimeoutError)):
        return exc
    table = _RESULT_ERRORS if in_transaction else _ERRORS
    cls = next((table[c] for c in type(exc).__mro__ if c in table), ZooKeeperError)
    # kazoo's ZookeeperError classes carry ZooKeeper's KeeperException code.
    code = getattr(exc, "code", None)
    detail = str(exc)
    where = f"{what}: " if what else ""
    kazoo_name = f"{type(exc).__name__}: {detail}" if detail else type(exc).__name__
    err = cls(
        f"ZooKeeper: {where}{cls.default_message} ({kazoo_name})",
        zk_code=code if isinstance(code, int) else None,
        path=path,
    )
    err.__cause__ = exc
    return err


def first_error(results: Sequence[Any]) -> BaseException | None:
    """The first real error in a transaction's results: the op that failed,
    rather than the ops rolled back with it (:class:`RolledBackError`)."""
    for r in results:
        if isinstance(r, BaseException) and not isinstance(r, RolledBackError):
            return r
    for r in results:
        if isinstance(r, BaseException):
            return r
    return None


def _settle(fut: asyncio.Future[Any], value: Any, exc: BaseException | None) -> None:
    if fut.done():
        return
    if exc is not None:
        fut.set_exception(exc)
    else:
        fut.set_result(value)


class Retry:
    """Run a call that makes ZooKeeper operations, retrying it as a whole
    after a connection loss or timeout (kazoo's ``KazooRetry`` for asyncio).

    The operations made inside are single attempts, so :attr:`attempts`
    counts every try: a write that finds NodeExists or BadVersion after
    ``attempts > 1`` may be finding its own earlier, applied attempt. The
    call is looked up by the caller (``retry(zk.set, path, data)``), so a
    wrapper installed on the client, as tests do, is what gets retried.
    """

    def __init__(self, policy: RetryPolicy | None = ZK_POLICY) -> None:
        self.policy = policy
        self.attempts = 0

    async def __call__(self, fn: Callable[..., Awaitable[T]], *args: Any, **kwargs: Any) -> T:
        self.attempts = 0

        async def attempt() -> T:
            self.attempts += 1
            token = _single_attempt.set(True)
            try:
                return await fn(*args, **kwargs)
            finally:
                _single_attempt.reset(token)

        try:
            if self.policy is None or _single_attempt.get():  # nested: the outer one retries
                return await attempt()
            return await retry_zk(attempt, policy=self.policy)
        except ZooKeeperError as e:
            e.attempts = self.attempts
            raise


class ZooKeeper:
    """An asyncio wrapper around one :class:`KazooClient` session.

    Operations retry transient errors under ``retry_policy`` (None: never;
    ``retry=False`` on a call: not that call) and raise
    :class:`dlog.errors.ZooKeeperError` subclasses, never kazoo's."""

    def __init__(
        self,
        hosts: str,
        timeout: float = 10.0,
        *,
        read_only: bool = False,
        client: KazooClient | None = None,
        retry_policy: RetryPolicy | None = ZK_POLICY,
    ) -> None:
        self.hosts = hosts
        self.client = client or KazooClient(
            hosts=hosts, timeout=timeout, read_only=read_only, logger=logging.getLogger("kazoo")
        )
        self.retry_policy = retry_policy
        self._loop: asyncio.AbstractEventLoop | None = None
        self._state_listeners: list[Callable[[str], Any]] = []
        self.client.add_listener(self._on_state)

    # -- lifecycle -----------------------------------------------------------
    @property
    def loop(self) -> asyncio.AbstractEventLoop:
        if self._loop is None:
            self._loop = asyncio.get_running_loop()
        return self._loop

    async def start(self, timeout: float = 15.0, *, setting: str | None = None) -> None:
        """Connect, waiting up to ``timeout`` seconds; ``setting`` names the
        configuration key that chose it, so the error says what to change."""
        self._loop = asyncio.get_running_loop()
        started: concurrent.futures.Future[None] = concurrent.futures.Future()

        def connect() -> None:
            if started.set_running_or_notify_cancel():
                try:
                    started.set_result(self.client.start(timeout=timeout))
                except BaseException as e:
                    started.set_exception(e)

        # A daemon thread, not the loop's executor: whoever gives up waiting
        # (a bookie told to stop while ZooKeeper is out of reach) must not
        # then wait out the timeout when the loop shuts its executor down.
        threading.Thread(target=connect, name="zk-connect", daemon=True).start()
        try:
            await asyncio.wrap_future(started)
        except KazooTimeoutError:
            which = f" ({setting})" if setting else ""
            raise ZooKeeperError(
                f"could not connect to ZooKeeper at {self.hosts} within {timeout:g} s{which}"
            ) from None
        except kz.KazooException as e:
            raise translate(e, f"connect to {self.hosts}") from e

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

    async def _attempt(self, what: str, path: str | None, begin: Callable[[], Any]) -> Any:
        """One try of a kazoo call (``begin`` starts it), its error translated."""
        try:
            return await self._wrap(begin())
        except (kz.KazooException, KazooTimeoutError) as e:
            raise translate(e, what, path) from e

    async def _run(
        self, what: str, path: str | None, begin: Callable[[], Any], retry: bool
    ) -> tuple[Any, int]:
        """A kazoo call under the retry policy; returns ``(result, attempts)``."""
        policy = None if not retry or _single_attempt.get() else self.retry_policy
        if policy is None:
            return await self._attempt(what, path, begin), 1
        attempts = 0

        async def attempt() -> Any:
            nonlocal attempts
            attempts += 1
            return await self._attempt(what, path, begin)

        try:
            return await retry_zk(attempt, policy=policy), attempts
        except ZooKeeperError as e:
            e.attempts = attempts
            raise

    async def retry(self, fn: Callable[..., Awaitable[T]], *args: Any, **kwargs: Any) -> T:
        """``await fn(*args, **kwargs)`` under :class:`Retry` with this
        client's policy (``KazooClient.retry``); its error's ``attempts``
        says whether an earlier attempt may have landed."""
        return await Retry(self.retry_policy)(fn, *args, **kwargs)

    # -- operations -----------------------------------------------------------
    async def get(
        self, path: str, watch: Callable[[WatchedEvent], Any] | None = None, *, retry: bool = True
    ) -> tuple[bytes, ZnodeStat]:
        w = self._watch(watch)
        result, _ = await self._run(
            f"get {path}", path, lambda: self.client.get_async(path, watch=w), retry
        )
        return result

    async def exists(
        self, path: str, watch: Callable[[WatchedEvent], Any] | None = None, *, retry: bool = True
    ) -> ZnodeStat | None:
        w = self._watch(watch)
        result, _ = await self._run(
            f"exists {path}", path, lambda: self.client.exists_async(path, watch=w), retry
        )
        return result

    async def get_children(
        self, path: str, watch: Callable[[WatchedEvent], Any] | None = None, *, retry: bool = True
    ) -> list[str]:
        w = self._watch(watch)
        result, _ = await self._run(
            f"get children of {path}",
            path,
            lambda: self.client.get_children_async(path, watch=w),
            retry,
        )
        return result

    async def create(
        self,
        path: str,
        value: bytes = b"",
        *,
        ephemeral: bool = False,
        sequence: bool = False,
        makepath: bool = False,
        retry: bool = True,
    ) -> str:
        """Create a znode; returns its path. Retried after a connection
        loss, a create may find NodeExists for its own earlier attempt, and
        a sequential one may leave a node of that attempt behind."""
        result, _ = await self._run(
            f"create {path}",
            path,
            lambda: self.client.create_async(
                path, value, ephemeral=ephemeral, sequence=sequence, makepath=makepath
            ),
            retry,
        )
        return result

    async def set(
        self, path: str, value: bytes, version: int = -1, *, retry: bool = True
    ) -> ZnodeStat:
        result, _ = await self._run(
            f"set {path}", path, lambda: self.client.set_async(path, value, version=version), retry
        )
        return result

    async def delete(self, path: str, version: int = -1, *, retry: bool = True) -> None:
        await self._run(
            f"delete {path}", path, lambda: self.client.delete_async(path, version=version), retry
        )

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

    async def transaction(self, ops: Sequence[TransactionOp], *, retry: bool = True) -> list[Any]:
        """Run ``[(op, args, kwargs), ...]`` atomically, ops being kazoo
        TransactionRequest method names (create, delete, set_data, check).
        Returns the per-op results, with a :class:`ZooKeeperError` for each
        op of a failed transaction (see :func:`first_error`); each carries
        the attempts made."""

        def begin() -> Any:
            t = self.client.transaction()
            for name, args, kwargs in ops:
                getattr(t, name)(*args, **kwargs)
            return t.commit_async()

        first = ops[0][1][0] if ops and ops[0][1] else None
        what = f"transaction of {len(ops)} ops on {first}"
        results, attempts = await self._run(what, first, begin, retry)
        out: list[Any] = []
        for r in results:
            if isinstance(r, BaseException):
                r = translate(r, what, in_transaction=True)
                if isinstance(r, ZooKeeperError):
                    r.attempts = attempts
            out.append(r)
        return out

    async def sync(self, path: str, *, retry: bool = True) -> None:
        await self._run(f"sync {path}", path, lambda: self.client.sync_async(path), retry)
