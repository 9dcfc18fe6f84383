"""The benchmark's tailing reader works each record's latency out from the
send stamps it copied (8 bytes big-endian at the head of each payload) and
its batch's arrival: the figures ``make bench`` prints rest on it."""

from __future__ import annotations

import struct
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "bench"))

from tail_reader import Window

MS = 1_000_000


def stamps(*sent_ns: int) -> bytes:
    return b"".join(struct.pack(">q", s) for s in sent_ns)


def test_latencies_are_each_batch_arrival_less_each_send_stamp() -> None:
    w = Window(0)
    t = w.started_ns
    w.add(t + 10 * MS, stamps(t + 1 * MS, t + 4 * MS))
    w.add(t + 12 * MS, stamps(t + 2 * MS))
    w.add(t + 1_500 * MS, stamps(t + 1_400 * MS, t + 1_450 * MS, t + 1_499 * MS))
    assert list(w.latencies) == [9 * MS, 6 * MS, 10 * MS, 100 * MS, 50 * MS, 1 * MS]
    report = w.report([])
    assert report["records"] == 6
    assert report["max_ms"] == 100.0
    assert report["p50_ms"] == 10.0


def test_records_split_by_their_send_time_around_flush_spans() -> None:
    w = Window(0)
    t = w.started_ns
    base = t / 1e9
    # Sent at +1 ms (inside the span) and +30 ms (outside), read at +40 ms.
    w.add(t + 40 * MS, stamps(t + 1 * MS, t + 30 * MS))
    split = w.by_flush([(base, base + 0.010)])
    assert split["share_of_records_during_flush"] == 0.5
    assert split["during_flush"]["max_ms"] == 39.0
    assert split["outside_flush"]["max_ms"] == 10.0


def test_the_per_second_p99_groups_records_by_arrival_second() -> None:
    w = Window(0)
    t = w.started_ns
    w.add(t + 100 * MS, stamps(*[t + 99 * MS] * 200))  # 1 ms each, second 0
    w.add(t + 1_100 * MS, stamps(*[t + 1_080 * MS] * 200))  # 20 ms each, second 1
    assert w.p99_by_second() == [1.0, 20.0]
