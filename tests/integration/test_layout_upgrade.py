"""``dlog namespace upgrade``: streams of older dlog releases (no
``<default>`` level) move into DistributedLog's layout without losing a
record or a subscriber position; new code refuses them until then."""

from __future__ import annotations

import subprocess
import sys
from typing import Any

import pytest

from dlog.dlsn import DLSN, NonInclusiveLowerBound
from dlog.layout_upgrade import _upgrade_stream, upgrade_namespace
from dlog.log_metadata import LEGACY_CHILDREN, LegacyLayoutError, LogMetadataStore
from dlog.record import LogRecord
from dlog.zk import ZooKeeper
from subscriptions.format import HEADER, RECORD, decode_record
from tests.compat.distributedlog_rules import java_position

STREAMS = {"zk-subs": False, "seg-subs": True}  # stream -> log-segment subscriptions
RECORDS = 60


def payload(stream: str, i: int) -> bytes:
    return b"%s-%d-" % (stream.encode(), i) + b"x" * 100


async def _move(zk: ZooKeeper, src: str, dst: str) -> None:
    """Copy ``src`` (data, children, recursively) to ``dst``, then delete ``src``."""
    data, _stat = await zk.get(src)
    await zk.create(dst, data)
    for child in await zk.get_children(src):
        await _move(zk, f"{src}/{child}", f"{dst}/{child}")
    await zk.delete(src)


async def write_old_namespace(open_namespace, zk: ZooKeeper, ns_path: str) -> dict:  # type: ignore[no-untyped-def]
    """A namespace as dlog wrote it before the ``<default>`` level: records
    in several segments and subscribers of both formats, written by the
    writer and stores, then moved to the old paths (the znodes and data old
    releases wrote are the same, one level up, and no ``version``)."""
    expected: dict = {}
    for name, log_segment in STREAMS.items():
        ns = await open_namespace(
            logSegmentBasedSubscriptionsStoreEnabled=log_segment,
            maxLogSegmentBytes=1024,
            writerOutputBufferSize=256,
        )
        lm = await ns.open_log(name)
        writer = await lm.open_writer()
        await writer.write_bulk([LogRecord(i, payload(name, i)) for i in range(RECORDS)])
        await writer.close()
        store = lm.subscriptions
        await store.advance_commit_position("app", DLSN(1, 3, 0))
        await store.advance_commit_position("audit", DLSN(2, 1, 0))
        positions = await store.get_last_commit_positions()
        await store.close()
        segments = await lm.store.get_segments(name)
        assert len(segments) >= 3, "expected several segments"
        expected[name] = (positions, len(segments))
        await ns.close()
    for name in STREAMS:
        stream = f"{ns_path}/{name}"
        for child in LEGACY_CHILDREN:
            await _move(zk, f"{stream}/<default>/{child}", f"{stream}/{child}")
        await zk.delete_recursive(f"{stream}/<default>")
        # Old releases kept a log-segment subscription's record in the
        # subscriber znode itself.
        for sid in await zk.get_children(f"{stream}/subscribers"):
            path = f"{stream}/subscribers/{sid}"
            if await zk.exists(f"{path}/{RECORD}") is not None:
                await zk.set(path, (await zk.get(f"{path}/{RECORD}"))[0])
                await zk.delete(f"{path}/{RECORD}")
    return expected


async def assert_nothing_lost(open_namespace, expected: dict) -> None:  # type: ignore[no-untyped-def]
    for name, log_segment in STREAMS.items():
        ns = await open_namespace(logSegmentBasedSubscriptionsStoreEnabled=log_segment)
        lm = await ns.open_log(name)
        positions, n_segments = expected[name]
        assert len(await lm.store.get_segments(name)) == n_segments
        reader = await lm.open_reader()
        got: list[LogRecord] = []
        while len(got) < RECORDS:
            got.extend(await reader.read_bulk(100, timeout=10))
        assert [r.payload for r in got] == [payload(name, i) for i in range(RECORDS)]
        await reader.close()
        assert await lm.subscriptions.get_last_commit_positions() == positions
        assert set(positions) == {"app", "audit"}
        await ns.close()


def upgrade_cli(uri: str, *extra: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "dlog", "namespace", "upgrade", uri, *extra],
        capture_output=True,
        text=True,
        timeout=120,
    )


async def tree(zk: ZooKeeper, path: str) -> dict[str, bytes]:
    data, _stat = await zk.get(path)
    out = {path: bytes(data)}
    for child in await zk.get_children(path):
        out.update(await tree(zk, f"{path}/{child}"))
    return out


@pytest.fixture
def ns_uri(zk_server, zk_root) -> str:  # type: ignore[no-untyped-def]
    return f"distributedlog://{zk_server.connect_string}{zk_root}/ns"


