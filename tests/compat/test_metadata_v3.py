"""``ledgerMetadataVersion=3``: everything dlog creates stays readable by
Apache BookKeeper (no release reads format 4), and dlog still works.

Each znode is checked with :mod:`tests.compat.upstream_serde`, upstream's
reading rules written independently of dlog's own parser."""

from __future__ import annotations

import asyncio
import json
import re
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from dlog.conf.bookkeeper import ClientConfig
from dlog.conf.dlog import DLogConfig
from dlog.errors import ConfigError, IncorrectParameterError
from dlog.ledger.client import BookKeeper
from dlog.ledger.metadata import (
    LedgerCloseContext,
    LedgerCreateContext,
    LedgerMetadata,
    LedgerOwner,
    serialize,
)
from dlog.ledger.metadata_store import LedgerMetadataStore
from dlog.namespace import Namespace
from dlog.record import LogRecord
from dlog.sandbox.zookeeper import ZooKeeperServer
from dlog.zk import ZooKeeper
from subscriptions.log_segment import LogSegmentSubscriptionsStore
from tests.compat.upstream_serde import (
    UpstreamSerdeError,
    check_v3,
    parse_like_upstream,
)
from tests.conftest import TEST_NAMESPACE_SETTINGS

# ---------------------------------------------------------------------------
# the checker itself: it must reject what BookKeeper rejects
# ---------------------------------------------------------------------------

_MD = LedgerMetadata(
    ledger_id=7,
    ensemble_size=3,
    write_quorum_size=2,
    ack_quorum_size=2,
    ensembles=((0, ("127.0.0.1:3181", "127.0.0.1:3182", "127.0.0.1:3183")),),
    password=b"pw",
)
_CTX = LedgerCreateContext(created_by=LedgerOwner(system="dlog"), part_of_data_set="ns/s")


def _frame(version: bytes, body: bytes) -> bytes:
    return b"BookieMetadataFormatVersion\t" + version + b"\n" + bytes([len(body)]) + body


def test_checker_accepts_bookkeepers_own_bytes() -> None:
    parsed = check_v3(serialize(_MD))
    assert parsed.format_version == 3 and parsed.state == "OPEN"
    assert parsed.ensembles == {0: list(_MD.last_ensemble)}
    closed = _MD.replace(state=3, last_entry_id=9, length=100)
    assert check_v3(serialize(closed)).state == "CLOSED"


@pytest.mark.parametrize(
    ("data", "why"),
    [
        (serialize(_MD.replace(create_context=_CTX)), "version not compatible"),
        (serialize(_MD.replace(seal_time=1)), "version not compatible"),
        (b"BookieMetadataFormatVersion 3\n", "header corrupt at index 27"),
        (b"BookieMetadataFormatVersion\t12345678901\n", "end of version number"),
        (b"BookieMetadataFormatVersion\t3x\n", "parse version number"),
        (b"BookieMetadataFormatVersion\t3\n\x80", "EOF reading varint"),
        (b"BookieMetadataFormatVersion\t3\n\x05\x08\x02", "EOF reading delimited"),
        (_frame(b"3", b"\x08\x02\x10\x03"), "required fields are missing"),
        (_frame(b"3", b"\x08\x03\x10\x02\x18\x00\x28\x01"), "less or equal to ensemble"),
        (_frame(b"3", b"\x08\x01\x10\x01\x18\x00\x28\x01"), "at least one ensemble"),
        (_frame(b"3", b"\x08\x01\x10\x01\x18\x00\x28\x09\x32\x05\x0a\x01a\x10\x00"), "(?i)state"),
        (_frame(b"3", b"\x08\x01\x10\x01\x18\x00\x28\x01\x32\x05\x0a\x01/\x10\x00"), "BookieId"),
    ],
)
def test_checker_rejects_what_bookkeeper_rejects(data: bytes, why: str) -> None:
    with pytest.raises(UpstreamSerdeError, match=why):
        parse_like_upstream(data)


def test_checker_flags_fields_format_3_lacks() -> None:
    # Format 3 header with BP-44 fields: protobuf would skip them, dlog must not write it.
    data = serialize(_MD.replace(create_context=_CTX))
    smuggled = data.replace(b"FormatVersion\t4\n", b"FormatVersion\t3\n", 1)
    assert parse_like_upstream(smuggled).unknown_fields == {100}
    with pytest.raises(UpstreamSerdeError, match=r"fields \[100\]"):
        check_v3(smuggled)


# ---------------------------------------------------------------------------
# the setting
# ---------------------------------------------------------------------------


def test_setting_uses_bookkeepers_key_and_default() -> None:
    assert ClientConfig().ledger_metadata_version == -1
    assert ClientConfig.load(ledgerMetadataVersion=3).ledger_metadata_version == 3
    conf = DLogConfig.load(overrides={"bkc.ledgerMetadataVersion": "3"})
    assert conf.bkc.ledger_metadata_version == 3
    for bad in (2, 5):  # text formats dlog cannot write; no such format
        with pytest.raises(ConfigError, match="ledgerMetadataVersion"):
            ClientConfig.load(ledgerMetadataVersion=bad)


