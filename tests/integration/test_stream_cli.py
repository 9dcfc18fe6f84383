"""`dlog stream`, `dlog write`, `dlog tail` and `dlog dlsn`, run as a user
runs them (``python -m dlog ...`` subprocesses) against one sandbox
(ZooKeeper and 3 bookie processes) started for the module."""

from __future__ import annotations

import asyncio
import time
from pathlib import Path

import pytest

from dlog.conf.dlog import DLogConfig
from dlog.dlsn import DLSN
from dlog.namespace import Namespace
from dlog.record import LogRecord
from tests.cli import Lines, dlog, error_line, ok, stop, tail_follow

pytestmark = pytest.mark.integration


def tail_lines(out: str) -> list[tuple[DLSN, str]]:
    rows = []
    for line in out.splitlines():
        dlsn, payload = line.split("\t", 1)
        rows.append((DLSN.deserialize(dlsn), payload))
    return rows


async def read_all(uri: str, stream: str) -> list[tuple[DLSN, bytes]]:
    async with await Namespace.open(uri, DLogConfig()) as ns:
        lm = await ns.open_log(stream)
        reader = await lm.open_reader()
        out: list[tuple[DLSN, bytes]] = []
        while batch := await reader.read_bulk(100, timeout=2):
            out += [(r.dlsn, r.payload) for r in batch]
        await reader.close()
        return out


async def write_records(uri: str, stream: str, payloads: list[bytes]) -> list[DLSN]:
    async with await Namespace.open(uri, DLogConfig()) as ns:
        lm = await ns.open_log(stream)
        writer = await lm.open_writer()
        try:
            txid = writer.last_txid + 1
            return await writer.write_bulk(LogRecord(txid + i, p) for i, p in enumerate(payloads))
        finally:
            await writer.close()


# ---------------------------------------------------------------------------


def test_stream_create_list_show_truncate_delete(uri: str) -> None:
    assert ok(dlog("stream", "create", "orders", uri=uri)).strip() == "created stream orders"
    assert "already exists" in error_line(dlog("stream", "create", "orders", uri=uri))
    ok(dlog("stream", "create", "other-1", uri=uri))
    names = ok(dlog("stream", "list", uri=uri)).split()
    assert {"orders", "other-1"} <= set(names)
    assert ok(dlog("stream", "list", "--prefix", "ord", uri=uri)).split() == ["orders"]
    r = ok(dlog("stream", "list", "--prefix", "zzz", uri=uri))
    assert r == ""

    out = ok(dlog("stream", "show", "orders", uri=uri))
    assert "stream orders has no segments" in out and "record count: 0" in out, out
    assert "first DLSN:   -" in out

    # Two writes, two completed segments.
    out = ok(dlog("write", "orders", uri=uri, input="a\nb\nc\n"))
    assert "wrote 3 record(s) to orders" in out, out
    first_last = DLSN.deserialize(out.splitlines()[-1])
    assert first_last.log_segment_sequence_no == 1
    out = ok(dlog("write", "orders", "--progress", uri=uri, input="d\ne"))
    assert "wrote 2 record(s)" in out, out
    second_last = DLSN.deserialize(out.splitlines()[-1])
    assert second_last.log_segment_sequence_no == 2

    out = ok(dlog("stream", "show", "orders", uri=uri))
    rows = {line.split("│")[1].strip(): line for line in out.splitlines() if line.startswith("│")}
    assert set(rows) == {"1", "2"}, out
    for seq, records in (("1", "3"), ("2", "2")):
        cells = [c.strip() for c in rows[seq].split("│")[1:-1]]
        assert cells[1] == "completed" and cells[2] == "active", cells
        assert cells[6] == records and cells[8] == f"{seq}/0/0", cells
        assert cells[9].startswith("20"), cells  # completion time
    assert "record count: 5" in out and f"last DLSN:    2/0/1  {second_last.serialize()}" in out

    # Truncate everything before the second segment, by a DLSN in S/E/N form.
    r = dlog("stream", "truncate", "orders", "--to", "2/0/0", "--force", uri=uri)
    assert "truncated before 2/0/0 (1 segment(s) truncated" in ok(r), r.stdout
    out = ok(dlog("stream", "show", "orders", uri=uri))
    row1 = next(line for line in out.splitlines() if line.startswith("│     1 "))
    assert "truncated" in row1, out
    assert "record count: 2" in out and "first DLSN:   2/0/0" in out, out
    assert [p for _, p in tail_lines(ok(dlog("tail", "orders", uri=uri)))] == ["d", "e"]

    # Bad or out-of-range positions.
    assert "--to" in error_line(
        dlog("stream", "truncate", "orders", "--to", "nope", "-f", uri=uri), 2
    )
    assert "beyond the end" in error_line(
        dlog("stream", "truncate", "orders", "--to", "9/0/0", "-f", uri=uri)
    )

    # delete asks first; "n" keeps the stream.
    r = dlog("stream", "delete", "orders", uri=uri, input="n\n")
    assert r.returncode == 1 and "Delete stream 'orders'" in r.stderr, r.stderr
    assert "orders" in ok(dlog("stream", "list", uri=uri)).split()
    assert "deleted stream orders" in ok(dlog("stream", "delete", "orders", "--force", uri=uri))
    assert "orders" not in ok(dlog("stream", "list", uri=uri)).split()
    assert "does not exist" in error_line(dlog("stream", "show", "orders", uri=uri))
    assert "does not exist" in error_line(dlog("stream", "delete", "orders", "-f", uri=uri))


