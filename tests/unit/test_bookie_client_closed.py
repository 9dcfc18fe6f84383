"""BookieClient when its connection drops with requests queued for writing."""

from __future__ import annotations

import asyncio
import socket
import struct
from typing import Any

import pytest
import uvloop

from dlog.ledger.bookie_client import BookieClient


@pytest.mark.parametrize("loop_factory", [asyncio.new_event_loop, uvloop.new_event_loop])
def test_a_write_pass_after_the_connection_is_lost_writes_nothing(loop_factory: Any) -> None:
    """The write pass can come after the loop closed the transport (a send
    queued in the same pass as the reset's ``connection_lost``): it must
    write nothing rather than raise from a loop callback."""
    listener = socket.create_server(("127.0.0.1", 0))
    port = listener.getsockname()[1]

    async def main() -> None:
        client = BookieClient(f"127.0.0.1:{port}")
        await client.connect()
        conn, _ = listener.accept()
        conn.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
        conn.close()  # RST
        for _ in range(100):
            if client.closed:
                break
            await asyncio.sleep(0.01)
        assert client.closed
        client._out.append(b"queued before the loss")
        client._flush()  # what the pass scheduled before the loss runs
        assert not client._out

    try:
        with asyncio.Runner(loop_factory=loop_factory) as runner:
            runner.run(main())
    finally:
        listener.close()
