"""The blocking twin of :class:`dlog.proxy.Client`, for scripts and threads::

from dlog.proxy import SyncClient

with SyncClient("127.0.0.1:8000") as client:
    dlsn = client.write("events", b"hello")
"""

from __future__ import annotations

from collections.abc import Sequence

from dlog.blocking import ClosingTwin, blocking
from dlog.loop_thread import LoopThread, default_loop_thread
from dlog.proxy.client import Client


class SyncClient(ClosingTwin[Client], wraps="client"):
    """Runs a :class:`Client` on a loop thread (the process-wide one by
    default); every method blocks until its async twin is done."""

    client: Client

    def __init__(
        self,
        hosts: str | Sequence[str],
        *,
        timeout: float = 60.0,
        connect_timeout: float = 5.0,
        loop_thread: LoopThread | None = None,
    ) -> None:
        runner = loop_thread or default_loop_thread()
        super().__init__(Client(hosts, timeout=timeout, connect_timeout=connect_timeout), runner)
        self._run(self.client.start())

    write = blocking(Client.write)
    write_bulk = blocking(Client.write_bulk)
    heartbeat = blocking(Client.heartbeat)
    truncate = blocking(Client.truncate)
    release = blocking(Client.release)
    create = blocking(Client.create)
    delete = blocking(Client.delete)

    def close(self) -> None:
        self._run(self.client.close())
