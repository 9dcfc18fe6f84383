"""Failpoints: named places where a test can make a real process pause or
die, so "kill -9 in the middle of a flush" or "crash between two steps of a
segment roll" land exactly where a test wants them.

Disabled unless ``DLOG_FAILPOINTS`` is set (``name=action[,name=action]``)
when the process starts; a disabled failpoint costs one dict lookup.
Actions:

* ``pause``: create ``$DLOG_FAILPOINT_DIR/<name>`` (so the test knows the
  process got there), then sleep until killed;
* ``exit``: terminate the process at once, without cleanup (``os._exit``);
* ``raise``: raise :class:`FailpointError` in the calling code;
* ``enospc`` / ``eio``: raise ``OSError`` with that errno, as a full or
  failing disk would (the bookie's file I/O goes through
  :mod:`dlog.bookie.fileio`, which checks a failpoint at every write and
  sync);
* ``short``: at a write, write part of the bytes, then fail with ENOSPC;
* ``hold``: create ``$DLOG_FAILPOINT_DIR/<name>``, wait until the test
  deletes it, then go on: a pause another process can end (the bookie's
  journal writer runs in a process of its own).

``action*N`` fires N times, then the failpoint disarms itself (a disk that
fails for a while, then recovers, in a process the test cannot reconfigure);
``action+K`` lets the first K passes go by (``enospc+3*2``: the 4th and 5th).

Coroutines use :func:`afailpoint`. In-process tests can also :func:`arm` a
:class:`Gate` there: the first coroutine to arrive parks until the test
releases it (optionally with an error), so a test can stop one owner between
two steps while another acts, which a process-wide action cannot do.
"""

from __future__ import annotations

import asyncio
import errno
import logging
import os
import time
from collections.abc import Callable
from pathlib import Path

log = logging.getLogger(__name__)


class FailpointError(RuntimeError):
    pass


def _parse(spec: str) -> dict[str, str]:
    out: dict[str, str] = {}
    for item in spec.split(","):
        item = item.strip()
        if not item:
            continue
        name, _, action = item.partition("=")
        out[name.strip()] = action.strip() or "pause"
    return out


_ACTIVE: dict[str, str] = _parse(os.environ.get("DLOG_FAILPOINTS", ""))


#: Told the new spec whenever :func:`configure` runs: a helper process (the
#: bookie's journal writer) gets the failpoints armed in its parent.
_LISTENERS: list[Callable[[str], None]] = []


def add_listener(fn: Callable[[str], None]) -> None:
    _LISTENERS.append(fn)


def remove_listener(fn: Callable[[str], None]) -> None:
    if fn in _LISTENERS:
        _LISTENERS.remove(fn)


def configure(spec: str) -> None:
    """Set failpoints in this process (tests running in-process) and in the
    helper processes listening; also disarms every gate."""
    _configure(spec)
    for fn in list(_LISTENERS):
        fn(spec)


def _configure(spec: str) -> None:
    _ACTIVE.clear()
    _ACTIVE.update(_parse(spec))
    _REMAINING.clear()
    _SKIPPED.clear()
    _GATES.clear()
    for gate in list(_PARKED):  # a test that failed half way must not hang its teardown
        gate.release(FailpointError(f"failpoint {gate.name}: released by a reset"))


_IO_ERRNO = {"enospc": errno.ENOSPC, "eio": errno.EIO}
#: Failpoints armed for a limited number of firings: name -> firings left.
_REMAINING: dict[str, int] = {}


_SKIPPED: dict[str, int] = {}


def _take(name: str) -> str | None:
    """The action armed at ``name`` (honouring ``+K`` and ``*N``), or None."""
    action = _ACTIVE.get(name)
    if action is None:
        return None
    action, star, times = action.partition("*")
    base, plus, skip = action.partition("+")
    if plus:
        seen = _SKIPPED.get(name, 0)
        if seen < int(skip or 0):
            _SKIPPED[name] = seen + 1
            return None
    if star:
        left = _REMAINING.get(name)
        if left is None:
            try:
                left = int(times)
            except ValueError:
                left = 1
        left -= 1
        if left <= 0:
            _ACTIVE.pop(name, None)
            _REMAINING.pop(name, None)
        else:
            _REMAINING[name] = left
    return base


