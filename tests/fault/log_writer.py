"""A log writer process for fault tests: writes records with increasing
txids and prints ``ACK <txid> <dlsn>`` for each durable one."""

from __future__ import annotations

import asyncio
import sys

from dlog.conf.dlog import DLogConfig
from dlog.namespace import Namespace
from dlog.record import LogRecord


async def main(uri: str, ledgers_uri: str, stream: str) -> None:
    conf = DLogConfig.load(
        overrides={
            "bkc.metadataServiceUri": ledgers_uri,
            "ensemble-size": 3,
            "write-quorum-size": 2,
            "ack-quorum-size": 2,
            "zkSessionTimeoutSeconds": 4,
            "maxLogSegmentBytes": 65536,
            "writerOutputBufferSize": 4096,
        }
    )
    ns = await Namespace.open(uri, conf, bind=True)
    writer = await (await ns.open_log(stream)).open_writer()
    print("READY", flush=True)
    sem = asyncio.Semaphore(500)
    txid = 0

    def done(fut: asyncio.Future, t: int) -> None:
        sem.release()
        if not fut.cancelled() and fut.exception() is None:
            sys.stdout.write(f"ACK {t} {fut.result()!r}\n")
            sys.stdout.flush()

    while True:
        await sem.acquire()
        writer.write_nowait(LogRecord(txid, b"payload-%d" % txid)).add_done_callback(
            lambda f, t=txid: done(f, t)
        )
        txid += 1


if __name__ == "__main__":
    asyncio.run(main(*sys.argv[1:4]))
