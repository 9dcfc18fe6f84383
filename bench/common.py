"""What the benchmarks share: percentiles, --set parsing, reported settings,
and a local ZooKeeper + bookies started for one run and always torn down."""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import re
import shutil
import signal
import sys
import tempfile
import time
import urllib.parse
import urllib.request
from array import array
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any

from dlog.conf.dlog import KEY_ALIASES, DLogConfig
from dlog.errors import ConfigError
from dlog.sandbox.bookies import BookieProcess, bookie_config, wait_serving
from dlog.sandbox.ports import free_port
from dlog.sandbox.zookeeper import ZooKeeperServer

#: Bookie settings the client benchmarks use: synced journal, entry-log
#: writeback spread out (journal and entry logs share one disk here), and
#: the journal synced as soon as its queue is empty, as dlog's sandbox does
#: (see ``bookie_config`` there for the measurements): with BookKeeper's
#: default a lone add waits journalMaxGroupWaitMSec (2 ms) for company.
#: flushEntrylogBytes stays: with BookKeeper's 0 (writeback windows only)
#: three alternating pairs of bench/dlog_write.py runs gave a light-load
#: end-to-end p99 of 7.6, 6.5 and 49 ms against 4.1, 3.5 and 5.2 ms.
BENCH_BOOKIE_SETTINGS: dict[str, Any] = {
    "journalSyncData": True,
    "journalFlushWhenQueueEmpty": True,
    "dbStorage_writeCacheMaxSizeMb": 256,
    "flushEntrylogBytes": 1048576,
}

#: Journal settings a benchmark reports whether or not they are defaults:
#: add and commit latency hang on them.
JOURNAL_KEYS = (
    "journalSyncData",
    "journalFlushWhenQueueEmpty",
    "journalMaxGroupWaitMSec",
    "journalBufferedWritesThreshold",
    "journalBufferedEntriesThreshold",
)

#: Per-bookie keys (paths, ports, addresses) left out of the reported settings.
PER_BOOKIE_KEYS = {
    "bookiePort",
    "advertisedAddress",
    "metadataServiceUri",
    "journalDirectories",
    "ledgerDirectories",
    "indexDirectories",
    "prometheusStatsHttpPort",
    "bookieId",
}


def latency_log() -> array[int]:
    """Where a benchmark keeps its latencies (ns), one per record: an array,
    not a list. A window holds millions: as a list of distinct ints (the
    tail reader's) that is about 40 bytes each instead of 8, some 270 MB
    against 55 MB for 6.7 million records, and a container the garbage
    collector traverses inside the process being measured. (One tail
    reader, with the list, stalled 65 ms in a single collection late in a
    window; four alternating pairs of the 1,000-in-flight phase with and
    without the array split 2-2 on end-to-end p99.)"""
    return array("q")


def percentiles(samples: list[float]) -> dict[str, float]:
    """p50/p99/p999 and the maximum, in milliseconds, of latencies given in
    seconds. The maximum matters in a closed loop: a stall there delays only
    the requests in flight, too few to move even the p999."""
    if not samples:
        return {"p50_ms": 0.0, "p99_ms": 0.0, "p999_ms": 0.0, "max_ms": 0.0}
    s = sorted(samples)

    def pick(q: float) -> float:
        return round(s[min(len(s) - 1, int(q * len(s)))] * 1000, 3)

    return {
        "p50_ms": pick(0.50),
        "p99_ms": pick(0.99),
        "p999_ms": pick(0.999),
        "max_ms": round(s[-1] * 1000, 3),
    }


def parse_sets(items: list[str]) -> dict[str, str]:
    out: dict[str, str] = {}
    for item in items:
        key, sep, value = item.partition("=")
        if not sep or not key.strip():
            raise SystemExit(f"--set wants key=value, got {item!r}")
        out[key.strip()] = value.strip()
    return out


def check_bookie_settings(settings: dict[str, Any], flag: str) -> None:
    """Refuse a bad bookie setting in one line before anything starts."""
    try:
        bookie_config(".", port=1, metadata_service_uri="zk://127.0.0.1:2181/ledgers", **settings)
    except ConfigError as e:
        raise SystemExit(f"{flag}: {e}") from None


