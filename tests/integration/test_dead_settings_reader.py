"""Reader settings that no code used to read (issue 14):
``readerIdleErrorThresholdMillis`` and ``readAheadWaitTime``. Real
ZooKeeper, real in-process bookies (stopped and restarted on their ports)."""

from __future__ import annotations

import asyncio
import logging
import re
import time
from typing import Any

import pytest

from dlog.conf.dlog import DLogConfig
from dlog.errors import IdleReaderError
from dlog.namespace import Namespace
from dlog.record import LogRecord
from tests.conftest import TEST_NAMESPACE_SETTINGS


async def open_ns(
    make_bookie: Any, zk_server: Any, zk_root: str, ledgers_uri: str, **s: Any
) -> tuple[Namespace, list[Any]]:
    bookies = [await make_bookie(f"b{i}") for i in range(3)]
    conf = DLogConfig.load(
        overrides={**TEST_NAMESPACE_SETTINGS, "bkc.metadataServiceUri": ledgers_uri, **s}
    )
    ns = await Namespace.open(
        f"distributedlog://{zk_server.connect_string}{zk_root}/ns", conf, bind=True
    )
    return ns, bookies


# ---------------------------------------------------------------------------
# readerIdleErrorThresholdMillis
# ---------------------------------------------------------------------------


async def test_reader_idle_past_the_error_threshold_fails(
    make_bookie: Any, zk_server: Any, zk_root: str, ledgers_uri: str
) -> None:
    ns, _ = await open_ns(
        make_bookie,
        zk_server,
        zk_root,
        ledgers_uri,
        readerIdleWarnThresholdMillis=500,
        readerIdleErrorThresholdMillis=2000,
    )
    try:
        lm = await ns.open_log("idle")
        writer = await lm.open_writer()
        await writer.write(LogRecord(1, b"first"))
        reader = await lm.open_reader()
        # Records every 300 ms keep it alive well past 2 s, even read with
        # short timeouts that come back empty. (The threshold leaves room for
        # a write that a stalled disk holds up for a second or more.)
        got = [await reader.read_next(timeout=5)]
        for i in range(2, 6):
            await asyncio.sleep(0.3)
            await writer.write(LogRecord(i, b"more"))
            record = None
            while record is None:
                record = await reader.read_next(timeout=0.1)
            got.append(record)
        assert [r.txid for r in got if r is not None] == [1, 2, 3, 4, 5]
        # Then nothing: a read without a timeout fails after about 2 s.
        t0 = time.monotonic()
        with pytest.raises(IdleReaderError):
            await asyncio.wait_for(reader.read_next(), 8)
        assert 1.9 <= time.monotonic() - t0 < 5
        with pytest.raises(IdleReaderError):  # and stays failed
            await reader.read_next(timeout=0.1)
        await reader.close()
        # Short reads that return empty do not restart the clock.
        reader = await lm.open_reader(from_txid=6)
        t0 = time.monotonic()
        with pytest.raises(IdleReaderError):
            while time.monotonic() - t0 < 8:
                assert await reader.read_next(timeout=0.05) is None
        assert 1.9 <= time.monotonic() - t0 < 5
        await reader.close()
        await writer.close()
    finally:
        await ns.close()


async def test_default_idle_error_threshold_never_fails(
    make_bookie: Any, zk_server: Any, zk_root: str, ledgers_uri: str
) -> None:
    ns, _ = await open_ns(
        make_bookie, zk_server, zk_root, ledgers_uri, readerIdleWarnThresholdMillis=100
    )
    try:
        lm = await ns.open_log("never-idle")
        writer = await lm.open_writer()
        await writer.write(LogRecord(1, b"x"))
        reader = await lm.open_reader()
        assert (await reader.read_next(timeout=5)) is not None
        with pytest.raises(TimeoutError):
            await asyncio.wait_for(reader.read_next(), 1.0)
        await reader.close()
        await writer.close()
    finally:
        await ns.close()


# ---------------------------------------------------------------------------
# readAheadWaitTime
# ---------------------------------------------------------------------------

RETRY = re.compile(r"retrying in (\d+) ms \(readAheadWaitTime\)")


class Retries(logging.Handler):
    """(time, delay in ms) of every read-ahead retry the reader logs."""

    def __init__(self) -> None:
        super().__init__(logging.WARNING)
        self.seen: list[tuple[float, int]] = []

    def emit(self, record: logging.LogRecord) -> None:
        m = RETRY.search(record.getMessage())
        if m:
            self.seen.append((time.monotonic(), int(m.group(1))))


@pytest.mark.parametrize("wait_ms", [150, 500])
async def test_read_ahead_backs_off_read_ahead_wait_time_and_recovers(
    make_bookie: Any, zk_server: Any, zk_root: str, ledgers_uri: str, wait_ms: int
) -> None:
    """With every bookie down the reader neither fails nor spins: it retries
    after readAheadWaitTime, 2x, then 4x at most; once the bookies are back
    it reads every record."""
    ns, bookies = await open_ns(
        make_bookie, zk_server, zk_root, ledgers_uri, readAheadWaitTime=wait_ms
    )
    retries = Retries()
    logging.getLogger("dlog.reader").addHandler(retries)
    try:
        lm = await ns.open_log("backoff")
        writer = await lm.open_writer()
        for i in range(1, 11):
            await writer.write(LogRecord(i, b"r%d" % i))
        await writer.close()  # a completed segment: reading it needs only the bookies
        ports = [b.server.port for b in bookies]
        for b in bookies:
            await b.stop()
        reader = await lm.open_reader()
        outage = 6 * wait_ms / 1000 + 0.5  # enough for three retries
        assert await reader.read_next(timeout=outage) is None
        delays = [d for _, d in retries.seen]
        assert delays[:3] == [wait_ms, 2 * wait_ms, 4 * wait_ms], delays
        assert all(d == 4 * wait_ms for d in delays[3:]), delays
        gaps = [b[0] - a[0] for a, b in zip(retries.seen, retries.seen[1:], strict=False)]
        assert all(g >= d / 1000 * 0.9 for g, (_, d) in zip(gaps, retries.seen, strict=False))
        for i, port in enumerate(ports):
            await make_bookie(f"b{i}", port=port)
        got: list[Any] = []
        while len(got) < 10:
            got += await reader.read_bulk(10, timeout=4 * wait_ms / 1000 + 5)
        assert [r.txid for r in got] == list(range(1, 11))
        await reader.close()
    finally:
        logging.getLogger("dlog.reader").removeHandler(retries)
        await ns.close()
