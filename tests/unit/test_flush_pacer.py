"""Pacing of background write-cache flushes (dlog.bookie.pacer) and the
setting that bounds it, dbStorage_flushMaxCpuPercent."""

from __future__ import annotations

import asyncio
import os
import struct
import threading
import time
from pathlib import Path

import pytest

from dlog.bookie.ledger_storage import DbLedgerStorage
from dlog.bookie.pacer import MAX_PAUSE, FlushPacer, LoopTurns
from dlog.conf.bookie import BookieConfig
from dlog.errors import ConfigError


class FakeCpu:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def test_pause_sleeps_to_keep_the_cpu_share() -> None:
    cpu, slept = FakeCpu(), []
    pacer = FlushPacer(25, cpu_clock=cpu, sleep=slept.append)
    pacer.start()
    for _ in range(4):
        cpu.now += 0.004  # a slice of 4 ms of CPU
        pacer.pause()
    # 25%: three times the CPU used, as sleep
    assert slept == pytest.approx([0.012] * 4)
    assert pacer.slept == pytest.approx(0.048)


def test_pause_is_bounded_and_counts_only_the_last_slice() -> None:
    cpu, slept = FakeCpu(), []
    pacer = FlushPacer(10, cpu_clock=cpu, sleep=slept.append)
    pacer.start()
    cpu.now += 1.0
    pacer.pause()
    cpu.now += 0.001
    pacer.pause()
    assert slept == pytest.approx([MAX_PAUSE, 0.009])


def test_no_pacing_at_100_or_when_urgent() -> None:
    cpu, slept = FakeCpu(), []
    urgent = [False]
    off = FlushPacer(100, cpu_clock=cpu, sleep=slept.append)
    off.start()
    cpu.now += 0.004
    off.pause()
    assert slept == [0]
    on = FlushPacer(50, urgent=lambda: urgent[0], cpu_clock=cpu, sleep=slept.append)
    on.start()
    urgent[0] = True
    cpu.now += 0.004
    on.pause()
    assert slept == [0, 0] and on.slept == 0


async def test_a_slice_runs_while_the_loop_waits_out_its_turn() -> None:
    """In a turn the loop runs nothing: a ticker on the loop does not move
    while the thread's slice runs (20 ms here, with the lock free)."""
    turns = LoopTurns(100, turn=5.0)
    ticks = 0
    stop = False

    async def ticker() -> None:
        nonlocal ticks
        while not stop:
            ticks += 1
            await asyncio.sleep(0)

    def flush() -> list[int]:
        moved = []
        for _ in range(5):
            assert turns.wait()
            before = ticks
            time.sleep(0.02)  # the slice: without a turn, the loop ticks meanwhile
            moved.append(ticks - before)
        turns.end()
        return moved

    lender = turns.lend(asyncio.get_running_loop())
    tick = asyncio.create_task(ticker())
    await asyncio.sleep(0)
    moved = await asyncio.to_thread(flush)
    stop = True
    lender.cancel()
    await tick
    assert moved == [0] * 5
    assert turns.granted >= 5 and turns.missed == 0


async def test_the_end_of_a_flush_gives_the_loop_back_its_turn() -> None:
    """``finish()`` ends the last slice's turn: the loop does not wait out
    the rest of it (here 5 s, which would count as an overrun)."""
    pacer = FlushPacer(50, turn=5.0)
    pacer.turns.gap = 0.0  # offer at once (50% of a 5 s turn would be 5 s)
    lender = pacer.turns.lend(asyncio.get_running_loop())

    def flush() -> None:
        pacer.start()
        pacer.pause()  # the slice that follows runs in a turn
        pacer.finish()

    await asyncio.to_thread(flush)
    lender.cancel()
    assert pacer.turns.granted == 1 and pacer.turns.overruns == 0


async def test_a_flush_is_never_stopped_by_the_loop() -> None:
    """No lender: the thread paces itself. A lender whose loop is blocked:
    the wait ends after max_wait, with no turn. A lender that stops: a
    waiting thread is released at once, not after max_wait."""
    turns = LoopTurns(25, max_wait=0.05)
    assert turns.wait() is False
    lender = turns.lend(asyncio.get_running_loop())
    await asyncio.sleep(0)
    assert turns.wait() is True  # on the loop's own thread: nobody can offer
    assert turns.missed == 1 and turns.granted == 0
    lender.cancel()
    await asyncio.gather(lender, return_exceptions=True)

    patient = LoopTurns(1, turn=1.0, max_wait=60.0)  # offers every 99 s
    lender = patient.lend(asyncio.get_running_loop())
    await asyncio.sleep(0)
    waiting = asyncio.create_task(asyncio.to_thread(patient.wait))
    await asyncio.sleep(0.05)
    lender.cancel()
    assert await asyncio.wait_for(waiting, 10) is True
    assert patient.missed == 1


