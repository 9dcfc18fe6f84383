"""The bookie's file writes and syncs, each with a failpoint.

Every write and sync of the journal, the entry logs and the checkpoint mark
goes through here, so a test can make any one of them fail with ENOSPC or
EIO, or write only part of its bytes (``DLOG_FAILPOINTS=<point>=enospc``,
see :mod:`dlog.failpoints`), and check that no acknowledged entry is lost.
The point is named by the caller, e.g. ``entry_log.write`` or
``journal.fsync``. Disabled failpoints cost one dict lookup.
"""

from __future__ import annotations

import errno
import os
from collections.abc import Sequence

from dlog import failpoints

#: At most this many buffers per writev (Linux's IOV_MAX).
IOV_MAX = 1024


def _armed(point: str) -> str | None:
    if not failpoints.is_armed(point):
        return None
    return failpoints.take_action(point)


def _fail(point: str, action: str) -> None:
    failpoints.act(point, action)


def pwritev(fd: int, parts: Sequence[bytes], offset: int, point: str) -> int:
    """Write ``parts`` contiguously at ``offset``, completing short writes;
    returns the bytes written (all of them, or an OSError)."""
    action = _armed(point)
    total = 0
    for i in range(0, len(parts), IOV_MAX):
        chunk = parts[i : i + IOV_MAX]
        expected = sum(map(len, chunk))
        if action == "short":
            data = b"".join(chunk)
            os.pwrite(fd, data[: max(1, len(data) // 2)], offset)
            raise OSError(errno.ENOSPC, f"{os.strerror(errno.ENOSPC)} (failpoint {point}: short)")
        if action is not None:
            _fail(point, action)
        written = os.pwritev(fd, chunk, offset)
        if written < expected:  # a short write: finish the rest plainly
            rest = memoryview(b"".join(chunk))[written:]
            done = 0
            while done < len(rest):
                n = os.pwrite(fd, rest[done:], offset + written + done)
                if n <= 0:
                    raise OSError(errno.EIO, f"write made no progress at {offset}")
                done += n
        offset += expected
        total += expected
    return total


def pwrite(fd: int, data: bytes, offset: int, point: str) -> int:
    return pwritev(fd, [data], offset, point)


def fsync(fd: int, point: str) -> None:
    action = _armed(point)
    if action is not None:
        _fail(point, "eio" if action == "short" else action)
    os.fsync(fd)


def fdatasync(fd: int, point: str) -> None:
    action = _armed(point)
    if action is not None:
        _fail(point, "eio" if action == "short" else action)
    os.fdatasync(fd)


def sync_dir(directory: str | os.PathLike[str], point: str) -> None:
    """fsync a directory, so that files created, renamed or removed in it
    stay that way after a crash."""
    dfd = os.open(directory, os.O_RDONLY)
    try:
        fsync(dfd, point)
    finally:
        os.close(dfd)


def check(point: str) -> None:
    """A failpoint before an operation this module cannot wrap (a RocksDB
    write): ENOSPC or EIO as the operation would report it."""
    action = _armed(point)
    if action is not None:
        _fail(point, "enospc" if action == "short" else action)
