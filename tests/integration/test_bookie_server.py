"""A real bookie (in-process server, real files, real ZooKeeper) answering
BookKeeper v3 requests over TCP."""

from __future__ import annotations

import asyncio
import os
import socket
import struct
import time

import pytest
from kazoo.client import KazooClient

from dlog.bookie import server as server_module
from dlog.bookie.registration import init_cluster
from dlog.bookie.service import BookieService
from dlog.errors import (
    EBADREQ,
    EFENCED,
    EIO,
    ENOENTRY,
    ENOLEDGER,
    EOK,
    EREADONLY,
    ETOOMANYREQUESTS,
    EUA,
    InvalidCookieError,
)
from dlog.ledger.bookie_client import BookieClient
from dlog.ledger.digest import CRC32C, DigestManager
from dlog.protocol import messages as m
from dlog.zk import ZooKeeper

#: Representative of the suite: runs with entry log per ledger off and on.
pytestmark = pytest.mark.both_entry_log_modes

KEY = DigestManager(1, CRC32C, b"pw").master_key


def entry(
    ledger_id: int, entry_id: int, lac: int | None = None, payload: bytes | None = None
) -> bytes:
    payload = payload if payload is not None else f"entry-{ledger_id}-{entry_id}".encode()
    dm = DigestManager(ledger_id, CRC32C, b"pw")
    return dm.compute(
        entry_id, entry_id - 1 if lac is None else lac, (entry_id + 1) * len(payload), payload
    )


async def connect(bookie: BookieService) -> BookieClient:
    client = BookieClient(f"127.0.0.1:{bookie.server.port}")
    await client.connect()
    return client


async def add(
    client: BookieClient, lid: int, eid: int, *, key: bytes = KEY, recovery: bool = False, **kw
) -> int:
    resp = await client.add_entry(lid, eid, key, entry(lid, eid, **kw), recovery=recovery)
    return resp.status


async def test_add_read_and_last_entry(make_bookie) -> None:
    bookie = await make_bookie()
    c = await connect(bookie)
    statuses = await asyncio.gather(*(c.add_entry(7, i, KEY, entry(7, i)) for i in range(500)))
    assert {r.status for r in statuses} == {EOK}
    r = await c.read_entry(7, 123)
    assert r.status == EOK and r.readResponse.body == entry(7, 123)
    assert r.readResponse.maxLAC == 498  # the bookie learns the LAC piggybacked on adds
    last = await c.read_entry(7, m.LAST_ADD_CONFIRMED)
    assert last.status == EOK and last.readResponse.entryId == -1  # echoed, as upstream
    assert last.readResponse.body == entry(7, 499)
    # After a checkpoint the entries come from entry logs through the index.
    await bookie.core.checkpointer.checkpoint()
    for s in bookie.core.storage.dirs:
        s.read_cache = type(s.read_cache)(0)
        assert s.write_cache_count == 0
    r = await c.read_entry(7, 321)
    assert r.status == EOK and r.readResponse.body == entry(7, 321)
    assert (await c.read_entry(8, 0)).status == ENOLEDGER
    assert (await c.read_entry(7, 500)).status == ENOENTRY
    await c.close()


async def test_fencing_rejects_adds_but_not_recovery_adds(
    make_bookie, tmp_path, ledgers_uri
) -> None:
    bookie = await make_bookie()
    c = await connect(bookie)
    for i in range(3):
        assert await add(c, 11, i) == EOK
    r = await c.read_entry(11, -1, fence=True, master_key=KEY)
    assert r.status == EOK and r.readResponse.body == entry(11, 2)
    assert await add(c, 11, 3) == EFENCED
    assert await add(c, 11, 3, recovery=True) == EOK
    # Wrong key: the fence read and adds are refused.
    assert (await c.read_entry(11, -1, fence=True, master_key=b"x" * 20)).status == EUA
    # Fencing a ledger this bookie never saw creates it fenced: a late add
    # from the old writer must still fail.
    r = await c.read_entry(12, -1, fence=True, master_key=KEY)
    assert r.status == ENOENTRY
    assert await add(c, 12, 0) == EFENCED
    await c.close()

    # Fencing is durable: it survives a restart.
    port = bookie.server.port
    await bookie.stop()
    again = await make_bookie("b0", port=port)
    c = await connect(again)
    assert await add(c, 11, 4) == EFENCED
    assert await add(c, 12, 0) == EFENCED
    r = await c.read_entry(11, 3)
    assert r.status == EOK and r.readResponse.body == entry(11, 3)
    await c.close()