@pytest.mark.parametrize("value", ["0", "101", "x"])
def test_setting_is_validated(value: str) -> None:
    with pytest.raises(ConfigError, match="dbStorage_flushMaxCpuPercent"):
        BookieConfig.from_mapping({"dbStorage_flushMaxCpuPercent": value})


def _storage(tmp_path: Path, **settings: object) -> DbLedgerStorage:
    conf = BookieConfig.from_mapping(
        {
            "journalDirectories": str(tmp_path / "j"),
            "ledgerDirectories": str(tmp_path / "l"),
            "dbStorage_writeCacheMaxSizeMb": 64,
            "dbStorage_readAheadCacheMaxSizeMb": 8,
            **settings,
        }
    )
    return DbLedgerStorage(conf, [tmp_path / "l" / "current"])


def _fill(storage: DbLedgerStorage, n: int) -> None:
    payload = os.urandom(200)
    sd = storage.dirs[0]
    for i in range(n):
        lid, eid = 1 + i % 2, i // 2
        assert sd.try_add(lid, eid, struct.pack(">qqq", lid, eid, eid - 1) + payload)


@pytest.mark.parametrize(
    ("percent", "lend", "how"),
    [(100, False, "flat out"), (100, True, "flat out"), (20, False, "sleeps"), (20, True, "turns")],
)
async def test_flush_is_paced_by_the_settings(
    tmp_path: Path, percent: int, lend: bool, how: str
) -> None:
    """The settings reach the flush: at 100 it neither sleeps nor waits for
    turns; at a lower share it sleeps between slices, or with
    dbStorage_flushLendTurns its slices run in turns the loop lends, with
    the gap the share sets; and every entry is stored either way."""
    storage = _storage(
        tmp_path, dbStorage_flushMaxCpuPercent=percent, dbStorage_flushLendTurns=lend
    )
    sd = storage.dirs[0]
    assert sd.pacer.max_cpu_percent == percent
    assert sd.pacer.turns.gap == pytest.approx(sd.pacer.turns.turn * (100 - percent) / percent)
    _fill(storage, 20_000)
    await storage.flush()
    assert (sd.pacer.turns.granted > 0) is (how == "turns")
    assert (sd.pacer.slept > 0) is (how == "sleeps")
    assert sd.get_entry(2, 9_999)[:16] == struct.pack(">qq", 2, 9_999)
    await storage.close()


def _thread_nice() -> int:
    return os.getpriority(os.PRIO_PROCESS, threading.get_native_id())


@pytest.mark.parametrize("nice", [0, 7])
async def test_the_flush_thread_runs_at_the_configured_lower_priority(
    tmp_path: Path, nice: int
) -> None:
    """dbStorage_flushThreadNice reaches the storage thread (the one that
    flushes) and only it: the loop's thread keeps the process's priority."""
    loop_nice = _thread_nice()
    storage = _storage(tmp_path, dbStorage_flushThreadNice=nice)
    sd = storage.dirs[0]
    assert sd.on_storage_thread(_thread_nice) == min(19, loop_nice + nice)
    _fill(storage, 1_000)
    await storage.flush()  # the flush runs on that thread
    assert sd.on_storage_thread(_thread_nice) == min(19, loop_nice + nice)
    assert _thread_nice() == loop_nice
    await storage.close()


async def test_flush_is_not_paced_when_the_active_half_fills_or_at_shutdown(
    tmp_path: Path,
) -> None:
    storage = _storage(tmp_path, dbStorage_flushMaxCpuPercent=10)
    sd = storage.dirs[0]
    assert not sd._flush_urgent()
    sd.pacing = False
    assert sd._flush_urgent()
    sd.pacing = True
    _fill(storage, 20_000)  # ~4.5 MiB into a 32 MiB half
    assert not sd._flush_urgent()
    big = b"\0" * (1 << 20)
    for i in range(12):  # past half of the active half
        assert sd.try_add(9, i, struct.pack(">qqq", 9, i, i - 1) + big)
    assert sd._flush_urgent()
    await asyncio.sleep(0)
    await storage.close()
