"""dlog.blocking itself, on made-up async classes and a real loop thread:
what every twin in dlog.sync and dlog.ledger.blocking inherits."""

from __future__ import annotations

import asyncio
import concurrent.futures
import inspect
import pickle
import threading
from collections.abc import Iterator

import pytest

from dlog.blocking import ClosingTwin, Twin, blocking, nowait
from dlog.loop_thread import LoopThread


class AsyncChild:
    def __init__(self, n: int) -> None:
        self.n = n


class AsyncThing:
    def __init__(self) -> None:
        self.threads: list[threading.Thread] = []
        self.added: list[int] = []
        self.closed = False

    async def add(self, n: int, *, times: int = 1) -> int:
        """Add ``n`` (``times`` times)."""
        self.threads.append(threading.current_thread())
        self.added += [n] * times
        return sum(self.added)

    async def child(self, n: int) -> AsyncChild:
        return AsyncChild(n)

    async def fail(self) -> None:
        raise ValueError("from the loop")

    def add_nowait(self, n: int) -> asyncio.Future[int]:
        return asyncio.ensure_future(self.add(n))

    async def close(self) -> None:
        self.closed = True


class AsyncSubThing(AsyncThing):
    async def add(self, n: int, *, times: int = 1) -> int:
        return -1  # an override: the twin must reach it


class SyncChild(Twin[AsyncChild], wraps="child"):
    child: AsyncChild


class SyncThing(ClosingTwin[AsyncThing], wraps="thing"):
    thing: AsyncThing

    add = blocking(AsyncThing.add)
    child = blocking(AsyncThing.child, wrap=SyncChild)
    fail = blocking(AsyncThing.fail)
    add_nowait = nowait(AsyncThing.add_nowait)
    close = blocking(AsyncThing.close)


@pytest.fixture(scope="module")
def runner() -> Iterator[LoopThread]:
    lt = LoopThread("test-blocking")
    yield lt
    lt.stop()


def test_a_call_runs_on_the_loop_thread_and_returns_its_result(runner: LoopThread) -> None:
    thing = SyncThing(AsyncThing(), runner)
    assert thing.thing is thing._wrapped
    assert thing.add(2, times=3) == 6
    assert thing.thing.threads == [runner._thread]
    with pytest.raises(ValueError, match="from the loop"):
        thing.fail()


def test_a_twin_has_the_async_name_parameters_and_docstring() -> None:
    assert SyncThing.add.__name__ == "add" and SyncThing.add.__qualname__ == "SyncThing.add"
    assert SyncThing.add.__doc__ == AsyncThing.add.__doc__
    assert inspect.signature(SyncThing.add) == inspect.signature(AsyncThing.add)
    assert not inspect.iscoroutinefunction(SyncThing.add)
    assert inspect.signature(SyncThing.child).return_annotation == "SyncChild"
    assert inspect.signature(SyncThing.add_nowait).return_annotation == "concurrent.futures.Future"


def test_wrap_makes_the_result_a_twin_on_the_same_loop(runner: LoopThread) -> None:
    child = SyncThing(AsyncThing(), runner).child(7)
    assert isinstance(child, SyncChild) and child.child.n == 7 and child._runner is runner


def test_the_call_reaches_a_subclass_override(runner: LoopThread) -> None:
    assert SyncThing(AsyncSubThing(), runner).add(1) == -1


def test_nowait_returns_a_concurrent_future_in_call_order(runner: LoopThread) -> None:
    thing = SyncThing(AsyncThing(), runner)
    futures = [thing.add_nowait(i) for i in range(100)]
    assert all(isinstance(f, concurrent.futures.Future) for f in futures)
    assert [f.result(5) for f in futures][-1] == sum(range(100))
    assert thing.thing.added == list(range(100))


def test_with_closes(runner: LoopThread) -> None:
    with SyncThing(AsyncThing(), runner) as thing:
        assert not thing.thing.closed
    assert thing.thing.closed


def test_calls_that_could_only_hang_fail_at_once(runner: LoopThread) -> None:
    thing = SyncThing(AsyncThing(), runner)
    # From the loop thread itself.
    caught: list[BaseException] = []
    done = threading.Event()

    def on_loop() -> None:
        for call in (lambda: thing.add(1), lambda: thing.add_nowait(1)):
            try:
                call()
            except RuntimeError as e:
                caught.append(e)
        done.set()

    runner.loop.call_soon_threadsafe(on_loop)
    assert done.wait(5) and len(caught) == 2
    # Through a loop thread inherited from another process (as after fork).
    pid, runner.pid = runner.pid, -1
    try:
        with pytest.raises(RuntimeError, match="this SyncThing belongs to process -1.*fork"):
            thing.add(1)
        with pytest.raises(RuntimeError, match="fork"):
            thing.add_nowait(1)
    finally:
        runner.pid = pid
    assert thing.thing.added == []


def test_a_twin_is_never_pickled(runner: LoopThread) -> None:
    with pytest.raises(TypeError, match="cannot be pickled"):
        pickle.dumps(SyncThing(AsyncThing(), runner))


def test_a_declaration_under_another_name_is_refused() -> None:
    with pytest.raises(TypeError, match=r"Wrong\.flush is declared as the twin of 'close'"):

        class Wrong(Twin[AsyncThing]):
            flush = blocking(AsyncThing.close)
