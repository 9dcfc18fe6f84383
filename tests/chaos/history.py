"""The operation history of a chaos run: one JSON object per line.

Every actor (a writer, a reader, a consumer, the nemesis) appends to its own
file, ``<proc>.jsonl``, so that a process killed with SIGKILL tears at most
its own last line, and no lock is shared between processes. Each line is
written with one ``write(2)`` on an ``O_APPEND`` descriptor: a record is on
disk whole or not at all as far as the checker cares (it ignores a torn last
line). Nothing is fsynced: the files outlive the process, not the machine.

The format is described in tests/chaos/checker.py, which reads it.
"""

from __future__ import annotations

import itertools
import json
import os
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

__all__ = ["DLSNValue", "Recorder", "dlsn_value", "read_history"]

DLSNValue = list[int] | None


def dlsn_value(dlsn: Any) -> DLSNValue:
    """A DLSN as the history writes it: ``[segment, entry, slot]``."""
    if dlsn is None:
        return None
    segment, entry, slot = dlsn  # a DLSN is a tuple
    return [int(segment), int(entry), int(slot)]


class Recorder:
    """Appends the invocations and completions of one actor."""

    def __init__(self, directory: str | os.PathLike[str], proc: str) -> None:
        self.proc = proc
        self.path = Path(directory) / f"{proc}.jsonl"
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self._fd = os.open(self.path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
        self._ops = itertools.count()

    def _line(self, op: int, kind: str, f: str, value: dict[str, Any]) -> None:
        line = {"t": time.time(), "proc": self.proc, "op": op, "type": kind, "f": f, "value": value}
        os.write(self._fd, (json.dumps(line, separators=(",", ":")) + "\n").encode())

    def invoke(self, f: str, **value: Any) -> int:
        op = next(self._ops)
        self._line(op, "invoke", f, value)
        return op

    def ok(self, op: int, f: str, **value: Any) -> None:
        self._line(op, "ok", f, value)

    def fail(self, op: int, f: str, error: BaseException | str) -> None:
        self._line(op, "fail", f, {"error": _describe(error)})

    def info(self, op: int, f: str, error: BaseException | str) -> None:
        """The outcome is unknown (it may or may not have taken effect)."""
        self._line(op, "info", f, {"error": _describe(error)})

    def close(self) -> None:
        os.close(self._fd)


def _describe(error: BaseException | str) -> str:
    if isinstance(error, str):
        return error
    return f"{type(error).__name__}: {error}"[:300]


def read_history(directory: str | os.PathLike[str]) -> Iterator[str]:
    """Every line of every actor's file (torn last lines included: the
    checker decides what to make of them)."""
    for path in sorted(Path(directory).glob("*.jsonl")):
        with open(path, encoding="utf-8", errors="replace") as f:
            yield from f
