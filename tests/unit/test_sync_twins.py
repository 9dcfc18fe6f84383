"""Every public coroutine of the async API has its blocking twin.

dlog.sync and dlog.ledger.blocking declare their classes as twins of the
async ones (dlog.blocking). Found by introspection here: a public coroutine
(or ``*_nowait`` call) added to an async class without a blocking twin, a
twin whose parameters drifted, a ``*_nowait`` twin handing out an asyncio
future, a twin returning an async object where its sync twin belongs, or
an async protocol (``async with``, ``async for``) without its blocking one
fails here, not in a user's script. Anything meant to stay on the event
loop is listed in LOOP_ONLY, with the reason.
"""

from __future__ import annotations

import inspect
from typing import Any

import pytest

from dlog.ledger.blocking import SyncBookKeeper, SyncReadHandle, SyncWriteHandle
from dlog.ledger.client import BookKeeper
from dlog.ledger.read_handle import ReadHandle
from dlog.ledger.write_handle import WriteHandle
from dlog.log import LogManager
from dlog.namespace import Namespace
from dlog.reader import LogReader
from dlog.sync import (
    SyncConsumer,
    SyncLogManager,
    SyncLogReader,
    SyncLogWriter,
    SyncNamespace,
    SyncSubscriptionsStore,
)
from dlog.writer import LogWriter
from subscriptions.consumer import Consumer
from subscriptions.log_segment import LogSegmentSubscriptionsStore
from subscriptions.store import SubscriptionsStore
from subscriptions.zk_store import ZKSubscriptionsStore

#: Each async class and its blocking twin (one twin serves every store).
TWINS: dict[type, type] = {
    Namespace: SyncNamespace,
    LogManager: SyncLogManager,
    LogWriter: SyncLogWriter,
    LogReader: SyncLogReader,
    SubscriptionsStore: SyncSubscriptionsStore,
    ZKSubscriptionsStore: SyncSubscriptionsStore,
    LogSegmentSubscriptionsStore: SyncSubscriptionsStore,
    Consumer: SyncConsumer,
    BookKeeper: SyncBookKeeper,
    WriteHandle: SyncWriteHandle,
    ReadHandle: SyncReadHandle,
}

#: Public async names with no blocking twin on purpose: (async class, name).
LOOP_ONLY: set[tuple[type, str]] = {
    # SyncBookKeeper(...) starts its client in its constructor; a started
    # client has nothing left to start.
    (BookKeeper, "start"),
    # A reader built from a stream's internal context (what LogManager and
    # Consumer use); the blocking way in is SyncLogManager.open_reader.
    (LogReader, "open"),
    # Recovery's own last step on the handle it re-adds entries with; the
    # blocking way to recover is SyncBookKeeper.open_ledger(recovery=True).
    (WriteHandle, "seal_recovered"),
    # One loop future for a whole bulk, for writers on the loop; a thread
    # gets the same batching from SyncLogWriter.write_nowait (queued records
    # reach the loop in batches) and waits for a bulk with write_bulk.
    (LogWriter, "write_bulk_nowait"),
}

#: Async protocols and the blocking protocol a twin offers instead.
PROTOCOLS = {
    "__aiter__": ("__iter__", "__next__"),
    "__aenter__": ("__enter__", "__exit__"),
}

#: Async class name -> its twin's, to tell a wrapped result from a leaked one.
TWIN_NAMES = {a.__name__: s.__name__ for a, s in TWINS.items()}


def public(cls: type) -> set[str]:
    return {name for name in dir(cls) if not name.startswith("_")}


def needs_twin(cls: type) -> set[str]:
    """Public coroutines, and the ``*_nowait`` calls that return an asyncio
    future (their twin returns a concurrent one)."""
    return {
        name
        for name in public(cls)
        if inspect.iscoroutinefunction(getattr(cls, name))
        or (name.endswith("_nowait") and callable(getattr(cls, name)))
    }


def properties(cls: type) -> set[str]:
    return {name for name in public(cls) if isinstance(inspect.getattr_static(cls, name), property)}


def parameters(fn: Any) -> dict[str, inspect.Parameter]:
    """Parameters of a method as called on an instance (or a class method)."""
    params = list(inspect.signature(fn).parameters.values())
    if params and params[0].name in ("self", "cls") and inspect.isfunction(fn):
        params = params[1:]
    return {p.name: p for p in params}


def returns(fn: Any) -> str:
    annotation = inspect.signature(fn).return_annotation
    return annotation if isinstance(annotation, str) else getattr(annotation, "__name__", "")


