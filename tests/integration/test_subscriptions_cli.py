"""`dlog subscriptions list/show/reset/delete`, run as a user runs them
(``python -m dlog ...`` subprocesses) against one sandbox (ZooKeeper and 3
bookie processes) started for the module. `migrate` is covered by
test_migration.py."""

from __future__ import annotations

import asyncio
import os
import re
import subprocess
import sys
import uuid

import pytest

from dlog.conf.dlog import DLogConfig
from dlog.dlsn import DLSN, NonInclusiveLowerBound
from dlog.errors import SubscriptionFencedError
from dlog.namespace import Namespace
from dlog.record import LogRecord
from subscriptions.format import SegmentSubscription, ZkPosition
from subscriptions.zk_store import ZKSubscriptionsStore
from tests.crash import crash

pytestmark = pytest.mark.integration


@pytest.fixture
def stream() -> str:
    return f"s-{uuid.uuid4().hex[:8]}"


async def dlog(
    *args: str, uri: str | None = None, input: str | None = None
) -> subprocess.CompletedProcess[str]:
    """Run the CLI without blocking this event loop (a live store in it
    keeps publishing its LAC)."""
    cmd = [sys.executable, "-m", "dlog", "subscriptions", *args]
    if uri is not None:
        cmd += ["--uri", uri]
    env = {k: v for k, v in os.environ.items() if k != "DLOG_URI"}
    env["COLUMNS"] = "200"
    return await asyncio.to_thread(
        subprocess.run,
        cmd,
        input=input,
        stdin=None if input is not None else subprocess.DEVNULL,
        capture_output=True,
        text=True,
        encoding="utf-8",
        timeout=60,
        env=env,
    )


def ok(r: subprocess.CompletedProcess[str]) -> str:
    assert r.returncode == 0, f"exit {r.returncode}\nstdout:\n{r.stdout}\nstderr:\n{r.stderr}"
    return r.stdout


def error_line(r: subprocess.CompletedProcess[str], code: int = 1) -> str:
    assert r.returncode == code, f"exit {r.returncode}\nstdout:\n{r.stdout}\nstderr:\n{r.stderr}"
    assert "Traceback" not in r.stderr, r.stderr
    lines = [line for line in r.stderr.splitlines() if line.strip()]
    assert lines and lines[-1].startswith(("error: ", "Aborted")), r.stderr
    return lines[-1]


def field(out: str, name: str) -> str:
    m = re.search(rf"^{re.escape(name)}:\s+(.*)$", out, re.M)
    assert m, f"no {name!r} line in:\n{out}"
    return m.group(1).strip()


async def open_ns(uri: str, log_segment: bool = False) -> Namespace:
    conf = DLogConfig.load(overrides={"logSegmentBasedSubscriptionsStoreEnabled": log_segment})
    return await Namespace.open(uri, conf)


async def write(ns: Namespace, stream: str, n: int) -> list[DLSN]:
    lm = await ns.open_log(stream)
    writer = await lm.open_writer()
    try:
        return await writer.write_bulk(LogRecord(i, b"r%d" % i) for i in range(n))
    finally:
        await writer.close()


