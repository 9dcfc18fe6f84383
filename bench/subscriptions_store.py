"""Subscriptions stores: commits/s, commit latency and ZooKeeper writes of
the log-segment store against two ZooKeeper baselines measured in the same
run:

* ``zk``: dlog's ZooKeeper store (subscriptions/zk_store.py), compare-and-set
  writes serialized per subscriber (one write in flight per subscription);
* ``zk_pipelined``: DistributedLog's Java ZooKeeper store, unconditional
  ``setData`` (version -1) of the base64 DLSN, every commit its own write
  and as many in flight as the consumer issues (``PipelinedSetData``, a
  benchmark-only class: no fencing, not a product store).

Starts a real ZooKeeper and three real bookie processes (dlog.sandbox);
subscription segments are replicated E=3 W=2 A=2 (``-e/-w/-a``). For each
store, with 1 and with 100 subscriptions (``--subscriptions 1,100``):

* every subscription is acquired first (the log-segment store creates its
  segment and writes its znode, the pipelined baseline creates its znode;
  the ZooKeeper store's first commit creates it, so a warm-up of
  ``--warmup`` seconds of load runs before measuring);
* then, for ``--seconds``, each subscription commits increasing DLSNs as
  fast as it can with ``--outstanding`` (K) commits in flight, in each of
  two shapes (``--shapes``): ``coroutines``, K coroutines per subscription
  each awaiting ``advance_commit_position`` (one task wake-up per commit,
  about 1.7 us of CPython here whatever the store); and ``futures``, one
  task per subscription keeping K futures from
  ``advance_commit_position_nowait`` in flight, as a pipelined consumer
  would (DistributedLog's own API returns futures). The ZooKeeper baselines
  run each shape too; their results keys end in ``_futures`` for the second.

Measured: acknowledged commits/s, per-commit latency (call to return)
p50/p99/p999, and ZooKeeper write transactions per 10,000 commits: the
server's zxid (``srvr`` four-letter word) read just before and just after
the commit phase. Plus, per store with 1 subscription, sequential commits
(K=1): the latency of a lone commit. For the log-segment store, the appends
made (commits coalesce into appends) and segment switches.

Prints one JSON document with the settings used (bookie, journal included,
and dlog); it ends with the log-segment store's commits/s over each
baseline's per subscription count, the targets and ``targets_met``.
Targets (the subscriptions issue), each checked against this run's numbers:

* sequential commit p50 of the log-segment store at most the ZooKeeper
  store's;
* with 64 commits in flight per subscription, at least 50x the ZooKeeper
  store's commits/s for 1 subscription and 100x for 100 subscriptions
  (checked for each shape; ``all_with_<shape>`` sums up each);
* 0 ZooKeeper writes per 10,000 commits in steady state (the measured
  phases, after acquire and warm-up) for the log-segment store;
* at least 5x the pipelined-setData baseline for 1 subscription.

    python bench/subscriptions_store.py [--seconds 5] [--outstanding 64] [--subscriptions 1,100]
"""

from __future__ import annotations

import argparse
import asyncio
import collections
import contextlib
import json
import os
import sys
import time
from typing import Any, Protocol

from common import (
    BENCH_BOOKIE_SETTINGS,
    add_cluster_args,
    check_bookie_settings,
    check_cluster_args,
    dlog_config,
    effective_settings,
    journal_settings,
    local_cluster,
    parse_sets,
    percentiles,
    reported_dlog_settings,
)
from ledger_throughput import closed_loop

from dlog.bookie.main import install_event_loop_policy, tune_runtime
from dlog.conf.bookie import BookieConfig
from dlog.conf.dlog import DLogConfig
from dlog.dlsn import DLSN, NonInclusiveLowerBound
from dlog.ledger.metadata import DigestType
from dlog.log import LogManager
from dlog.namespace import Namespace
from dlog.sandbox.zookeeper import ZooKeeperServer
from dlog.zk import NodeExistsError, NoNodeError
from subscriptions.format import (
    SEGMENT_FORMAT,
    ZK_FORMAT,
    ZkPosition,
    decode_subscriber,
    encode_commit,
    encode_zk_position,
    validate_subscriber_id,
)
from subscriptions.log_segment import MAX_INFLIGHT
from subscriptions.migrate import store_for

