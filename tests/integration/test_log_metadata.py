"""LogMetadataStore and the namespace binding against a real ZooKeeper."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator

import pytest

from dlog.errors import (
    InvalidStreamNameError,
    LogExistsError,
    LogMetadataVersionError,
    LogNotFoundError,
    MetadataError,
)
from dlog.log_metadata import (
    LogMetadataStore,
    NamespaceBinding,
    bind_namespace,
    decode_long,
    encode_long,
    read_namespace_binding,
    validate_stream_name,
)
from dlog.sandbox.zookeeper import ZooKeeperServer
from dlog.segment import LogSegmentMetadata, TruncationStatus
from dlog.zk import ConnectionLossError, ZooKeeper

pytestmark = pytest.mark.integration


@pytest.fixture
def ns(zk_root: str) -> str:
    return f"{zk_root}/ns"


@pytest.fixture
def store(zk: ZooKeeper, ns: str) -> LogMetadataStore:
    return LogMetadataStore(zk, ns)


@pytest.fixture
async def zk2(zk_server: ZooKeeperServer) -> AsyncIterator[ZooKeeper]:
    """A second, independent ZooKeeper session (another process, in effect)."""
    client = ZooKeeper(zk_server.connect_string)
    await client.start()
    yield client
    await client.stop()


def seg(
    seq: int, ledger_id: int | None = None, first_txid: int | None = None
) -> LogSegmentMetadata:
    return LogSegmentMetadata(
        ledger_id=ledger_id if ledger_id is not None else 100 + seq,
        first_txid=first_txid if first_txid is not None else seq * 1000,
        log_segment_sequence_no=seq,
    )


def done(s: LogSegmentMetadata, last_txid: int | None = None) -> LogSegmentMetadata:
    return s.complete(
        last_txid=last_txid if last_txid is not None else s.first_txid + 99,
        record_count=100,
        last_entry_id=9,
        last_slot_id=9,
        start_sequence_id=0,
        completion_time=1700000000000,
    )


# ---------------------------------------------------------------------------
# streams
# ---------------------------------------------------------------------------


async def test_create_log_lays_out_distributedlog_znodes(
    zk: ZooKeeper, store: LogMetadataStore, ns: str
) -> None:
    assert not await store.log_exists("orders")
    await store.create_log("orders")
    assert await store.log_exists("orders")
    assert await zk.get_children(f"{ns}/orders") == ["<default>"]
    assert (await zk.get(f"{ns}/orders"))[0] == b""
    root = f"{ns}/orders/<default>"
    assert sorted(await zk.get_children(root)) == [
        "ledgers",
        "lock",
        "maxtxid",
        "readLock",
        "subscribers",
        "version",
    ]
    assert (await zk.get(f"{root}/ledgers"))[0] == b"0"
    assert (await zk.get(f"{root}/maxtxid"))[0] == b"0"
    assert (await zk.get(f"{root}/version"))[0] == b"\xff\xff\xff\xff"
    assert (await zk.get(root))[0] == b""
    p = store.paths("orders")
    assert (p.stream, p.version) == (f"{ns}/orders", f"{root}/version")
    assert (p.root, p.ledgers, p.maxtxid, p.lock, p.read_lock, p.subscribers) == (
        root,
        f"{root}/ledgers",
        f"{root}/maxtxid",
        f"{root}/lock",
        f"{root}/readLock",
        f"{root}/subscribers",
    )
    assert p.segment("logrecs_000000000000000001") == f"{root}/ledgers/logrecs_000000000000000001"
    with pytest.raises(ValueError):
        p.segment("../lock")
    assert p.subscriber("reader-1") == f"{root}/subscribers/reader-1"
    for bad in ("", "..", "a/b"):
        with pytest.raises(ValueError):
            p.subscriber(bad)
    assert await store.get_segments("orders") == []
    assert await store.get_max_seqno("orders") == (0, 0)
    assert await store.get_max_txid("orders") == (0, 0)


async def test_create_existing_log_fails(store: LogMetadataStore) -> None:
    await store.create_log("a")
    with pytest.raises(LogExistsError):
        await store.create_log("a")


async def test_list_and_delete_logs(zk: ZooKeeper, store: LogMetadataStore, ns: str) -> None:
    assert await store.get_logs() == []  # namespace not even created yet
    for name in ("b-2", "a", "b-1", "c"):
        await store.create_log(name)
    await zk.create(f"{ns}/.allocation_pool")  # DistributedLog's reserved children are not logs
    assert await store.get_logs() == ["a", "b-1", "b-2", "c"]
    assert await store.get_logs(prefix="b-") == ["b-1", "b-2"]
    assert await store.get_logs(prefix="z") == []

    assert await store.delete_log("b-1") == []
    assert not await store.log_exists("b-1")
    assert await zk.exists(f"{ns}/b-1") is None
    assert await store.get_logs() == ["a", "b-2", "c"]
    with pytest.raises(LogNotFoundError):
        await store.delete_log("b-1")
    await store.create_log("b-1")  # a deleted name can be reused
    assert await store.get_segments("b-1") == []


async def test_delete_log_returns_segment_ledger_ids(
    zk: ZooKeeper, store: LogMetadataStore
) -> None:
    await store.create_log("s")
    s1 = seg(1, ledger_id=11)
    await store.create_segment("s", s1)
    await store.complete_segment("s", s1, 0, done(s1))
    await store.create_segment("s", seg(2, ledger_id=7))
    await zk.create(f"{store.paths('s').subscribers}/reader-1", b"AQ==")
    await zk.create(f"{store.paths('s').lock}/member_0000000001", b"x")
    assert await store.delete_log("s") == [11, 7]
    assert not await store.log_exists("s")


async def test_missing_log_errors(store: LogMetadataStore) -> None:
    for call in (
        lambda: store.get_segments("nope"),
        lambda: store.get_max_txid("nope"),
        lambda: store.get_max_seqno("nope"),
        lambda: store.set_max_txid("nope", 5, 0),
        lambda: store.create_segment("nope", seg(1)),
        lambda: store.update_segment("nope", seg(1), 0),
        lambda: store.get_segment("nope", "inprogress_000000000000000001"),
    ):
        with pytest.raises(LogNotFoundError):
            await call()


async def test_concurrent_create_log_has_exactly_one_winner(
    zk: ZooKeeper, zk2: ZooKeeper, ns: str
) -> None:
    stores = [LogMetadataStore(c, ns) for c in (zk, zk2) for _ in range(5)]
    results = await asyncio.gather(*(s.create_log("race") for s in stores), return_exceptions=True)
    winners = [r for r in results if r is None]
    losers = [r for r in results if isinstance(r, LogExistsError)]
    assert len(winners) == 1 and len(losers) == len(stores) - 1, results
    assert await stores[0].log_exists("race")


# ---------------------------------------------------------------------------
# names
# ---------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("name", "reason"),
    [
        ("", "empty"),
        (".hidden", "'.'"),
        (".", "'.'"),
        ("..", "'.'"),
        ("a/b", "'/'"),
        ("/a", "'/'"),
        ("a/../b", "'/'"),
        ("<default>", "reserved"),
        ("a<b", "'<'"),
        ("a>b", "'>'"),
        ("a b", "whitespace"),
        ("a\tb", "control"),
        ("a\x00b", "control"),
        ("a\x7fb", "control"),
        ("a\u0085b", "control"),
        ("a\u00a0b", "whitespace"),
        ("a\u2028b", "whitespace"),
        ("a\ue000b", "private-use"),
        ("a\ufff9b", "non-printable"),
        ("a\U0001f600b", "Basic Multilingual Plane"),
        ("ledgers", "reserved"),
        ("lock", "reserved"),
        ("readLock", "reserved"),
        ("maxtxid", "reserved"),
        ("subscribers", "reserved"),
        ("version", "reserved"),
        ("allocation", "reserved"),
        ("x" * 256, "256 bytes"),
        ("é" * 128, "256 bytes"),
    ],
)
async def test_invalid_names_are_rejected(
    store: LogMetadataStore, zk: ZooKeeper, ns: str, name: str, reason: str
) -> None:
    with pytest.raises(InvalidStreamNameError) as e:
        validate_stream_name(name)
    assert reason in str(e.value)
    with pytest.raises(InvalidStreamNameError):
        await store.create_log(name)
    with pytest.raises(InvalidStreamNameError):
        await store.log_exists(name)
    assert await zk.exists(ns) is None  # nothing was written


def test_invalid_name_types() -> None:
    with pytest.raises(InvalidStreamNameError):
        validate_stream_name(None)  # type: ignore[arg-type]
    with pytest.raises(InvalidStreamNameError):
        validate_stream_name(b"abc")  # type: ignore[arg-type]


@pytest.mark.parametrize("name", ["a", "orders-2024.v1", "a:b", "Ledgers", "ünïcødé", "x" * 255])
async def test_valid_names(store: LogMetadataStore, name: str) -> None:
    assert validate_stream_name(name) == name
    await store.create_log(name)
    assert await store.get_logs() == [name]


# ---------------------------------------------------------------------------
# segments
# ---------------------------------------------------------------------------


async def test_segment_lifecycle(zk: ZooKeeper, store: LogMetadataStore) -> None:
    await store.create_log("s")
    p = store.paths("s")
    s1 = seg(1, first_txid=10)
    assert await store.create_segment("s", s1) == 0
    assert await store.get_segments("s") == [(s1, 0)]
    assert (await zk.get(p.segment(s1.znode_name)))[0] == b"5;101;10;1;0;0;-1"
    assert await store.get_max_seqno("s") == (1, 1)
    assert (await zk.get(p.ledgers))[0] == b"1"
    assert (await zk.get(p.maxtxid))[0] == b"10"  # raised to the first txid, as DL does

    c1 = done(s1, last_txid=109)
    assert await store.complete_segment("s", s1, 0, c1) == 0
    assert await store.get_segments("s") == [(c1, 0)]
    assert await zk.exists(p.segment(s1.znode_name)) is None
    assert await store.get_max_txid("s") == (109, 2)
    assert await store.get_max_seqno("s") == (1, 1)  # completing does not move it

    s2 = seg(2, first_txid=110)
    await store.create_segment("s", s2)
    segments = await store.get_segments("s")
    assert [s for s, _ in segments] == [c1, s2]
    assert await store.get_segment("s", "logrecs_000000000000000001") == (c1, 0)

    # truncation is a compare-and-set update of the completed segment
    t1 = c1.mark_truncated()
    assert await store.update_segment("s", t1, 0) == 1
    assert await store.get_segment("s", c1.znode_name) == (t1, 1)
    with pytest.raises(LogMetadataVersionError):
        await store.update_segment("s", c1.truncate_to(c1.first_dlsn.next()), 0)
    assert (await store.get_segment("s", c1.znode_name))[0].truncation_status == (
        TruncationStatus.TRUNCATED
    )

    # deleting at a stale version fails; at the current one (or -1) it works
    with pytest.raises(LogMetadataVersionError):
        await store.delete_segment("s", t1, 0)
    await store.delete_segment("s", t1, 1)
    await store.delete_segment("s", t1, 1)  # already gone: fine
    assert [s for s, _ in await store.get_segments("s")] == [s2]


async def test_complete_segment_compare_and_set(store: LogMetadataStore) -> None:
    await store.create_log("s")
    s1 = seg(1)
    await store.create_segment("s", s1)
    await store.update_segment("s", s1.truncate_to(s1.first_dlsn), 0)  # now at version 1
    with pytest.raises(LogMetadataVersionError, match="version 0"):
        await store.complete_segment("s", s1, 0, done(s1))
    # nothing changed: still in progress, no completed znode
    assert [(s.in_progress, v) for s, v in await store.get_segments("s")] == [(True, 1)]
    await store.complete_segment("s", s1, 1, done(s1))
    with pytest.raises(LogMetadataVersionError, match="gone"):
        await store.complete_segment("s", s1, 1, done(s1))


async def test_complete_segment_checks_its_arguments(store: LogMetadataStore) -> None:
    await store.create_log("s")
    s1 = seg(1)
    await store.create_segment("s", s1)
    with pytest.raises(ValueError):
        await store.complete_segment("s", done(s1), 0, done(s1))
    with pytest.raises(ValueError):
        await store.complete_segment("s", s1, 0, s1)
    with pytest.raises(ValueError):
        await store.complete_segment("s", s1, 0, done(seg(1, ledger_id=999)))


async def test_create_segment_must_follow_max_seqno(store: LogMetadataStore) -> None:
    await store.create_log("s")
    s5 = seg(5)
    await store.create_segment("s", s5)  # a new stream may start anywhere
    assert await store.get_max_seqno("s") == (5, 1)
    for bad in (seg(5, ledger_id=1), seg(7), seg(4)):
        with pytest.raises(LogMetadataVersionError):
            await store.create_segment("s", bad)
    assert [s for s, _ in await store.get_segments("s")] == [s5]
    await store.create_segment("s", seg(6))
    assert await store.get_max_seqno("s") == (6, 2)
    # retrying the very same create (e.g. after an error) finds its own segment
    assert await store.create_segment("s", seg(6)) == 0


async def test_concurrent_create_segment_has_one_winner(
    zk: ZooKeeper, zk2: ZooKeeper, ns: str
) -> None:
    a, b = LogMetadataStore(zk, ns), LogMetadataStore(zk2, ns)
    await a.create_log("s")
    # Same sequence number: the segment znode itself collides.
    contenders = [(store, seg(1, ledger_id=lid)) for lid, store in enumerate([a, b] * 4, 1)]
    results = await asyncio.gather(
        *(store.create_segment("s", s) for store, s in contenders), return_exceptions=True
    )
    won = [c for c, r in zip(contenders, results, strict=True) if r == 0]
    assert len(won) == 1, results
    assert all(isinstance(r, LogMetadataVersionError) for r in results if r != 0), results
    assert [s for s, _ in await a.get_segments("s")] == [won[0][1]]
    assert await a.get_max_seqno("s") == (1, 1)


async def test_concurrent_first_segments_are_serialized_by_max_seqno(
    zk: ZooKeeper, zk2: ZooKeeper, ns: str
) -> None:
    """A new stream may start at any number, so different numbers do not
    collide by name: only the compare-and-set on ``ledgers`` picks one.
    The numbers are even: a contender that reads the max only after another
    won must not hold the number that follows it (that one may rightly
    succeed, as a slow full suite showed)."""
    a, b = LogMetadataStore(zk, ns), LogMetadataStore(zk2, ns)
    await a.create_log("s")
    contenders = [(store, seg(2 * n)) for n, store in enumerate([a, b] * 4, 1)]
    results = await asyncio.gather(
        *(store.create_segment("s", s) for store, s in contenders), return_exceptions=True
    )
    won = [c for c, r in zip(contenders, results, strict=True) if r == 0]
    assert len(won) == 1, results
    assert all(isinstance(r, LogMetadataVersionError) for r in results if r != 0), results
    winner = won[0][1]
    assert [s for s, _ in await a.get_segments("s")] == [winner]
    assert (await a.get_max_seqno("s"))[0] == winner.log_segment_sequence_no


async def test_maxtxid_compare_and_set(store: LogMetadataStore, zk: ZooKeeper) -> None:
    await store.create_log("s")
    assert await store.get_max_txid("s") == (0, 0)
    assert await store.set_max_txid("s", 500, 0) == 1
    assert (await zk.get(store.paths("s").maxtxid))[0] == b"500"
    with pytest.raises(LogMetadataVersionError):
        await store.set_max_txid("s", 600, 0)
    assert await store.get_max_txid("s") == (500, 1)
    # segment operations only ever raise it
    s1 = seg(1, first_txid=100)
    await store.create_segment("s", s1)
    assert await store.get_max_txid("s") == (500, 1)
    await store.complete_segment("s", s1, 0, done(s1, last_txid=450))
    assert await store.get_max_txid("s") == (500, 1)
    s2 = seg(2, first_txid=451)
    await store.create_segment("s", s2)
    await store.complete_segment("s", s2, 0, done(s2, last_txid=700))
    assert await store.get_max_txid("s") == (700, 2)


async def test_completion_retries_when_maxtxid_moves(
    store: LogMetadataStore, zk2: ZooKeeper, ns: str
) -> None:
    other = LogMetadataStore(zk2, ns)
    await store.create_log("s")
    s1 = seg(1, first_txid=1)
    await store.create_segment("s", s1)
    real_get = store.get_max_txid
    bumped = False

    async def get_then_bump(name: str) -> tuple[int, int]:
        nonlocal bumped
        value = await real_get(name)
        if not bumped:  # another process moves maxtxid between our read and our write
            bumped = True
            await other.set_max_txid(name, 50, value[1])
        return value

    store.get_max_txid = get_then_bump  # type: ignore[method-assign]
    await store.complete_segment("s", s1, 0, done(s1, last_txid=99))
    assert bumped
    assert await other.get_max_txid("s") == (99, 3)
    assert [s.in_progress for s, _ in await other.get_segments("s")] == [False]


async def test_get_segments_watch_fires_on_change(store: LogMetadataStore) -> None:
    await store.create_log("s")
    fired = asyncio.Event()
    await store.get_segments("s", watch=lambda event: fired.set())
    await store.create_segment("s", seg(1))
    await asyncio.wait_for(fired.wait(), 10)


async def test_get_segments_is_strict_about_segment_data(
    store: LogMetadataStore, zk: ZooKeeper
) -> None:
    await store.create_log("s")
    await store.create_segment("s", seg(1))
    ledgers = store.paths("s").ledgers
    await zk.create(f"{ledgers}/not-a-segment", b"junk")  # unexpected name: skipped
    assert len(await store.get_segments("s")) == 1
    await zk.create(f"{ledgers}/logrecs_000000000000000009", b"5;1;2;3")
    with pytest.raises(MetadataError):
        await store.get_segments("s")
    await zk.delete(f"{ledgers}/logrecs_000000000000000009")
    await zk.create(f"{ledgers}/logrecs_000000000000000009", b"5;1;2;9;0;0;-1")  # in-progress data
    with pytest.raises(MetadataError, match="does not match"):
        await store.get_segments("s")


async def test_malformed_counters_are_errors(store: LogMetadataStore, zk: ZooKeeper) -> None:
    await store.create_log("s")
    await zk.set(store.paths("s").maxtxid, b"12abc")
    with pytest.raises(MetadataError, match="maxtxid"):
        await store.get_max_txid("s")
    await zk.set(store.paths("s").ledgers, b"")  # created empty: reads as unassigned
    assert (await store.get_max_seqno("s"))[0] == 0


def test_long_encoding() -> None:
    for value in (0, 1, -999, 2**63 - 1, -(2**63)):
        assert decode_long(encode_long(value), "x") == value
    assert encode_long(123) == b"123"
    for bad in (b"+1", b"01", b"-0", b" 1", b"1.0", b"9223372036854775808", b"\xff"):
        with pytest.raises(MetadataError):
            decode_long(bad, "x")
    with pytest.raises(ValueError):
        encode_long(2**63)


def test_store_rejects_bad_namespace_paths(zk: ZooKeeper) -> None:
    for bad in ("", "/", "ns", "/a//b", "/a/../b"):
        with pytest.raises(ValueError):
            LogMetadataStore(zk, bad)
    assert LogMetadataStore(zk, "/a/b/").namespace_path == "/a/b"


# ---------------------------------------------------------------------------
# namespace binding
# ---------------------------------------------------------------------------

# DLMetadata as DistributedLog writes it for `dlog admin bind -l /ledgers -s
# zk1:2181,zk2:2181 -dlzw zk1:2181 ...`: format version, type, then
# BKDLConfigFormat in TJSONProtocol, fields in id order, bools as 1/0.
DL_BINDING = (
    b"1\nBKDL\n"
    b'{"1":{"str":"zk1:2181,zk2:2181"},"2":{"str":"/bk/ledgers"},"3":{"tf":1},'
    b'"4":{"tf":0},"5":{"str":"zk1:2181,zk2:2181"},"6":{"str":"dlzk:2181"},'
    b'"7":{"str":"dlzk:2181"}}'
)


def test_binding_wire_format_is_distributedlogs() -> None:
    b = NamespaceBinding.for_metadata_uri(
        "zk+hierarchical://zk1:2181;zk2:2181/bk/ledgers", "dlzk:2181"
    )
    assert b.serialize() == DL_BINDING
    assert NamespaceBinding.parse(DL_BINDING) == b
    assert b.metadata_service_uri == "zk+hierarchical://zk1:2181;zk2:2181/bk/ledgers"


def test_binding_reads_distributedlogs_optional_fields() -> None:
    doc = {
        "1": {"str": "zk1:2181"},
        "2": {"str": "/ledgers"},
        "3": {"tf": 0},
        "4": {"tf": 1},
        "6": {"str": "zk1:2181"},
        "8": {"str": "/acl"},
        "9": {"i64": 5},
        "10": {"tf": 1},
        "42": {"rec": {}},  # a field this version does not know: skipped, as thrift does
    }
    data = b"1\r\nBKDL\r\n" + json.dumps(doc, indent=2).encode()  # line breaks inside the JSON too
    b = NamespaceBinding.parse(data)
    assert b.bk_zk_servers_for_reader == "zk1:2181"  # defaults to the writer's, as in DL
    assert b.dl_zk_servers_for_reader == "zk1:2181"
    assert (b.sanity_check_txnid, b.encode_region_id, b.federated_namespace) == (False, True, True)
    assert (b.acl_root_path, b.first_log_segment_seq_no) == ("/acl", 5)
    assert NamespaceBinding.parse(b.serialize()) == b


@pytest.mark.parametrize(
    "data",
    [
        b"",
        b"2\nBKDL\n{}",
        b"1\nZKDL\n{}",
        b"1\nBKDL\n",
        b"1\nBKDL\nnot json",
        b"1\nBKDL\n[]",
        b'1\nBKDL\n{"2":{"str":"/ledgers"},"6":{"str":"zk:2181"}}',  # no bkZkServers
        b'1\nBKDL\n{"1":{"i32":5},"2":{"str":"/l"},"6":{"str":"zk:2181"}}',
        b'1\nBKDL\n{"1":{"str":"zk:2181"},"2":{"str":"/l"},"3":{"tf":"yes"},"6":{"str":"zk:2181"}}',
        b'1\nBKDL\n{"x":{"str":"zk:2181"}}',
        b'1\nBKDL\n{"1":{"str":"zk"},"2":{"str":"/l"},"6":{"str":"zk:2181"}}',  # not host:port
        b"\xff\xfe",
    ],
)
def test_binding_rejects_garbage(data: bytes) -> None:
    with pytest.raises(MetadataError):
        NamespaceBinding.parse(data)


async def test_bind_namespace_creates_and_then_keeps_the_binding(
    zk: ZooKeeper, ns: str, ledgers_uri: str
) -> None:
    assert await read_namespace_binding(zk, ns) is None
    first = await bind_namespace(zk, ns, ledgers_uri)
    assert first.metadata_service_uri == ledgers_uri
    assert first.dl_zk_servers == zk.hosts
    data, _ = await zk.get(ns)
    assert data.startswith(b"1\nBKDL\n{")
    assert await read_namespace_binding(zk, ns) == first
    other = await bind_namespace(zk, ns, "zk+hierarchical://elsewhere:2181/other")
    assert other == first


async def test_bind_namespace_binds_an_existing_unbound_namespace(
    zk: ZooKeeper, store: LogMetadataStore, ns: str, ledgers_uri: str
) -> None:
    await store.create_log("s")  # creates the namespace znode, empty
    assert await read_namespace_binding(zk, ns) is None
    b = await bind_namespace(zk, ns, ledgers_uri)
    assert await read_namespace_binding(zk, ns) == b
    assert await store.get_logs() == ["s"]


async def test_concurrent_binds_agree_on_one_binding(
    zk: ZooKeeper, zk2: ZooKeeper, ns: str
) -> None:
    uris = [f"zk+hierarchical://bk{i}:2181/ledgers-{i}" for i in range(8)]
    clients = [zk, zk2] * 4
    results = await asyncio.gather(
        *(bind_namespace(c, ns, u) for c, u in zip(clients, uris, strict=True))
    )
    assert len(set(results)) == 1
    assert results[0].metadata_service_uri in uris
    assert await read_namespace_binding(zk2, ns) == results[0]


async def test_concurrent_binds_on_an_empty_namespace_znode(
    zk: ZooKeeper, zk2: ZooKeeper, ns: str
) -> None:
    await zk.ensure_path(ns)
    uris = [f"zk+hierarchical://bk{i}:2181/ledgers" for i in range(8)]
    results = await asyncio.gather(
        *(bind_namespace(c, ns, u) for c, u in zip([zk, zk2] * 4, uris, strict=True))
    )
    assert len(set(results)) == 1
    assert await read_namespace_binding(zk, ns) == results[0]


async def test_complete_segment_argument_order_is_checked(store: LogMetadataStore) -> None:
    await store.create_log("s")
    s1 = seg(1)
    await store.create_segment("s", s1)
    with pytest.raises(TypeError, match="inprogress_seg, version, completed_seg"):
        await store.complete_segment("s", s1, done(s1), 0)  # type: ignore[arg-type]


# ---------------------------------------------------------------------------
# writes that landed before a connection loss
# ---------------------------------------------------------------------------


def lose_connection_after_first(monkeypatch: pytest.MonkeyPatch, zk: ZooKeeper, method: str):
    """Make ``zk.<method>`` apply its first call and then report ConnectionLossError,
    as when the answer to a write that landed is lost."""
    real = getattr(zk, method)
    calls = {"n": 0}

    async def landed_then_lost(*args, **kwargs):
        calls["n"] += 1
        result = await real(*args, **kwargs)
        if calls["n"] == 1:
            raise ConnectionLossError()
        return result

    monkeypatch.setattr(zk, method, landed_then_lost)
    return calls


async def test_segment_writes_recognise_their_own_landed_attempt(
    store: LogMetadataStore, zk: ZooKeeper, monkeypatch: pytest.MonkeyPatch
) -> None:
    await store.create_log("s")
    s1 = seg(1, first_txid=5)
    calls = lose_connection_after_first(monkeypatch, zk, "transaction")
    assert await store.create_segment("s", s1) == 0
    assert calls["n"] == 2
    assert await store.get_segments("s") == [(s1, 0)]
    assert await store.get_max_seqno("s") == (1, 1)

    monkeypatch.undo()
    calls = lose_connection_after_first(monkeypatch, zk, "transaction")
    c1 = done(s1)
    assert await store.complete_segment("s", s1, 0, c1) == 0
    assert calls["n"] == 2
    assert await store.get_segments("s") == [(c1, 0)]

    monkeypatch.undo()
    calls = lose_connection_after_first(monkeypatch, zk, "set")
    assert await store.update_segment("s", c1.mark_truncated(), 0) == 1
    assert calls["n"] == 2
    # ...but a genuinely stale update still fails.
    with pytest.raises(LogMetadataVersionError):
        await store.update_segment("s", c1.truncate_to(c1.first_dlsn), 0)

    monkeypatch.undo()
    calls = lose_connection_after_first(monkeypatch, zk, "set")
    assert await store.set_max_txid("s", 1000, 2) == 3
    assert calls["n"] == 2


async def test_create_log_after_connection_loss_says_it_may_be_ours(
    store: LogMetadataStore, zk: ZooKeeper, monkeypatch: pytest.MonkeyPatch
) -> None:
    await store.create_log("warmup")  # the namespace exists: only the log's transaction runs
    lose_connection_after_first(monkeypatch, zk, "transaction")
    with pytest.raises(LogExistsError, match="earlier attempt"):
        await store.create_log("s")
    monkeypatch.undo()
    assert await store.log_exists("s")


async def test_bind_after_connection_loss_returns_the_landed_binding(
    zk: ZooKeeper, ns: str, ledgers_uri: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    calls = lose_connection_after_first(monkeypatch, zk, "create")
    b = await bind_namespace(zk, ns, ledgers_uri)
    assert calls["n"] == 2
    assert b.metadata_service_uri == ledgers_uri
    assert await read_namespace_binding(zk, ns) == b


async def test_create_log_under_a_stream_znode_left_alone(
    zk: ZooKeeper, store: LogMetadataStore
) -> None:
    """A delete cut short can leave ``<ns>/<stream>`` without its log: the
    log is created under it (as DistributedLog creates only missing parents)."""
    await store.create_log("warmup")
    await zk.create(store.paths("s").stream, b"")
    assert not await store.log_exists("s")
    await store.create_log("s")
    assert await store.log_exists("s")
    assert (await zk.get(store.paths("s").version))[0] == b"\xff\xff\xff\xff"
