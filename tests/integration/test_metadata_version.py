"""``ledgerMetadataVersion`` on create and on rewrite: format 4 (BP-44
contexts) is written only where the setting allows it: a client set to 3
writes format 3 on create and on every rewrite, dropping the hints of a
ledger another client stored as format 4, so a cluster shared with Java
clients only ever holds what BookKeeper reads; every setting reads format 4."""

from __future__ import annotations

import pytest

from dlog.conf.bookkeeper import ClientConfig
from dlog.ledger.client import BookKeeper
from dlog.ledger.metadata import (
    CloseReason,
    LedgerCloseContext,
    LedgerCreateContext,
    LedgerMetadata,
    LedgerOwner,
    LedgerState,
)
from dlog.ledger.metadata_store import LedgerMetadataStore
from dlog.zk import ZooKeeper

CTX = LedgerCreateContext(
    created_by=LedgerOwner("E", "S", "svc", "host"),
    part_of_data_set="ns/stream",
    expected_max_open_duration_ms=60_000,
)
CLOSE = LedgerCloseContext.no_more_data(expect_delete_after=1_700_000_100_000)


def new_md(ledger_id: int, **kw: object) -> LedgerMetadata:
    fields: dict[str, object] = dict(
        ledger_id=ledger_id,
        ensemble_size=3,
        write_quorum_size=2,
        ack_quorum_size=2,
        ensembles=((0, ("b1:3181", "b2:3181", "b3:3181")),),
        password=b"pw",
        ctime=1_700_000_000_000,
    )
    fields.update(kw)
    return LedgerMetadata(**fields)  # type: ignore[arg-type]


@pytest.fixture
async def stores(zk: ZooKeeper, zk_root: str) -> dict[int, LedgerMetadataStore]:
    root = f"{zk_root}/ledgers"
    await zk.ensure_path(root)
    return {v: LedgerMetadataStore(zk, root, v) for v in (-1, 3, 4)}


async def header(zk: ZooKeeper, store: LedgerMetadataStore, ledger_id: int) -> bytes:
    data, _ = await zk.get(store.ledger_path(ledger_id))
    return data.split(b"\n", 1)[0]


@pytest.mark.parametrize("setting", [-1, 4])
async def test_default_and_4_write_format_4_only_with_bp44_fields(
    zk: ZooKeeper, stores: dict[int, LedgerMetadataStore], setting: int
) -> None:
    s = stores[setting]
    plain, _ = await s.create(new_md(1))
    assert plain.format_version == 3 and await header(zk, s, 1) == b"BookieMetadataFormatVersion\t3"
    md, _ = await s.create(new_md(2, create_context=CTX))
    assert await header(zk, s, 2) == b"BookieMetadataFormatVersion\t4"
    assert (await s.read(2))[0].create_context == CTX


async def test_setting_3_creates_format_3_without_contexts(
    zk: ZooKeeper, stores: dict[int, LedgerMetadataStore]
) -> None:
    s3 = stores[3]
    md, version = await s3.create(new_md(1, create_context=CTX))
    assert await header(zk, s3, 1) == b"BookieMetadataFormatVersion\t3"
    stored, _ = await s3.read(1)
    assert stored.create_context is None and stored.ctime == 1_700_000_000_000
    assert md == stored  # the handle shows what is stored
    # Its close under 3: the close context and seal time are dropped, it stays 3.
    closed = stored.replace(
        state=LedgerState.CLOSED, last_entry_id=4, length=50, close_context=CLOSE, seal_time=9
    )
    await s3.write(closed, version)
    again, version = await s3.read(1)
    assert (again.close_context, again.seal_time, again.create_context) == (None, None, None)
    assert again.is_closed and await header(zk, s3, 1) == b"BookieMetadataFormatVersion\t3"
    # A client set to -1 rewriting it may make it format 4 (its setting allows it).
    await stores[-1].write(again.replace(close_context=CLOSE), version)
    assert (await stores[3].read(1))[0].close_context == CLOSE
    assert await header(zk, s3, 1) == b"BookieMetadataFormatVersion\t4"