#: What each --stores name measures: a product store's znode format, or the
#: benchmark-only pipelined-setData baseline.
ZK_PIPELINED = "zk-pipelined-setdata"
STORES = {"zk": ZK_FORMAT, "zk_pipelined": ZK_PIPELINED, "log_segment": SEGMENT_FORMAT}
#: Where each store's results go in the report.
REPORT_KEYS = {
    "zk": "zk_store",
    "zk_pipelined": "zk_pipelined_setdata_baseline",
    "log_segment": "log_segment_store",
}
#: The issue's throughput targets hold at this many commits in flight.
TARGET_OUTSTANDING = 64
_REPORTED_KEYS = (
    "bkcEnsembleSize",
    "bkcWriteQuorumSize",
    "bkcAckQuorumSize",
    "bkDigestType",
    "subscriptionSegmentMaxEntries",
    "subscriptionSegmentMaxBytes",
    "subscriptionSegmentMaxAgeMinutes",
    "zkSessionTimeoutSeconds",
)


class Store(Protocol):
    """What the load needs of a store: the product stores and the baseline."""

    async def acquire(self, subscriber_id: str) -> DLSN: ...

    async def advance_commit_position(self, subscriber_id: str, dlsn: DLSN) -> None: ...

    def advance_commit_position_nowait(
        self, subscriber_id: str, dlsn: DLSN
    ) -> asyncio.Future[None]: ...

    async def close(self) -> None: ...


class PipelinedSetData:
    """DistributedLog's Java ZooKeeper store (ZKSubscriptionStateStore) as a
    baseline: a commit past the last one issued is an unconditional
    ``setData`` (version -1) of the base64 DLSN, created on NoNode, with no
    serialization, so a subscriber has as many writes in flight as commits.
    The fastest a ZooKeeper-only store gets; it cannot fence a stale owner,
    which is why dlog's store compares and sets instead. Benchmark only."""

    def __init__(self, log_manager: LogManager) -> None:
        self.zk = log_manager.context.zk
        self.path = log_manager.context.paths.subscribers
        self.last: dict[str, DLSN] = {}

    def znode(self, subscriber_id: str) -> str:
        return f"{self.path}/{validate_subscriber_id(subscriber_id)}"

    async def acquire(self, subscriber_id: str) -> DLSN:
        """The stored position (the Java store takes no ownership). An absent
        znode is created here, as the log-segment store's acquire writes
        its own, so that measured commits are all plain ``setData``: started
        all at once, 100 x 64 committers take longer than a short warm-up
        to issue their first write."""
        path = self.znode(subscriber_id)
        try:
            data, _ = await self.zk.get(path)
        except NoNodeError:
            position = NonInclusiveLowerBound
            with contextlib.suppress(NodeExistsError):
                await self.zk.create(path, b"", makepath=True)
        else:
            znode = decode_subscriber(data, None, path)
            position = znode.position if isinstance(znode, ZkPosition) else znode.last_commit
        self.last[subscriber_id] = position
        return position

    async def advance_commit_position(self, subscriber_id: str, dlsn: DLSN) -> None:
        last = self.last.get(subscriber_id)
        if last is not None and dlsn <= last:
            return
        self.last[subscriber_id] = dlsn
        path, data = self.znode(subscriber_id), encode_zk_position(dlsn)
        try:
            await self.zk.set(path, data)
        except NoNodeError:
            # zkAsyncCreateFullPathOptimisticAndSetData: create, and if a
            # concurrent commit created it first, set again.
            try:
                await self.zk.create(path, data, makepath=True)
            except NodeExistsError:
                await self.zk.set(path, data)

    def advance_commit_position_nowait(
        self, subscriber_id: str, dlsn: DLSN
    ) -> asyncio.Future[None]:
        return asyncio.ensure_future(self.advance_commit_position(subscriber_id, dlsn))

    async def close(self) -> None:
        self.last.clear()


