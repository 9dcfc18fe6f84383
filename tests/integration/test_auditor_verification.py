"""Corrupt replicas on live bookies, on real ZooKeeper and real bookies: a
byte flipped in an entry's payload in its entry log (the bookie serves it,
its digest fails) or its record header damaged (the bookie answers EIO).
The auditor's entries check reads and digest-verifies the first and last
entry of each fragment plus auditorLedgerVerificationPercentage of the
others and marks the ledger; the replication worker replaces the bad
replica although its bookie is alive and lists the entry; verify_ledgers
reports the bad replica before and nothing after.

The corruption is done as the chaos suite does it to a running bookie:
checkpoint (entries leave the write cache for the entry log), then find
the entry's record by scanning the entry logs and patch the file; the
bookie reads entry logs with pread and its read-ahead cache only holds
entries read from disk, so the next read sees the damage."""

from __future__ import annotations

import asyncio
import struct
import subprocess
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

from dlog.autorecovery.auditor import Auditor
from dlog.autorecovery.worker import ReplicationWorker
from dlog.conf.bookie import BookieConfig
from dlog.ledger import checker
from dlog.ledger.checker import BAD_DIGEST, UNREADABLE, sample_entries, verify_ledgers
from dlog.ledger.client import BookKeeper
from dlog.ledger.fragments import fragments, stored_entries
from dlog.ledger.replicator import find_fragments
from dlog.ledger.underreplication import UnderreplicationManager
from tests.cli import dlog, ok
from tests.waiting import eventually

QUIET = {
    "auditorPeriodicBookieCheckInterval": 0,  # once, at start
    "auditorPeriodicCheckInterval": 0,  # the test runs the entries check itself
    "auditorPeriodicOrphanedLedgerCheckInterval": 0,
}
PASSWORD = b"pw"

# Entry log layout (BookKeeper's): a 1024-byte header (magic, version,
# ledgersMapOffset, ledgersCount), then records: a 4-byte size and the
# stored entry, which starts with (ledgerId, entryId) and ends with the
# payload (after lac, length and the digest).
_LOG_HEADER = struct.Struct(">4siqi")
_SIZE = struct.Struct(">i")
_IDS = struct.Struct(">qq")


def entry_records(ledger_dirs: list[str], ledger_id: int, entry_id: int) -> list[tuple[Path, int]]:
    """(entry log, offset of the record's size field) of every stored copy
    of an entry, found by scanning the bookie's entry logs (no help from
    the bookie: works for a bookie in another process too)."""
    out = []
    for d in ledger_dirs:
        for path in sorted(Path(d).rglob("*.log")):
            data = path.read_bytes()
            if len(data) < 1024:
                continue
            magic, _version, map_offset, _count = _LOG_HEADER.unpack_from(data)
            if magic != b"BKLO":
                continue
            end = map_offset if map_offset > 0 else len(data)
            pos = 1024
            while pos + 20 <= end:
                (size,) = _SIZE.unpack_from(data, pos)
                if size < 16 or pos + 4 + size > end:
                    break
                lid, eid = _IDS.unpack_from(data, pos + 4)
                if (lid, eid) == (ledger_id, entry_id):
                    out.append((path, pos))
                pos += 4 + size
    return out


def patch(path: Path, offset: int, new: bytes) -> None:
    with open(path, "r+b") as f:
        f.seek(offset)
        f.write(new)
        f.flush()


async def flushed(service: Any) -> list[str]:
    """Checkpoint a running bookie (its write cache goes to the entry
    logs) and return its ledger directories."""
    await service.core.checkpointer.checkpoint()
    return list(service.conf.ledger_directories)


async def flip_payload_byte(service: Any, ledger_id: int, entry_id: int) -> None:
    """Flip the last byte of the entry's payload in its entry log: the
    bookie still serves the entry, its digest no longer matches."""
    records = entry_records(await flushed(service), ledger_id, entry_id)
    assert records, f"entry {ledger_id}/{entry_id} not found in the entry logs"
    for path, pos in records:
        data = path.read_bytes()
        (size,) = _SIZE.unpack_from(data, pos)
        last = pos + 4 + size - 1
        patch(path, last, bytes([data[last] ^ 0xFF]))