def test_write_then_tail(uri: str) -> None:
    text = "one\ntwo\r\nback\\slash\n\nünïcode\n"
    out = ok(dlog("write", "lines", "--txid-start", "100", uri=uri, input=text))
    assert "wrote 5 record(s) to lines (txids 100..104)" in out, out
    last_cli = DLSN.deserialize(out.splitlines()[-1])
    [lib_dlsn] = asyncio.run(write_records(uri, "lines", [b"multi\nline\ttab\xff"]))
    expected = [
        "one",
        "two",
        "back\\\\slash",
        "",
        "ünïcode",
        "multi\\nline\ttab\ufffd",
    ]
    records = asyncio.run(read_all(uri, "lines"))
    assert records[-1][0] == lib_dlsn and records[4][0] == last_cli

    # Everything, in order, one line per record; stops by itself once caught up.
    t0 = time.monotonic()
    rows = tail_lines(ok(dlog("tail", "lines", uri=uri)))
    assert time.monotonic() - t0 < 20
    assert [p for _, p in rows] == expected
    assert [d for d, _ in rows] == [d for d, _ in records]

    # --limit: the first N (-n is the last N: tests/integration/test_cli_tail.py)
    rows = tail_lines(ok(dlog("tail", "lines", "--limit", "2", uri=uri)))
    assert rows == [(records[0][0], "one"), (records[1][0], "two")]

    # --from with the DLSN printed by write, as printed and as S/E/N.
    rows = tail_lines(ok(dlog("tail", "lines", "--from", out.splitlines()[-1], uri=uri)))
    assert [p for _, p in rows] == expected[4:]
    sen = f"{last_cli.log_segment_sequence_no}/{last_cli.entry_id}/{last_cli.slot_id}"
    rows2 = tail_lines(ok(dlog("tail", "lines", "--from", sen, "--limit", "1", uri=uri)))
    assert rows2 == rows[:1]

    # latest without --follow: nothing new, so nothing printed.
    assert ok(dlog("tail", "lines", "--from", "latest", uri=uri)) == ""

    # A txid below the stream's last one is refused by the writer.
    r = dlog("write", "lines", "--txid-start", "5", uri=uri, input="x\n")
    assert "transaction id 5 is smaller" in error_line(r)
    # Default txid: the last one + 1.
    out = ok(dlog("write", "lines", uri=uri, input="next\n"))
    assert "(txids 106..106)" in out, out
    # Empty stdin writes nothing.
    r = dlog("write", "lines", uri=uri, input="")
    assert r.returncode == 0 and r.stdout == "" and "nothing written" in r.stderr

    # tail does not create a missing stream.
    assert "does not exist" in error_line(dlog("tail", "missing", uri=uri))
    assert "missing" not in ok(dlog("stream", "list", uri=uri)).split()


