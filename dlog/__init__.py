"""dlog: a DistributedLog-style replicated log on BookKeeper-compatible bookies.

    import dlog

    ns = await dlog.Namespace.open("distributedlog://127.0.0.1:2181/messaging")
    log = await ns.open_log("events")
    async with await log.open_writer() as writer:
        dlsn = await writer.write(dlog.LogRecord(txid=1, payload=b"hello"))

Names are imported lazily, so ``import dlog`` stays cheap for the bookie
server and command-line tools.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

__version__ = "0.1.0"

_EXPORTS = {
    "Namespace": "dlog.namespace",
    "LogManager": "dlog.log",
    "LogWriter": "dlog.writer",
    "LogReader": "dlog.reader",
    "LogRecord": "dlog.record",
    "LogRecordWithDLSN": "dlog.record",
    "DLSN": "dlog.dlsn",
    "DLogConfig": "dlog.conf.dlog",
}

__all__ = [
    "DLSN",
    "DLogConfig",
    "LogManager",
    "LogReader",
    "LogRecord",
    "LogRecordWithDLSN",
    "LogWriter",
    "Namespace",
    "__version__",
]

if TYPE_CHECKING:
    from dlog.conf.dlog import DLogConfig
    from dlog.dlsn import DLSN
    from dlog.log import LogManager
    from dlog.namespace import Namespace
    from dlog.reader import LogReader
    from dlog.record import LogRecord, LogRecordWithDLSN
    from dlog.writer import LogWriter


def __getattr__(name: str) -> Any:
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module 'dlog' has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value
    return value