async def test_wrong_master_key_and_write_close(make_bookie) -> None:
    bookie = await make_bookie()
    c = await connect(bookie)
    assert await add(c, 5, 0) == EOK
    assert await add(c, 5, 1, key=b"another-key-20-bytes") == EUA
    assert (await c.write_close(5, b"another-key-20-bytes")).status == EUA
    assert (await c.write_close(5, KEY)).status == EOK
    # Advisory: an unknown ledger is fine.
    resp = await c.write_close(999, KEY)
    assert resp.status == EOK and resp.writeCloseResponse.ledgerId == 999
    # The id in the body must match the request.
    assert (await c.add_entry(5, 2, KEY, entry(5, 3))).status == EBADREQ
    await c.close()


async def test_long_poll_lac(make_bookie) -> None:
    bookie = await make_bookie()
    c = await connect(bookie)
    for i in range(3):
        assert await add(c, 21, i) == EOK  # LAC piggybacked: 1
    # LAC already past previousLAC: answered at once.
    r = await c.read_entry(21, 1, previous_lac=0, long_poll_timeout_ms=10000, piggyback=True)
    assert r.status == EOK and r.readResponse.maxLAC == 1 and r.readResponse.body == entry(21, 1)
    # Wait for the LAC to move past 1.
    t0 = time.monotonic()
    poll = asyncio.ensure_future(
        c.read_entry(21, 2, previous_lac=1, long_poll_timeout_ms=10000, piggyback=True)
    )
    await asyncio.sleep(0.2)
    assert not poll.done()
    assert await add(c, 21, 3) == EOK  # piggybacks LAC 2
    r = await asyncio.wait_for(poll, 5)
    assert time.monotonic() - t0 < 5
    assert r.status == EOK and r.readResponse.maxLAC == 2 and r.readResponse.body == entry(21, 2)
    # Timeout: the LAC simply has not moved.
    r = await c.read_entry(21, 3, previous_lac=2, long_poll_timeout_ms=300, piggyback=True)
    assert r.status == EOK and r.readResponse.maxLAC == 2 and not r.readResponse.HasField("body")
    # Explicit LAC (WRITE_LAC) also moves it, and READ_LAC returns both bodies.
    lac_body = DigestManager(21, CRC32C, b"pw").compute_lac(3)
    assert (await c.write_lac(21, 3, KEY, lac_body)).status == EOK
    r = await c.read_lac(21)
    assert r.status == EOK and r.readLacResponse.lacBody == lac_body
    assert r.readLacResponse.lastEntryBody == entry(21, 3)
    assert (await c.force_ledger(21)).status == EOK
    await c.close()


async def test_back_pressure_with_tiny_write_cache(make_bookie) -> None:
    bookie = await make_bookie(dbStorage_writeCacheMaxSizeMb=1, dbStorage_maxThrottleTimeMs=300)
    storage = bookie.core.storage.dirs[0]
    release = asyncio.Event()
    loop = asyncio.get_running_loop()
    original = storage._flush_frozen

    def slow_flush() -> None:
        asyncio.run_coroutine_threadsafe(release.wait(), loop).result()
        original()

    storage._flush_frozen = slow_flush
    c = await connect(bookie)
    payload = b"p" * (64 * 1024)
    results = []
    for i in range(40):  # 2.5 MiB into a 1 MiB cache (two 512 KiB halves)
        r = await c.add_entry(31, i, KEY, entry(31, i, payload=payload))
        results.append(r.status)
        assert storage.write_cache_size <= 1024 * 1024
    assert results[0] == EOK
    assert ETOOMANYREQUESTS in results  # refused after dbStorage_maxThrottleTimeMs
    assert storage.rejected_adds > 0
    release.set()
    await asyncio.sleep(0.2)
    # Once the flush completes, adds are accepted again.
    first_refused = results.index(ETOOMANYREQUESTS)
    r = await c.add_entry(31, first_refused, KEY, entry(31, first_refused, payload=payload))
    assert r.status == EOK
    await c.close()


