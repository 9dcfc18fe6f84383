"""An explicit LAC is written to the bookies when it is sent, not on the
next loop pass: tailing readers wait for it, and whatever the caller does
next (a writer refilling its buffer) must not delay it."""

from __future__ import annotations

import asyncio
import types

from dlog.ledger.bookie_client import BookieClient
from dlog.ledger.metadata import LedgerMetadata
from dlog.ledger.write_handle import WriteHandle
from dlog.protocol import messages as m


class _Transport:
    def __init__(self) -> None:
        self.writes: list[bytes] = []

    def write(self, data: bytes) -> None:
        self.writes.append(data)

    def is_closing(self) -> bool:
        return False


def connected_client(address: str) -> tuple[BookieClient, _Transport]:
    client = BookieClient(address)
    transport = _Transport()
    client._proto = types.SimpleNamespace(transport=transport)  # type: ignore[assignment]
    client._loop = asyncio.get_running_loop()
    return client, transport


async def test_requests_go_out_once_per_loop_pass_unless_sent_now() -> None:
    client, transport = connected_client("127.0.0.1:3181")
    client.send(m.write_lac_request(0, 1, 0, b"k", b"a"))
    client.send(m.write_lac_request(0, 1, 1, b"k", b"b"))
    assert transport.writes == []
    await asyncio.sleep(0)
    assert len(transport.writes) == 1  # both, in one write
    client.send(m.write_lac_request(0, 1, 2, b"k", b"c"))
    client.write_lac(1, 3, b"k", b"d", now=True)
    assert len(transport.writes) == 2  # at once, the one queued before it first
    assert transport.writes[1].index(b"c") < transport.writes[1].index(b"d")
    await asyncio.sleep(0)
    assert len(transport.writes) == 2  # nothing left for the loop pass


async def test_a_write_handle_writes_its_explicit_lac_at_once() -> None:
    bookies = ["127.0.0.1:3181", "127.0.0.1:3182", "127.0.0.1:3183"]
    clients = dict(connected_client(b) for b in bookies)
    md = LedgerMetadata(
        ledger_id=9,
        ensemble_size=3,
        write_quorum_size=2,
        ack_quorum_size=2,
        ensembles=((0, tuple(bookies)),),
    )
    by_address = {b: c for b, c in zip(bookies, clients, strict=True)}
    context = types.SimpleNamespace(
        conf=types.SimpleNamespace(delay_ensemble_change=False, add_entry_timeout_sec=5),
        pool=types.SimpleNamespace(connected=by_address.get),
    )
    handle = WriteHandle(context, md, 0, b"pw", last_add_confirmed=4)  # type: ignore[arg-type]
    publish = asyncio.ensure_future(handle.write_lac())
    await asyncio.sleep(0)  # its first step, and nothing after it
    assert [len(t.writes) for t in clients.values()] == [1, 1, 1]
    assert handle.lac_published == 4
    publish.cancel()
