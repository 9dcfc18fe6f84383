"""A consumer process for fault tests: takes ownership of a subscription,
prints its starting position, commits ``count`` further positions one at a
time printing ``ACK <entry>`` after each is acknowledged, then waits to be
killed."""

from __future__ import annotations

import asyncio
import sys

from dlog.conf.dlog import DLogConfig
from dlog.dlsn import DLSN
from dlog.namespace import Namespace


async def main(uri: str, ledgers_uri: str, count: int) -> None:
    conf = DLogConfig.load(
        overrides={
            "bkc.metadataServiceUri": ledgers_uri,
            "ensemble-size": 3,
            "write-quorum-size": 2,
            "ack-quorum-size": 2,
            "logSegmentBasedSubscriptionsStoreEnabled": True,
            "subscriptionSegmentMaxEntries": 7,  # rolls happen along the way
        }
    )
    ns = await Namespace.open(uri, conf)
    store = (await ns.open_log("stream")).subscriptions
    start = await store.acquire("consumer")
    print(f"START {start.entry_id}", flush=True)
    entry = max(start.entry_id, 0)
    for _ in range(count):
        entry += 1
        await store.advance_commit_position("consumer", DLSN(1, entry, 0))
        print(f"ACK {entry}", flush=True)
    print("IDLE", flush=True)
    await asyncio.Event().wait()


if __name__ == "__main__":
    asyncio.run(main(sys.argv[1], sys.argv[2], int(sys.argv[3])))