async def damage_header(service: Any, ledger_id: int, entry_id: int) -> None:
    """Overwrite the entry id in the entry's record header: the bookie's
    read finds another entry at the location and answers EIO."""
    records = entry_records(await flushed(service), ledger_id, entry_id)
    assert records, f"entry {ledger_id}/{entry_id} not found in the entry logs"
    for path, pos in records:
        patch(path, pos + 4 + 8, struct.pack(">q", entry_id + 1_000_000))


@pytest.fixture
async def env(make_bookie, ledgers_uri) -> AsyncIterator[dict[str, Any]]:  # type: ignore[no-untyped-def]
    bookies = {}
    for i in range(4):
        b = await make_bookie(f"b{i}")
        bookies[b.bookie_id] = b
    bk = BookKeeper(ledgers_uri)
    await bk.start()
    await bk.watcher.wait_for(4, 10)
    urm = UnderreplicationManager(bk.zk, bk.uri.ledgers_root, owner="test")
    await urm.initialize()
    started: list[Auditor | ReplicationWorker] = []

    def conf(percentage: int) -> BookieConfig:
        return BookieConfig.load(
            None,
            {
                "metadataServiceUri": ledgers_uri,
                **QUIET,
                "auditorLedgerVerificationPercentage": percentage,
                "lockReleaseOfFailedLedgerGracePeriod": 1000,
                "rwRereplicateBackoffMs": 100,
            },
        )

    async def auditor(percentage: int) -> Auditor:
        a = Auditor(bk, urm, conf(percentage))
        await a.start()
        started.append(a)
        await eventually(lambda: a.metrics.check_duration["bookie"].count >= 1)
        return a

    async def worker(percentage: int) -> ReplicationWorker:
        w = ReplicationWorker(bk, urm, conf(percentage))
        await w.start()
        started.append(w)
        return w

    yield {
        "bk": bk,
        "urm": urm,
        "bookies": bookies,
        "auditor": auditor,
        "worker": worker,
        "uri": ledgers_uri,
    }
    for s in started:
        await s.stop()
    urm.close()
    await bk.close()


async def write_closed(bk: BookKeeper, n: int, e: int = 3, w: int = 3) -> int:
    wh = await bk.create_ledger(e, w, 2, password=PASSWORD)
    for i in range(n):
        await wh.append(b"payload-%d" % i)
    await wh.close()
    return wh.ledger_id


async def marked(urm: UnderreplicationManager) -> dict[int, tuple[str, ...]]:
    return {lid: tuple(sorted(u.replicas)) for lid, u in await urm.list()}


async def shell_verify(env: dict[str, Any], *args: str) -> subprocess.CompletedProcess[str]:
    return await asyncio.to_thread(dlog, "shell", "verifyledgers", "-u", env["uri"], *args)


async def reads_back(bk: BookKeeper, ledger_id: int, n: int) -> None:
    rh = await bk.open_ledger(ledger_id, PASSWORD)
    got = [bytes(e.data) for e in await rh.read(0, n - 1)]
    await rh.close()
    assert got == [b"payload-%d" % i for i in range(n)]


async def repaired(env: dict[str, Any], ledger_id: int, bad: str, percentage: int) -> None:
    """The worker replaces ``bad`` in the ledger; then every replica verifies."""
    bk, urm = env["bk"], env["urm"]
    w = await env["worker"](percentage)
    await eventually(lambda: w.ledgers_replicated.get() >= 1)
    assert await urm.get(ledger_id) is None
    md = await bk.ledger_metadata(ledger_id)
    assert bad not in md.bookies()
    assert len(md.last_ensemble) == 3
    assert await verify_ledgers(bk) == []


def test_sample_entries_takes_first_last_and_the_percentage_between() -> None:
    stored = list(range(0, 204, 2))  # 102 entries
    assert sample_entries(stored, 0) == [0, 202]
    assert sample_entries(stored, 100) == stored
    half = sample_entries(stored, 50)
    assert half[0] == 0 and half[-1] == 202 and len(half) == 52
    assert set(half) <= set(stored)
    # evenly spread: one pick in each bucket of two middle entries
    middle = stored[1:-1]
    assert all(half[1 + i] in middle[2 * i : 2 * i + 2] for i in range(50))
    assert sample_entries([7], 0) == [7] and sample_entries([], 50) == []
    assert sample_entries([3, 5], 0) == [3, 5]


