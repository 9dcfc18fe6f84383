"""Fan-out: several subscribers read the same stream, each at its own pace.

Start a sandbox and run it:

    URI=$(.venv/bin/dlog sandbox start --dir /tmp/sb | tail -1)
    .venv/bin/python examples/fan_out.py --uri $URI --produce 2000 --seconds 2
    .venv/bin/python examples/fan_out.py --uri $URI            # the slow ones catch up
    .venv/bin/dlog subscriptions list fan-out --uri $URI
    .venv/bin/dlog sandbox stop --dir /tmp/sb

Three subscribers, ``analytics``, ``billing`` and ``audit``, consume the same
stream concurrently in this process. Each is a consumer of its own
subscription (``LogManager.subscribe``): it starts after its own last
commit, reads at its own pace (analytics is fast and commits every 500
records; billing spends --billing-ms per record and commits every 50; audit
spends --audit-ms and commits every 10) and commits its own position. No
subscriber waits for another: the stream is read once per subscriber, and
the log keeps every record whatever the readers do.

Each stops when it has been idle for a second (caught up) or after
``--seconds``, committing what it processed (a graceful stop). At the end the
example prints, for each subscriber, what it processed in this run and its
committed position from ``get_last_commit_positions()``; the stream's last
DLSN is printed for comparison. Run it again and the ones that lagged
continue where they stopped.

Positions are kept by the log-segment subscriptions store
(``logSegmentBasedSubscriptionsStoreEnabled`` is set); pass
``--set logSegmentBasedSubscriptionsStoreEnabled=false`` to use
DistributedLog's ZooKeeper store instead: the code does not change.
"""

from __future__ import annotations

import argparse
import asyncio
import dataclasses
import sys
import time

from dlog.conf.dlog import DLogConfig
from dlog.dlsn import DLSN
from dlog.errors import LogEmptyError
from dlog.log import LogManager
from dlog.namespace import Namespace
from dlog.record import LogRecord


@dataclasses.dataclass
class Subscriber:
    name: str
    work_ms: float
    commit_every: int
    processed: int = 0
    commits: int = 0
    first: DLSN | None = None
    last: DLSN | None = None
    stopped: str = ""


def short(dlsn: DLSN | None) -> str:
    return "-" if dlsn is None else "/".join(map(str, dlsn))


async def produce(log: LogManager, count: int) -> None:
    writer = await log.open_writer()
    try:
        first = max(writer.last_txid + 1, 0)
        await writer.write_bulk(
            LogRecord(t, f"event-{t}".encode()) for t in range(first, first + count)
        )
    finally:
        await writer.close()
    print(f"produced {count} records", flush=True)


async def run_subscriber(log: LogManager, sub: Subscriber, deadline: float) -> None:
    consumer = await log.subscribe(sub.name)
    since_commit = 0
    idle_since = time.monotonic()
    try:
        while True:
            if time.monotonic() >= deadline:
                sub.stopped = "time is up"
                break
            records = await consumer.read_bulk(100, timeout=0.1)
            if not records:
                if time.monotonic() - idle_since >= 1.0:
                    sub.stopped = "caught up"
                    break
                continue
            idle_since = time.monotonic()
            for record in records:
                if sub.work_ms:
                    await asyncio.sleep(sub.work_ms / 1000)  # this subscriber's "work"
                sub.processed += 1
                sub.first = sub.first or record.dlsn
                sub.last = record.dlsn
                since_commit += 1
                if since_commit >= sub.commit_every:
                    await consumer.commit(record)
                    sub.commits += 1
                    since_commit = 0
                if time.monotonic() >= deadline:
                    break
        if since_commit and sub.last is not None:
            # The last record *processed*: consumer.commit() without an
            # argument would commit the last record read, which after
            # read_bulk may be one this subscriber has not processed yet.
            await consumer.commit(sub.last)
            sub.commits += 1
    finally:
        await consumer.close()


async def run(args: argparse.Namespace) -> bool:
    overrides: dict[str, object] = {"logSegmentBasedSubscriptionsStoreEnabled": True}
    overrides.update(dict(item.split("=", 1) for item in args.set))
    config = DLogConfig.load(overrides=overrides)
    async with await Namespace.open(args.uri, config) as namespace:
        log = await namespace.open_log(args.stream)
        if args.produce:
            await produce(log, args.produce)
        subscribers = [
            Subscriber("analytics", 0.0, 500),
            Subscriber("billing", args.billing_ms, 50),
            Subscriber("audit", args.audit_ms, 10),
        ]
        deadline = time.monotonic() + args.seconds
        t0 = time.perf_counter()
        await asyncio.gather(*(run_subscriber(log, s, deadline) for s in subscribers))
        elapsed = time.perf_counter() - t0
        positions = await log.subscriptions.get_last_commit_positions()
        try:
            last = await log.get_last_dlsn()
        except LogEmptyError:
            last = None
        print(f"stream {args.stream}: last DLSN {short(last)}, {elapsed:.2f} s")
        print(
            f"{'subscriber':<10} {'processed':>9} {'commits':>7}  {'from':<12} {'committed':<12} state"
        )
        for s in subscribers:
            position = positions.get(s.name)
            state = "at the end" if position == last else f"lagging ({s.stopped})"
            print(
                f"{s.name:<10} {s.processed:>9} {s.commits:>7}  {short(s.first):<12} "
                f"{short(position):<12} {state}"
            )
        print("get_last_commit_positions():")
        for name, position in sorted(positions.items()):
            print(f"  {name}: {position}")
        return all(positions.get(s.name) is not None for s in subscribers)


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--uri", required=True, help="namespace URI (distributedlog://...)")
    parser.add_argument("--stream", default="fan-out")
    parser.add_argument("--produce", type=int, default=0, metavar="N", help="write N records first")
    parser.add_argument("--seconds", type=float, default=30.0, help="stop after this long")
    parser.add_argument("--billing-ms", type=float, default=0.5, help="billing's work per record")
    parser.add_argument("--audit-ms", type=float, default=2.0, help="audit's work per record")
    parser.add_argument("--set", action="append", default=[], metavar="KEY=VALUE")
    args = parser.parse_args()
    try:
        ok = asyncio.run(run(args))
    except Exception as e:
        print(f"FAIL: {type(e).__name__}: {e}", file=sys.stderr)
        ok = False
    sys.exit(0 if ok else 1)


if __name__ == "__main__":
    main()
