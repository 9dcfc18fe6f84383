"""Opening RocksDB (rocksdict) the way the bookie's indexes need it: raw
bytes keys and values, and explicit control over when writes are synced."""

from __future__ import annotations

import contextlib
import errno
import os
import re
from collections.abc import Iterator
from pathlib import Path

from rocksdict import AccessType, Options, Rdict, WriteOptions

from dlog.bookie import fileio


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


#: A write-ahead log's name in a RocksDB directory (the info log is ``LOG``).
_WAL_NAME = re.compile(r"^[0-9]+\.log$")


def sync_wal(db: Rdict, path: Path) -> None:
    """Make every write so far durable, as ``db.flush_wal(True)`` does, but
    with the fsyncs outside Python's interpreter lock.

    rocksdict holds the GIL for the whole of each call, and an fsync on a
    disk busy with entry-log writeback takes tens of milliseconds: with
    ``flush_wal(True)`` the event loop answering adds stopped for all of
    them. Here RocksDB only hands its buffered WAL bytes to the OS (no
    sync), and ``os.fsync``, which releases the lock, syncs every WAL file
    in the directory, then the directory itself (a WAL created since the
    last sync must stay reachable). A WAL that RocksDB deletes meanwhile is
    skipped: it deletes one only after the memtables it covered were
    written to table files and the MANIFEST, both synced. (Callers check
    their own failpoint first, as before a RocksDB write.)"""
    db.flush_wal(False)
    for name in sorted(os.listdir(path)):
        if not _WAL_NAME.match(name):
            continue
        try:
            fd = os.open(path / name, os.O_RDONLY)
        except FileNotFoundError:
            continue
        try:
            fileio.fdatasync(fd, "rocksdb.wal_sync")
        finally:
            os.close(fd)
    fileio.sync_dir(path, "rocksdb.wal_sync")


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
