"""dlog.sync's subscription twins keep every public name of their async
classes, found by introspection: a public coroutine added to a store or to
Consumer without a blocking twin fails here, not in a user's script."""

from __future__ import annotations

import inspect
from typing import Any

import pytest

from dlog.sync import SyncConsumer, SyncLogManager, SyncSubscriptionsStore
from subscriptions.consumer import Consumer
from subscriptions.log_segment import LogSegmentSubscriptionsStore
from subscriptions.store import SubscriptionsStore
from subscriptions.zk_store import ZKSubscriptionsStore

#: Each async class and its blocking twin (one twin serves every store).
PAIRS: list[tuple[type, type]] = [
    (SubscriptionsStore, SyncSubscriptionsStore),
    (LogSegmentSubscriptionsStore, SyncSubscriptionsStore),
    (ZKSubscriptionsStore, SyncSubscriptionsStore),
    (Consumer, SyncConsumer),
]

#: The async classes a twin stands for: its public names must come from them.
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

#: Async protocols and the blocking protocol a twin must offer instead.
PROTOCOLS = {
    "__aiter__": ("__iter__", "__next__"),
    "__aenter__": ("__enter__",),
    "__aexit__": ("__exit__",),
}


def public(cls: type) -> set[str]:
    return {name for name in dir(cls) if not name.startswith("_")}


def coroutine_methods(cls: type) -> set[str]:
    """Public coroutines, and the ``*_nowait`` calls that return a future:
    each needs a twin (the blocking one returns a concurrent future)."""
    return {
        name
        for name in public(cls)
        if inspect.iscoroutinefunction(getattr(cls, name))
        or (name.endswith("_nowait") and callable(getattr(cls, name)))
    }


def properties(cls: type) -> set[str]:
    return {name for name in public(cls) if isinstance(inspect.getattr_static(cls, name), property)}


def parameters(fn: Any) -> list[tuple[str, Any, Any]]:
    return [(p.name, p.kind, p.default) for p in inspect.signature(fn).parameters.values()]


def missing_twins(async_cls: type, sync_cls: type) -> list[str]:
    """What ``sync_cls`` lacks or gets wrong, one line per problem."""
    problems = []
    for name in sorted(coroutine_methods(async_cls)):
        twin = inspect.getattr_static(sync_cls, name, None)
        if twin is None or not callable(twin):
            problems.append(f"{sync_cls.__name__}.{name} is missing")
        elif inspect.iscoroutinefunction(twin):
            problems.append(f"{sync_cls.__name__}.{name} is a coroutine, not a blocking call")
        elif parameters(twin) != parameters(getattr(async_cls, name)):
            problems.append(
                f"{sync_cls.__name__}.{name}{inspect.signature(twin)} takes other parameters "
                f"than {async_cls.__name__}.{name}{inspect.signature(getattr(async_cls, name))}"
            )
    for name in sorted(properties(async_cls) - properties(sync_cls)):
        problems.append(f"{sync_cls.__name__}.{name} is not a property")
    for aname, names in PROTOCOLS.items():
        if hasattr(async_cls, aname):
            problems += [
                f"{sync_cls.__name__}.{name} is missing (for {aname})"
                for name in names
                if not hasattr(sync_cls, name)
            ]
    return problems


@pytest.mark.parametrize(("async_cls", "sync_cls"), PAIRS, ids=lambda c: c.__name__)
def test_every_public_coroutine_and_property_has_a_blocking_twin(
    async_cls: type, sync_cls: type
) -> None:
    assert coroutine_methods(async_cls), "introspection found no coroutines: is it broken?"
    assert missing_twins(async_cls, sync_cls) == []


@pytest.mark.parametrize("sync_cls", list(FAMILIES), ids=lambda c: c.__name__)
def test_twin_has_no_public_name_its_async_classes_lack(sync_cls: type) -> None:
    known = set().union(*(public(c) for c in FAMILIES[sync_cls]))
    assert public(sync_cls) - known - EXTRAS[sync_cls] == set()
    for name in public(sync_cls):
        assert not inspect.iscoroutinefunction(getattr(sync_cls, name)), name


def test_the_check_catches_a_coroutine_without_a_twin() -> None:
    """The check itself: a new public coroutine, a changed signature, a
    property or an async protocol without a blocking twin are all reported."""

    class Async:
        async def read(self, timeout: float | None = None) -> None: ...

        async def added(self) -> None: ...

        async def _private(self) -> None: ...

        @property
        def position(self) -> int:
            return 0

        def __aiter__(self) -> Async:
            return self

    class Sync:
        def read(self, timeout: float) -> None: ...

    assert missing_twins(Async, Sync) == [
        "Sync.added is missing",
        "Sync.read(self, timeout: 'float') -> 'None' takes other parameters than "
        "Async.read(self, timeout: 'float | None' = None) -> 'None'",
        "Sync.position is not a property",
        "Sync.__iter__ is missing (for __aiter__)",
        "Sync.__next__ is missing (for __aiter__)",
    ]


def test_log_manager_twin_subscribes() -> None:
    from dlog.log import LogManager

    assert inspect.iscoroutinefunction(LogManager.subscribe)
    assert parameters(SyncLogManager.subscribe) == parameters(LogManager.subscribe)
    assert isinstance(inspect.getattr_static(SyncLogManager, "subscriptions"), property)
