"""A bookie's answer with a status code protobuf does not know is a failure.

protobuf leaves an enum field unset for a code it does not know (a newer
bookie's, or a damaged byte), and reading the unset field gives its default,
EOK. A read answered so must not come back as a read of an empty entry: the
client reads it as EIO, on every operation, as it already did for adds.
"""

from __future__ import annotations

import asyncio

from dlog.errors import EIO, ENOENTRY, EOK
from dlog.ledger.bookie_client import BookieClient
from dlog.protocol import messages as m
from dlog.protocol.frame import FrameDecoder, encode_frame


def with_status_code(resp: m.Response, code: int) -> bytes:
    """``resp`` serialized with ``code`` in both of its status fields, where
    protobuf's own setters refuse a code they do not know."""
    resp.status = ENOENTRY
    resp.readResponse.status = ENOENTRY
    data = bytearray(resp.SerializeToString())
    # Response.status (field 2) and ReadResponse.status (field 1), as varints.
    known = m._varint(ENOENTRY)
    for tag in (0x10, 0x08):
        at = data.index(bytes([tag]) + known) + 1
        data[at : at + len(known)] = m._varint(code)
    return bytes(data)


def test_a_read_response_with_an_unknown_status_parses_as_eio() -> None:
    data = with_status_code(m.read_response(5, EOK, 1, 2), 9999)
    assert m.Response.FromString(data).status == EOK  # protobuf's own reading
    resp = m.parse_response(data)
    assert resp.status == EIO
    assert (resp.header.txnId, resp.readResponse.ledgerId) == (5, 1)
    known = with_status_code(m.read_response(5, EOK, 1, 2), ENOENTRY)
    assert m.parse_response(known).status == ENOENTRY


def test_the_client_reads_an_unknown_status_as_eio() -> None:
    """A peer answering every read with code 9999: read_entry gives EIO."""

    async def main() -> int:
        async def peer(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
            decoder = FrameDecoder()
            while data := await reader.read(65536):
                for payload in decoder.feed(data):
                    req = m.Request.FromString(bytes(payload))
                    answer = m.read_response(req.header.txnId, EOK, 1, 0, body=b"")
                    writer.write(encode_frame(with_status_code(answer, 9999)))
            writer.close()

        server = await asyncio.start_server(peer, "127.0.0.1", 0)
        port = server.sockets[0].getsockname()[1]
        client = BookieClient(f"127.0.0.1:{port}")
        try:
            await client.connect()
            resp = await client.read_entry(1, 0, timeout=10)
            return int(resp.status)
        finally:
            await client.close()
            server.close()

    assert asyncio.run(main()) == EIO
