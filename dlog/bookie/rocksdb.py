"""Opening RocksDB (rocksdict) the way the bookie's indexes need it: raw
bytes keys and values, and explicit control over when writes are synced."""

from __future__ import annotations

import contextlib
import errno
import os
from collections.abc import Iterator
from pathlib import Path

from rocksdict import AccessType, Options, Rdict, WriteOptions


def open_db(path: Path, *, read_only: bool = False) -> Rdict:
    """Open (creating) a database; ``read_only`` writes nothing at all, so it
    works on a full disk, where a read-write open fails (it appends to the
    MANIFEST)."""
    opts = Options(raw_mode=True)
    opts.create_if_missing(not read_only)
    opts.set_max_open_files(256)
    opts.set_keep_log_file_num(2)
    with io_errors(f"opening {path}"):
        if read_only:
            return Rdict(str(path), options=opts, access_type=AccessType.read_only())
        return Rdict(str(path), options=opts)


def sync_write_options() -> WriteOptions:
    wo = WriteOptions()
    wo.sync = True
    return wo


@contextlib.contextmanager
def io_errors(what: str) -> Iterator[None]:
    """RocksDB reports a full or failing disk as a plain exception with a
    message; turn it into the OSError the bookie's I/O paths handle."""
    try:
        yield
    except OSError:
        raise
    except Exception as e:
        text = str(e)
        if "No space left" in text:
            code = errno.ENOSPC
        elif "read only" in text.lower():
            code = errno.EROFS
        elif "IO error" in text or "Input/output" in text:
            code = errno.EIO
        else:
            raise
        raise OSError(code, f"{what}: {os.strerror(code)}: {text}") from e
