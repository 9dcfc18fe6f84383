"""LedgerMetadataStore against a real ZooKeeper."""

from __future__ import annotations

import asyncio

import pytest

from dlog.errors import LedgerExistsError, MetadataVersionError, NoSuchLedgerError
from dlog.ledger import layout
from dlog.ledger.metadata import (
    LedgerCloseContext,
    LedgerMetadata,
    LedgerState,
    deserialize,
    serialize,
)
from dlog.ledger.metadata_store import LedgerMetadataStore
from dlog.zk import ConnectionLossError, NoNodeError, ZooKeeper

pytestmark = pytest.mark.integration


@pytest.fixture
def root(zk_root: str) -> str:
    return f"{zk_root}/ledgers"


@pytest.fixture
async def store(zk: ZooKeeper, root: str) -> LedgerMetadataStore:
    await zk.ensure_path(root)
    return LedgerMetadataStore(zk, root)


def new_md(ledger_id: int, **overrides) -> LedgerMetadata:
    fields = dict(
        ledger_id=ledger_id,
        ensemble_size=3,
        write_quorum_size=3,
        ack_quorum_size=2,
        ensembles={0: ["b1:3181", "b2:3181", "b3:3181"]},
        password=b"secret",
        ctime=1700000000000,
    )
    fields.update(overrides)
    return LedgerMetadata(**fields)


# ---------------------------------------------------------------------------
# ids
# ---------------------------------------------------------------------------


async def test_generated_ids_are_unique_under_concurrency(
    zk: ZooKeeper, root: str, store: LedgerMetadataStore
) -> None:
    other = LedgerMetadataStore(zk, root)  # a second generator on the same root
    ids = await asyncio.gather(
        *(s.generate_ledger_id() for _ in range(100) for s in (store, other))
    )
    assert len(ids) == 200 and len(set(ids)) == 200
    assert all(0 <= i < layout.INT_MAX for i in ids)
    assert await zk.get_children(f"{root}/idgen") == []  # id nodes are removed
    assert not await zk.exists(f"{root}/idgen-long")


async def test_long_ids_once_idgen_long_exists(zk: ZooKeeper, root: str) -> None:
    await zk.ensure_path(f"{root}/idgen-long")
    store = LedgerMetadataStore(zk, root)
    ids = await asyncio.gather(*(store.generate_ledger_id() for _ in range(20)))
    assert len(set(ids)) == 20
    assert all(i >> 32 == 1 and 0 <= i & 0xFFFFFFFF < 20 for i in ids)
    assert await zk.get_children(f"{root}/idgen-long") == ["HOB-0000000001"]
    await store.create(new_md(max(ids)))
    assert layout.ledger_path(root, max(ids)).startswith(f"{root}/000/0000/0042/")
    assert await store.list_ledgers() == [max(ids)]


async def test_long_ids_use_the_newest_hob_dir_and_collect_old_ones(
    zk: ZooKeeper, root: str
) -> None:
    for high in (1, 2, 3, 4, 5):
        await zk.ensure_path(f"{root}/idgen-long/HOB-{high:010d}")
    store = LedgerMetadataStore(zk, root)
    lid = await store.generate_ledger_id()
    assert lid >> 32 == 5
    assert sorted(await zk.get_children(f"{root}/idgen-long")) == [
        "HOB-0000000003",
        "HOB-0000000004",
        "HOB-0000000005",
    ]