def twin_problems(
    async_cls: type, sync_cls: type, loop_only: frozenset[str] | set[str] = frozenset()
) -> list[str]:
    """What ``sync_cls`` lacks or gets wrong as the twin of ``async_cls``,
    one line per problem."""
    problems = []
    twin_name = sync_cls.__name__
    for name in sorted(needs_twin(async_cls) - set(loop_only)):
        twin = getattr(sync_cls, name, None)
        if twin is None or not callable(twin):
            problems.append(f"{twin_name}.{name} is missing")
            continue
        if inspect.iscoroutinefunction(twin):
            problems.append(f"{twin_name}.{name} is a coroutine, not a blocking call")
            continue
        original = getattr(async_cls, name)
        ours, theirs = parameters(twin), parameters(original)
        for pname, p in theirs.items():
            q = ours.get(pname)
            if q is None or (q.kind, q.default) != (p.kind, p.default):
                problems.append(
                    f"{twin_name}.{name}{inspect.signature(twin)} does not take "
                    f"{async_cls.__name__}.{name}'s {p}"
                )
        for pname in ours.keys() - theirs.keys():
            if ours[pname].default is inspect.Parameter.empty and ours[pname].kind not in (
                inspect.Parameter.VAR_POSITIONAL,
                inspect.Parameter.VAR_KEYWORD,
            ):
                problems.append(f"{twin_name}.{name} requires {pname}, which the async one lacks")
        result = returns(twin)
        if name.endswith("_nowait"):
            if not result.startswith("concurrent.futures.Future"):
                problems.append(f"{twin_name}.{name} returns {result!r}, not a concurrent future")
        elif returns(original) in TWIN_NAMES and result != TWIN_NAMES[returns(original)]:
            problems.append(
                f"{twin_name}.{name} returns {result!r}, not {TWIN_NAMES[returns(original)]!r}"
            )
    for name in sorted(properties(async_cls) - properties(sync_cls)):
        problems.append(f"{twin_name}.{name} is not a property")
    for aname, names in PROTOCOLS.items():
        if hasattr(async_cls, aname):
            problems += [
                f"{twin_name}.{name} is missing (for {aname})"
                for name in names
                if not hasattr(sync_cls, name)
            ]
    for name in sorted(public(sync_cls)):
        if inspect.iscoroutinefunction(getattr(sync_cls, name)):
            problems.append(f"{twin_name}.{name} is a coroutine")
    return problems


@pytest.mark.parametrize(("async_cls", "sync_cls"), TWINS.items(), ids=lambda c: c.__name__)
def test_every_public_coroutine_has_a_blocking_twin(async_cls: type, sync_cls: type) -> None:
    assert needs_twin(async_cls), "introspection found no coroutines: is it broken?"
    loop_only = {name for cls, name in LOOP_ONLY if cls is async_cls}
    assert twin_problems(async_cls, sync_cls, loop_only) == []


def test_loop_only_names_exist() -> None:
    """An exclusion outlives nothing: each names a real public coroutine."""
    for cls, name in LOOP_ONLY:
        assert name in needs_twin(cls), f"{cls.__name__}.{name} is listed as loop-only"


def test_the_check_catches_what_a_twin_gets_wrong() -> None:
    """The check itself, on a made-up pair."""

    class Async:
        async def read(self, timeout: float | None = None) -> None: ...

        async def added(self) -> None: ...

        async def _private(self) -> None: ...

        async def open_writer(self) -> LogWriter:
            raise NotImplementedError

        def send_nowait(self) -> None: ...

        @property
        def position(self) -> int:
            return 0

        def __aiter__(self) -> Async:
            return self

    class Sync:
        def read(self, timeout: float, extra: int) -> None: ...

        def open_writer(self) -> LogWriter:
            raise NotImplementedError

        def send_nowait(self) -> None: ...

        async def stray(self) -> None: ...

    assert twin_problems(Async, Sync) == [
        "Sync.added is missing",
        "Sync.open_writer returns 'LogWriter', not 'SyncLogWriter'",
        "Sync.read(self, timeout: 'float', extra: 'int') -> 'None' does not take "
        "Async.read's timeout: 'float | None' = None",
        "Sync.read requires extra, which the async one lacks",
        "Sync.send_nowait returns 'None', not a concurrent future",
        "Sync.position is not a property",
        "Sync.__iter__ is missing (for __aiter__)",
        "Sync.__next__ is missing (for __aiter__)",
        "Sync.stray is a coroutine",
    ]


#: The async classes a subscriptions twin stands for: its public names
#: must come from them (one twin serves every store).
FAMILIES: dict[type, list[type]] = {
    SyncSubscriptionsStore: [
        SubscriptionsStore,
        LogSegmentSubscriptionsStore,
        ZKSubscriptionsStore,
    ],
    SyncConsumer: [Consumer],
}

#: Public names a twin may have that its async classes lack (none so far;
#: add one here with the reason).
EXTRAS: dict[type, set[str]] = {SyncSubscriptionsStore: set(), SyncConsumer: set()}


@pytest.mark.parametrize("sync_cls", list(FAMILIES), ids=lambda c: c.__name__)
def test_twin_has_no_public_name_its_async_classes_lack(sync_cls: type) -> None:
    known = set().union(*(public(c) for c in FAMILIES[sync_cls]))
    assert public(sync_cls) - known - EXTRAS[sync_cls] == set()
    for name in public(sync_cls):
        assert not inspect.iscoroutinefunction(getattr(sync_cls, name)), name
