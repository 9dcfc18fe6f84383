"""The bookie's file writes and syncs, each with a failpoint.

Every write and sync of the journal, the entry logs and the checkpoint mark
goes through here, so a test can make any one of them fail with ENOSPC or
EIO, or write only part of its bytes (``DLOG_FAILPOINTS=<point>=enospc``,
see :mod:`dlog.failpoints`), and check that no acknowledged entry is lost.
The point is named by the caller, e.g. ``entry_log.write`` or
``journal.fsync``. Disabled failpoints cost one dict lookup.
"""

from __future__ import annotations

import ctypes
import errno
import os
from collections.abc import Callable, Sequence

from dlog import failpoints

#: At most this many buffers per writev (Linux's IOV_MAX).
IOV_MAX = 1024

# sync_file_range(2) flags, from linux/fs.h.
SYNC_FILE_RANGE_WAIT_BEFORE = 1
SYNC_FILE_RANGE_WRITE = 2
SYNC_FILE_RANGE_WAIT_AFTER = 4


def _libc_sync_file_range() -> Callable[[int, int, int, int], int] | None:
    """libc's sync_file_range (Python's os module lacks it), or None where
    the platform has none. ctypes releases the GIL for the call."""
    try:
        fn = ctypes.CDLL(None, use_errno=True).sync_file_range
    except (OSError, AttributeError):
        return None
    fn.argtypes = (ctypes.c_int, ctypes.c_int64, ctypes.c_int64, ctypes.c_uint)
    fn.restype = ctypes.c_int
    return fn


_sync_file_range = _libc_sync_file_range()


def _armed(point: str) -> str | None:
    if not failpoints.is_armed(point):
        return None
    return failpoints.take_action(point)


def _fail(point: str, action: str) -> None:
    failpoints.act(point, action)


def pwritev(fd: int, parts: Sequence[bytes | memoryview], offset: int, point: str) -> int:
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


def writeback(fd: int, offset: int, nbytes: int, point: str, *, wait: bool = False) -> bool:
    """Start writing a range of dirty pages back to the disk now, and with
    ``wait`` also wait until that range is written: writeback spread over a
    flush instead of one burst at its fdatasync, which would queue the
    journal's fsyncs behind it. Not durability (no metadata, no disk cache
    flush): the fdatasync that ends the flush still gives that. False where
    the platform cannot do it."""
    action = _armed(point)
    if action is not None:
        _fail(point, "eio" if action == "short" else action)
    if _sync_file_range is None or nbytes <= 0:
        return False
    flags = SYNC_FILE_RANGE_WRITE
    if wait:
        flags |= SYNC_FILE_RANGE_WAIT_BEFORE | SYNC_FILE_RANGE_WAIT_AFTER
    if _sync_file_range(fd, offset, nbytes, flags) != 0:
        err = ctypes.get_errno()
        if err in (errno.ENOSYS, errno.EINVAL, errno.ESPIPE):
            return False  # not supported for this file: the fdatasync still comes
        raise OSError(err, f"sync_file_range: {os.strerror(err)}")
    return True


def fallocate(fd: int, offset: int, length: int, point: str) -> None:
    """Reserve file space (``posix_fallocate``), where a full disk shows first."""
    action = _armed(point)
    if action is not None:
        _fail(point, "enospc" if action == "short" else action)
    os.posix_fallocate(fd, offset, length)


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