def test_tail_follow_picks_up_new_records(uri: str) -> None:
    [old] = asyncio.run(write_records(uri, "live", [b"before"]))
    proc = tail_follow(uri, "live")
    try:
        lines = Lines(proc)
        assert lines.next() == f"{old.serialize()}\tbefore\n"
        [new] = asyncio.run(write_records(uri, "live", [b"fresh"]))
        assert lines.next() == f"{new.serialize()}\tfresh\n"
    finally:
        code, err = stop(proc)
    assert code == 0, err  # SIGTERM ends --follow cleanly
    assert "Traceback" not in err

    # --from latest: only records written after it started.
    proc = tail_follow(uri, "live", "--from", "latest")
    try:
        lines = Lines(proc)
        got = lines.first_new(lambda p: asyncio.run(write_records(uri, "live", [p.encode()])))
        assert got is not None and got.split("\t")[1].startswith("tick-"), got
    finally:
        code, err = stop(proc)
    assert code == 0, err


def test_dlsn_serialize_deserialize() -> None:
    b64 = ok(dlog("dlsn", "serialize", "1", "2", "3")).strip()
    assert b64 == DLSN(1, 2, 3).serialize()
    out = ok(dlog("dlsn", "deserialize", b64)).splitlines()
    assert out == ["DLSN{logSegmentSequenceNo=1, entryId=2, slotId=3}", "1 2 3"]
    # Negative fields (the invalid DLSN) are numbers, not options.
    b64 = ok(dlog("dlsn", "serialize", "0", "-1", "-1")).strip()
    assert DLSN.deserialize(b64) == DLSN(0, -1, -1)
    assert ok(dlog("dlsn", "deserialize", b64)).splitlines()[1] == "0 -1 -1"

    assert "base64" in error_line(dlog("dlsn", "deserialize", "not a dlsn!"), 2)
    assert "25 bytes" in error_line(dlog("dlsn", "deserialize", "AQAAAA=="), 2)
    assert "int64" in error_line(dlog("dlsn", "serialize", "1", "2", str(2**63)), 2)
    r = dlog("dlsn", "serialize", "1", "x", "3")
    assert r.returncode == 2 and "Traceback" not in r.stderr


def test_namespace_uri_and_settings(uri: str, tmp_path: Path) -> None:
    for args in (("stream", "list"), ("tail", "s"), ("stream", "show", "s")):
        assert "DLOG_URI" in error_line(dlog(*args), 2)
    r = dlog("write", "s", input="x\n")
    assert "DLOG_URI" in error_line(r, 2)
    assert "invalid namespace URI" in error_line(dlog("stream", "list", uri="zk://h:1/x"), 2)

    ok(dlog("stream", "create", "env-stream", uri=uri))
    assert "env-stream" in ok(dlog("stream", "list", env={"DLOG_URI": uri})).split()

    assert "noSuchKey" in error_line(dlog("stream", "list", "--set", "noSuchKey=1", uri=uri), 2)
    conf = tmp_path / "dlog.conf"
    conf.write_text("zkSessionTimeoutSeconds=7\nbkcEnsembleSize=3\n")
    assert "env-stream" in ok(dlog("stream", "list", "--conf", str(conf), uri=uri)).split()
    conf.write_text("bkcEnsembleSize=five\n")
    error_line(dlog("stream", "list", "--conf", str(conf), uri=uri), 2)