async def test_full_disk_turns_read_only(
    make_bookie, zk: ZooKeeper, zk_root: str, caplog: pytest.LogCaptureFixture
) -> None:
    with caplog.at_level("WARNING"):
        bookie = await make_bookie(
            diskUsageThreshold=0.00001,
            diskUsageLwmThreshold=0.0,
            diskUsageWarnThreshold=0.000001,
        )
    assert bookie.core.read_only
    assert "diskUsageWarnThreshold" in caplog.text
    ro_path = f"{zk_root}/ledgers/available/readonly/{bookie.bookie_id}"
    rw_path = f"{zk_root}/ledgers/available/{bookie.bookie_id}"
    assert await zk.exists(ro_path) is not None
    assert await zk.exists(rw_path) is None
    c = await connect(bookie)
    assert await add(c, 41, 0) == EREADONLY
    assert (await c.write_lac(41, 0, KEY, b"x" * 24)).status == EREADONLY
    # Space comes back (the thresholds are lifted): writable again.
    bookie.core.disk.threshold, bookie.core.disk.lwm = 1.0, 0.999
    bookie.core.disk.check()
    assert not bookie.core.read_only
    # Registration creates the writable znode, then deletes the read-only one.
    for _ in range(100):
        if await zk.exists(rw_path) is not None and await zk.exists(ro_path) is None:
            break
        await asyncio.sleep(0.05)
    assert await zk.exists(rw_path) is not None and await zk.exists(ro_path) is None
    assert await add(c, 41, 0) == EOK
    # And full again: reads still served, adds refused, nothing half-written.
    bookie.core.disk.threshold, bookie.core.disk.lwm = 0.00001, 0.0
    bookie.core.disk.check()
    assert await add(c, 41, 1) == EREADONLY
    r = await c.read_entry(41, 0)
    assert r.status == EOK and r.readResponse.body == entry(41, 0)
    assert (await c.read_entry(41, 1)).status == ENOENTRY
    await c.close()


async def test_cookie_protects_directories(make_bookie, tmp_path) -> None:
    bookie = await make_bookie("b0")
    c = await connect(bookie)
    assert await add(c, 1, 0) == EOK
    await c.close()
    port = bookie.server.port
    await bookie.stop()
    # Same directories, different bookie id (port): they belong to another bookie.
    with pytest.raises(InvalidCookieError, match="belongs to bookie|no cookie"):
        await make_bookie("b0")
    # A ledger directory that lost its cookie (wiped or replaced disk).
    (tmp_path / "b0" / "ledgers" / "current" / "VERSION").unlink()
    with pytest.raises(InvalidCookieError, match="lost its cookie"):
        await make_bookie("b0", port=port)


async def test_malformed_frames_close_only_that_connection(make_bookie) -> None:
    bookie = await make_bookie(nettyMaxFrameSizeBytes=64 * 1024)
    good = await connect(bookie)
    assert await add(good, 1, 0) == EOK
    port = bookie.server.port

    def raw(data: bytes) -> bytes:
        with socket.create_connection(("127.0.0.1", port), timeout=5) as s:
            s.sendall(data)
            s.shutdown(socket.SHUT_WR)
            chunks = []
            while True:
                try:
                    d = s.recv(65536)
                except ConnectionResetError:
                    break
                if not d:
                    break
                chunks.append(d)
            return b"".join(chunks)

    loop = asyncio.get_running_loop()
    # Oversized frame: closed without an answer.
    assert (
        await loop.run_in_executor(None, raw, struct.pack(">i", 10 * 1024 * 1024) + b"x" * 100)
        == b""
    )
    # Undecodable frame: closed without an answer.
    assert (
        await loop.run_in_executor(None, raw, struct.pack(">i", 5) + b"\xff\xff\xff\xff\xff") == b""
    )
    # Missing required fields: EBADREQ, matched by txnId.
    req = m.add_request(77, 1, 1, KEY, b"")
    req.addRequest.ClearField("body")
    payload = req.SerializePartialToString()
    answer = await loop.run_in_executor(None, raw, struct.pack(">i", len(payload)) + payload)
    resp = m.Response.FromString(answer[4:])
    assert resp.status == EBADREQ and resp.header.txnId == 77 and resp.addResponse.status == EBADREQ
    # The well-behaved connection never noticed.
    assert await add(good, 1, 1) == EOK
    assert bookie.metrics.closed_connections.get(("frame_too_large",)) == 1
    assert bookie.metrics.closed_connections.get(("undecodable",)) == 1
    await good.close()