def test_in_format_3_drops_only_the_bp44_fields() -> None:
    md = _MD.replace(
        create_context=_CTX, close_context=LedgerCloseContext.no_more_data(), seal_time=5
    )
    assert md.in_format(-1) is md and md.in_format(4) is md
    v3 = md.in_format(3)
    assert v3 == _MD and v3.format_version == 3
    assert _MD.in_format(3) is _MD
    with pytest.raises(IncorrectParameterError):
        md.in_format(2)
    with pytest.raises(IncorrectParameterError):
        LedgerMetadataStore(ZooKeeper("127.0.0.1:1"), "/ledgers", 2)


# ---------------------------------------------------------------------------
# end to end, on bookie processes
# ---------------------------------------------------------------------------


def _payload(i: int) -> bytes:
    return b"v3-%06d-" % i + b"y" * 60


def _shell(*args: str) -> str:
    r = subprocess.run(
        [sys.executable, "-m", "dlog", "shell", *args],
        capture_output=True,
        text=True,
        timeout=120,
        env={"COLUMNS": "200", "PATH": "/usr/bin:/bin"},
        stdin=subprocess.DEVNULL,
    )
    assert r.returncode == 0, f"exit {r.returncode}\n{r.stdout}\n{r.stderr}"
    return r.stdout


async def _raw_ledgers(zk: ZooKeeper, ledgers_uri: str) -> dict[int, bytes]:
    """Every ledger znode under the ledgers root, as stored."""
    async with BookKeeper(ledgers_uri) as bk:
        ids = await bk.list_ledgers()
        return {lid: (await zk.get(bk.metadata_store.ledger_path(lid)))[0] for lid in ids}


async def _check_every_ledger(zk: ZooKeeper, ledgers_uri: str) -> set[int]:
    """Check every ledger znode with upstream's rules; their ids."""
    raw = await _raw_ledgers(zk, ledgers_uri)
    for lid, data in raw.items():
        try:
            check_v3(data)
        except UpstreamSerdeError as e:
            raise AssertionError(f"ledger {lid}: BookKeeper cannot read it: {e}") from None
    return set(raw)


async def _open(
    zk_server: ZooKeeperServer, zk_root: str, ledgers_uri: str, **settings: object
) -> Namespace:
    conf = DLogConfig.load(
        overrides={
            **TEST_NAMESPACE_SETTINGS,
            "bkc.metadataServiceUri": ledgers_uri,
            "logSegmentBasedSubscriptionsStoreEnabled": True,
            "subscriptionSegmentMaxEntries": 10,
            "maxLogSegmentBytes": 2048,
            "writerOutputBufferSize": 1024,
            **settings,
        }
    )
    return await Namespace.open(
        f"distributedlog://{zk_server.connect_string}{zk_root}/ns", conf, bind=True
    )


async def test_writer_subscriptions_and_shell_write_only_format_3(
    bookie_cluster: Callable[..., Any],
    zk_server: ZooKeeperServer,
    zk_root: str,
    ledgers_uri: str,
    zk: ZooKeeper,
    tmp_path: Path,
) -> None:
    await asyncio.to_thread(bookie_cluster, 3)
    v3 = {"bkc.ledgerMetadataVersion": 3}
    checked: set[int] = set()
    ns = await _open(zk_server, zk_root, ledgers_uri, **v3)
    try:
        lm = await ns.open_log("s")
        writer = await lm.open_writer()
        dlsns = await writer.write_bulk([LogRecord(i, _payload(i)) for i in range(300)])
        await writer.close()
        segments = [s for s, _ in await lm.store.get_segments("s")]
        assert len(segments) >= 3, "the writer should have rolled"
        reader = await lm.open_reader()
        got: list[LogRecord] = []
        while len(got) < 300:
            got.extend(await reader.read_bulk(100, timeout=10))
        await reader.close()
        assert [r.payload for r in got] == [_payload(i) for i in range(300)]

        store = lm.subscriptions
        assert isinstance(store, LogSegmentSubscriptionsStore)
        await store.acquire("sub")
        first_segment = store._subs["sub"].znode.segment_id
        for i in range(25):  # 10 entries a segment: at least two switches
            await store.advance_commit_position("sub", dlsns[i])
        sub_segment = store._subs["sub"].znode.segment_id
        assert sub_segment != first_segment
        # Before closing: a graceful release deletes the subscription's segment.
        checked |= await _check_every_ledger(zk, ledgers_uri)
        assert {s.ledger_id for s in segments} | {sub_segment} <= checked
        await store.close()
    finally:
        await ns.close()
    ns = await _open(zk_server, zk_root, ledgers_uri, **v3)  # a restart
    try:
        store = (await ns.open_log("s")).subscriptions
        assert isinstance(store, LogSegmentSubscriptionsStore)
        assert await store.acquire("sub") == dlsns[24]
        await store.advance_commit_position("sub", dlsns[25])
        sub_segment = store._subs["sub"].znode.segment_id
        md = json.loads(
            await asyncio.to_thread(
                _shell, "ledgermetadata", "-l", str(sub_segment), "--json", "-u", ledgers_uri
            )
        )
        assert md["format_version"] == 3 and md["create_context"] is None
        checked |= await _check_every_ledger(zk, ledgers_uri)
        assert sub_segment in checked
        await store.close()
    finally:
        await ns.close()

    # The shell, once with --set and once with a DistributedLog file's bkc. key.
    conf_file = tmp_path / "dlog.conf"
    conf_file.write_text(f"bkc.ledgerMetadataVersion=3\nbkc.metadataServiceUri={ledgers_uri}\n")
    shell_ledgers = []
    for how in (
        ["--set", "ledgerMetadataVersion=3", "-u", ledgers_uri],
        ["--conf", str(conf_file)],
    ):
        out = await asyncio.to_thread(_shell, "simpletest", "-n", "50", "--size", "64", *how)
        m = re.search(r"created ledger (\d+)", out)
        assert m and "all 50 entries verified" in out, out
        shell_ledgers.append(int(m.group(1)))
    table = await asyncio.to_thread(_shell, "listledgers", "--meta", "-u", ledgers_uri)
    for lid in shell_ledgers:
        assert re.search(rf"│ +{lid} │ CLOSED", table), table
    checked |= await _check_every_ledger(zk, ledgers_uri)
    assert set(shell_ledgers) <= checked


