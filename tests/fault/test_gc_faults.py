"""Garbage collection survives kill -9 (issue 14): a real bookie process
dies at every step of a compaction (``DLOG_FAILPOINTS=<step>=exit``, which
``os._exit``s there) and while it removes the entry logs of deleted
ledgers whole (SIGKILL as the first log goes); restarted, it keeps every
live entry readable through the ledger client, and the deleted ledgers'
data still goes, with no half-compacted file or marker left behind.

The collector runs on its own: ``gcWaitTime`` 300 ms and minor/major
compaction every second, no trigger.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from dlog.bookie.compactor import FAILPOINTS
from dlog.ledger.client import BookKeeper
from dlog.sandbox.bookies import BookieCluster, BookieProcess

pytestmark = pytest.mark.fault

ENTRY = 8000
GC_SETTINGS: dict[str, object] = {
    "logSizeLimit": 1024 * 1024,
    "gcWaitTime": 300,
    "minorCompactionInterval": 1,
    "majorCompactionInterval": 1,
    "flushInterval": 300,
}
#: Exit code of a process stopped by an ``exit`` failpoint.
FAILPOINT_EXIT = 86

COMPACTION_STEPS = list(FAILPOINTS)


def body(lid: int, eid: int) -> bytes:
    head = b"%d:%d:" % (lid, eid)
    return head + bytes([(lid + eid) % 251]) * (ENTRY - len(head))


async def write_interleaved(uri: str, ledgers: int, entries: int) -> list[int]:
    """``ledgers`` ledgers on the one bookie, their entries interleaved in
    the same entry logs (unless the bookie keeps a log per ledger)."""
    async with BookKeeper(uri) as bk:
        handles = [await bk.create_ledger(1, 1, 1, password=b"pw") for _ in range(ledgers)]
        for base in range(0, entries, 20):
            await asyncio.gather(
                *(
                    wh.append_nowait(body(wh.ledger_id, eid))
                    for eid in range(base, min(base + 20, entries))
                    for wh in handles
                )
            )
        for wh in handles:
            await wh.close()
        return [wh.ledger_id for wh in handles]


async def delete(uri: str, ids: list[int]) -> None:
    async with BookKeeper(uri) as bk:
        for lid in ids:
            await bk.delete_ledger(lid)


async def read_all(uri: str, ids: list[int], entries: int) -> None:
    async with BookKeeper(uri) as bk:
        for lid in ids:
            rh = await bk.open_ledger(lid, b"pw")
            got = await rh.read(0, entries - 1)
            assert len(got) == entries, (lid, len(got))
            for e in got:
                assert e.data == body(lid, e.entry_id), (lid, e.entry_id)
            await rh.close()


def ledger_dir(bookie: BookieProcess) -> Path:
    return bookie.base_dir / "ledgers" / "current"


def log_bytes(bookie: BookieProcess) -> int:
    """Bytes of entry logs (the collector may remove one while we look)."""
    total = 0
    for p in ledger_dir(bookie).glob("*.log"):
        try:
            total += p.stat().st_size
        except FileNotFoundError:
            pass
    return total


def leftovers(bookie: BookieProcess) -> list[str]:
    d = ledger_dir(bookie)
    return sorted(p.name for p in [*d.glob("*.compacting"), *d.glob("compaction.*")])


def wait_until(
    check: Callable[[], bool], what: str, timeout: float = 30.0, poll: float = 0.05
) -> None:
    deadline = time.monotonic() + timeout
    while not check():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(poll)


def wait_checkpointed(bookie: BookieProcess) -> None:
    """Let a checkpoint or two index what was written (the collector only
    judges logs every entry of which is indexed)."""
    wait_until(lambda: (ledger_dir(bookie) / "lastMark").exists(), "a checkpoint")
    time.sleep(1.0)


def restart_clean(bookie: BookieProcess) -> None:
    bookie.process = None
    bookie.pid = None
    bookie.env = {}
    bookie.start()


def wait_collected(bookie: BookieProcess, live: int) -> None:
    """The deleted ledgers' data goes: what is left is the live entries and
    at most the log being written (up to logSizeLimit)."""
    limit = live + 1024 * 1024 + 64 * 1024
    wait_until(
        lambda: log_bytes(bookie) <= limit and not leftovers(bookie),
        f"collection down to {limit} bytes (at {log_bytes(bookie)}, leftovers {leftovers(bookie)})",
    )


@pytest.mark.parametrize("step", COMPACTION_STEPS)
def test_kill_9_at_each_compaction_step(
    bookie_cluster: Callable[..., BookieCluster], ledgers_uri: str, tmp_path: Path, step: str
) -> None:
    ledgers, entries = 8, 100
    cluster = bookie_cluster(
        1,
        env={"DLOG_FAILPOINTS": f"{step}=exit"},
        entryLogPerLedgerEnabled=False,  # one log per ledger is never compacted
        **GC_SETTINGS,
    )
    bookie = cluster[0]
    ids = asyncio.run(write_interleaved(ledgers_uri, ledgers, entries))
    keep = ids[::4]  # a quarter live in every log: below majorCompactionThreshold
    wait_checkpointed(bookie)
    full = log_bytes(bookie)
    asyncio.run(delete(ledgers_uri, [lid for lid in ids if lid not in keep]))
    assert bookie.process is not None
    try:
        code = bookie.process.wait(60)
    except Exception as e:
        raise AssertionError(f"the bookie never reached {step}: {bookie.log_tail()}") from e
    assert code == FAILPOINT_EXIT, (code, bookie.log_tail())

    restart_clean(bookie)
    live = len(keep) * entries * ENTRY
    asyncio.run(read_all(ledgers_uri, keep, entries))
    wait_collected(bookie, live)
    assert log_bytes(bookie) < full / 2
    asyncio.run(read_all(ledgers_uri, keep, entries))
    # And once more from the files alone.
    bookie.kill()
    restart_clean(bookie)
    asyncio.run(read_all(ledgers_uri, keep, entries))


@pytest.mark.both_entry_log_modes
def test_kill_9_while_whole_logs_are_removed(
    bookie_cluster: Callable[..., BookieCluster],
    ledgers_uri: str,
    entry_log_per_ledger: bool,
) -> None:
    ledgers, entries = 60, 30
    cluster = bookie_cluster(1, **GC_SETTINGS)
    bookie = cluster[0]
    ids = asyncio.run(write_interleaved(ledgers_uri, ledgers, entries))
    # With one log for all, ledgers written together share logs: keep the
    # first few (their logs hold nothing else at the start) and delete the
    # rest, so most logs hold only deleted ledgers.
    keep = ids[:2] if entry_log_per_ledger else []
    wait_checkpointed(bookie)
    logs_before = len(list(ledger_dir(bookie).glob("*.log")))
    full = log_bytes(bookie)
    asyncio.run(delete(ledgers_uri, [lid for lid in ids if lid not in keep]))
    wait_until(
        lambda: len(list(ledger_dir(bookie).glob("*.log"))) < logs_before,
        "the first entry log removed",
        poll=0.002,
    )
    bookie.kill()
    logs_at_kill = len(list(ledger_dir(bookie).glob("*.log")))
    print(f"\nkilled with {logs_at_kill} of {logs_before} entry logs left")

    restart_clean(bookie)
    asyncio.run(read_all(ledgers_uri, keep, entries))
    wait_collected(bookie, len(keep) * entries * ENTRY)
    assert log_bytes(bookie) < full / 2
    # The kill landed while logs were being removed.
    assert logs_at_kill > len(list(ledger_dir(bookie).glob("*.log")))
    asyncio.run(read_all(ledgers_uri, keep, entries))