def add_cluster_args(parser: argparse.ArgumentParser) -> None:
    """--bookies, -e/-w/-a and --dir, as every cluster benchmark takes them."""
    parser.add_argument("--bookies", type=int, default=3)
    parser.add_argument("-e", "--ensemble", type=int, default=3)
    parser.add_argument("-w", "--write-quorum", type=int, default=2)
    parser.add_argument("-a", "--ack-quorum", type=int, default=2)
    parser.add_argument(
        "--dir", type=Path, default=None, help="where ZooKeeper and bookies keep files"
    )


def check_cluster_args(args: argparse.Namespace) -> None:
    if args.bookies < args.ensemble:
        raise SystemExit(
            f"--bookies ({args.bookies}) must be at least --ensemble ({args.ensemble})"
        )


def dlog_config(ledgers_uri: str, args: argparse.Namespace) -> DLogConfig:
    """The client config from -e/-w/-a and --set (which may use DL's aliases)."""
    values: dict[str, Any] = {
        "bkcEnsembleSize": args.ensemble,
        "bkcWriteQuorumSize": args.write_quorum,
        "bkcAckQuorumSize": args.ack_quorum,
    }
    for key, value in parse_sets(args.set).items():
        values[KEY_ALIASES.get(key, key)] = value
    values["bkc.metadataServiceUri"] = ledgers_uri
    try:
        return DLogConfig.load(overrides=values)
    except ConfigError as e:
        raise SystemExit(f"--set: {e}") from None


def reported_dlog_settings(conf: DLogConfig, keys: tuple[str, ...]) -> dict[str, Any]:
    """``keys`` always, plus every setting that differs from its default."""
    mine, base = conf.to_properties(), DLogConfig().to_properties()
    out = {k: mine[k] for k in keys}
    for k, v in sorted(mine.items()):
        if k != "bkc.metadataServiceUri" and base.get(k) != v:
            out[k] = v
    return out


def effective_settings(conf: Any, defaults: Any) -> dict[str, Any]:
    """Every setting that differs from the documented default (ports and paths aside)."""
    mine, base = conf.to_properties(), defaults.to_properties()
    return {k: v for k, v in sorted(mine.items()) if k not in PER_BOOKIE_KEYS and base.get(k) != v}


def journal_settings(conf: Any) -> dict[str, Any]:
    """The journal settings a bookie ran with, defaults included."""
    props = conf.to_properties()
    return {k: props[k] for k in JOURNAL_KEYS}


def scrape(port: int, name: str) -> float:
    """The value of metric ``name`` on the endpoint at ``port``, summed over
    its labels."""
    return scrape_many(port, (name,))[name]


def scrape_many(port: int, names: tuple[str, ...]) -> dict[str, float]:
    """Several metrics from one read of the endpoint (one instant), each
    summed over its labels."""
    # Only these: a bookie's whole exposition holds its interpreter lock for
    # 2-3 ms, and a measured window polls twice a second (watch_flushes).
    query = urllib.parse.urlencode([("name[]", name) for name in names])
    text = (
        urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics?{query}", timeout=5)
        .read()
        .decode()
    )
    totals = dict.fromkeys(names, 0.0)
    for line in text.splitlines():
        for name in names:
            if re.match(rf"^{re.escape(name)}(\{{.*\}})? ", line):
                totals[name] += float(line.rsplit(" ", 1)[1])
    return totals


FLUSH_COUNT = "bookie_ledger_storage_flush_latency_seconds_count"
FLUSH_SUM = "bookie_ledger_storage_flush_latency_seconds_sum"
#: How often a measured window reads a bookie's flush histogram.
FLUSH_POLL_S = 0.5
#: After the window, how long to wait for a flush still running to end.
FLUSH_TAIL_S = 8.0