async def test_a_flipped_payload_byte_is_found_marked_and_replaced(env: dict[str, Any]) -> None:
    bk, urm = env["bk"], env["urm"]
    n = 20
    lid = await write_closed(bk, n)
    healthy = await write_closed(bk, 5)
    md = await bk.ledger_metadata(lid)
    victim = md.last_ensemble[1]
    # percentage 0 verifies the first and last entries: damage the last
    await flip_payload_byte(env["bookies"][victim], lid, n - 1)

    before = await verify_ledgers(bk)
    assert [(b.ledger_id, b.bookie, b.entry_id, b.reason) for b in before] == [
        (lid, victim, n - 1, BAD_DIGEST)
    ]
    # the bookie still lists the entry: only reading it shows the damage
    conn = await bk.pool.get(victim)
    assert n - 1 in await conn.entries_of_ledger(lid)
    assert await checker.find_ledgers_missing_entries(bk) == {}
    r = await shell_verify(env, "--percentage", "0")
    assert r.returncode == 1, r.stderr
    assert "1 bad replica(s)" in r.stdout and BAD_DIGEST in r.stdout

    auditor = await env["auditor"](0)
    assert await auditor.check_all_ledgers() == 1
    assert await marked(urm) == {lid: (victim,)}
    assert healthy not in await marked(urm)

    await repaired(env, lid, victim, 0)
    await reads_back(bk, lid, n)
    assert "every replica verifies" in ok(await shell_verify(env, "-l", str(lid)))


async def test_a_damaged_record_header_answers_eio_and_is_replaced(env: dict[str, Any]) -> None:
    bk, urm = env["bk"], env["urm"]
    n = 30
    lid = await write_closed(bk, n, e=3, w=2)  # striped: each bookie holds 2 of 3 entries
    md = await bk.ledger_metadata(lid)
    f = next(f for f in fragments(md) if f.index == 0)
    victim = f.bookie
    held = stored_entries(md, f)
    middle = held[len(held) // 2]
    await damage_header(env["bookies"][victim], lid, middle)

    assert [(b.bookie, b.entry_id, b.reason) for b in await verify_ledgers(bk, [lid])] == [
        (victim, middle, UNREADABLE)
    ]
    # a middle entry: percentage 0 does not read it
    assert await verify_ledgers(bk, [lid], percentage=0) == []

    auditor = await env["auditor"](100)
    assert await auditor.check_all_ledgers() == 1
    assert await marked(urm) == {lid: (victim,)}

    await repaired(env, lid, victim, 100)
    await reads_back(bk, lid, n)


async def test_the_verification_percentage_is_honoured(env: dict[str, Any]) -> None:
    bk, urm = env["bk"], env["urm"]
    n = 20
    lid = await write_closed(bk, n)
    md = await bk.ledger_metadata(lid)
    victim = md.last_ensemble[2]
    await flip_payload_byte(env["bookies"][victim], lid, n // 2)

    # 0: first and last only, the corrupt middle entry goes unnoticed
    assert await verify_ledgers(bk, percentage=0) == []
    assert await find_fragments(bk, md, check_entries=True, verify_percentage=0) == []
    a0 = await env["auditor"](0)
    assert await a0.check_all_ledgers() == 0
    assert await marked(urm) == {}
    await a0.stop()

    # 100: every entry
    bad = await find_fragments(bk, md, check_entries=True, verify_percentage=100)
    assert [f.bookie for f in bad] == [victim]
    a100 = await env["auditor"](100)
    assert await a100.check_all_ledgers() == 1
    assert await marked(urm) == {lid: (victim,)}
    assert [(b.bookie, b.entry_id, b.reason) for b in await verify_ledgers(bk)] == [
        (victim, n // 2, BAD_DIGEST)
    ]
