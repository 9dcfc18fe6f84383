"""`dlog shell` ledger and bookie commands, run as an operator runs them
(``python -m dlog shell ...`` subprocesses) against real bookie processes."""

from __future__ import annotations

import asyncio
import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from dlog.ledger.client import BookKeeper
from dlog.ledger.metadata import LedgerCreateContext
from dlog.sandbox.ports import free_port

pytestmark = pytest.mark.integration


def shell(
    *args: str, uri: str | None = None, env: dict[str, str] | None = None, timeout: float = 90
) -> subprocess.CompletedProcess[str]:
    full_env = {k: v for k, v in os.environ.items() if k != "DLOG_SERVICE_URI"}
    full_env["COLUMNS"] = "200"  # rich tables must not wrap ids in the checks below
    full_env.update(env or {})
    cmd = [sys.executable, "-m", "dlog", "shell", *args]
    if uri is not None:
        cmd += ["--service-uri", uri]
    return subprocess.run(
        cmd, capture_output=True, text=True, timeout=timeout, env=full_env, stdin=subprocess.DEVNULL
    )


def ok(r: subprocess.CompletedProcess[str]) -> str:
    assert r.returncode == 0, f"exit {r.returncode}\nstdout:\n{r.stdout}\nstderr:\n{r.stderr}"
    return r.stdout


def one_error_line(r: subprocess.CompletedProcess[str]) -> str:
    """A failure is one clear line on stderr, never a traceback."""
    assert r.returncode != 0, r.stdout
    assert "Traceback" not in r.stderr, r.stderr
    lines = [line for line in r.stderr.splitlines() if line.strip()]
    assert len(lines) == 1, r.stderr
    assert lines[0].startswith("error:"), r.stderr
    return lines[0]


def test_ledger_lifecycle_through_the_shell(bookie_cluster, ledgers_uri: str) -> None:
    bookie_cluster(3)
    u = ledgers_uri

    out = ok(shell("listbookies", uri=u))
    assert len(re.findall(r"127\.0\.0\.1:\d+ +│? *writable", out)) == 3, out
    out = ok(shell("listbookies", "--readonly", uri=u))
    assert "writable" not in out
    out = ok(shell("listbookies", "--all", uri=u))
    assert out.count("writable") == 3

    out = ok(
        shell("simpletest", "-e", "3", "-w", "2", "-a", "2", "-n", "500", "--size", "256", uri=u)
    )
    m = re.search(r"created ledger (\d+)", out)
    assert m, out
    lid = int(m.group(1))
    assert "writes/s" in out and "reads/s" in out
    assert f"ledger {lid}: all 500 entries verified" in out

    assert str(lid) in ok(shell("listledgers", uri=u)).split()
    out = ok(shell("listledgers", "--meta", uri=u))
    row = next(line for line in out.splitlines() if re.search(rf"│ +{lid} │", line))
    assert "CLOSED" in row and "3/2/2" in row and "499" in row and str(500 * 256) in row

    text = ok(shell("ledgermetadata", "-l", str(lid), uri=u))
    assert f"ledgerID: {lid}" in text and "state: CLOSED" in text and "lastEntryId: 499" in text
    assert "password: OMITTED" in text
    md = json.loads(ok(shell("ledgermetadata", "-l", str(lid), "--json", uri=u)))
    assert md["ensemble_size"] == 3 and md["write_quorum_size"] == 2
    assert md["state"] == "CLOSED" and md["last_entry_id"] == 499 and md["password"] is None

    r = shell("readledger", "-l", str(lid), "--first", "10", "--last", "12", "--hex", uri=u)
    lines = ok(r).splitlines()
    assert [line.split("\t")[0] for line in lines] == ["10", "11", "12"]
    # simpletest payloads lead with their entry id as 8 big-endian bytes
    assert lines[0].split("\t")[1].startswith((10).to_bytes(8, "big").hex())
    r = shell("readledger", "-l", str(lid), "--first", "498", "--last", "900", uri=u)
    assert [line.split("\t")[0] for line in ok(r).splitlines()] == ["498", "499"]
    assert "beyond the last entry (499)" in r.stderr

    r = shell("deleteledger", "-l", str(lid), uri=u)  # no --force, no terminal: not deleted
    assert r.returncode != 0
    assert str(lid) in ok(shell("listledgers", uri=u)).split()
    assert f"deleted ledger {lid}" in ok(shell("deleteledger", "-l", str(lid), "--force", uri=u))
    assert str(lid) not in ok(shell("listledgers", uri=u)).split()
    assert "no such ledger" in one_error_line(shell("ledgermetadata", "-l", str(lid), uri=u))