async def test_upgrade_moves_every_stream_and_loses_nothing(
    open_namespace: Any, zk: ZooKeeper, zk_root: str, ns_uri: str
) -> None:
    ns_path = f"{zk_root}/ns"
    expected = await write_old_namespace(open_namespace, zk, ns_path)
    before = await tree(zk, ns_path)

    # New code refuses the old layout instead of creating a second log.
    ns = await open_namespace()
    for name in STREAMS:
        with pytest.raises(LegacyLayoutError, match="dlog namespace upgrade"):
            await ns.open_log(name)
        with pytest.raises(LegacyLayoutError, match="dlog namespace upgrade"):
            await ns.create_log(name)
    assert await tree(zk, ns_path) == before

    dry = upgrade_cli(ns_uri, "--dry-run")
    assert dry.returncode == 0, dry.stderr
    assert all(f"would move {name}:" in dry.stdout for name in STREAMS), dry.stdout
    assert "would move seg-subs: 2 subscription records" in dry.stdout, dry.stdout
    assert "zk-subs: 2 subscription records" not in dry.stdout, dry.stdout
    assert await tree(zk, ns_path) == before

    done = upgrade_cli(ns_uri)
    assert done.returncode == 0, done.stderr
    assert all(f"moved {name}:" in done.stdout for name in STREAMS), done.stdout
    assert "one transaction" in done.stdout
    assert "moved seg-subs: 2 subscription records" in done.stdout, done.stdout
    store = LogMetadataStore(zk, ns_path)
    for name in STREAMS:
        p = store.paths(name)
        assert await zk.get_children(p.stream) == ["<default>"]
        assert (await zk.get(p.version))[0] == b"\xff\xff\xff\xff"
        # Every old znode, with its data, now one level down; an inline
        # subscription record one further, in the subscriber's child, and
        # the subscriber znode holds its position as DistributedLog does.
        for path, data in before.items():
            if path.startswith(f"{p.stream}/"):
                moved = p.root + path[len(p.stream) :]
                if data.startswith(HEADER):
                    record = decode_record(data, path)
                    assert (await zk.get(f"{moved}/{RECORD}"))[0] == data, moved
                    assert java_position((await zk.get(moved))[0]) == record.last_commit
                    assert record.last_commit > NonInclusiveLowerBound
                else:
                    assert (await zk.get(moved))[0] == data, moved
    await assert_nothing_lost(open_namespace, expected)

    after = await tree(zk, ns_path)
    again = upgrade_cli(ns_uri)
    assert again.returncode == 0, again.stderr
    assert "already in DistributedLog's layout" in again.stdout
    assert await tree(zk, ns_path) == after


async def test_an_interrupted_upgrade_finishes_when_run_again(
    open_namespace: Any, zk: ZooKeeper, zk_root: str, ns_uri: str
) -> None:
    ns_path = f"{zk_root}/ns"
    expected = await write_old_namespace(open_namespace, zk, ns_path)
    # A crash half way through copying: part of <default> exists, all old znodes remain.
    await upgrade_namespace(zk, ns_path, _stop_after=4)
    ns = await open_namespace()
    for name in STREAMS:
        assert await zk.exists(f"{ns_path}/{name}/<default>/ledgers") is not None
        with pytest.raises(LegacyLayoutError):  # half-moved: still refused
            await ns.open_log(name)
    # ... and one cut short in deleting, after its copy completed: the old
    # subscribers (deleted first) are gone, the old ledgers remain.
    await _upgrade_stream(
        zk,
        LogMetadataStore(zk, ns_path),
        "zk-subs",
        dry_run=False,
        max_transaction_bytes=0,
        stop_after=10_000,
    )
    await zk.delete_recursive(f"{ns_path}/zk-subs/subscribers")
    # Meanwhile an old-release writer moved maxtxid on: the resumed copy takes it.
    old_maxtxid = f"{ns_path}/zk-subs/maxtxid"
    await zk.set(old_maxtxid, b"%d" % (int((await zk.get(old_maxtxid))[0]) + 5))
    bumped = (await zk.get(old_maxtxid))[0]

    done = upgrade_cli(ns_uri)
    assert done.returncode == 0, done.stderr
    assert "copy then delete" in done.stdout
    store = LogMetadataStore(zk, ns_path)
    for name in STREAMS:
        p = store.paths(name)
        assert await zk.get_children(p.stream) == ["<default>"]
        assert (await zk.get(p.version))[0] == b"\xff\xff\xff\xff"
    assert (await zk.get(store.paths("zk-subs").maxtxid))[0] == bumped
    await assert_nothing_lost(open_namespace, expected)


async def test_a_live_holder_stops_the_upgrade(
    open_namespace: Any, zk: ZooKeeper, zk_root: str, ns_uri: str
) -> None:
    ns_path = f"{zk_root}/ns"
    await write_old_namespace(open_namespace, zk, ns_path)
    # The last stream in order: the first must not have moved either.
    await zk.create(f"{ns_path}/zk-subs/lock/member_", b"w", ephemeral=True, sequence=True)
    before = await tree(zk, ns_path)
    done = upgrade_cli(ns_uri)
    assert done.returncode != 0
    assert "zk-subs" in done.stderr and "/lock/member_" in done.stderr, done.stderr
    assert await tree(zk, ns_path) == before  # no stream moved, not even the idle one