async def test_list_and_show_read_both_formats_without_fencing(uri: str, stream: str) -> None:
    zk_ns, seg_ns = await open_ns(uri), await open_ns(uri, True)
    try:
        dlsns = await write(zk_ns, stream, 10)
        zk_store = (await zk_ns.open_log(stream)).subscriptions
        await zk_store.advance_commit_position("billing", dlsns[3])
        seg_store = (await seg_ns.open_log(stream)).subscriptions
        await seg_store.advance_commit_position("closed", dlsns[5])
        await seg_store.release("closed")
        await seg_store.advance_commit_position("live", dlsns[7])  # stays owned: a segment
        segment = (await seg_store.read_znode("live"))[0].segment_id
        await asyncio.sleep(0.3)  # its explicit LAC, so admin reads see the last commit

        out = ok(await dlog("list", stream, uri=uri))
        for sid, dlsn, fmt in (
            ("billing", dlsns[3], "zookeeper"),
            ("closed", dlsns[5], "log-segment"),
            ("live", dlsns[7], "log-segment"),
        ):
            [row] = [line for line in out.splitlines() if f" {sid} " in line]
            assert str(dlsn) in row and dlsn.serialize() in row and fmt in row, row

        out = ok(await dlog("show", stream, "billing", uri=uri))
        assert field(out, "format") == "zookeeper"
        assert field(out, "position") == str(dlsns[3])
        assert field(out, "position base64") == dlsns[3].serialize()
        assert re.search(r"\(version \d+\)", field(out, "znode"))

        out = ok(await dlog("show", stream, "live", uri=uri))
        assert field(out, "format") == "log-segment"
        assert field(out, "position") == str(dlsns[7])
        assert field(out, "segment ledger") == str(segment)
        assert field(out, "  state") == "OPEN"
        assert field(out, "  last entry").startswith("1 ")  # the switch's record, then one commit
        ensemble = field(out, "  ensemble")
        assert ensemble.startswith("0: [") and ensemble.count("127.0.0.1:") == 3
        owner = field(out, "owner")
        assert owner.startswith("alive") and f"pid {os.getpid()}" in owner, owner
        assert "may lag its newest commits" in out

        out = ok(await dlog("show", stream, "closed", uri=uri))
        assert field(out, "format") == "log-segment"
        assert field(out, "position") == str(dlsns[5])
        assert field(out, "segment ledger").startswith("-")

        # Admin reads fenced nobody: the live owner still commits.
        await seg_store.advance_commit_position("live", dlsns[8])
        await zk_store.advance_commit_position("billing", dlsns[4])
        assert await seg_store.get_last_commit_position("live") == dlsns[8]

        # Once the owner is gone (its session with it), show says the
        # position includes every acknowledged commit.
        await crash(seg_ns)
        out = ok(await dlog("show", stream, "live", uri=uri))
        assert field(out, "owner").startswith("none alive")
        assert "includes every acknowledged commit" in out
        assert field(out, "position") == str(dlsns[8])

        assert "no subscriber" in error_line(await dlog("show", stream, "nobody", uri=uri))
        error_line(await dlog("list", "no-such-stream", uri=uri))
        assert not await zk_ns.log_exists("no-such-stream")  # not created
    finally:
        await seg_ns.close()
        await zk_ns.close()


