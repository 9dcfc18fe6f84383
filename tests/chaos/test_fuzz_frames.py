"""Wire-frame fuzzing of a live bookie process (tests/chaos/fuzz_frames.py).

After any interleaving of malformed frames on one connection the bookie
must still serve other clients, answer exactly the good requests read
before a violation, close the connection in time, keep its memory bounded
(an oversize length never allocates) and leave every stored entry as it
was.
"""

from __future__ import annotations

import asyncio
import contextlib
import struct
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from dlog.errors import EOK
from dlog.ledger.bookie_client import BookieClient
from dlog.ledger.digest import CRC32C, DigestManager
from dlog.sandbox.bookies import BookieProcess
from dlog.sandbox.zookeeper import ZooKeeperServer
from tests.chaos.fuzz_frames import (
    KINDS,
    FrameFuzzer,
    acheck_bookie_intact,
    expected_responses,
    fuzz_bookie,
    rss_kb,
    send_interleaving,
)

pytestmark = pytest.mark.integration

HOST = "127.0.0.1"
#: Ledgers written by a legitimate client before the fuzzing.
LEDGERS = (5, 6)
ENTRIES = 40
PASSWORD = b"owner"
KEY = DigestManager(LEDGERS[0], CRC32C, PASSWORD).master_key


class Target:
    """The fuzzed bookie and the entries its owner wrote (a plain class:
    hypothesis would print every entry of a dataclass with each failure)."""

    def __init__(self, bookie: BookieProcess, entries: dict[tuple[int, int], bytes]) -> None:
        self.bookie = bookie
        self.entries = entries

    def __repr__(self) -> str:  # hypothesis prints it with every failing example
        return f"Target(bookie {self.bookie.bookie_id}, {len(self.entries)} entries)"

    @property
    def port(self) -> int:
        return self.bookie.port

    @property
    def pid(self) -> int:
        assert self.bookie.pid is not None
        return self.bookie.pid

    async def intact(self) -> None:
        await acheck_bookie_intact(
            HOST,
            self.port,
            self.entries,
            absent=[(lid, ENTRIES + i) for lid in LEDGERS for i in range(5)],
        )


def body(lid: int, eid: int) -> bytes:
    payload = f"ledger {lid} entry {eid} ".encode() * 4
    return DigestManager(lid, CRC32C, PASSWORD).compute(eid, eid - 1, eid * len(payload), payload)


@pytest.fixture(scope="module")
def target(
    zk_server: ZooKeeperServer, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Target]:
    uri = f"zk+hierarchical://{zk_server.connect_string}/fuzz-{uuid.uuid4().hex[:8]}/ledgers"
    bookie = BookieProcess(tmp_path_factory.mktemp("fuzz-bookie"), uri).start()
    entries = {(lid, eid): body(lid, eid) for lid in LEDGERS for eid in range(ENTRIES)}

    async def write() -> None:
        client = BookieClient(bookie.bookie_id)
        await client.connect()
        try:
            got = await asyncio.gather(
                *(client.add_entry(lid, eid, KEY, data) for (lid, eid), data in entries.items())
            )
            assert {r.status for r in got} == {EOK}
        finally:
            await client.close()

    try:
        asyncio.run(write())
        yield Target(bookie, entries)
        # The owner still writes its ledgers: neither fenced nor re-keyed.
        asyncio.run(
            acheck_bookie_intact(HOST, bookie.port, entries, keys=dict.fromkeys(LEDGERS, KEY))
        )
        assert bookie.process is not None and bookie.process.poll() is None, "the bookie died"
        assert "Traceback" not in bookie.log_tail(2000), bookie.log_tail(60)
    finally:
        bookie.stop()