def make_store(log_manager: LogManager, fmt: str) -> Store:
    if fmt == ZK_PIPELINED:
        return PipelinedSetData(log_manager)
    return store_for(log_manager.context, fmt)


#: How a consumer keeps K commits in flight: K coroutines each awaiting
#: ``advance_commit_position``, or one task per subscription keeping K
#: futures from ``advance_commit_position_nowait`` (how a pipelined consumer
#: would write it, as with DistributedLog's future-returning API).
SHAPES = ("coroutines", "futures")


class Load:
    """K commits in flight per subscription, in one of the SHAPES; each
    commit takes the subscription's next DLSN."""

    def __init__(
        self, store: Store, ids: list[str], outstanding: int, shape: str = "coroutines"
    ) -> None:
        self.store = store
        self.ids = ids
        self.outstanding = outstanding
        self.shape = shape
        self.next_entry = dict.fromkeys(ids, 0)
        self.latencies: list[float] = []
        self.commits = 0
        self.errors: list[str] = []
        self.measuring = False

    async def _committer(self, sid: str, stop_at: float) -> None:
        advance = self.store.advance_commit_position
        perf = time.perf_counter
        nxt = self.next_entry
        lat = self.latencies
        while perf() < stop_at and not self.errors:
            entry = nxt[sid] = nxt[sid] + 1
            t0 = perf()
            try:
                await advance(sid, DLSN(1, entry, 0))
            except Exception as e:
                if len(self.errors) < 5:
                    self.errors.append(f"{sid}: {e!r}")
                return
            if self.measuring:
                lat.append(perf() - t0)
                self.commits += 1

    async def _pipeline(self, sid: str, stop_at: float) -> None:
        """Keep ``outstanding`` commit futures in flight; take them in order
        (one that is already done is awaited without suspending)."""
        nowait = self.store.advance_commit_position_nowait
        perf = time.perf_counter
        lat = self.latencies
        window: collections.deque[tuple[asyncio.Future[None], float]] = collections.deque()
        entry = self.next_entry[sid]
        try:
            while True:
                if perf() < stop_at and not self.errors:
                    while len(window) < self.outstanding:
                        entry += 1
                        window.append((nowait(sid, DLSN(1, entry, 0)), perf()))
                elif not window:
                    return
                fut, t0 = window.popleft()
                try:
                    await fut
                except Exception as e:
                    if len(self.errors) < 5:
                        self.errors.append(f"{sid}: {e!r}")
                    continue
                if self.measuring:
                    lat.append(perf() - t0)
                    self.commits += 1
        finally:
            self.next_entry[sid] = entry

    async def run(self, seconds: float, *, measure: bool) -> float:
        self.measuring = measure
        stop_at = time.perf_counter() + seconds
        t0 = time.perf_counter()
        if self.shape == "futures":
            await asyncio.gather(*(self._pipeline(sid, stop_at) for sid in self.ids))
        else:
            await asyncio.gather(
                *(
                    self._committer(sid, stop_at)
                    for sid in self.ids
                    for _ in range(self.outstanding)
                )
            )
        return time.perf_counter() - t0


async def zxid(zk: ZooKeeperServer) -> int:
    return await asyncio.to_thread(zk.zxid)


def appends_of(store: Store) -> tuple[int, int]:
    """(appends, segment switches) a log-segment store made so far."""
    subs = getattr(store, "_subs", None)
    if subs is None:
        return 0, 0
    # entries counts appends to the current segment (the switch's own first
    # record included); a switch resets it, hence the switch count as well.
    return sum(st.entries for st in subs.values()), getattr(store, "switches", 0)


