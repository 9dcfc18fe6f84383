"""Failover: two ``dlog proxy`` processes, a client writing without pause,
and kill -9 of the stream's owner mid-stream. The client moves to the other
proxy (which takes the stream once the dead owner's ZooKeeper session
expires); no acknowledged record is lost and the reader sees every record
once: acknowledged ones at their DLSNs, and those whose outcome the client
could not know at most once."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Iterator

import pytest

from dlog.dlsn import DLSN
from dlog.errors import WriteOutcomeUnknownError
from dlog.proxy import Client
from dlog.sandbox.cluster import Sandbox
from dlog.sync import Namespace
from tests.proxy_process import ProxyProcess

pytestmark = [pytest.mark.integration, pytest.mark.timeout(240)]

SETTINGS = ("zkSessionTimeoutSeconds=4", "lockTimeoutSeconds=20")
IN_FLIGHT = 4


@pytest.fixture(scope="module")
def sandbox(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Sandbox]:
    sb = Sandbox(tmp_path_factory.mktemp("proxy-failover"), bookies=3).start()
    try:
        yield sb
    finally:
        sb.stop()


def test_kill_9_of_the_owner_loses_no_acknowledged_record(sandbox: Sandbox) -> None:
    proxies = [ProxyProcess(sandbox.namespace_uri, *SETTINGS) for _ in range(2)]
    stream = "failover"
    acked: dict[bytes, DLSN] = {}
    unknown: set[bytes] = set()
    killed_at: list[int] = []

    async def run() -> None:
        async with Client([p.endpoint for p in proxies], timeout=90) as client:
            await client.write(stream, b"first")
            owner = next(p for p in proxies if p.endpoint == client.owners[stream])
            survivor = next(p for p in proxies if p is not owner)
            counter = iter(range(1_000_000))

            async def writer() -> None:
                while len(acked) < 600:
                    batch = [b"r%07d" % next(counter) for _ in range(5)]
                    try:
                        dlsns = await client.write_bulk(stream, batch)
                    except WriteOutcomeUnknownError:
                        unknown.update(batch)
                        continue
                    acked.update(zip(batch, dlsns, strict=True))
                    if len(acked) >= 200 and not killed_at:
                        killed_at.append(len(acked))
                        owner.kill()

            await asyncio.gather(*(writer() for _ in range(IN_FLIGHT)))
            assert client.owners[stream] == survivor.endpoint

    started = time.monotonic()
    asyncio.run(run())
    assert killed_at, "the owner was never killed"
    assert time.monotonic() - started < 120
    survivor = next(p for p in proxies if p.proc.poll() is None)
    assert survivor.stop() == 0, "".join(survivor.stderr)

    with Namespace.open(sandbox.namespace_uri) as ns:
        log = ns.open_log(stream)
        last = log.get_last_dlsn()
        seen: list[tuple[DLSN, bytes]] = []
        with log.open_reader() as reader:
            for record in reader:
                seen.append((record.dlsn, record.payload))
                if record.dlsn >= last:
                    break
    payloads = [p for _, p in seen]
    assert payloads[0] == b"first"
    assert len(payloads) == len(set(payloads)), "a record was written twice"
    at = dict((p, d) for d, p in seen)
    missing = [p for p in acked if p not in at]
    assert not missing, f"{len(missing)} acknowledged records lost, e.g. {missing[:3]}"
    assert all(at[p] == d for p, d in acked.items()), "a record is not at its acknowledged DLSN"
    assert set(payloads[1:]) <= set(acked) | unknown
    assert len(acked) >= 600