async def test_large_and_small_read_answers_share_a_connection(make_bookie, monkeypatch) -> None:
    """An entry of LARGE_PART bytes or more goes out as its parts (the
    stored bytes themselves between the response's head and tail), small
    answers joined around it: pipelined on one connection, every answer
    arrives whole in its own frame, matched to its request, from the write
    cache and from entry logs alike."""
    batches: list[list[bytes]] = []
    real = server_module.coalesce

    def recording(pieces: list[bytes]) -> list[bytes]:
        batches.append(pieces)
        return real(pieces)

    monkeypatch.setattr(server_module, "coalesce", recording)
    bookie = await make_bookie()
    c = await connect(bookie)
    large = server_module.LARGE_PART
    sizes = [10, large - 200, large, 300_000, 5, 1_000_000, 17]
    bodies = [entry(9, i, payload=os.urandom(n)) for i, n in enumerate(sizes)]
    for i, body in enumerate(bodies):
        assert (await c.add_entry(9, i, KEY, body)).status == EOK
    for source in ("write cache", "entry logs"):
        order = [*range(len(sizes))] * 3
        batches.clear()
        answers = await asyncio.gather(*(c.read_entry(9, i) for i in order))
        assert [a.status for a in answers] == [EOK] * len(order), source
        assert [a.readResponse.entryId for a in answers] == order, source
        assert [a.readResponse.body for a in answers] == [bodies[i] for i in order], source
        assert {a.readResponse.maxLAC for a in answers} == {len(sizes) - 2}, source
        assert sum(len(p) >= large for b in batches for p in b) == 3 * 3, source  # not joined
        await bookie.core.checkpointer.checkpoint()
        for s in bookie.core.storage.dirs:
            s.read_cache = type(s.read_cache)(0)
            assert s.write_cache_count == 0
    await c.close()


async def test_a_read_that_fails_inside_the_bookie_is_answered_eio(
    make_bookie, monkeypatch
) -> None:
    """A read (or long poll) the bookie fails on with an unexpected error is
    still answered, EIO to its txn, and the connection goes on serving."""
    bookie = await make_bookie()
    c = await connect(bookie)
    assert await add(c, 4, 0) == EOK
    await bookie.core.checkpointer.checkpoint()  # from entry logs: the path that awaits
    for s in bookie.core.storage.dirs:
        s.read_cache = type(s.read_cache)(0)

    async def broken(*args: object, **kw: object) -> object:
        raise RuntimeError("injected")

    monkeypatch.setattr(bookie.core, "read_entry", broken)
    monkeypatch.setattr(bookie.core, "wait_for_lac", broken)
    r = await c.read_entry(4, 0, timeout=10)
    assert (r.status, r.readResponse.entryId, r.readResponse.HasField("body")) == (EIO, 0, False)
    poll = await c.read_entry(4, 1, previous_lac=0, long_poll_timeout_ms=100, timeout=10)
    assert (poll.status, poll.readResponse.entryId) == (EIO, 1)
    monkeypatch.undo()
    r = await c.read_entry(4, 0)
    assert r.status == EOK and r.readResponse.body == entry(4, 0)
    await c.close()