async def test_reset_earliest_latest_and_a_dlsn_fences_the_owner(uri: str, stream: str) -> None:
    ns, seg_ns = await open_ns(uri), await open_ns(uri, True)
    try:
        dlsns = await write(ns, stream, 20)
        live = (await seg_ns.open_log(stream)).subscriptions
        await live.advance_commit_position("app", dlsns[12])
        admin = ZKSubscriptionsStore((await ns.open_log(stream)).context)

        # Without --force it asks; "n" changes nothing.
        r = await dlog("reset", stream, "app", "--to", "earliest", uri=uri, input="n\n")
        assert r.returncode != 0 and "Aborted" in r.stderr
        assert "in the log-segment format?" in r.stderr, r.stderr
        assert await admin.get_last_commit_position("app") == dlsns[12]

        # earliest, without --format: the subscriber keeps its log-segment
        # format although the configuration selects the ZooKeeper store; the
        # live owner is fenced.
        out = ok(await dlog("reset", stream, "app", "--to", "earliest", "--force", uri=uri))
        assert "(wrote the log-segment format)" in out, out
        assert out.splitlines()[-1] == NonInclusiveLowerBound.serialize()
        znode = (await admin.read_znode("app"))[0]
        assert isinstance(znode, SegmentSubscription)
        assert (znode.segment_id, znode.last_commit) == (None, NonInclusiveLowerBound)
        with pytest.raises(SubscriptionFencedError):
            await live.advance_commit_position("app", dlsns[13])

        # --format converts, and the output says so in the word given.
        out = ok(
            await dlog(
                "reset", stream, "app", "--to", "earliest", "--format", "zk", "--force", uri=uri
            )
        )
        assert "(wrote the zk format, converted from log-segment)" in out, out
        assert (await admin.read_znode("app"))[0] == ZkPosition(NonInclusiveLowerBound)
        consumer = await (await ns.open_log(stream)).subscribe("app")
        assert (await consumer.read(timeout=10)).dlsn == dlsns[0]
        await consumer.close()

        # latest, converting back, confirmed with "y".
        r = await dlog(
            "reset",
            stream,
            "app",
            "--to",
            "latest",
            "--format",
            "log-segment",
            uri=uri,
            input="y\n",
        )
        assert "in the log-segment format, converting it from zookeeper?" in r.stderr, r.stderr
        assert "(wrote the log-segment format, converted from zookeeper)" in ok(r)
        znode = (await admin.read_znode("app"))[0]
        assert isinstance(znode, SegmentSubscription)
        assert (znode.segment_id, znode.last_commit) == (None, dlsns[-1])

        # Backwards to a DLSN, in each accepted form; the format stays.
        for text in (str(dlsns[4]), dlsns[4].serialize(), "/".join(map(str, dlsns[4]))):
            out = ok(await dlog("reset", stream, "app", "--to", text, "--force", uri=uri))
            assert out.splitlines()[-2] == str(dlsns[4]), out
            assert "(wrote the log-segment format)" in out, out
        assert isinstance((await admin.read_znode("app"))[0], SegmentSubscription)
        assert await admin.get_last_commit_position("app") == dlsns[4]
        consumer = await (await ns.open_log(stream)).subscribe("app")
        assert (await consumer.read(timeout=10)).dlsn == dlsns[5]
        await consumer.close()

        # A new subscriber is created at a position, in the configured format.
        out = ok(await dlog("reset", stream, "newbie", "--to", "latest", "--force", uri=uri))
        assert "new -> " in out and "(wrote the zookeeper format)" in out, out
        assert (await admin.read_znode("newbie"))[0] == ZkPosition(dlsns[-1])
        out = ok(
            await dlog(
                "reset",
                stream,
                "segment-newbie",
                "--to",
                "latest",
                "--force",
                "--set",
                "logSegmentBasedSubscriptionsStoreEnabled=true",
                uri=uri,
            )
        )
        assert "(wrote the log-segment format)" in out, out
        assert isinstance((await admin.read_znode("segment-newbie"))[0], SegmentSubscription)
        # --format zookeeper on one already in that format: kept, in that word.
        out = ok(
            await dlog(
                "reset",
                stream,
                "newbie",
                "--to",
                "earliest",
                "--format",
                "zookeeper",
                "--force",
                uri=uri,
            )
        )
        assert "(wrote the zookeeper format)" in out, out

        line = error_line(
            await dlog("reset", stream, "app", "--to", "earliest", "--format", "etcd", uri=uri), 2
        )
        assert "--format" in line and "zk" in line and "log-segment" in line, line
        error_line(await dlog("reset", stream, "app", "--to", "1/2", "--force", uri=uri), 2)
        error_line(await dlog("reset", stream, "a/b", "--to", "earliest", "--force", uri=uri), 2)
        error_line(await dlog("reset", "missing", "app", "--to", "earliest", "--force", uri=uri))
        assert not await ns.log_exists("missing")
    finally:
        await seg_ns.close()
        await ns.close()


async def test_migrate_prints_formats_in_the_word_given(uri: str, stream: str) -> None:
    """--to zk and --to zookeeper both work; the table says the word given."""
    ns = await open_ns(uri)
    try:
        lm = await ns.open_log(stream)
        for sid in ("a", "b"):
            await lm.subscriptions.reset_position(sid, DLSN(1, 2, 0))
        admin = ZKSubscriptionsStore(lm.context)

        def rows(out: str) -> list[list[str]]:
            return [
                [cell.strip() for cell in line.split("│")[1:-1]]
                for line in out.splitlines()
                if line.startswith("│") and f" {stream} " in line
            ]

        async def migrate(to: str) -> str:
            return ok(await dlog("migrate", "--to", to, "--stream", stream, uri=uri))

        out = await migrate("zk")
        assert "subscriptions -> zk" in out and "zookeeper" not in out, out
        assert [r[2:4] + r[6:] for r in rows(out)] == [["zk", "zk", "already"]] * 2, out

        out = await migrate("log-segment")
        assert [r[2:4] + r[6:] for r in rows(out)] == [
            ["zookeeper", "log-segment", "converted"]
        ] * 2, out

        out = await migrate("zk")
        assert "subscriptions -> zk" in out and "zookeeper" not in out, out
        assert [r[2:4] + r[6:] for r in rows(out)] == [["log-segment", "zk", "converted"]] * 2
        assert (await admin.read_znode("a"))[0] == ZkPosition(DLSN(1, 2, 0))

        out = await migrate("zookeeper")
        assert "subscriptions -> zookeeper" in out and " zk " not in out, out
        assert [r[2:4] + r[6:] for r in rows(out)] == [["zookeeper", "zookeeper", "already"]] * 2

        line = error_line(await dlog("migrate", "--to", "etcd", uri=uri), 2)
        assert "--to" in line and "zk" in line and "log-segment" in line, line
    finally:
        await ns.close()