def spec() -> str:
    """The failpoints armed now, as ``DLOG_FAILPOINTS`` would arm them in a
    new process (firings and skips already used are taken off): a child
    process started now gets the same ones."""
    items = []
    for name, action in _ACTIVE.items():
        base, star, times = action.partition("*")
        base, plus, skip = base.partition("+")
        if plus:
            left = int(skip or 0) - _SKIPPED.get(name, 0)
            if left > 0:
                base = f"{base}+{left}"
        if star:
            base = f"{base}*{_REMAINING.get(name, times)}"
        items.append(f"{name}={base}")
    return ",".join(items)


def io_error(name: str, action: str) -> OSError:
    code = _IO_ERRNO.get(action, errno.ENOSPC)
    return OSError(code, f"{os.strerror(code)} (failpoint {name})")


def take_action(name: str) -> str | None:
    """The action armed at ``name``, for callers that act it out themselves
    (a short write); logs it and consumes a firing."""
    action = _take(name)
    if action is not None:
        log.warning("failpoint %s: %s", name, action)
    return action


def is_armed(name: str) -> bool:
    return name in _ACTIVE


def is_set(name: str) -> bool:
    """Whether reaching ``name`` would do anything (an action or a gate is
    armed): a hot path that need not await checks this before it does."""
    return name in _ACTIVE or name in _GATES


def failpoint(name: str) -> None:
    if name not in _ACTIVE:
        return
    act(name, take_action(name))


def act(name: str, action: str | None) -> None:
    """Carry out ``action`` at failpoint ``name``."""
    if action == "pause":
        marker_dir = Path(os.environ.get("DLOG_FAILPOINT_DIR", "."))
        marker_dir.mkdir(parents=True, exist_ok=True)
        (marker_dir / name).write_text(str(os.getpid()))
        while True:
            time.sleep(3600)
    elif action == "hold":
        marker = Path(os.environ.get("DLOG_FAILPOINT_DIR", ".")) / name
        marker.parent.mkdir(parents=True, exist_ok=True)
        marker.write_text(str(os.getpid()))
        log.warning("failpoint %s: holding until %s is deleted", name, marker)
        while marker.exists():
            time.sleep(0.01)
    elif action == "exit":
        os._exit(86)
    elif action == "raise":
        raise FailpointError(f"failpoint {name}")
    elif action in _IO_ERRNO or action == "short":
        raise io_error(name, action)


class Gate:
    """A one-shot pause point armed by a test (see :func:`arm`)."""

    def __init__(self, name: str, only: Callable[[], bool] | None = None) -> None:
        self.name = name
        self.only = only
        self._reached = asyncio.Event()
        self._released = asyncio.Event()
        self._error: BaseException | None = None

    @property
    def reached(self) -> bool:
        return self._reached.is_set()

    async def wait_reached(self, timeout: float = 30.0) -> None:
        """Wait until a coroutine is parked here."""
        try:
            async with asyncio.timeout(timeout):
                await self._reached.wait()
        except TimeoutError:
            raise AssertionError(f"failpoint {self.name} was not reached in {timeout}s") from None

    def release(self, error: BaseException | None = None) -> None:
        """Let the parked coroutine go on, or make it raise ``error``."""
        if _GATES.get(self.name) is self:  # released before anyone arrived
            del _GATES[self.name]
        self._error = error
        self._released.set()

    async def _park(self) -> None:
        self._reached.set()
        log.warning("failpoint %s: parked", self.name)
        _PARKED.add(self)
        try:
            await self._released.wait()
        finally:
            _PARKED.discard(self)
        if self._error is not None:
            raise self._error


_GATES: dict[str, Gate] = {}
_PARKED: set[Gate] = set()


def arm(name: str, only: Callable[[], bool] | None = None) -> Gate:
    """Park the next coroutine that reaches ``afailpoint(name)`` (and for
    which ``only()`` is true: say, a context variable naming the owner the
    test means, which tasks it starts inherit)."""
    gate = _GATES[name] = Gate(name, only)
    return gate


async def afailpoint(name: str) -> None:
    """:func:`failpoint` for coroutines, where an armed :class:`Gate` parks."""
    gate = _GATES.get(name)
    if gate is not None and (gate.only is None or gate.only()):
        del _GATES[name]
        await gate._park()
        return
    failpoint(name)
