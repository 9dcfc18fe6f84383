"""Write proxy throughput: 100-byte records through one ``dlog proxy``
(``writeBulkWithContext``) against a direct dlog writer, same stream
settings (the defaults), same cluster, same run.

Starts a sandbox (real ZooKeeper, three bookie processes, one ``dlog proxy``
process). The baseline is a LogWriter in this process keeping
``--window`` records in flight for ``--seconds``. Then a
:class:`dlog.proxy.Client` in this process keeps ``--in-flight`` bulk
requests of ``--bulk`` records outstanding for ``--seconds``. Records/s
count records acknowledged (durable) within the measured time.

Prints one JSON document: both rates, the ratio (proxy / direct; the
issue's target is at least 0.5), and the settings.

    python bench/proxy.py [--seconds 8] [--bulk 1000] [--in-flight 16]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
import tempfile
import time
from collections import deque
from pathlib import Path

from dlog.dlsn import DLSN
from dlog.namespace import Namespace
from dlog.proxy import Client
from dlog.record import LogRecord
from dlog.sandbox.cluster import Sandbox

RECORD_SIZE = 100


async def direct(uri: str, seconds: float, window: int) -> dict[str, float]:
    payload = b"d" * RECORD_SIZE
    async with await Namespace.open(uri) as ns:
        lm = await ns.open_log("bench-direct")
        writer = await lm.open_writer()
        try:
            inflight: deque[asyncio.Future[DLSN]] = deque()
            txid = 1
            # Warm-up: the first segment and ledger.
            await writer.write(LogRecord(txid, payload))
            done = 0
            start = time.perf_counter()
            deadline = start + seconds
            while time.perf_counter() < deadline:
                while len(inflight) < window:
                    txid += 1
                    inflight.append(writer.write_nowait(LogRecord(txid, payload)))
                await inflight.popleft()
                done += 1
            elapsed = time.perf_counter() - start
            for fut in inflight:
                await fut
        finally:
            await writer.close()
    return {"records": done, "seconds": elapsed, "records_per_s": done / elapsed}


async def proxied(endpoint: str, seconds: float, bulk: int, in_flight: int) -> dict[str, float]:
    batch = [b"p" * RECORD_SIZE] * bulk
    async with Client([endpoint]) as client:
        await client.write("bench-proxy", b"warm-up")
        done = 0
        start = time.perf_counter()
        deadline = start + seconds

        async def loop() -> None:
            nonlocal done
            while time.perf_counter() < deadline:
                await client.write_bulk("bench-proxy", batch)
                if time.perf_counter() <= deadline:
                    done += bulk

        await asyncio.gather(*(loop() for _ in range(in_flight)))
        elapsed = time.perf_counter() - start
    return {"records": done, "seconds": seconds, "records_per_s": done / seconds, "wall": elapsed}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=8.0)
    parser.add_argument("--bulk", type=int, default=1000, help="records per writeBulkWithContext")
    parser.add_argument("--in-flight", type=int, default=16, help="bulk requests outstanding")
    parser.add_argument(
        "--window", type=int, default=20000, help="direct writer's records in flight"
    )
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="dlog-bench-proxy-") as tmp:
        sb = Sandbox(Path(tmp), bookies=3, proxies=1).start()
        try:
            base = asyncio.run(direct(sb.namespace_uri, args.seconds, args.window))
            prox = asyncio.run(
                proxied(sb.proxy_endpoints[0], args.seconds, args.bulk, args.in_flight)
            )
        finally:
            sb.stop()
    result = {
        "bench": "proxy",
        "record_bytes": RECORD_SIZE,
        "direct_writer_records_per_s": round(base["records_per_s"]),
        "proxy_records_per_s": round(prox["records_per_s"]),
        "ratio_proxy_vs_direct": round(prox["records_per_s"] / base["records_per_s"], 3),
        "target_ratio": 0.5,
        "settings": {
            "seconds": args.seconds,
            "bulk_records": args.bulk,
            "bulk_requests_in_flight": args.in_flight,
            "direct_window_records": args.window,
            "stream_settings": "DLogConfig defaults on both sides",
            "proxies": 1,
            "bookies": 3,
        },
    }
    print(json.dumps(result, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
