"""Opening RocksDB (rocksdict) the way the bookie's indexes need it: raw
bytes keys and values, and explicit control over when writes are synced."""

from __future__ import annotations

from pathlib import Path

from rocksdict import Options, Rdict, WriteOptions


def open_db(path: Path) -> Rdict:
    opts = Options(raw_mode=True)
    opts.create_if_missing(True)
    opts.set_max_open_files(256)
    opts.set_keep_log_file_num(2)
    return Rdict(str(path), options=opts)


def sync_write_options() -> WriteOptions:
    wo = WriteOptions()
    wo.sync = True
    return wo
