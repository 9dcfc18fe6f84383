"""A consumer that commits after every record, with each subscriptions store.

Start a sandbox and run it:

    URI=$(.venv/bin/dlog sandbox start --dir /tmp/sb | tail -1)
    .venv/bin/python examples/commit_every_record.py --uri $URI --records 2000
    .venv/bin/dlog sandbox stop --dir /tmp/sb

Committing after every record is the simplest exactly-where-I-was
consumer: after a crash nothing is processed twice except, at most, the
record in hand. It is also the heaviest load a consumer puts on its
subscriptions store: one commit per record.

DistributedLog's ZooKeeper store turns every commit into a ZooKeeper write,
and ZooKeeper does not scale for writes: every write goes through its
leader and is logged and synced by a quorum, for every consumer of every
stream. The log-segment store (``logSegmentBasedSubscriptionsStoreEnabled``)
appends the commit to a ledger on the bookies instead, the same path as the
log's own records, and ZooKeeper is written only when a subscription's
segment rolls over (every 50,000 appends by default:
``subscriptionSegmentMaxEntries``) or when it changes owner.

The example writes ``--records`` records, then consumes them once with each
store (``--store both``, the default; or ``zk`` / ``log-segment``), as
subscriber ``every-record-<store>``, awaiting every commit before the next
record. It reports, per store, commits/s, the mean commit latency and the
ZooKeeper write transactions during the commits (the zxid delta from the
``srvr`` four-letter word of the namespace's ZooKeeper, or of ``--zk
HOST:PORT``).

Read the numbers carefully. Commits here are sequential (one in flight), so
commits/s is one round trip per commit for both stores. The sandbox's
bookies sync their journal as soon as their request queue is empty
(``journalFlushWhenQueueEmpty=true``; BookKeeper's default, false, makes a
lone append wait ``journalMaxGroupWaitMSec``, 2 ms, for company), so a lone
commit costs about what a lone ZooKeeper write does (bench/subscriptions_store.py
measures it). The number that matters is the last column: one ZooKeeper
write per commit against none. ZooKeeper's capacity is shared by every
consumer of every stream (a few thousand writes/s in total); the bookies'
is not, and with many commits in flight the log-segment store also
coalesces them into fewer appends.
"""

from __future__ import annotations

import argparse
import asyncio
import sys
import time

from dlog.conf.dlog import DLogConfig
from dlog.namespace import Namespace
from dlog.record import LogRecord
from dlog.sandbox.zookeeper import four_letter_word
from dlog.uri import parse_namespace_uri

STORES = {"zk": False, "log-segment": True}


def zxid(zk: str) -> int | None:
    """The ZooKeeper server's last zxid (None if ``srvr`` is not allowed)."""
    host, _, port = zk.split(",")[0].rpartition(":")
    try:
        answer = four_letter_word(host, int(port), "srvr")
    except OSError:
        return None
    for line in answer.splitlines():
        if line.startswith("Zxid:"):
            return int(line.split()[1], 16)
    return None


async def produce(uri: str, stream: str, count: int, sets: dict[str, object]) -> None:
    async with await Namespace.open(uri, DLogConfig.load(overrides=sets)) as ns:
        if await ns.log_exists(stream):
            await ns.delete_log(stream)  # start fresh: every run consumes the same records
        log = await ns.open_log(stream)
        writer = await log.open_writer()
        try:
            await writer.write_bulk(LogRecord(i, b"record %d" % i) for i in range(count))
        finally:
            await writer.close()
    print(f"produced {count} records to {stream}", flush=True)


async def consume(
    uri: str, stream: str, store: str, count: int, zk: str, sets: dict[str, object]
) -> dict[str, float | int | None]:
    overrides = {**sets, "logSegmentBasedSubscriptionsStoreEnabled": STORES[store]}
    async with await Namespace.open(uri, DLogConfig.load(overrides=overrides)) as ns:
        log = await ns.open_log(stream)
        consumer = await log.subscribe(f"every-record-{store}")  # takes ownership first
        try:
            await asyncio.sleep(0.2)  # let the takeover's writes settle
            before = zxid(zk)
            commits = 0
            t0 = time.perf_counter()
            while commits < count:
                records = await consumer.read_bulk(1000, timeout=10)
                if not records:
                    raise TimeoutError(f"no record for 10 s after {commits} of {count}")
                for record in records:
                    await consumer.commit(record)  # durable when it returns
                    commits += 1
            elapsed = time.perf_counter() - t0
            after = zxid(zk)
        finally:
            await consumer.close()
    writes = after - before if before is not None and after is not None else None
    return {
        "commits": commits,
        "seconds": round(elapsed, 3),
        "commits_per_s": round(commits / elapsed),
        "mean_commit_ms": round(1000 * elapsed / commits, 3),
        "zk_writes": writes,
    }


async def run(args: argparse.Namespace) -> None:
    sets: dict[str, object] = dict(item.split("=", 1) for item in args.set)
    zk = args.zk or parse_namespace_uri(args.uri).hosts
    await produce(args.uri, args.stream, args.records, sets)
    stores = list(STORES) if args.store == "both" else [args.store]
    results = {}
    for store in stores:
        r = results[store] = await consume(args.uri, args.stream, store, args.records, zk, sets)
        writes = "n/a (srvr not allowed)" if r["zk_writes"] is None else r["zk_writes"]
        per = (
            f" ({r['zk_writes'] / r['commits']:.3f} per commit)"
            if r["zk_writes"] is not None
            else ""
        )
        print(
            f"{store:<12} {r['commits']} commits in {r['seconds']} s: {r['commits_per_s']} "
            f"commits/s, {r['mean_commit_ms']} ms each; ZooKeeper writes: {writes}{per}",
            flush=True,
        )
    if len(results) == 2:
        zk_r, seg_r = results["zk"], results["log-segment"]
        print(f"log-segment / zk commits/s: {seg_r['commits_per_s'] / zk_r['commits_per_s']:.2f}")


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--uri", required=True, help="namespace URI (distributedlog://...)")
    parser.add_argument("--stream", default="commit-every-record")
    parser.add_argument("--records", type=int, default=2000)
    parser.add_argument("--store", choices=["both", *STORES], default="both")
    parser.add_argument("--zk", help="ZooKeeper HOST:PORT for the zxid (default: the URI's)")
    parser.add_argument("--set", action="append", default=[], metavar="KEY=VALUE")
    args = parser.parse_args()
    if args.records < 1:
        parser.error("--records must be at least 1")
    try:
        asyncio.run(run(args))
    except Exception as e:
        print(f"FAIL: {type(e).__name__}: {e}", file=sys.stderr)
        sys.exit(1)


if __name__ == "__main__":
    main()
