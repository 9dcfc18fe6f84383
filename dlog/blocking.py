"""Blocking twins of async classes, each declared once.

dlog is asyncio first; scripts, REPLs, threads and Spark executors want
plain calls. As kazoo pairs each call with an async twin, every blocking
class here is the *twin* of one async class: it holds the async object and
the :class:`~dlog.loop_thread.LoopThread` that object lives on, and its
methods are declared from the async ones, so their names, parameters and
docstrings cannot drift apart::

    class SyncLogManager(ClosingTwin[LogManager], wraps="log"):
        log: LogManager
        get_last_dlsn = blocking(LogManager.get_last_dlsn)
        open_reader = blocking(LogManager.open_reader, wrap=SyncLogReader)

* :func:`blocking` runs the coroutine on the loop thread and waits;
  ``wrap`` turns an async result into its own twin (LogWriter ->
  SyncLogWriter). Calls are typed through ParamSpec.
* :func:`nowait` twins a ``*_nowait`` method (an asyncio future, usable only
  on the loop): the blocking side gets a :class:`concurrent.futures.Future`
  at once.
* What no declaration fits (an async iterator becomes a buffered blocking
  iterator, a queue of ``write_nowait`` records, a cache of twins) is
  written by hand on the same base: :meth:`Twin._run` and :meth:`Twin._start`.

The call is resolved by name on the wrapped object, so one twin serves a
base class and its subclasses (one SyncSubscriptionsStore for both stores).
tests/unit/test_sync_twins.py checks by introspection that every public
coroutine of each async class has its twin, or is listed as loop-only.

Threads and processes: a twin may be used from any thread (each call hops to
the loop thread), never from the loop thread itself nor from a child forked
after it was opened (both fail at once with RuntimeError rather than hang),
and it is never pickled.
"""

from __future__ import annotations

import concurrent.futures
import functools
import inspect
from collections.abc import Awaitable, Callable, Coroutine
from typing import Any, ClassVar, Concatenate, Generic, NoReturn, ParamSpec, Self, TypeVar, overload

from dlog.loop_thread import LoopThread

__all__ = ["ClosingTwin", "Twin", "blocking", "nowait"]

A = TypeVar("A")
P = ParamSpec("P")
R = TypeVar("R")
W = TypeVar("W")

#: Marks a method made by :func:`blocking` or :func:`nowait` (the async name).
_TWIN_OF = "__twin_of__"


class Twin(Generic[A]):
    """A blocking twin: the async object and the loop thread it lives on.

    ``wraps="name"`` (a class keyword) also publishes the async object as the
    instance attribute ``name`` (``writer.writer``, ``consumer.consumer``);
    annotate it in the class body for type checkers. No other public name
    comes from here, so a twin's public names are its async class's.
    """

    #: The instance attribute the async object is published as.
    _wraps: ClassVar[str | None] = None

    def __init_subclass__(cls, *, wraps: str | None = None, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        if wraps is not None:
            cls._wraps = wraps
        for name, value in vars(cls).items():
            twin_of = getattr(value, _TWIN_OF, None)
            if twin_of is None:
                continue
            if name != twin_of:
                # A slip like ``flush = blocking(LogWriter.close)``.
                raise TypeError(f"{cls.__name__}.{name} is declared as the twin of {twin_of!r}")
            value.__qualname__ = f"{cls.__qualname__}.{name}"

    def __init__(self, wrapped: A, loop_thread: LoopThread) -> None:
        self._wrapped = wrapped
        self._runner = loop_thread
        if self._wraps is not None:
            setattr(self, self._wraps, wrapped)

    def _owner(self) -> str:
        """This object, for a wrong-process message."""
        return f"this {type(self).__name__}"

    def _run(self, coro: Coroutine[Any, Any, R]) -> R:
        """Run ``coro`` on the loop thread and wait: every blocking call goes
        through here (a twin may override it to do something on the loop first)."""
        return self._runner.run(coro, owner=self._owner())

    def _start(self, make: Callable[[], Awaitable[R]]) -> concurrent.futures.Future[R]:
        """Call ``make`` on the loop thread (where asyncio futures may be
        made) and await its result there: a concurrent future of it."""

        async def call() -> R:
            return await make()

        return self._runner.submit(call(), owner=self._owner())

    def _check_caller(self) -> None:
        """What :meth:`_run` checks, for calls that do not go through it."""
        self._runner.check_caller(self._owner())

    def __reduce__(self) -> NoReturn:
        raise TypeError(
            f"{type(self).__name__} cannot be pickled: it is bound to this process's "
            "connections; pass the namespace URI and settings and open it where it is used"
        )


class ClosingTwin(Twin[A]):
    """The twin of something closed when done: ``with`` closes it."""

    def close(self) -> None:
        raise NotImplementedError

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def _declare(
    fn: Callable[..., Any], call: Callable[..., Any], returns: str | None
) -> Callable[..., Any]:
    """``call`` as the twin of ``fn``: its name, docstring and parameters."""
    functools.update_wrapper(call, fn)
    signature = inspect.signature(fn)
    if returns is not None:
        signature = signature.replace(return_annotation=returns)
    call.__signature__ = signature  # type: ignore[attr-defined]
    setattr(call, _TWIN_OF, fn.__name__)
    return call


@overload
def blocking(
    fn: Callable[Concatenate[A, P], Awaitable[R]],
) -> Callable[Concatenate[Twin[A], P], R]: ...


@overload
def blocking(
    fn: Callable[Concatenate[A, P], Awaitable[R]], *, wrap: Callable[[R, LoopThread], W]
) -> Callable[Concatenate[Twin[A], P], W]: ...


def blocking(
    fn: Callable[Concatenate[A, P], Awaitable[Any]],
    *,
    wrap: Callable[[Any, LoopThread], Any] | None = None,
) -> Callable[Concatenate[Twin[A], P], Any]:
    """The blocking twin of the async method ``fn``: runs it on the loop
    thread and returns its result, made a twin by ``wrap(result, loop_thread)``."""
    name = fn.__name__

    if wrap is None:

        def call(self: Twin[A], /, *args: P.args, **kwargs: P.kwargs) -> Any:
            return self._run(getattr(self._wrapped, name)(*args, **kwargs))

        return _declare(fn, call, None)

    make_twin = wrap

    def call_and_wrap(self: Twin[A], /, *args: P.args, **kwargs: P.kwargs) -> Any:
        return make_twin(self._run(getattr(self._wrapped, name)(*args, **kwargs)), self._runner)

    return _declare(fn, call_and_wrap, getattr(wrap, "__name__", None))


def nowait(
    fn: Callable[Concatenate[A, P], Awaitable[R]],
) -> Callable[Concatenate[Twin[A], P], concurrent.futures.Future[R]]:
    """The twin of ``fn``, an async ``*_nowait`` method (its asyncio future
    is for the loop only): calls it on the loop thread and returns a
    concurrent future of its outcome at once. Calls from one thread reach
    the loop in order."""
    name = fn.__name__

    def call(self: Twin[A], /, *args: P.args, **kwargs: P.kwargs) -> concurrent.futures.Future[R]:
        method = getattr(self._wrapped, name)
        return self._start(lambda: method(*args, **kwargs))

    return _declare(fn, call, "concurrent.futures.Future")