def count_parses(monkeypatch: pytest.MonkeyPatch, module: object, name: str) -> list[int]:
    """Sizes of the messages protobuf parses with ``module.name``'s
    FromString from now on (the test's monkeypatch undoes it)."""
    parsed: list[int] = []
    real = getattr(module, name)

    class Counting:
        @staticmethod
        def FromString(data: bytes) -> object:
            parsed.append(len(data))
            return real.FromString(data)

    monkeypatch.setattr(module, name, Counting)
    return parsed


async def test_adds_skip_protobuf_unless_they_carry_more(make_bookie, monkeypatch) -> None:
    """Adds as clients send them never reach protobuf's parser, whose arenas
    make glibc trim the whole heap every 10,000 frees, on the event loop. An
    add carrying anything more is protobuf's to parse, and is served the same."""
    parsed = count_parses(monkeypatch, server_module, "Request")
    bookie = await make_bookie()
    client = await connect(bookie)
    assert await add(client, 5, 0) == EOK
    assert await add(client, 5, 1, recovery=True) == EOK
    assert parsed == []
    unusual = m.add_request(0, 5, 2, KEY, entry(5, 2))
    unusual.requestContext.add(key="trace", value="1")
    resp = await client.send(unusual)
    assert resp.status == EOK and resp.addResponse.entryId == 2
    assert len(parsed) == 1
    for eid in range(3):
        r = await client.read_entry(5, eid)
        assert r.status == EOK and r.readResponse.body == entry(5, eid)
    await client.close()


async def test_a_client_reads_add_answers_without_protobuf(make_bookie, monkeypatch) -> None:
    """The ledger client's answers to its adds skip protobuf's parser too
    (its arenas trim the heap every 10,000 frees, in the writer's loop);
    every other answer, and an add sent as a plain request, is protobuf's."""
    parsed = count_parses(monkeypatch, m, "Response")  # the client's parse_response
    bookie = await make_bookie()
    client = await connect(bookie)
    results = [await client.add_entry(6, eid, KEY, entry(6, eid)) for eid in range(3)]
    assert [(r.status, r.ledger_id, r.entry_id) for r in results] == [(EOK, 6, e) for e in range(3)]
    assert await add(client, 6, 1, key=b"k" * 20) == EUA  # errors too
    assert parsed == []
    resp = await client.send(m.add_request(0, 6, 3, KEY, entry(6, 3)))
    assert resp.status == EOK and resp.addResponse.entryId == 3  # a protobuf Response
    r = await client.read_entry(6, 0)
    assert r.status == EOK and r.readResponse.body == entry(6, 0)
    assert len(parsed) == 2
    await client.close()


async def test_registration_survives_session_expiry(
    make_bookie, zk: ZooKeeper, zk_root: str, zk_server
) -> None:
    bookie = await make_bookie()
    path = f"{zk_root}/ledgers/available/{bookie.bookie_id}"
    assert (await zk.exists(path)).ephemeralOwner == bookie.core.zk.session_id
    old_session = bookie.core.zk.session_id
    # Expire the bookie's session: another client attaches to it and closes it.
    sid, passwd = bookie.core.zk.client.client_id
    intruder = KazooClient(hosts=zk_server.connect_string, client_id=(sid, passwd))
    intruder.start()
    intruder.stop()
    intruder.close()
    deadline = time.monotonic() + 20
    while time.monotonic() < deadline:
        stat = await zk.exists(path)
        if stat is not None and stat.ephemeralOwner != old_session:
            break
        await asyncio.sleep(0.1)
    stat = await zk.exists(path)
    assert stat is not None and stat.ephemeralOwner == bookie.core.zk.session_id != old_session


async def test_cluster_layout_creation_is_race_safe(zk_server, zk_root: str) -> None:
    clients = [ZooKeeper(zk_server.connect_string) for _ in range(6)]
    await asyncio.gather(*(c.start() for c in clients))
    root = f"{zk_root}/ledgers"
    ids = await asyncio.gather(*(init_cluster(c, root) for c in clients))
    assert len(set(ids)) == 1
    children = set(await clients[0].get_children(root))
    assert {"available", "cookies", "LAYOUT", "INSTANCEID", "idgen"} <= children
    assert await clients[0].exists(f"{root}/available/readonly") is not None
    await asyncio.gather(*(c.stop() for c in clients))


