"""``clientConnectTimeoutMillis``: how long the client waits for a bookie's
TCP connection to open before it counts the bookie unreachable.

The bookie here is a listening socket whose accept queue is full, so the
kernel drops further SYNs and a connect hangs, as it does to a host that
is down behind a firewall. A client with a short timeout gives up after
its three quick attempts; with the 10 s default it would still be waiting
when the guard below fires."""

from __future__ import annotations

import asyncio
import socket
from collections.abc import Iterator

import pytest

from dlog.conf.bookkeeper import ClientConfig
from dlog.errors import BookieHandleNotAvailableError
from dlog.ledger.client import BookKeeper

#: Far below the 10 s default and far above a loopback connect.
TIMEOUT_MS = 300


@pytest.fixture
def silent_bookie() -> Iterator[str]:
    """The address of a listener that never completes another handshake."""
    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen(0)
    address = f"127.0.0.1:{server.getsockname()[1]}"
    fillers = []
    for _ in range(3):  # fill the accept queue (and the SYN queue behind it)
        s = socket.socket()
        s.setblocking(False)
        try:
            s.connect(server.getsockname())
        except BlockingIOError:
            pass
        fillers.append(s)
    try:
        yield address
    finally:
        for s in fillers:
            s.close()
        server.close()


async def test_the_client_gives_up_on_a_silent_bookie_after_its_connect_timeout(
    silent_bookie: str,
) -> None:
    conf = ClientConfig.load(
        metadataServiceUri="zk+hierarchical://127.0.0.1:2181/ledgers",
        clientConnectTimeoutMillis=TIMEOUT_MS,
    )
    bk = BookKeeper(conf=conf)  # the pool needs no ZooKeeper
    try:
        # Three attempts of 0.3 s and their backoff: about 1 s. With the
        # default (10 s an attempt) the guard fires first.
        async with asyncio.timeout(8):
            with pytest.raises(BookieHandleNotAvailableError, match="cannot connect"):
                await bk.pool.get(silent_bookie)
    finally:
        await bk.pool.close()
