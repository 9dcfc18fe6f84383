"""A tailing reader in its own process, for bench/dlog_write.py.

Tailing readers are other processes than the writer in a real deployment
(consumers, a proxy's clients). In the writer's own process the two would
share one event loop, and each record's end-to-end latency would include
the writer's next batch being built before the reader could run.

    python bench/tail_reader.py URI CONF STREAM

Reads STREAM of namespace URI from its start with the client config in the
file CONF, checking that txids come in order with no gap. Every payload
starts with its send time (``time.monotonic_ns``, 8 bytes big-endian; the
clock is the machine's, shared by every process). Prints ``ready`` once
its reader is open, then takes commands on stdin, one per line:

* ``measure FIRST``: records with txid >= FIRST are measured from now on;
* ``until NEXT``: once every record before txid NEXT has been read (or 30 s
  have passed: an error), print one JSON line with the window's records,
  latency percentiles, records read per second, the reader process's CPU
  per record and errors;
* ``split SPANS``: for the window ``until`` reported, one JSON line with
  the percentiles of its records sent during the flushes in SPANS (a JSON
  list of ``[start, end]`` pairs, ``time.monotonic`` seconds) and of the
  others;
* ``quit``: close the reader and exit.
"""

from __future__ import annotations

import asyncio
import json
import operator
import struct
import sys
import time
from array import array
from collections.abc import Iterator
from typing import Any

from common import latency_log, percentiles, split_by_spans

from dlog.bookie.main import install_event_loop_policy, tune_runtime
from dlog.conf.dlog import DLogConfig
from dlog.namespace import Namespace

_STAMP = struct.Struct(">q")
CATCH_UP_SECONDS = 30.0


class Window:
    """What the reader saw of one measured window.

    While the window runs, a batch costs the reader one pass in C over its
    records: each record's send stamp (its payload's first 8 bytes) is
    copied out as it is, and the latencies are worked out at report time,
    so that the benchmark's own bookkeeping takes as little as it can of
    the two cores the writer, the reader and the bookies share. Subtracting
    record by record in Python as batches arrived took the reader's process
    1.43-1.48 us of CPU per record at 1,000 in flight, against 1.31-1.43 us
    now (three alternating pairs; ``reader_cpu_us_per_record``)."""

    def __init__(self, first_txid: int) -> None:
        self.first_txid = first_txid
        self.started = time.perf_counter()
        self.started_cpu = time.process_time()
        #: (wall, CPU) seconds from the window's start to its last record read.
        self.ended: tuple[float, float] | None = None
        self.started_ns = time.monotonic_ns()
        #: Every measured record's send stamp, 8 bytes big-endian each.
        self.stamps = bytearray()
        self.count = 0
        #: (second of the window, index of its first record): where each
        #: second's reads begin, for the per-second p99.
        self.seconds: list[tuple[int, int]] = []
        #: (arrival, index of its first record) of every batch read.
        self.batches: list[tuple[int, int]] = []
        self._latencies: array[int] | None = None

    def add(self, received_ns: int, stamps: bytes) -> None:
        """A batch that arrived at ``received_ns`` (monotonic), with its
        records' send stamps end to end."""
        second = (received_ns - self.started_ns) // 1_000_000_000
        if not self.seconds or self.seconds[-1][0] != second:
            self.seconds.append((second, self.count))
        self.batches.append((received_ns, self.count))
        self.stamps += stamps
        self.count += len(stamps) // _STAMP.size

    def finish(self) -> None:
        """The window's last record has been read: stop its clocks."""
        self.ended = (
            time.perf_counter() - self.started,
            time.process_time() - self.started_cpu,
        )

    @property
    def latencies(self) -> array[int]:
        """Each record's latency (ns), in the order read: its batch's
        arrival less its send stamp."""
        if self._latencies is None or len(self._latencies) != self.count:
            sent = latency_log()
            sent.frombytes(self.stamps)
            if sys.byteorder == "little":
                sent.byteswap()
            out = latency_log()
            for arrived, a, b in self._batch_ranges():
                out.extend([arrived - s for s in sent[a:b]])
            self._latencies = out
        return self._latencies

    def _batch_ranges(self) -> Iterator[tuple[int, int, int]]:
        """(arrival, first, end) of each batch: its records' indexes."""
        ends = [i for _, i in self.batches[1:]] + [self.count]
        for (arrived, a), b in zip(self.batches, ends, strict=True):
            yield arrived, a, b

    def by_flush(self, spans: list[tuple[float, float]]) -> dict[str, Any]:
        """Percentiles of the records sent while a bookie flushed (during
        one of ``spans``) and of the others."""
        lats = self.latencies

        def samples() -> Iterator[tuple[float, float]]:
            for arrived, a, b in self._batch_ranges():
                for i in range(a, b):
                    yield (arrived - lats[i]) / 1e9, lats[i] / 1e9

        return split_by_spans(samples(), spans, "records")

    def p99_by_second(self) -> list[float]:
        """The p99 of the records read in each second of the window (seconds
        with fewer than 100 left out): a reader falling behind, or a stall,
        shows here even when the window's p99 hides it."""
        lats = self.latencies
        bounds = [i for _, i in self.seconds] + [len(lats)]
        out = []
        for a, b in zip(bounds, bounds[1:], strict=False):
            if b - a >= 100:
                out.append(percentiles([s / 1e9 for s in lats[a:b]])["p99_ms"])
        return out

    def report(self, errors: list[str]) -> dict[str, Any]:
        if self.ended is None:
            self.finish()
        assert self.ended is not None
        elapsed, cpu = self.ended
        return {
            "records": self.count,
            **percentiles([s / 1e9 for s in self.latencies]),
            "p99_by_second_ms": self.p99_by_second(),
            "reader_records_per_s": round(self.count / elapsed) if elapsed else 0,
            # The reader's process (dlog's reader and this script's own
            # stamp copying), up to the window's last record read.
            "reader_cpu_us_per_record": round(1e6 * cpu / self.count, 2) if self.count else 0,
            "errors": list(errors),
        }