async def test_a_client_set_to_3_rewrites_a_format_4_ledger_as_format_3(
    zk: ZooKeeper, stores: dict[int, LedgerMetadataStore]
) -> None:
    """The setting is what this client writes, on create and on rewrite: a
    cluster shared with Java clients sets 3, and every ledger it touches
    (an ensemble change, a re-replication, a recovery's close) comes out
    readable by BookKeeper. The BP-44 hints are what that costs."""
    s4, s3 = stores[-1], stores[3]
    await s4.create(new_md(7, create_context=CTX))
    assert await header(zk, s3, 7) == b"BookieMetadataFormatVersion\t4"
    # The client set to 3 reads it fine...
    md, version = await s3.read(7)
    assert md.create_context == CTX
    # ...and its ensemble change (what a re-replication does) writes format 3.
    await s3.write(md.with_ensemble(0, ("b1:3181", "b2:3181", "b4:3181")), version)
    md, version = await s3.read(7)
    assert md.create_context is None and md.last_ensemble[2] == "b4:3181"
    assert await header(zk, s3, 7) == b"BookieMetadataFormatVersion\t3"
    closed = md.replace(
        state=LedgerState.CLOSED, last_entry_id=0, length=1, close_context=CLOSE, seal_time=5
    )
    await s3.write(closed, version)
    md, _ = await s3.read(7)
    assert (md.create_context, md.close_context, md.seal_time) == (None, None, None)
    assert await header(zk, s3, 7) == b"BookieMetadataFormatVersion\t3"


async def test_ctime_is_stored_when_a_create_context_is_given(make_bookie, ledgers_uri) -> None:  # type: ignore[no-untyped-def]
    for i in range(3):
        await make_bookie(f"b{i}")
    conf = ClientConfig.load(
        metadataServiceUri=ledgers_uri, storeSystemtimeAsLedgerCreationTime=False
    )
    async with BookKeeper(conf=conf) as bk:
        plain = await bk.create_ledger(password=b"pw")
        with_ctx = await bk.create_ledger(password=b"pw", create_context=CTX)
        assert (await bk.ledger_metadata(plain.ledger_id)).ctime is None
        ctime = (await bk.ledger_metadata(with_ctx.ledger_id)).ctime
        assert ctime is not None and ctime > 1_600_000_000_000
    async with BookKeeper(conf=conf.with_overrides({"ledgerMetadataVersion": 3})) as bk3:
        # Under 3 the context is not stored, the ctime still is.
        wh = await bk3.create_ledger(password=b"pw", create_context=CTX)
        md = await bk3.ledger_metadata(wh.ledger_id)
        assert md.create_context is None and md.ctime is not None


async def test_a_client_set_to_3_recovers_and_reads_a_format_4_ledger(
    make_bookie, ledgers_uri
) -> None:  # type: ignore[no-untyped-def]
    for i in range(3):
        await make_bookie(f"b{i}")
    async with BookKeeper(ledgers_uri) as bk:
        wh = await bk.create_ledger(password=b"pw", create_context=CTX)
        for i in range(5):
            await wh.append(b"e%d" % i)
        closed = await bk.create_ledger(password=b"pw", create_context=CTX)
        await closed.append(b"x")
        await closed.close(CLOSE)
        conf3 = bk.conf.with_overrides({"ledgerMetadataVersion": 3})
        async with BookKeeper(conf=conf3) as bk3:
            # recovery (fence + close) of the open v4 ledger by the v3 client
            rh = await bk3.open_ledger(wh.ledger_id, b"pw")
            assert [e.data for e in await rh.read(0, 4)] == [b"e%d" % i for i in range(5)]
            md = await bk3.ledger_metadata(wh.ledger_id)
            # Its close (a rewrite) was written as format 3: the hints are gone.
            assert md.is_closed and md.format_version == 3
            assert (md.create_context, md.seal_time) == (None, None)
            rh2 = await bk3.open_ledger(closed.ledger_id, b"pw")
            assert [e.data for e in await rh2.read(0, 0)] == [b"x"]
            md2 = rh2.metadata
            assert md2.close_context is not None
            assert md2.close_context.reason is CloseReason.NO_MORE_DATA