async def measure(
    lm: LogManager,
    zk: ZooKeeperServer,
    fmt: str,
    count: int,
    outstanding: int,
    seconds: float,
    warmup: float,
    shape: str = "coroutines",
) -> dict[str, Any]:
    store = make_store(lm, fmt)
    ids = [f"sub-{i:03d}" for i in range(count)]
    try:
        t0 = time.perf_counter()
        for sid in ids:
            await store.acquire(sid)
        acquire_s = time.perf_counter() - t0
        load = Load(store, ids, outstanding, shape)
        if warmup:
            await load.run(warmup, measure=False)
            if load.errors:
                return {"error": f"warm-up failed: {load.errors}"}
        await asyncio.sleep(0.3)  # explicit LACs and other stragglers settle
        appends0, switches0 = appends_of(store)
        zxid0 = await zxid(zk)
        cpu0 = time.process_time()
        elapsed = await load.run(seconds, measure=True)
        cpu = time.process_time() - cpu0
        zxid1 = await zxid(zk)
        appends1, switches1 = appends_of(store)
        commits = load.commits
        writes = zxid1 - zxid0
        out: dict[str, Any] = {
            "subscriptions": count,
            "outstanding_per_subscription": outstanding,
            "in_flight_as": shape if outstanding > 1 else "one commit at a time",
            "commits": commits,
            "seconds": round(elapsed, 3),
            "commits_per_s": round(commits / elapsed) if elapsed else 0,
            "commit_latency": percentiles(load.latencies),
            "zk_write_txns": writes,
            "zk_writes_per_10k_commits": round(writes * 10_000 / commits, 3) if commits else None,
            "client_cpu_percent": round(100 * cpu / elapsed) if elapsed else 0,
            "acquire_seconds": round(acquire_s, 3),
            "errors": load.errors,
        }
        if fmt == SEGMENT_FORMAT:
            switches = switches1 - switches0
            appends = appends1 - appends0 if not switches else None
            out["appends"] = appends
            out["commits_per_append"] = round(commits / appends, 2) if appends else None
            out["segment_switches"] = switches
        return out
    finally:
        await store.close()


async def run(uri: str, conf: DLogConfig, zk: ZooKeeperServer, args: argparse.Namespace) -> Any:
    results: dict[str, Any] = {}
    async with await Namespace.open(uri, conf, bind=True) as ns:
        tune_runtime()  # the load generator must not be the one pausing for GC
        if len(await ns.bk.watcher.wait_for(args.bookies, 30)) < args.bookies:
            raise RuntimeError(f"only {len(ns.bk.writable_bookies())} bookies registered")
        for name in args.stores:
            fmt = STORES[name]
            per: dict[str, Any] = {}
            for shape in args.shapes:
                for count in args.subscriptions:
                    key = result_key(count, shape)
                    lm = await ns.open_log(f"bench-{name}-{count}-{shape}")
                    per[key] = await measure(
                        lm, zk, fmt, count, args.outstanding, args.seconds, args.warmup, shape
                    )
                    print(f"{name} {key}: {per[key]}", file=sys.stderr)
            lm = await ns.open_log(f"bench-{name}-sequential")
            per["sequential_1_subscription"] = await measure(
                lm, zk, fmt, 1, 1, args.seconds, min(args.warmup, 1.0)
            )
            print(f"{name} sequential: {per['sequential_1_subscription']}", file=sys.stderr)
            results[name] = per
        if "log_segment" in args.stores:
            results["ledger_baseline"] = await ledger_baseline(ns, conf, args.seconds)
    return results


async def ledger_baseline(ns: Namespace, conf: DLogConfig, seconds: float) -> dict[str, Any]:
    """What one subscription's segment can do: appends of a commit record's
    size, with as many in flight as the log-segment store keeps
    (MAX_INFLIGHT), same client, bookies and quorums."""
    payload = encode_commit(DLSN(1, 123456, 0))
    handle = await ns.bk.create_ledger(
        conf.ensemble_size,
        conf.write_quorum_size,
        conf.ack_quorum_size,
        DigestType.CRC32C,
        b"bench",
    )
    try:
        await closed_loop([handle], payload, MAX_INFLIGHT, 0.5)
        result = await closed_loop([handle], payload, MAX_INFLIGHT, seconds)
    finally:
        with contextlib.suppress(Exception):
            await handle.close()
    result["entry_size"] = len(payload)
    result["outstanding"] = MAX_INFLIGHT
    return result


