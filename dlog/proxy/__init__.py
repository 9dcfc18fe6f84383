"""DistributedLog's write proxy: the server (``dlog proxy``,
:mod:`dlog.proxy.server`) and its clients, :class:`Client` (asyncio) and
:class:`SyncClient` (blocking).

The clients need only thriftpy2 (the ``server`` extra); the server needs a
namespace too.
"""

from dlog.proxy.client import BulkWriteError, Client
from dlog.proxy.sync import SyncClient

__all__ = ["BulkWriteError", "Client", "SyncClient"]
