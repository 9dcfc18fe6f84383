"""A log writer process that stalls (as in a long GC pause) right after
sending a write, long enough for its ZooKeeper session to expire.

It writes one record, prints ``READY``, queues a second record and stops
itself with SIGSTOP before the event loop sends it. The test decides what
happens meanwhile (a new writer takes over, or nobody does), then sends
SIGCONT. The process prints how the stalled write ended and how a write
after it ends: ``ACKED`` or ``FAILED <class> <code> <message>``, one line
each, and exits.
"""

from __future__ import annotations

import asyncio
import os
import signal
import sys

from dlog.conf.dlog import DLogConfig
from dlog.errors import DLogError
from dlog.namespace import Namespace
from dlog.record import LogRecord


def outcome(fut: asyncio.Future) -> str:
    exc = fut.exception()
    if exc is None:
        return "ACKED"
    code = getattr(exc, "code", "-")
    return f"FAILED {type(exc).__name__} {code} {exc}"


async def main(uri: str, ledgers_uri: str, stream: str) -> None:
    conf = DLogConfig.load(
        overrides={
            "bkc.metadataServiceUri": ledgers_uri,
            "ensemble-size": 3,
            "write-quorum-size": 2,
            "ack-quorum-size": 2,
            "zkSessionTimeoutSeconds": 4,
            # Every record is sent as its own entry at once: the stalled
            # write is in flight, not buffered, when the process stops.
            "writerOutputBufferSize": 0,
            # Shorter than the stall: the stalled add's timers are overdue
            # when the process resumes, as after any pause this long.
            "bkc.addEntryTimeoutSec": 1,
        }
    )
    ns = await Namespace.open(uri, conf, bind=True)
    writer = await (await ns.open_log(stream)).open_writer()
    await writer.write(LogRecord(1, b"before the stall"))
    print("READY", flush=True)
    stalled = writer.write_nowait(LogRecord(2, b"queued as the process stalls"))
    os.kill(os.getpid(), signal.SIGSTOP)
    await asyncio.wait([stalled])
    print(outcome(stalled), flush=True)
    try:
        after = writer.write_nowait(LogRecord(3, b"after the stall"))
    except DLogError as e:
        print(f"FAILED {type(e).__name__} {e.code} {e}", flush=True)
    else:
        await asyncio.wait([after])
        print(outcome(after), flush=True)
    sys.stdout.flush()
    os._exit(0)  # like the process dying: nothing released gracefully


if __name__ == "__main__":
    asyncio.run(main(*sys.argv[1:4]))
