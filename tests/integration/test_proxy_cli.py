"""`dlog sandbox start --proxies N` and `dlog write --proxy`, run as a user
runs them: the proxies are recorded in sandbox.json, serve writes that
`dlog tail` reads back, keep their ports across a restart, and stop with
the sandbox."""

from __future__ import annotations

import asyncio
import json
import re
import signal
import sys
from pathlib import Path

import pytest

from dlog.proxy.client import Client
from tests.cli import dlog, error_line, ok, running
from tests.metrics import assert_documented, metric, scrape

pytestmark = [pytest.mark.integration, pytest.mark.timeout(240)]


def test_sandbox_proxies_and_dlog_write_through_them(tmp_path: Path) -> None:
    d = tmp_path / "sb"
    try:
        out = ok(dlog("sandbox", "start", "--dir", str(d), "--proxies", "2"))
        uri = out.splitlines()[-1]
        state = json.loads((d / "sandbox.json").read_text())
        proxies = state["proxies"]
        assert [p["index"] for p in proxies] == [0, 1]
        assert all(running(p["pid"]) for p in proxies)
        endpoints = ",".join(p["endpoint"] for p in proxies)
        assert f"write proxies:        {endpoints}" in out

        lines = "".join(f"line {i}\n" for i in range(2500))
        out = ok(dlog("write", "--proxy", endpoints, "events", input=lines))
        assert f"wrote 2500 record(s) to events through {endpoints}" in out
        last = out.splitlines()[-1]
        tail = ok(dlog("tail", "events", "--limit", "2500", uri=uri))
        rows = [line.split("\t", 1) for line in tail.splitlines() if line.strip()]
        assert [payload for _, payload in rows] == [f"line {i}" for i in range(2500)]
        assert rows[-1][0] == last  # the DLSN `dlog write` printed

        # Refused arguments: a clear error, exit 2.
        assert "--txid-start" in error_line(
            dlog("write", "--proxy", endpoints, "--txid-start", "5", "events", input="x\n"), 2
        )
        assert "not host:port" in error_line(
            dlog("write", "--proxy", "nonsense", "events", input="x\n"), 2
        )

        status = ok(dlog("sandbox", "status", "--dir", str(d)))
        assert "proxy-0" in status and "proxy-1" in status and "all processes alive" in status

        # Every bookie and proxy serves its metrics on a port of its own
        # (BookKeeper's enableStatistics=true), shown in sandbox.json.
        bookies = state["bookies"]
        ports = [p["metrics_port"] for p in bookies + proxies]
        assert all(ports) and len(set(ports)) == len(ports)
        assert proxies[0]["metrics"] == f"http://127.0.0.1:{proxies[0]['metrics_port']}/metrics"
        assert_documented(scrape(bookies[0]["metrics_port"]), "Bookie")
        proxy_metrics = [scrape(p["metrics_port"]) for p in proxies]
        for text in proxy_metrics:
            assert_documented(text, "Write proxy", "Ledger client")
        # The 2500 records (the refused calls sent none).
        assert sum(metric(t, "proxy_records_written_total") for t in proxy_metrics) == 2500

        ok(dlog("sandbox", "stop", "--dir", str(d)))
        assert not any(running(p["pid"]) for p in proxies)
        stopped = json.loads((d / "sandbox.json").read_text())
        assert [p["pid"] for p in stopped["proxies"]] == [None, None]
        # The proxies stopped gracefully: they released their streams.
        logs = "".join((d / f"proxy-{i}" / "proxy.log").read_text() for i in range(2))
        assert "is now DOWN" in logs and "Traceback" not in logs

        # Resumed: the same proxy ports (clients were given them).
        ok(dlog("sandbox", "start", "--dir", str(d)))
        again = json.loads((d / "sandbox.json").read_text())
        resumed = again["proxies"]
        assert [p["endpoint"] for p in resumed] == [p["endpoint"] for p in proxies]
        assert [p["metrics_port"] for p in again["bookies"] + resumed] == ports
        out = ok(dlog("write", "--proxy", endpoints, "events", input="after restart\n"))
        assert "wrote 1 record(s)" in out
    finally:
        dlog("sandbox", "stop", "--dir", str(d))


def test_a_sandbox_with_statistics_off_serves_no_metrics(tmp_path: Path) -> None:
    """`--set enableStatistics=false`: no bookie or proxy opens a metrics
    port. (Before each got a port of its own, `--set enableStatistics=true`
    started every bookie on BookKeeper's 8000, and all but one exited.)"""
    d = tmp_path / "sb"
    try:
        ok(
            dlog(
                "sandbox",
                "start",
                "--dir",
                str(d),
                "--bookies",
                "1",
                "--proxies",
                "1",
                "--set",
                "enableStatistics=false",
            )
        )
        state = json.loads((d / "sandbox.json").read_text())
        assert [p["metrics"] for p in state["bookies"] + state["proxies"]] == [None, None]
        status = ok(dlog("sandbox", "status", "--dir", str(d)))
        assert "http://" not in status and "all processes alive" in status
    finally:
        dlog("sandbox", "stop", "--dir", str(d))


async def test_proxy_stats_port_serves_the_documented_metrics(
    open_namespace, zk_server, zk_root
) -> None:  # type: ignore[no-untyped-def]
    """`dlog proxy --stats-port 0`: its ready line names the port, whose
    /metrics has the proxy's and its ledger client's metrics (README's
    tables), counting a write made through it; SIGTERM stops it cleanly."""
    await open_namespace()  # three bookies, and the namespace bound to them
    proc = await asyncio.create_subprocess_exec(
        *(sys.executable, "-m", "dlog", "proxy", "--uri"),
        f"distributedlog://{zk_server.connect_string}{zk_root}/ns",
        *("--port", "0", "--stats-port", "0"),
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.STDOUT,
    )
    try:
        assert proc.stdout is not None
        seen: list[str] = []  # its log lines come first (stderr joins stdout)
        ready = None
        while ready is None:
            line = (await asyncio.wait_for(proc.stdout.readline(), 60)).decode()
            assert line, "exited before serving:\n" + "".join(seen)
            seen.append(line)
            ready = re.match(r"proxy serving (\S+) as \S+ stats=(\d+)$", line.strip())
        endpoint, stats_port = ready.group(1), int(ready.group(2))
        async with Client(endpoint) as client:
            await client.write("metered", b"one")
        text = await asyncio.to_thread(scrape, stats_port)
        assert_documented(text, "Write proxy", "Ledger client")
        assert metric(text, "proxy_records_written_total") == 1
        assert metric(text, "proxy_owned_streams") == 1
        proc.send_signal(signal.SIGTERM)
        out, _ = await asyncio.wait_for(proc.communicate(), 30)
        assert proc.returncode == 0, out.decode()
    finally:
        if proc.returncode is None:
            proc.kill()
            await proc.wait()


def test_proxy_refuses_a_stats_port_that_is_not_a_port() -> None:
    bad = dlog("proxy", "--uri", "distributedlog://127.0.0.1:1/ns", "--stats-port", "70000")
    assert "--stats-port 70000 is not a TCP port" in error_line(bad, 2)
