"""Pacing of background write-cache flushes (dlog.bookie.pacer) and the
setting that bounds it, dbStorage_flushMaxCpuPercent."""

from __future__ import annotations

import asyncio
import os
import struct
from pathlib import Path

import pytest

from dlog.bookie.ledger_storage import DbLedgerStorage
from dlog.bookie.pacer import MAX_PAUSE, FlushPacer
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


@pytest.mark.parametrize(("percent", "paced"), [(100, False), (20, True)])
async def test_flush_is_paced_by_the_setting(tmp_path: Path, percent: int, paced: bool) -> None:
    """The setting reaches the flush: 100 never sleeps, a lower share
    sleeps; and every entry is stored either way."""
    storage = _storage(tmp_path, dbStorage_flushMaxCpuPercent=percent)
    sd = storage.dirs[0]
    assert sd.pacer.max_cpu_percent == percent
    _fill(storage, 20_000)
    await storage.flush()
    assert (sd.pacer.slept > 0) is paced
    assert sd.get_entry(2, 9_999)[:16] == struct.pack(">qq", 2, 9_999)
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