async def watch_flushes(
    port: int, window_over: asyncio.Event, spans: list[tuple[float, float]]
) -> None:
    """Read a bookie's flush histogram every FLUSH_POLL_S. A flush
    counted between two reads ended after the first began and before the
    second returned, and started its duration (the sum's growth) before
    its end: ``spans`` gets a span (``time.monotonic`` seconds) that surely
    holds it, at most one poll wider. Once ``window_over``, a flush still
    running is waited for (at most FLUSH_TAIL_S), then the watch ends."""
    names = (FLUSH_COUNT, FLUSH_SUM)
    t_prev = time.monotonic()
    prev = await asyncio.to_thread(scrape_many, port, names)
    tail_until: float | None = None
    while True:
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(window_over.wait(), FLUSH_POLL_S)
        t_read = time.monotonic()
        cur = await asyncio.to_thread(scrape_many, port, names)
        ended = cur[FLUSH_COUNT] > prev[FLUSH_COUNT]
        if ended:
            spans.append((t_prev - (cur[FLUSH_SUM] - prev[FLUSH_SUM]), time.monotonic()))
        prev, t_prev = cur, t_read
        if window_over.is_set():
            if tail_until is None:
                tail_until = t_read + FLUSH_TAIL_S
            if ended or t_read >= tail_until:
                return
            await asyncio.sleep(FLUSH_POLL_S)


def split_by_spans(
    samples: Iterable[tuple[float, float]], spans: list[tuple[float, float]], what: str = "adds"
) -> dict[str, Any]:
    """Latency percentiles of the samples (send time, latency, in seconds)
    sent while a flush ran (inside one of ``spans``) and of the others:
    how much of a window's tail the flushes make."""
    during: list[float] = []
    outside: list[float] = []
    for t, lat in samples:
        (during if any(a <= t <= b for a, b in spans) else outside).append(lat)
    n = len(during) + len(outside)
    return {
        "flush_spans_s": [round(b - a, 1) for a, b in spans],
        f"share_of_{what}_during_flush": round(len(during) / n, 3) if n else 0.0,
        "during_flush": percentiles(during) if during else None,
        "outside_flush": percentiles(outside) if outside else None,
    }


def start_bookies(procs: list[BookieProcess]) -> None:
    """Start all at once, then wait for each to serve."""
    for b in procs:
        b.start(wait=False)
    for b in procs:
        wait_serving(b.address, b.port, 60.0, b.process, b.log_path)


@contextlib.contextmanager
def local_cluster(
    bookies: int,
    bookie_settings: dict[str, Any],
    directory: Path | None,
    prefix: str,
    started: int | None = None,
    *,
    metrics: bool = False,
) -> Iterator[tuple[ZooKeeperServer, list[BookieProcess], str]]:
    """ZooKeeper and ``bookies`` bookie processes, the first ``started``
    (default all) running; yields (zk, bookies, metadata service URI).
    With ``metrics`` each bookie serves Prometheus metrics on a port of its
    own on 127.0.0.1 (its ``conf.prometheus_stats_http_port``).
    SIGTERM and Ctrl-C stop everything cleanly (exit 130); a temporary
    directory is removed afterwards."""

    def on_term(*_: object) -> None:
        raise KeyboardInterrupt

    signal.signal(signal.SIGTERM, on_term)
    signal.signal(signal.SIGINT, signal.default_int_handler)
    base = directory or Path(tempfile.mkdtemp(prefix=prefix))
    base.mkdir(parents=True, exist_ok=True)
    zk = ZooKeeperServer(base / "zk")
    procs: list[BookieProcess] = []
    try:
        zk.start()
        ledgers_uri = f"zk+hierarchical://{zk.connect_string}/ledgers"
        procs = [
            BookieProcess(
                base / f"bookie-{i}",
                ledgers_uri,
                **(
                    {
                        "enableStatistics": True,
                        "prometheusStatsHttpAddress": "127.0.0.1",
                        "prometheusStatsHttpPort": free_port(),
                    }
                    if metrics
                    else {}
                ),
                **bookie_settings,
            )
            for i in range(bookies)
        ]
        start_bookies(procs[:started])
        yield zk, procs, ledgers_uri
    except KeyboardInterrupt:
        print("interrupted: stopping bookies and ZooKeeper", file=sys.stderr)
        raise SystemExit(130) from None
    finally:
        # Bookies first: they unregister from ZooKeeper on the way out.
        for b in procs:
            if b.process is not None and b.process.poll() is None:
                b.process.send_signal(signal.SIGTERM)
        for b in procs:
            with contextlib.suppress(Exception):
                b.stop()
        zk.stop()
        if directory is None:
            shutil.rmtree(base, ignore_errors=True)