async def test_without_the_setting_writer_ledgers_are_format_4(
    bookie_cluster: Callable[..., Any],
    zk_server: ZooKeeperServer,
    zk_root: str,
    ledgers_uri: str,
    zk: ZooKeeper,
) -> None:
    """The default is unchanged (BP-44 contexts kept): the setting above is
    what made the difference, and the checker sees it."""
    await asyncio.to_thread(bookie_cluster, 3)
    ns = await _open(zk_server, zk_root, ledgers_uri)
    try:
        writer = await (await ns.open_log("s")).open_writer()
        await writer.write(LogRecord(1, b"x"))
        await writer.close()
    finally:
        await ns.close()
    raw = await _raw_ledgers(zk, ledgers_uri)
    assert raw
    for data in raw.values():
        with pytest.raises(UpstreamSerdeError, match="got 4"):
            parse_like_upstream(data)


async def test_a_format_3_client_rewrites_a_format_4_ledger_as_3(
    bookie_cluster: Callable[..., Any], ledgers_uri: str, zk: ZooKeeper
) -> None:
    """Recovery (and any other metadata write) by a format-3 client leaves
    a ledger BookKeeper can read, whoever created it."""
    await asyncio.to_thread(bookie_cluster, 3)
    async with BookKeeper(ledgers_uri) as bk4:
        wh = await bk4.create_ledger(password=b"p", create_context=_CTX)
        await wh.append(b"a")
        path = bk4.metadata_store.ledger_path(wh.ledger_id)
        with pytest.raises(UpstreamSerdeError):
            parse_like_upstream((await zk.get(path))[0])
        conf = ClientConfig.load(metadataServiceUri=ledgers_uri, ledgerMetadataVersion=3)
        async with BookKeeper(conf=conf) as bk3:
            rh = await bk3.open_ledger(wh.ledger_id, b"p")  # fences and closes it
            assert rh.metadata.is_closed and rh.metadata.last_entry_id == 0
            await rh.close()
        assert check_v3((await zk.get(path))[0]).state == "CLOSED"


async def test_a_format_3_handle_shows_what_is_stored(
    bookie_cluster: Callable[..., Any], ledgers_uri: str, zk: ZooKeeper
) -> None:
    """Contexts given to a format-3 client are dropped in its handle too,
    so nothing in the process claims a context the znode lacks."""
    await asyncio.to_thread(bookie_cluster, 3)
    conf = ClientConfig.load(metadataServiceUri=ledgers_uri, ledgerMetadataVersion=3)
    async with BookKeeper(conf=conf) as bk:
        wh = await bk.create_ledger(create_context=_CTX)
        assert wh.metadata.create_context is None
        await wh.append(b"a")
        await wh.close(LedgerCloseContext.no_more_data())
        assert wh.metadata.is_closed and wh.metadata.format_version == 3
        stored = check_v3((await zk.get(bk.metadata_store.ledger_path(wh.ledger_id)))[0])
        assert stored.state == "CLOSED"


async def test_every_store_write_is_format_3(zk: ZooKeeper, zk_root: str) -> None:
    """The store is the one place every metadata write passes (create,
    recovery's IN_RECOVERY, ensemble changes, close): all come out format 3."""
    store = LedgerMetadataStore(zk, f"{zk_root}/ledgers", 3)
    rich = _MD.replace(create_context=_CTX, seal_time=1)
    created, version = await store.create(rich)
    assert created.create_context is None and created.seal_time is None
    assert check_v3((await zk.get(store.ledger_path(7)))[0]).state == "OPEN"
    await store.write(rich.replace(state=2), version)
    assert check_v3((await zk.get(store.ledger_path(7)))[0]).state == "IN_RECOVERY"