async def tail(reader: Any, state: dict[str, Any], progress: asyncio.Event) -> None:
    now = time.monotonic_ns
    payload_of = operator.attrgetter("payload")
    stamp_of = operator.itemgetter(slice(0, _STAMP.size))
    errors: list[str] = state["errors"]
    try:
        while True:
            batch = await reader.read_bulk(10_000, timeout=1.0)
            if not batch:
                continue
            t = now()
            first = batch[0].txid
            if first != state["next_txid"] or batch[-1].txid != first + len(batch) - 1:
                errors.append(f"out of order at txid {first}, expected {state['next_txid']}")
                return
            state["next_txid"] = batch[-1].txid + 1
            window: Window | None = state["window"]
            if window is not None and batch[-1].txid >= window.first_txid:
                if first < window.first_txid:
                    batch = batch[window.first_txid - first :]
                window.add(t, b"".join(map(stamp_of, map(payload_of, batch))))
            progress.set()
    except asyncio.CancelledError:
        raise
    except Exception as e:
        errors.append(repr(e))
    finally:
        progress.set()


async def wait_until(state: dict[str, Any], progress: asyncio.Event, next_txid: int) -> None:
    deadline = time.monotonic() + CATCH_UP_SECONDS
    while state["next_txid"] < next_txid and not state["errors"]:
        left = deadline - time.monotonic()
        if left <= 0:
            state["errors"].append(f"reader stuck at txid {state['next_txid']} of {next_txid}")
            return
        progress.clear()
        try:
            await asyncio.wait_for(progress.wait(), left)
        except TimeoutError:
            pass


async def main(uri: str, conf_path: str, stream: str) -> None:
    conf = DLogConfig.load(conf_path)
    loop = asyncio.get_running_loop()
    commands = asyncio.StreamReader()
    await loop.connect_read_pipe(lambda: asyncio.StreamReaderProtocol(commands), sys.stdin)
    async with await Namespace.open(uri, conf) as ns:
        tune_runtime()  # as the writer's process: no full collections while measuring
        log = await ns.open_log(stream)
        reader = await log.open_reader()
        state: dict[str, Any] = {"next_txid": 0, "window": None, "last": Window(0), "errors": []}
        progress = asyncio.Event()
        task = asyncio.create_task(tail(reader, state, progress))
        print("ready", flush=True)
        try:
            while line := (await commands.readline()).decode().split():
                if line[0] == "measure":
                    state["window"] = Window(int(line[1]))
                elif line[0] == "until":
                    await wait_until(state, progress, int(line[1]))
                    window = state["window"] or Window(0)
                    window.finish()
                    print(json.dumps(window.report(state["errors"])), flush=True)
                    state["window"], state["last"] = None, window
                elif line[0] == "split":
                    spans = [(float(a), float(b)) for a, b in json.loads(" ".join(line[1:]))]
                    print(json.dumps(state["last"].by_flush(spans)), flush=True)
                elif line[0] == "quit":
                    break
                else:
                    raise SystemExit(f"tail_reader: unknown command {line!r}")
        finally:
            task.cancel()
            await asyncio.gather(task, return_exceptions=True)
            await reader.close()


if __name__ == "__main__":
    if len(sys.argv) != 4:
        raise SystemExit("usage: tail_reader.py URI CONF STREAM")
    install_event_loop_policy()
    asyncio.run(main(*sys.argv[1:]))
