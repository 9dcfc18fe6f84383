"""``dlog shell triggergc`` against a real bookie's HTTP admin API, and
``dlog shell listfilesondisc`` / ``readlog`` against a real bookie's files,
each run as the ``dlog`` command (a subprocess; the bookie runs in the
test's event loop, so the command runs in a thread)."""

from __future__ import annotations

import asyncio
import json
import urllib.error
import urllib.request
from pathlib import Path

from dlog.bookie.service import BookieService
from dlog.ledger.client import BookKeeper
from tests.cli import dlog, error_line

PAYLOADS = [f"entry-{i}".encode() for i in range(10)]


async def shell(*args: str) -> tuple[int, str, str]:
    r = await asyncio.to_thread(dlog, "shell", *args)
    return r.returncode, r.stdout, r.stderr


async def admin_bookie(make_bookie) -> BookieService:  # type: ignore[no-untyped-def]
    return await make_bookie(
        "b0",
        httpServerEnabled=True,
        httpServerPort=0,
        gcWaitTime=3600_000,
        flushInterval=3600_000,
        entryLogPerLedgerEnabled=False,
    )


async def write_ledger(bk: BookKeeper) -> int:
    wh = await bk.create_ledger(1, 1, 1, password=b"pw")
    for p in PAYLOADS:
        await wh.append(p)
    await wh.close()
    return wh.ledger_id


def stored(bookie: BookieService) -> set[int]:
    assert bookie.core.storage is not None
    return {lid for d in bookie.core.storage.dirs for lid in d.ledger_index.ledgers()}


def is_file(path: str) -> bool:
    return Path(path).is_file()


def biggest(paths: list[str]) -> str:
    return max(paths, key=lambda p: Path(p).stat().st_size)


def http(port: int, method: str, path: str, body: bytes | None = None) -> tuple[int, object]:
    req = urllib.request.Request(f"http://127.0.0.1:{port}{path}", data=body, method=method)
    try:
        with urllib.request.urlopen(req, timeout=5) as resp:
            return resp.status, json.loads(resp.read())
    except urllib.error.HTTPError as e:
        return e.code, json.loads(e.read())


async def test_triggergc_collects_a_deleted_ledger(make_bookie, ledgers_uri: str) -> None:
    bookie = await admin_bookie(make_bookie)
    assert bookie.admin is not None and bookie.core.checkpointer is not None
    port = bookie.admin.port
    async with BookKeeper(ledgers_uri) as bk:
        keep, drop = await write_ledger(bk), await write_ledger(bk)
        await bookie.core.checkpointer.checkpoint()
        await bk.delete_ledger(drop)
    # gcWaitTime is an hour: only the command collects.
    code, out, err = await shell("triggergc", "--bookie", f"127.0.0.1:{port}")
    assert code == 0, err
    first, _, rest = out.partition("\n")
    assert first == f"Triggered GC on BookieServer: {bookie.bookie_id}"
    (details,) = json.loads(rest)
    assert details["deletedLedgers"] == 1 and details["forceCompacting"] is False
    assert stored(bookie) == {keep}
    assert bookie.core.gc is not None and bookie.core.gc.stats.cycles == 1

    # Only minor compaction: BookKeeper's body says so.
    seen: list[tuple[bool, bool]] = []
    real = bookie.core.gc.trigger

    def spy(*, force_major: bool = False, force_minor: bool = False):  # type: ignore[no-untyped-def]
        seen.append((force_major, force_minor))
        return real(force_major=force_major, force_minor=force_minor)

    bookie.core.gc.trigger = spy  # type: ignore[method-assign]
    code, out, err = await shell("triggergc", "-b", f"127.0.0.1:{port}", "--forceMinor")
    assert code == 0, err
    code, out, err = await shell("triggergc", "-b", f"127.0.0.1:{port}", "--no-wait")
    assert code == 0, err
    assert out.strip() == f"Triggered GC on BookieServer: {bookie.bookie_id}"
    assert seen == [(False, True), (True, True)]