#: The subscriptions issue's targets; ``targets_met`` checks each one.
TARGETS: dict[str, Any] = {
    "sequential_commit_p50": "log-segment store at most the ZooKeeper store (same run)",
    "outstanding_per_subscription": TARGET_OUTSTANDING,
    "min_ratio_to_zk_store": {"1_subscriptions": 50, "100_subscriptions": 100},
    "max_zk_writes_per_10k_commits": 0,
    "min_ratio_to_zk_pipelined_setdata": {"1_subscriptions": 5},
}


def result_key(count: int, shape: str) -> str:
    """``100_subscriptions`` (coroutines, as before) or ``100_subscriptions_futures``."""
    return f"{count}_subscriptions" + ("" if shape == "coroutines" else f"_{shape}")


def ratios(
    results: dict[str, Any], baseline: str, counts: list[int], shape: str = "coroutines"
) -> dict[str, float | None]:
    """The log-segment store's commits/s over ``baseline``'s, per subscription
    count, both loaded in ``shape``."""
    out: dict[str, float | None] = {}
    if not {baseline, "log_segment"} <= set(results):
        return out
    for count in counts:
        key = result_key(count, shape)
        b = results[baseline].get(key, {}).get("commits_per_s")
        s = results["log_segment"].get(key, {}).get("commits_per_s")
        out[key] = round(s / b, 2) if b and s else None
    return out