@settings(
    max_examples=400,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(
    kinds=st.lists(st.sampled_from(KINDS), min_size=1, max_size=25),
    seed=st.integers(0, 2**32 - 1),
)
def test_interleavings_on_one_connection(target: Target, kinds: list[str], seed: int) -> None:
    fz = FrameFuzzer(seed, targets=LEDGERS, big_frames=True)
    pieces = [fz.piece(k) for k in kinds]

    async def run() -> None:
        res = await send_interleaving(HOST, target.port, pieces, close_timeout=10.0)
        assert not res.hung, f"the bookie kept the connection open after {kinds}"
        assert res.bad_responses == 0, "an undecodable response"
        n, exact = expected_responses(pieces)
        if exact:
            assert res.responses == n, (kinds, res)
        else:
            assert res.responses >= n, (kinds, res)
        await target.intact()

    asyncio.run(run())


async def _oversize(port: int, length: int, limit: int) -> tuple[bool, int]:
    """Claim ``length`` bytes and keep sending (up to ``limit``) until the
    bookie closes: (closed by the bookie within 10 s, bytes sent)."""
    reader, writer = await asyncio.open_connection(HOST, port)
    sent = 0
    try:
        writer.write(struct.pack(">i", length))
        chunk = b"\xab" * (256 * 1024)
        closed = asyncio.ensure_future(reader.read())
        deadline = time.monotonic() + 10.0
        while not closed.done() and time.monotonic() < deadline:
            if sent < limit:
                writer.write(chunk)
                sent += len(chunk)
                with contextlib.suppress(OSError):
                    await asyncio.wait_for(writer.drain(), 1.0)
            else:
                await asyncio.wait([closed], timeout=0.1)
        with contextlib.suppress(Exception):
            await asyncio.wait_for(closed, 0.1)
        return closed.done(), sent
    except OSError:
        return True, sent  # reset by the bookie
    finally:
        writer.close()
        with contextlib.suppress(Exception):
            await writer.wait_closed()


def test_oversize_lengths_never_allocate(target: Target) -> None:
    """Sixteen connections at once each claim ~2 GB and send 8 MiB behind
    the claim: each is closed and the bookie's RSS barely moves (a
    bookie that buffered the claimed frames would hold ~128 MiB)."""
    before, _ = rss_kb(target.pid)
    peak = before
    lengths = [2**31 - 1, 2**31 - 2, 0x7FFF0000, 2**30] * 4

    async def run() -> list[tuple[bool, int]]:
        nonlocal peak
        tasks = [asyncio.ensure_future(_oversize(target.port, n, 8 << 20)) for n in lengths]
        while not all(t.done() for t in tasks):
            peak = max(peak, rss_kb(target.pid)[0])
            await asyncio.sleep(0.05)
        return [t.result() for t in tasks]

    results = asyncio.run(run())
    peak = max(peak, rss_kb(target.pid)[0])
    assert all(closed for closed, _ in results), f"not closed by the bookie: {results}"
    assert peak - before < 40 * 1024, f"RSS grew {peak - before} KiB: {before} -> {peak}"
    asyncio.run(target.intact())


def test_fuzz_bookie_50k_frames(target: Target) -> None:
    log_lines = len(target.bookie.log_path.read_text().splitlines())
    stats = fuzz_bookie(HOST, target.port, frames=50_000, seed=17, pid=target.pid, targets=LEDGERS)
    assert stats["frames"] >= 50_000
    assert stats["hung_connections"] == 0, stats
    assert stats["bad_responses"] == 0, stats
    assert stats["responses"] >= 0.95 * stats["frames"], stats
    assert stats["connections_closed_by_bookie"] > 0, stats
    assert stats["by_kind"]["wrong_key_write"] > 1000, stats
    assert stats["frames_per_second"] > 0
    growth = stats["rss_peak_kb"] - stats["rss_before_kb"]
    assert growth < 64 * 1024, f"RSS grew {growth} KiB: {stats}"
    asyncio.run(target.intact())
    # Refused requests are counted, not logged one by one: 50,000 frames
    # in a few seconds log a handful of lines, not tens of thousands.
    new = Path(target.bookie.log_path).read_text().splitlines()[log_lines:]
    assert len(new) < 50, f"{len(new)} log lines for one fuzz run: {new[:5]}"