async def test_switch_to_long_ids_when_short_ids_overflow(
    zk: ZooKeeper, root: str, store: LedgerMetadataStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    real = store._next_sequence

    async def overflowing(parent: str, *, makepath: bool = True) -> int:
        seq = await real(parent, makepath=makepath)
        return layout.INT_MAX if parent.endswith("/idgen") else seq

    monkeypatch.setattr(store, "_next_sequence", overflowing)
    lid = await store.generate_ledger_id()
    assert lid == 1 << 32
    assert await zk.exists(f"{root}/idgen-long/HOB-0000000001")
    assert await store.generate_ledger_id() == (1 << 32) | 1
    # A fresh store sees idgen-long and goes straight to long ids.
    assert await LedgerMetadataStore(zk, root).generate_ledger_id() == (1 << 32) | 2


# ---------------------------------------------------------------------------
# create / read / write / delete
# ---------------------------------------------------------------------------


async def test_create_read_and_compare_and_set(
    zk: ZooKeeper, root: str, store: LedgerMetadataStore
) -> None:
    lid = await store.generate_ledger_id()
    md, version = await store.create(new_md(lid))
    assert version == 0 and md.ctoken is not None and md.ctoken >= 0
    path = layout.ledger_path(root, lid)
    raw, stat = await zk.get(path)
    assert raw == serialize(md) and raw.startswith(b"BookieMetadataFormatVersion\t3\n")
    assert await store.read(lid) == (md, 0)
    assert await store.exists(lid) and not await store.exists(lid + 1)

    with pytest.raises(LedgerExistsError):
        await store.create(new_md(lid))

    closed = md.replace(
        state=LedgerState.CLOSED,
        last_entry_id=10,
        length=1000,
        close_context=LedgerCloseContext.no_more_data(expect_delete_after=1700000100000),
        seal_time=1700000050000,
    )
    assert await store.write(closed, 0) == 1
    assert await store.read(lid) == (closed, 1)
    assert (await zk.get(path))[0].startswith(b"BookieMetadataFormatVersion\t4\n")

    with pytest.raises(MetadataVersionError):
        await store.write(md, 0)  # stale version
    assert await store.read(lid) == (closed, 1)

    with pytest.raises(NoSuchLedgerError):
        await store.read(lid + 1)
    with pytest.raises(NoSuchLedgerError):
        await store.write(new_md(lid + 1), 0)


async def test_create_that_landed_before_connection_loss_is_recognised(
    store: LedgerMetadataStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    zk = store.zk
    real_create = zk.create
    calls = 0

    async def create_then_lose_connection(*args, **kwargs):
        nonlocal calls
        calls += 1
        result = await real_create(*args, **kwargs)
        if calls == 1:
            raise ConnectionLossError()
        return result

    monkeypatch.setattr(zk, "create", create_then_lose_connection)
    md, version = await store.create(new_md(77))
    assert calls == 2 and version == 0
    assert await store.read(77) == (md, 0)


async def test_write_that_landed_before_connection_loss_is_recognised(
    store: LedgerMetadataStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    md, _ = await store.create(new_md(78))
    zk = store.zk
    real_set = zk.set
    calls = 0

    async def set_then_lose_connection(*args, **kwargs):
        nonlocal calls
        calls += 1
        result = await real_set(*args, **kwargs)
        if calls == 1:
            raise ConnectionLossError()
        return result

    monkeypatch.setattr(zk, "set", set_then_lose_connection)
    closed = md.replace(state=LedgerState.CLOSED, last_entry_id=0, length=1)
    assert await store.write(closed, 0) == 1
    assert calls == 2
    # ...but a genuinely stale write still fails after a retry.
    calls = 0
    with pytest.raises(MetadataVersionError):
        await store.write(md, 0)


async def test_delete_prunes_empty_buckets_only(
    zk: ZooKeeper, root: str, store: LedgerMetadataStore
) -> None:
    for lid in (1, 2, 12345678, 2**40):
        await store.create(new_md(lid))
    await store.delete(12345678)
    assert not await zk.exists(f"{root}/00/1234")  # bucket pruned
    assert await zk.exists(f"{root}/00/0000/L0001")

    await store.delete(1)
    assert await zk.exists(f"{root}/00/0000")  # ledger 2 still lives there
    _, version = await store.read(2)
    with pytest.raises(MetadataVersionError):
        await store.delete(2, version=version + 1)
    await store.delete(2, version=version)
    assert not await zk.exists(f"{root}/00")

    await store.delete(2**40)
    assert not await zk.exists(f"{root}/000")
    assert await zk.exists(root)  # never the root itself
    await store.delete(2**40)  # already gone: fine, as in BookKeeper
    with pytest.raises(NoSuchLedgerError):
        await store.read(2**40)


async def test_read_existing_skips_ledgers_deleted_since_the_listing(
    store: LedgerMetadataStore,
) -> None:
    ids = [5, 3, 9, 2**40]
    for i in ids:
        await store.create(new_md(i))
    await store.delete(9)
    mds = await store.read_existing(ids)
    assert [md.ledger_id for md in mds] == [5, 3, 2**40]  # the order asked, 9 left out
    assert mds[0] == (await store.read(5))[0]


async def test_list_ledgers_walks_both_layouts_and_skips_reserved(
    zk: ZooKeeper, root: str, store: LedgerMetadataStore
) -> None:
    for name in (
        "available/readonly",
        "cookies/b1:3181",
        "underreplication",
        "INSTANCEID",
        "idgen",
        "idgen-long/HOB-0000000001",
        "ORPHANED/5",
        "ID-0000000003",
    ):
        await zk.ensure_path(f"{root}/{name}")
    await zk.create(f"{root}/LAYOUT", layout.LAYOUT_DATA)
    ids = [0, 1, 1234, 10000, 99999999, 2**31 - 2, 2**31 - 1, 2**32 + 5, 2**63 - 1]
    await asyncio.gather(*(store.create(new_md(i)) for i in ids))
    await zk.ensure_path(f"{root}/00/0000/junk")  # not a ledger: ignored
    assert await store.list_ledgers() == sorted(ids)
    await store.delete(1234)
    assert await store.list_ledgers() == sorted(set(ids) - {1234})


async def test_list_ledgers_of_an_empty_or_missing_root(zk: ZooKeeper, root: str) -> None:
    assert await LedgerMetadataStore(zk, root).list_ledgers() == []
    assert await LedgerMetadataStore(zk, root + "-missing").list_ledgers() == []


async def test_read_rejects_corrupt_znode(
    zk: ZooKeeper, root: str, store: LedgerMetadataStore
) -> None:
    from dlog.errors import MetadataSerializationError

    await zk.create(
        layout.ledger_path(root, 5), b"BookieMetadataFormatVersion\t2\nx", makepath=True
    )
    with pytest.raises(MetadataSerializationError, match="version 2"):
        await store.read(5)


# ---------------------------------------------------------------------------
# watches
# ---------------------------------------------------------------------------


async def _next(queue: asyncio.Queue) -> object:
    return await asyncio.wait_for(queue.get(), timeout=10)


async def test_watch_sees_ensemble_change_close_and_delete(store: LedgerMetadataStore) -> None:
    md, version = await store.create(new_md(42))
    seen: asyncio.Queue = asyncio.Queue()
    handle = store.watch(42, seen.put_nowait)

    assert await _next(seen) == (md, version)  # the current value first

    changed = md.with_ensemble(5, ["b1:3181", "b4:3181", "b3:3181"])
    version = await store.write(changed, version)
    got_md, got_version = await _next(seen)
    assert got_version == version and got_md.ensemble_for(5) == ("b1:3181", "b4:3181", "b3:3181")

    closed = changed.replace(state=LedgerState.CLOSED, last_entry_id=9, length=90)
    version = await store.write(closed, version)
    got_md, got_version = await _next(seen)
    assert got_md.is_closed and got_md.last_entry_id == 9 and got_version == version

    await store.delete(42)
    assert await _next(seen) is None
    await asyncio.wait_for(handle.wait(), timeout=10)
    assert handle.done and seen.empty()


async def test_watch_with_async_callback_and_cancel(store: LedgerMetadataStore) -> None:
    md, version = await store.create(new_md(43))
    seen: list = []
    first = asyncio.Event()

    async def callback(value) -> None:
        seen.append(value)
        first.set()

    handle = store.watch(43, callback)
    await asyncio.wait_for(first.wait(), timeout=10)
    handle.cancel()
    await handle.wait()
    await store.write(md.replace(state=LedgerState.IN_RECOVERY), version)
    await asyncio.sleep(0.2)
    assert seen == [(md, version)]


async def test_watch_on_a_missing_ledger_reports_none(store: LedgerMetadataStore) -> None:
    seen: asyncio.Queue = asyncio.Queue()
    handle = store.watch(404, seen.put_nowait)
    assert await _next(seen) is None
    await asyncio.wait_for(handle.wait(), timeout=10)


async def test_one_shot_watch_through_read(zk: ZooKeeper, store: LedgerMetadataStore) -> None:
    md, version = await store.create(new_md(44))
    fired: asyncio.Future = asyncio.get_running_loop().create_future()
    await store.read(44, watch=lambda ev: fired.done() or fired.set_result(ev))
    await store.write(md.replace(state=LedgerState.IN_RECOVERY), version)
    event = await asyncio.wait_for(fired, timeout=10)
    assert event.path == store.ledger_path(44)
    # The raw bytes a BookKeeper client would read.
    raw, _ = await zk.get(store.ledger_path(44))
    assert deserialize(raw, 44).state is LedgerState.IN_RECOVERY


async def test_missing_node_errors_are_not_leaked_as_kazoo(store: LedgerMetadataStore) -> None:
    with pytest.raises(NoSuchLedgerError):
        await store.read(999)
    with pytest.raises(NoSuchLedgerError):
        await store.write(new_md(999), 3)
    assert not issubclass(NoSuchLedgerError, NoNodeError)
