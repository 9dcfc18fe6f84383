"""Failpoints: named places where a test can make a real process pause or
die, so "kill -9 in the middle of a flush" or "crash between two steps of a
segment roll" land exactly where a test wants them.

Disabled unless ``DLOG_FAILPOINTS`` is set (``name=action[,name=action]``)
when the process starts; a disabled failpoint costs one dict lookup.
Actions:

* ``pause``: create ``$DLOG_FAILPOINT_DIR/<name>`` (so the test knows the
  process got there), then sleep until killed;
* ``exit``: terminate the process at once, without cleanup (``os._exit``);
* ``raise``: raise :class:`FailpointError` in the calling code.
"""

from __future__ import annotations

import logging
import os
import time
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


def configure(spec: str) -> None:
    """Set failpoints in this process (tests running in-process)."""
    _ACTIVE.clear()
    _ACTIVE.update(_parse(spec))


def failpoint(name: str) -> None:
    action = _ACTIVE.get(name)
    if action is None:
        return
    log.warning("failpoint %s: %s", name, action)
    if action == "pause":
        marker_dir = Path(os.environ.get("DLOG_FAILPOINT_DIR", "."))
        marker_dir.mkdir(parents=True, exist_ok=True)
        (marker_dir / name).write_text(str(os.getpid()))
        while True:
            time.sleep(3600)
    elif action == "exit":
        os._exit(86)
    elif action == "raise":
        raise FailpointError(f"failpoint {name}")