async def test_checkpoint_persists_mark_and_collects_journals(make_bookie, tmp_path) -> None:
    bookie = await make_bookie(journalMaxSizeMB=1, journalMaxBackups=1)
    c = await connect(bookie)
    payload = b"j" * 8192
    for batch in range(6):  # ~3 MiB: several 1 MiB journals
        await asyncio.gather(
            *(
                c.add_entry(3, batch * 64 + i, KEY, entry(3, batch * 64 + i, payload=payload))
                for i in range(64)
            )
        )
    journal_dir = tmp_path / "b0" / "journal" / "current"
    before = sorted(journal_dir.glob("*.txn"))
    assert len(before) >= 3
    marks = await bookie.core.checkpointer.checkpoint()
    after = sorted(journal_dir.glob("*.txn"))
    # Only the current journal and journalMaxBackups=1 older one remain.
    assert len(after) == 2
    mark_file = tmp_path / "b0" / "ledgers" / "current" / "lastMark"
    assert mark_file.read_bytes() == marks[0].to_bytes()
    r = await c.read_entry(3, 5)
    assert r.status == EOK and r.readResponse.body == entry(3, 5, payload=payload)
    await c.close()


async def test_journal_stages_checkpoints_and_flushes_are_measured(make_bookie) -> None:
    """The metrics that trace an add's latency: the journal's write and
    fsync once per synced batch, its queue and callback waits once per
    record (so their percentiles are the adds'), and every storage flush
    and checkpoint with its duration."""
    bookie = await make_bookie()
    m = bookie.core.metrics
    c = await connect(bookie)
    await asyncio.gather(
        *(c.add_entry(4, i, KEY, entry(4, i, payload=b"s" * 100)) for i in range(50))
    )
    stages = (
        m.journal_queue_latency,
        m.journal_write_latency,
        m.journal_fsync_latency,
        m.journal_callback_latency,
    )
    batches = m.journal_write_latency.count
    assert batches >= 1
    assert m.journal_fsync_latency.count == batches
    # every journal record (the 50 entries and the new ledger's key) in a group
    records = sum(j.stats.records for j in bookie.core.journals)
    assert m.journal_group_size.sum == records >= 50
    # a batch holds one or more groups; the adds sent together shared groups
    assert batches <= m.journal_group_size.count < records
    # the waits are counted for each record, not once per group or batch
    assert m.journal_queue_latency.count == m.journal_callback_latency.count == records
    assert m.journal_add_latency.count == records
    assert all(s.sum >= 0 for s in stages)
    flushes, checkpoints = m.flush_latency.count, m.checkpoint_latency.count
    await bookie.core.checkpointer.checkpoint()
    assert m.checkpoint_latency.count == checkpoints + 1
    assert m.flush_latency.count == flushes + 1
    # the flush was paced by sleeping (the default), not in the loop's turns
    assert sum(sd.pacer.slept for sd in bookie.core.storage.dirs) > 0
    assert sum(m.flush_turns.get((o,)) for o in ("granted", "overrun", "missed")) == 0
    await c.close()


async def test_a_flush_paced_in_the_loops_turns(make_bookie) -> None:
    """dbStorage_flushLendTurns: the flush's slices wait for turns the event
    loop lends (counted by outcome) instead of sleeping."""
    bookie = await make_bookie(dbStorage_flushLendTurns=True)
    m = bookie.core.metrics
    c = await connect(bookie)
    await asyncio.gather(
        *(c.add_entry(4, i, KEY, entry(4, i, payload=b"s" * 100)) for i in range(50))
    )
    await bookie.core.checkpointer.checkpoint()
    assert m.flush_turns.get(("granted",)) + m.flush_turns.get(("missed",)) >= 1
    assert sum(sd.pacer.slept for sd in bookie.core.storage.dirs) == 0
    await c.close()
