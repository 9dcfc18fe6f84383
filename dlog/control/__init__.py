"""The gRPC control plane: standard health checks and dlog's admin API.

Hosts (a bookie, AutoRecovery, a write proxy) run a :class:`ControlServer`
and pass down :class:`AdminProviders`, async callables returning the
``dlog.admin.v1`` messages of :mod:`dlog.protocol.admin_pb2`; this package
imports nothing above the protocol layer, so any host can use it::

    control = ControlServer(host, port, services=[PROXY],
                            providers=AdminProviders(owned_streams=list_owned))
    port = await control.start()              # port 0 binds a free one
    await control.set_serving(OVERALL, True)  # "" is the process as a whole
    await control.set_serving(PROXY, accepting_new_streams)
    ...
    await control.shutting_down()             # NOT_SERVING while the host drains
    await control.stop()
"""

from dlog.control.rpc import METHODS, SERVICE
from dlog.control.server import (
    ADMIN,
    AUTORECOVERY,
    BOOKIE,
    OVERALL,
    PROXY,
    AdminProviders,
    ControlServer,
)

__all__ = [
    "ADMIN",
    "AUTORECOVERY",
    "BOOKIE",
    "METHODS",
    "OVERALL",
    "PROXY",
    "SERVICE",
    "AdminProviders",
    "ControlServer",
]
