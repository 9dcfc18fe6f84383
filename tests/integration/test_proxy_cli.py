"""`dlog sandbox start --proxies N` and `dlog write --proxy`, run as a user
runs them: the proxies are recorded in sandbox.json, serve writes that
`dlog tail` reads back, keep their ports across a restart, and stop with
the sandbox."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.cli import dlog, error_line, ok, running

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

        ok(dlog("sandbox", "stop", "--dir", str(d)))
        assert not any(running(p["pid"]) for p in proxies)
        stopped = json.loads((d / "sandbox.json").read_text())
        assert [p["pid"] for p in stopped["proxies"]] == [None, None]
        # The proxies stopped gracefully: they released their streams.
        logs = "".join((d / f"proxy-{i}" / "proxy.log").read_text() for i in range(2))
        assert "is now DOWN" in logs and "Traceback" not in logs

        # Resumed: the same proxy ports (clients were given them).
        ok(dlog("sandbox", "start", "--dir", str(d)))
        resumed = json.loads((d / "sandbox.json").read_text())["proxies"]
        assert [p["endpoint"] for p in resumed] == [p["endpoint"] for p in proxies]
        out = ok(dlog("write", "--proxy", endpoints, "events", input="after restart\n"))
        assert "wrote 1 record(s)" in out
    finally:
        dlog("sandbox", "stop", "--dir", str(d))