async def test_delete(uri: str, stream: str) -> None:
    ns, seg_ns = await open_ns(uri), await open_ns(uri, True)
    try:
        dlsns = await write(ns, stream, 5)
        seg = (await seg_ns.open_log(stream)).subscriptions
        await seg.advance_commit_position("gone", dlsns[2])
        segment = (await seg.read_znode("gone"))[0].segment_id  # owned: its ledger exists
        assert segment in await ns.bk.list_ledgers()
        await seg.advance_commit_position("kept", dlsns[1])
        await seg.release("kept")

        r = await dlog("delete", stream, "gone", uri=uri, input="n\n")
        assert r.returncode != 0 and "Aborted" in r.stderr
        admin = ZKSubscriptionsStore((await ns.open_log(stream)).context)
        assert await admin.list_subscribers() == ["gone", "kept"]

        out = ok(await dlog("delete", stream, "gone", "--force", uri=uri))
        assert "deleted subscriber gone" in out
        assert await admin.list_subscribers() == ["kept"]
        assert segment not in await ns.bk.list_ledgers()
        out = ok(await dlog("list", stream, uri=uri))
        assert " kept " in out and " gone " not in out

        assert "no subscriber" in error_line(
            await dlog("delete", stream, "gone", "--force", uri=uri)
        )
        ok(await dlog("delete", stream, "kept", uri=uri, input="y\n"))
        assert await admin.list_subscribers() == []
        r = await dlog("list", stream, uri=uri)
        assert r.returncode == 0 and "no subscribers" in r.stderr
    finally:
        await seg_ns.close()
        await ns.close()


async def test_a_subscription_whose_segment_is_gone(uri: str, stream: str) -> None:
    """Every command says so in one line naming the subscriber and the
    ledger; list shows the others; reset is the way out."""
    seg_ns = await open_ns(uri, True)
    try:
        dlsns = await write(seg_ns, stream, 10)
        store = (await seg_ns.open_log(stream)).subscriptions
        await store.advance_commit_position("ok", dlsns[2])
        await store.advance_commit_position("broken", dlsns[3])
        segment = (await store.read_znode("broken"))[0].segment_id
        await crash(seg_ns)
        seg_ns = await open_ns(uri, True)
        await seg_ns.bk.delete_ledger(segment)  # lost behind the store's back

        line = error_line(await dlog("show", stream, "broken", uri=uri))
        assert "'broken'" in line and f"ledger {segment}" in line and "reset" in line, line
        out = ok(await dlog("list", stream, uri=uri))
        [row] = [r for r in out.splitlines() if " broken " in r]
        assert "unreadable" in row, row
        [row] = [r for r in out.splitlines() if " ok " in r]
        assert str(dlsns[2]) in row, row

        # Reset keeps the format the znode is in (the configuration selects
        # the ZooKeeper store here).
        r = await dlog("reset", stream, "broken", "--to", str(dlsns[3]), "--force", uri=uri)
        assert f"ledger {segment}" in r.stderr, r.stderr  # says what is lost
        assert "unreadable -> " in ok(r) and "(wrote the log-segment format)" in r.stdout, r.stdout
        out = ok(await dlog("show", stream, "broken", uri=uri))
        assert field(out, "position") == str(dlsns[3])
        assert field(out, "format") == "log-segment"
    finally:
        await seg_ns.close()