async def test_admin_api_answers_like_bookkeeper(make_bookie) -> None:
    bookie = await admin_bookie(make_bookie)
    assert bookie.admin is not None
    port = bookie.admin.port
    assert await asyncio.to_thread(http, port, "GET", "/api/v1/bookie/gc") == (
        200,
        {"is_in_force_gc": "false"},
    )
    status, doc = await asyncio.to_thread(
        http, port, "PUT", "/api/v1/bookie/gc", b'{"forceMajor": "false", "forceMinor": true}'
    )
    assert status == 200 and doc == f"Triggered GC on BookieServer: {bookie.bookie_id}"
    status, doc = await asyncio.to_thread(
        http, port, "PUT", "/api/v1/bookie/gc", b'{"forceMajor": 1}'
    )
    assert status == 400 and "forceMajor" in str(doc)
    status, _ = await asyncio.to_thread(http, port, "POST", "/api/v1/bookie/gc")
    assert status == 405
    status, _ = await asyncio.to_thread(http, port, "GET", "/api/v1/bookie/nothing")
    assert status == 404
    status, doc = await asyncio.to_thread(http, port, "GET", "/api/v1/bookie/gc_details")
    assert status == 200 and isinstance(doc, list) and doc[0]["cycles"] >= 0


async def test_triggergc_bad_input_is_one_error_line(make_bookie) -> None:
    r = await asyncio.to_thread(dlog, "shell", "triggergc", "--bookie", "127.0.0.1:notaport")
    assert "--bookie" in error_line(r, 2)
    # A bookie without httpServerEnabled: nothing listens.
    bookie = await make_bookie("b0")
    assert bookie.admin is None
    from dlog.sandbox.ports import free_port

    r = await asyncio.to_thread(dlog, "shell", "triggergc", "-b", f"127.0.0.1:{free_port()}")
    assert "httpServerEnabled" in error_line(r, 1)


async def test_listfilesondisc_and_readlog(make_bookie, ledgers_uri: str, tmp_path: Path) -> None:
    bookie = await make_bookie("b0", entryLogPerLedgerEnabled=False, gcWaitTime=3600_000)
    conf = tmp_path / "bookie.conf"
    conf.write_text(bookie.conf.dumps())
    async with BookKeeper(ledgers_uri) as bk:
        lid = await write_ledger(bk)
    await bookie.stop()  # offline: what an operator looks at

    code, out, err = await shell("listfilesondisc", "--conf", str(conf), "-txn")
    assert code == 0, err
    journals = out.split()
    assert journals and all(p.endswith(".txn") and is_file(p) for p in journals)
    code, out, err = await shell("listfilesondisc", "-c", str(conf), "-log")
    logs = out.split()
    assert code == 0 and logs and all(p.endswith(".log") for p in logs), (out, err)
    code, out, err = await shell("listfilesondisc", "-c", str(conf), "-idx")
    assert code == 0 and all("/ledgers/" in p or "/locations/" in p for p in out.split())
    code, out, err = await shell("listfilesondisc", "-c", str(conf))
    assert set(journals + logs) <= set(out.split())

    # The ledger's entries, by id and by file, with payloads.
    log_file = biggest(logs)  # the one written to
    log_id = int(Path(log_file).name[:-4], 16)
    code, out, err = await shell("readlog", str(log_id), "--conf", str(conf), "-m", "-l", str(lid))
    assert code == 0, err
    rows = [line.split("\t") for line in out.splitlines()]
    assert [(int(r[0]), int(r[1])) for r in rows] == [(lid, i) for i in range(10)]
    assert [r[4] for r in rows] == [p.decode() for p in PAYLOADS]
    code, by_file, err = await shell("readlog", log_file, "-l", str(lid), "-e", "3")
    assert code == 0 and [r.split("\t")[:2] for r in by_file.splitlines()] == [[str(lid), "3"]]
    pos = int(rows[5][2])
    code, out, _ = await shell("readlog", log_file, "-sp", str(pos), "-ep", str(pos))
    assert [line.split("\t")[1] for line in out.splitlines()] == ["5"]
    code, out, _ = await shell("readlog", log_file, "--ledgers-map")
    assert code == 0 and str(lid) in [line.split("\t")[0] for line in out.splitlines()]

    # Bad input: one error line each.
    for args, code in (
        (("readlog", "7777", "--conf", str(conf)), 1),
        (("readlog", str(log_id)), 2),
        (("readlog", str(tmp_path / "nope.log")), 2),
        (("readlog", log_file, "-e", "1"), 2),
        (("listfilesondisc", "--conf", str(tmp_path / "missing.conf")), 2),
    ):
        r = await asyncio.to_thread(dlog, "shell", *args)
        error_line(r, code)
