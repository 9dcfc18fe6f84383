"""BookieClient when its connection drops with requests queued for writing."""

from __future__ import annotations

import asyncio
import socket
import struct
from typing import Any

import pytest
import uvloop

from dlog.ledger.bookie_client import BookieClient
from dlog.protocol import messages as m


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


def test_what_was_sent_before_close_goes_out() -> None:
    """Requests wait for the next loop pass to be written; ``close`` right
    after sending (a fire-and-forget explicit LAC, say) must write them
    first, not drop them with the queue of a closed client."""

    async def main() -> bytes:
        got: asyncio.Future[bytes] = asyncio.get_running_loop().create_future()

        async def peer(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
            got.set_result(await reader.read())  # until the client closes
            writer.close()

        server = await asyncio.start_server(peer, "127.0.0.1", 0)
        port = server.sockets[0].getsockname()[1]
        client = BookieClient(f"127.0.0.1:{port}")
        await client.connect()
        client.send(m.write_lac_request(7, 1, 0, b"k", b"lac"))
        await client.close()
        data = await asyncio.wait_for(got, 5)
        server.close()
        await server.wait_closed()
        return data

    data = asyncio.run(main())
    assert len(data) > 4 and int.from_bytes(data[:4], "big") == len(data) - 4
