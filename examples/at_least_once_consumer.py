"""An at-least-once consumer: process records, commit every N, survive kill -9.

Start a sandbox, write some records and consume them:

    URI=$(.venv/bin/dlog sandbox start --dir /tmp/sb | tail -1)
    .venv/bin/python examples/at_least_once_consumer.py --uri $URI --produce 1000 \\
        --commit-every 100 --work-ms 5
    # ... kill -9 it halfway (or Ctrl-C), then run it again: it resumes
    .venv/bin/python examples/at_least_once_consumer.py --uri $URI --commit-every 100
    .venv/bin/dlog subscriptions show at-least-once app --uri $URI
    .venv/bin/dlog sandbox stop --dir /tmp/sb

The consumer is ``LogManager.subscribe(subscriber)``: a reader that starts
just after the subscription's last committed position. Commits go to the
log-segment subscriptions store (``logSegmentBasedSubscriptionsStoreEnabled``
is switched on through a configuration override): each commit is a ledger
append, not a ZooKeeper write, and ``consumer.commit()`` returns only once
it is durable on an ack quorum of bookies.

At-least-once: a record is committed only after it was processed, so a
crash never skips a record; but the records processed after the last
commit are delivered again after a restart. With ``--commit-every N``, a
kill -9 re-delivers at most N records: the up to N-1 processed since the
last commit, plus the one whose processing (which ends with the commit) was
interrupted. Make processing idempotent, or commit more often (see
examples/commit_every_record.py for what committing every record costs).
Ctrl-C or SIGTERM stop gracefully: the last processed record is committed,
so nothing is re-delivered.

Output, one line each (flushed, so you can watch or pipe it):

    resuming after 1/0/99 (DLSN{...}): 100 records were committed before
    record 1/0/100 txid=100 payload=record-100     (with --print-records)
    committed 1/0/199 (100 processed, 1 commits)
    caught up: no record for 2.0 s (--idle-exit)
    done: 900 processed, 9 commits, last committed 1/0/999

Options: ``--stream`` (default at-least-once), ``--subscriber`` (default
app), ``--produce N`` (write N records first), ``--work-ms`` (simulated
processing time per record), ``--max-records``, ``--idle-exit SECONDS``
(0: wait for records forever), ``--set key=value`` (any log setting, e.g.
``--set ensemble-size=1 --set write-quorum-size=1 --set ack-quorum-size=1``
for a one-bookie sandbox).
"""

from __future__ import annotations

import argparse
import asyncio
import signal
import sys
import time

from dlog.conf.dlog import DLogConfig
from dlog.dlsn import DLSN, NonInclusiveLowerBound
from dlog.log import LogManager
from dlog.namespace import Namespace
from dlog.record import LogRecord, LogRecordWithDLSN


def short(dlsn: DLSN) -> str:
    return "/".join(map(str, dlsn))


def say(text: str) -> None:
    print(text, flush=True)


async def produce(log: LogManager, count: int) -> None:
    writer = await log.open_writer()
    try:
        first = writer.last_txid + 1 if writer.last_txid >= 0 else 0
        dlsns = await writer.write_bulk(
            LogRecord(txid, f"record-{txid}".encode()) for txid in range(first, first + count)
        )
    finally:
        await writer.close()
    say(f"produced {count} records (txids {first}..{first + count - 1}), last {short(dlsns[-1])}")


def process(record: LogRecordWithDLSN, work_ms: float) -> None:
    """The application's work. Here: pretend to be busy."""
    if work_ms:
        time.sleep(work_ms / 1000)  # blocking on purpose: real work holds the CPU too


async def consume(log: LogManager, args: argparse.Namespace, stopping: asyncio.Event) -> int:
    consumer = await log.subscribe(args.subscriber)
    committed = await consumer.committed()
    if committed == NonInclusiveLowerBound:
        say(f"subscriber {args.subscriber!r} starts at the beginning of {args.stream!r}")
    else:
        say(f"resuming after {short(committed)} ({committed})")
    processed = commits = since_commit = 0
    last: LogRecordWithDLSN | None = None
    idle_since = time.monotonic()
    try:
        while not stopping.is_set():
            if args.max_records and processed >= args.max_records:
                break
            want = 100 if not args.max_records else min(100, args.max_records - processed)
            records = await consumer.read_bulk(want, timeout=0.2)
            if not records:
                if args.idle_exit and time.monotonic() - idle_since >= args.idle_exit:
                    say(f"caught up: no record for {args.idle_exit:.1f} s (--idle-exit)")
                    break
                continue
            idle_since = time.monotonic()
            for record in records:
                process(record, args.work_ms)
                if args.print_records:
                    say(
                        f"record {short(record.dlsn)} txid={record.txid} "
                        f"payload={record.payload.decode(errors='replace')}"
                    )
                processed += 1
                since_commit += 1
                last = record
                if since_commit >= args.commit_every:
                    await consumer.commit(record)  # durable when it returns
                    commits += 1
                    since_commit = 0
                    say(
                        f"committed {short(record.dlsn)} ({processed} processed, {commits} commits)"
                    )
                if stopping.is_set():
                    break
        if last is not None and since_commit:
            await consumer.commit(last)  # a graceful stop re-delivers nothing
            commits += 1
            say(f"committed {short(last.dlsn)} on the way out")
    finally:
        await consumer.close()
    final = await log.subscriptions.get_last_commit_position(args.subscriber)
    say(f"done: {processed} processed, {commits} commits, last committed {short(final)}")
    return processed


async def run(args: argparse.Namespace) -> None:
    overrides: dict[str, object] = dict(item.split("=", 1) for item in args.set)
    overrides["logSegmentBasedSubscriptionsStoreEnabled"] = True
    config = DLogConfig.load(overrides=overrides)
    stopping = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, stopping.set)
    async with await Namespace.open(args.uri, config) as namespace:
        log = await namespace.open_log(args.stream)
        if args.produce:
            await produce(log, args.produce)
        await consume(log, args, stopping)


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--uri", required=True, help="namespace URI (distributedlog://...)")
    parser.add_argument("--stream", default="at-least-once")
    parser.add_argument("--subscriber", default="app")
    parser.add_argument("--commit-every", type=int, default=100, metavar="N")
    parser.add_argument("--produce", type=int, default=0, metavar="N", help="write N records first")
    parser.add_argument("--work-ms", type=float, default=0.0, help="processing time per record")
    parser.add_argument("--max-records", type=int, default=0, help="stop after this many")
    parser.add_argument(
        "--idle-exit", type=float, default=2.0, help="stop after this long without a record"
    )
    parser.add_argument("--print-records", action="store_true", help="one line per record")
    parser.add_argument("--set", action="append", default=[], metavar="KEY=VALUE")
    args = parser.parse_args()
    if args.commit_every < 1:
        parser.error("--commit-every must be at least 1")
    try:
        asyncio.run(run(args))
    except Exception as e:
        print(f"FAIL: {type(e).__name__}: {e}", file=sys.stderr)
        sys.exit(1)


if __name__ == "__main__":
    main()
