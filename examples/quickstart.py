"""dlog quickstart: write 100,000 records to a stream, then tail them back.

Start a local cluster (ZooKeeper and three bookies on loopback, in the
background) and point this example at the namespace URI it prints last:

    URI=$(dlog sandbox start --dir /tmp/dlog-sandbox | tail -1)
    python examples/quickstart.py --uri "$URI"     # distributedlog://127.0.0.1:<port>/messaging
    dlog sandbox stop --dir /tmp/dlog-sandbox

``make demo`` runs it against a sandbox. Options: ``--records N`` (default 100000),
``--stream NAME`` (default "quickstart"; a stream left by an earlier run is
deleted first), ``--set key=value`` for any log setting (e.g.
``--set ensemble-size=1 --set write-quorum-size=1 --set ack-quorum-size=1``
on a single-bookie sandbox).

What it shows, with the asyncio API:

1. ``Namespace.open(uri)`` and ``namespace.open_log(name)``;
2. ``writer.write_nowait(record)``: pipelined writes, each returning a future
   that resolves to the record's DLSN once an ack quorum of bookies has it.
   The writer batches records into ledger entries; the example keeps at most
   ``--in-flight`` records outstanding (back-pressure);
3. ``log.open_reader(from_dlsn=...)`` at the stream's first DLSN, reading with
   ``read_bulk`` while the writer is still open (a tailing reader);
4. checks: every record back, in order, with its payload, and DLSNs that
   strictly increase and match what the writer was told.

It prints throughput, the last DLSN (DistributedLog's toString and its
base64 form, as stored in ZooKeeper) and PASS, or FAIL with exit status 1.
"""

from __future__ import annotations

import argparse
import asyncio
import sys
import time
from collections import deque

from dlog.conf.dlog import DLogConfig
from dlog.dlsn import DLSN
from dlog.log import LogManager
from dlog.namespace import Namespace
from dlog.record import LogRecord, LogRecordWithDLSN
from dlog.writer import LogWriter


def make_payload(i: int) -> bytes:
    return b'{"i": %d, "msg": "hello from the dlog quickstart"}' % i


async def write_records(writer: LogWriter, count: int, in_flight: int) -> tuple[list[DLSN], float]:
    """Write ``count`` records with txid = i; returns their DLSNs and the seconds taken."""
    dlsns: list[DLSN] = []
    pending: deque[asyncio.Future[DLSN]] = deque()
    start = time.perf_counter()
    for i in range(count):
        pending.append(writer.write_nowait(LogRecord(txid=i, payload=make_payload(i))))
        if len(pending) >= in_flight:
            # Futures resolve in write order: waiting for the oldest bounds
            # the records in flight.
            dlsns.append(await pending.popleft())
    while pending:
        dlsns.append(await pending.popleft())
    return dlsns, time.perf_counter() - start


async def read_records(log: LogManager, count: int) -> tuple[list[LogRecordWithDLSN], float]:
    """Tail the stream from its first record until ``count`` records arrived."""
    first = await log.get_first_dlsn()
    records: list[LogRecordWithDLSN] = []
    async with await log.open_reader(from_dlsn=first) as reader:
        start = time.perf_counter()
        while len(records) < count:
            batch = await reader.read_bulk(10_000, timeout=10)
            if not batch:
                raise TimeoutError(f"no record for 10 s after {len(records)} of {count}")
            records.extend(batch)
        elapsed = time.perf_counter() - start
        # Nothing beyond what we wrote.
        extra = await reader.read_next(timeout=0.2)
        if extra is not None:
            records.append(extra)
    return records, elapsed


def verify(records: list[LogRecordWithDLSN], dlsns: list[DLSN], count: int) -> list[str]:
    """What is wrong with the records read back (empty when all is well)."""
    problems = []
    if len(records) != count:
        problems.append(f"read {len(records)} records, wrote {count}")
    for i, record in enumerate(records[:count]):
        if record.txid != i:
            problems.append(f"record {i}: txid {record.txid}, expected {i}")
        elif record.payload != make_payload(i):
            problems.append(f"record {i}: payload {record.payload[:60]!r} differs")
        elif record.dlsn != dlsns[i]:
            problems.append(f"record {i}: read at {record.dlsn}, written at {dlsns[i]}")
        elif i and not record.dlsn > records[i - 1].dlsn:
            problems.append(f"record {i}: DLSN {record.dlsn} does not follow {records[i - 1].dlsn}")
        if len(problems) >= 5:
            break
    return problems


async def run(args: argparse.Namespace) -> bool:
    overrides = dict(item.split("=", 1) for item in args.set)
    config = DLogConfig.load(overrides=overrides)
    async with await Namespace.open(args.uri, config) as namespace:
        if await namespace.log_exists(args.stream):
            await namespace.delete_log(args.stream)  # start fresh: txids begin at 0
        log = await namespace.open_log(args.stream)

        writer = await log.open_writer()
        dlsns, write_s = await write_records(writer, args.records, args.in_flight)
        # The writer stays open, so the reader tails the segment being written.
        records, read_s = await read_records(log, args.records)
        await writer.close()

        problems = verify(records, dlsns, args.records)
        last = dlsns[-1]
        print(f"stream:            {args.stream} in {args.uri}")
        print(f"records written:   {len(dlsns):,}")
        print(f"write:             {len(dlsns) / write_s:,.0f} records/s ({write_s:.2f} s)")
        print(f"read (tailing):    {len(records) / read_s:,.0f} records/s ({read_s:.2f} s)")
        print(f"last DLSN:         {last}")
        print(f"last DLSN base64:  {last.serialize()}")
        for p in problems:
            print(f"problem: {p}")
        print("FAIL" if problems else "PASS")
        return not problems


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--uri", required=True, help="namespace URI (distributedlog://...)")
    parser.add_argument("--records", type=int, default=100_000)
    parser.add_argument("--stream", default="quickstart")
    parser.add_argument("--in-flight", type=int, default=10_000, help="records outstanding")
    parser.add_argument("--set", action="append", default=[], metavar="KEY=VALUE")
    args = parser.parse_args()
    try:
        import uvloop  # optional: a faster event loop

        asyncio.set_event_loop_policy(uvloop.EventLoopPolicy())
    except ImportError:
        pass
    try:
        ok = asyncio.run(run(args))
    except Exception as e:
        print(f"FAIL: {type(e).__name__}: {e}", file=sys.stderr)
        ok = False
    sys.exit(0 if ok else 1)


if __name__ == "__main__":
    main()