def test_read_and_recover_an_open_ledger(bookie_cluster, ledgers_uri: str, tmp_path: Path) -> None:
    bookie_cluster(3)

    async def write_and_walk_away() -> int:
        # The writer stops without closing, like a crashed process.
        async with BookKeeper(ledgers_uri) as bk:
            wh = await bk.create_ledger(
                3,
                2,
                2,
                password=b"pw",
                create_context=LedgerCreateContext(part_of_data_set="stream-x"),
            )
            for i in range(5):
                await wh.append(f"entry {i}".encode())
            await wh.append(b"\x00\xff binary")
            return wh.ledger_id

    lid = asyncio.run(write_and_walk_away())
    conf = tmp_path / "client.conf"
    conf.write_text(f"metadataServiceUri={ledgers_uri}\naddEntryTimeoutSec=3\n")
    c = ("--conf", str(conf))

    out = ok(shell("listledgers", "--meta", *c))
    row = next(line for line in out.splitlines() if re.search(rf"│ +{lid} │", line))
    assert "OPEN" in row and "stream-x" in row

    # Without recovery the reader stops at the LAC the bookies know (entry 4:
    # the last entry carried the LAC of the one before it) and says so.
    r = shell("readledger", "-l", str(lid), "-p", "pw", "--last", "5", *c)
    assert ok(r).splitlines() == [f"{i}\tentry {i}" for i in range(5)]
    assert "beyond the last add confirmed (4)" in r.stderr
    assert "state: OPEN" in ok(shell("ledgermetadata", "-l", str(lid), *c))

    err = one_error_line(shell("recover", "-l", str(lid), "-p", "wrong", *c))
    assert "wrong password" in err
    out = ok(shell("recover", "-l", str(lid), "-p", "pw", *c))
    assert "recovered and closed" in out and "last entry id 5" in out, out
    out = ok(shell("recover", "-l", str(lid), "-p", "pw", *c))
    assert "already closed" in out and "last entry id 5" in out, out
    assert "state: CLOSED" in ok(shell("ledgermetadata", "-l", str(lid), *c))

    lines = ok(shell("readledger", "-l", str(lid), "-p", "pw", *c)).splitlines()
    assert len(lines) == 6 and lines[0] == "0\tentry 0"
    assert lines[5] == "5\t" + b"\x00\xff binary".hex()  # not UTF-8: hex


def test_errors_are_one_clear_line(zk_server, ledgers_uri: str, tmp_path: Path) -> None:
    # A missing ledger (the layout exists, the ledger does not).
    ok(shell("initnewcluster", uri=ledgers_uri))
    for cmd in ("ledgermetadata", "readledger", "recover", "deleteledger"):
        err = one_error_line(shell(cmd, "-l", "12345", uri=ledgers_uri))
        assert "no such ledger 12345" in err, (cmd, err)
    # No URI anywhere.
    err = one_error_line(shell("listledgers"))
    assert "no metadata service URI" in err
    # The URI from the environment works.
    ok(shell("listledgers", env={"DLOG_SERVICE_URI": ledgers_uri}))
    # A bad URI, an unreadable --conf, an unknown client setting.
    assert "scheme" in one_error_line(shell("listledgers", uri="http://nope/ledgers"))
    assert "cannot read" in one_error_line(shell("listledgers", "--conf", str(tmp_path / "nope")))
    conf = tmp_path / "bad.conf"
    conf.write_text(f"metadataServiceUri={ledgers_uri}\naddEntryTimeout=3\n")
    err = one_error_line(shell("listledgers", "--conf", str(conf)))
    assert "addEntryTimeout" in err and f"(in {conf})" in err, err
    # A bad --set says so (not the file, not "<command line>").
    err = one_error_line(shell("listledgers", "--set", "bogusKey=1", uri=ledgers_uri))
    assert err == "error: bogusKey: unknown setting (in --set)", err
    # ZooKeeper unreachable.
    dead = f"zk+hierarchical://127.0.0.1:{free_port()}/ledgers"
    err = one_error_line(shell("listbookies", uri=dead))
    assert "could not connect to ZooKeeper" in err