def targets_met(results: dict[str, Any], outstanding: int) -> dict[str, Any]:
    """Each target against this run's numbers; ``met`` is None when the run
    did not measure it (a store or subscription count left out, or another
    ``--outstanding`` than the targets')."""
    seg = results.get("log_segment", {})
    out: dict[str, Any] = {}

    def p50(name: str) -> float | None:
        row = results.get(name, {}).get("sequential_1_subscription", {})
        return row.get("commit_latency", {}).get("p50_ms") if not row.get("errors") else None

    mine, theirs = p50("log_segment"), p50("zk")
    out["sequential_commit_p50"] = {
        "log_segment_ms": mine,
        "zk_store_ms": theirs,
        "met": mine <= theirs if mine is not None and theirs is not None else None,
    }
    by_shape: dict[str, list[str]] = {shape: [] for shape in SHAPES}
    for shape in SHAPES:
        for baseline, label, wanted in (
            ("zk", "zk_store", TARGETS["min_ratio_to_zk_store"]),
            ("zk_pipelined", "zk_pipelined_setdata", TARGETS["min_ratio_to_zk_pipelined_setdata"]),
        ):
            measured = ratios(results, baseline, [int(k.split("_")[0]) for k in wanted], shape)
            for key, target in wanted.items():
                rkey = result_key(int(key.split("_")[0]), shape)
                r = measured.get(rkey) if outstanding == TARGET_OUTSTANDING else None
                name = f"ratio_to_{label}_{rkey}"
                by_shape[shape].append(name)
                out[name] = {"measured": r, "target": target, "met": r >= target if r else None}
    writes = {
        key: row.get("zk_writes_per_10k_commits") for key, row in seg.items() if "error" not in row
    }
    out["zk_writes_per_10k_commits"] = {
        "measured": writes,
        "target": TARGETS["max_zk_writes_per_10k_commits"],
        "met": all(
            w is not None and w <= TARGETS["max_zk_writes_per_10k_commits"] for w in writes.values()
        )
        if writes
        else None,
    }
    shared = [k for k in out if not k.startswith("ratio_")]
    for shape, names in by_shape.items():
        # Every target, with the ratios as measured under this shape of load.
        verdicts = [out[k]["met"] for k in shared + names]
        out[f"all_with_{shape}"] = (
            False if False in verdicts else (None if None in verdicts else True)
        )
    return out


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--seconds", type=float, default=5.0, help="per configuration")
    parser.add_argument(
        "--warmup", type=float, default=1.0, help="seconds of load before measuring"
    )
    parser.add_argument(
        "--outstanding", type=int, default=64, help="commits in flight per subscription (K)"
    )
    parser.add_argument(
        "--subscriptions", default="1,100", help="subscription counts, comma-separated"
    )
    parser.add_argument(
        "--shapes",
        default=",".join(SHAPES),
        help="how K commits are kept in flight: coroutines (K awaiting each), "
        "futures (advance_commit_position_nowait)",
    )
    parser.add_argument(
        "--stores",
        default=",".join(STORES),
        help=f"stores to measure: {', '.join(STORES)}",
    )
    add_cluster_args(parser)
    parser.add_argument("--set", action="append", default=[], help="DLogConfig key=value")
    parser.add_argument("--bookie-set", action="append", default=[], help="bookie key=value")
    args = parser.parse_args()
    args.subscriptions = [int(x) for x in args.subscriptions.split(",") if x.strip()]
    args.stores = [x.strip() for x in args.stores.split(",") if x.strip()]
    args.shapes = [x.strip() for x in args.shapes.split(",") if x.strip()]
    if not args.shapes or not set(args.shapes) <= set(SHAPES):
        raise SystemExit(f"--shapes: choose among {', '.join(SHAPES)}")
    if not args.stores or not set(args.stores) <= set(STORES):
        raise SystemExit(f"--stores: choose among {', '.join(STORES)}")
    check_cluster_args(args)
    settings: dict[str, Any] = {**BENCH_BOOKIE_SETTINGS, **parse_sets(args.bookie_set)}
    check_bookie_settings(settings, "--bookie-set")
    dlog_config("zk+hierarchical://127.0.0.1:2181/ledgers", args)  # bad --set fails early
    install_event_loop_policy()
    with local_cluster(args.bookies, settings, args.dir, "dlog-bench-subs-") as (
        zk,
        bookies,
        ledgers_uri,
    ):
        conf = dlog_config(ledgers_uri, args)
        uri = f"distributedlog://{zk.connect_string}/bench"
        results = asyncio.run(run(uri, conf, zk, args))

    report = {
        "benchmark": "subscriptions",
        "bookies": args.bookies,
        "ensemble": args.ensemble,
        "write_quorum": args.write_quorum,
        "ack_quorum": args.ack_quorum,
        "seconds": args.seconds,
        "warmup_seconds": args.warmup,
        "outstanding_per_subscription": args.outstanding,
        "cpus": os.cpu_count(),
        **{REPORT_KEYS[name]: results.get(name) for name in STORES},
        "ledger_baseline": results.get("ledger_baseline"),
        "dlog_settings": reported_dlog_settings(conf, _REPORTED_KEYS),
        "bookie_settings": {
            **journal_settings(bookies[0].conf),
            **effective_settings(bookies[0].conf, BookieConfig()),
        },
        "ratio_log_segment_to_zk_commits_per_s": {
            k: v
            for shape in args.shapes
            for k, v in ratios(results, "zk", args.subscriptions, shape).items()
        },
        "ratio_log_segment_to_zk_pipelined_setdata_commits_per_s": {
            k: v
            for shape in args.shapes
            for k, v in ratios(results, "zk_pipelined", args.subscriptions, shape).items()
        },
        "targets": TARGETS,
        "targets_met": targets_met(results, args.outstanding),
    }
    json.dump(report, sys.stdout, indent=2)
    print()
    failed = any(
        "error" in r or r.get("errors")
        for name, per in results.items()
        if name in STORES
        for r in per.values()
    )
    if failed:
        raise SystemExit(1)


if __name__ == "__main__":
    main()
