"""BP-44 orphan audit against a real ZooKeeper: both orphan kinds are
listed under ORPHANED, nothing else is, and the index follows the ledgers."""

from __future__ import annotations

import pytest

from dlog.ledger.client import BookKeeper
from dlog.ledger.metadata import (
    LedgerCloseContext,
    LedgerCreateContext,
    LedgerMetadata,
    LedgerState,
)
from dlog.ledger.orphans import Orphan, OrphanReason, audit_orphans, list_orphaned
from dlog.protocol import orphans as fmt
from dlog.zk import ZooKeeper

NOW = 1_700_000_000_000
GRACE = 60_000


def md(ledger_id: int, *, closed: bool = True, delete_after: int | None = None, **kw):  # type: ignore[no-untyped-def]
    fields: dict[str, object] = dict(
        ledger_id=ledger_id,
        ensemble_size=1,
        write_quorum_size=1,
        ack_quorum_size=1,
        ensembles=((0, ("b1:3181",)),),
        ctime=NOW - 10_000_000,
    )
    if closed:
        fields.update(state=LedgerState.CLOSED, last_entry_id=3, length=40)
        if delete_after is not None:
            fields["close_context"] = LedgerCloseContext.inactive(expect_delete_after=delete_after)
    elif delete_after is not None:
        raise ValueError("an open ledger has no close context")
    fields.update(kw)
    return LedgerMetadata(**fields)  # type: ignore[arg-type]


def child_of(parent: int) -> LedgerCreateContext:
    return LedgerCreateContext(child_of_ledger=parent, part_of_data_set="x")


@pytest.fixture
async def bk(ledgers_uri: str, zk: ZooKeeper):  # type: ignore[no-untyped-def]
    async with BookKeeper(ledgers_uri) as client:
        await zk.ensure_path(client.metadata_store.ledgers_root)
        yield client


async def put(bk: BookKeeper, *mds: LedgerMetadata) -> None:
    for m in mds:
        await bk.metadata_store.create(m)


async def test_both_kinds_are_listed_and_nothing_else(bk: BookKeeper, zk: ZooKeeper) -> None:
    root = bk.metadata_store.ledgers_root
    assert await list_orphaned(zk, root) == []  # no audit ran yet
    await put(
        bk,
        md(10, delete_after=NOW - GRACE - 1),  # overdue
        md(11, delete_after=NOW + 3_600_000),  # healthy: deletion is due later
        md(12, delete_after=NOW - GRACE + 1),  # overdue, but within the grace period
        md(13, delete_after=NOW - GRACE),  # exactly at the end of the grace period
        md(14),  # closed without expectDeleteAfter
        md(15, closed=False),  # open
        md(16, create_context=child_of(999)),  # parent 999 does not exist
        md(17, create_context=child_of(10)),  # parent exists
        md(18, closed=False, create_context=child_of(998)),  # open child, missing parent
        md(19, close_context=LedgerCloseContext.no_more_data()),  # close context, no instant
    )
    expected = [
        Orphan(10, OrphanReason.DELETE_OVERDUE, NOW - GRACE - 1),
        Orphan(16, OrphanReason.BROKEN_PARENT_REF, 999),
        Orphan(18, OrphanReason.BROKEN_PARENT_REF, 998),
    ]
    assert await audit_orphans(bk, grace_ms=GRACE, now_ms=NOW) == expected
    assert await list_orphaned(zk, root) == expected
    assert sorted(await zk.get_children(fmt.orphaned_path(root))) == ["10", "16", "18"]
    # the index is not a ledger
    assert await bk.list_ledgers() == list(range(10, 20))


async def test_the_index_follows_the_ledgers(bk: BookKeeper, zk: ZooKeeper) -> None:
    root = bk.metadata_store.ledgers_root
    await put(bk, md(1, delete_after=NOW - 2 * GRACE), md(2, create_context=child_of(77)))
    await put(bk, md(3, delete_after=NOW))
    found = await audit_orphans(bk, grace_ms=GRACE, now_ms=NOW)
    assert [o.ledger_id for o in found] == [1, 2]
    # A foreign or stale child is removed, a changed record is rewritten.
    await zk.create(fmt.orphan_znode(root, 555), b"1 DELETE_OVERDUE 1")
    await zk.set(fmt.orphan_znode(root, 1), b"1 DELETE_OVERDUE 5")
    assert await audit_orphans(bk, grace_ms=GRACE, now_ms=NOW) == found
    assert await list_orphaned(zk, root) == found
    # The overdue orphan is deleted at last; the parent of 2 appears; 3 becomes overdue.
    await bk.metadata_store.delete(1)
    await put(bk, md(77))
    later = NOW + 2 * GRACE
    again = await audit_orphans(bk, grace_ms=GRACE, now_ms=later)
    assert again == [Orphan(3, OrphanReason.DELETE_OVERDUE, NOW)]
    assert await list_orphaned(zk, root) == again
    assert await zk.get_children(fmt.orphaned_path(root)) == ["3"]
    # A larger grace period forgives it again.
    assert await audit_orphans(bk, grace_ms=10 * GRACE, now_ms=later) == []
    assert await list_orphaned(zk, root) == []


async def test_list_orphaned_skips_what_it_cannot_read(bk: BookKeeper, zk: ZooKeeper) -> None:
    root = bk.metadata_store.ledgers_root
    base = fmt.orphaned_path(root)
    await zk.create(f"{base}/5", b"1 BROKEN_PARENT_REF 4", makepath=True)
    await zk.create(f"{base}/6", b"9 SOMETHING NEW")
    await zk.create(f"{base}/junk", b"")
    assert await list_orphaned(zk, root) == [Orphan(5, OrphanReason.BROKEN_PARENT_REF, 4)]


async def test_default_now_is_the_wall_clock(bk: BookKeeper) -> None:
    await put(bk, md(1, delete_after=1_000), md(2, delete_after=2**62))
    found = await audit_orphans(bk, grace_ms=0)
    assert found == [Orphan(1, OrphanReason.DELETE_OVERDUE, 1_000)]


def test_find_orphan_rules() -> None:
    """The pure rule: an open ledger is never DELETE_OVERDUE (even with a
    close context, as an IN_RECOVERY rewrite could leave), and a parent in
    the known set is not missing."""
    from dlog.ledger.orphans import find_orphan

    overdue = LedgerCloseContext.inactive(expect_delete_after=0)
    for state in (LedgerState.OPEN, LedgerState.IN_RECOVERY):
        m = md(1, closed=False, close_context=overdue, state=state)
        assert find_orphan(m, now_ms=NOW, grace_ms=0, existing=set()) is None
    child = md(2, create_context=child_of(1))
    assert find_orphan(child, now_ms=NOW, grace_ms=0, existing={1, 2}) is None
    assert find_orphan(child, now_ms=NOW, grace_ms=0, existing={2}) == Orphan(
        2, OrphanReason.BROKEN_PARENT_REF, 1
    )
    both = md(3, delete_after=0, create_context=child_of(1))
    assert find_orphan(both, now_ms=NOW, grace_ms=0, existing=set()).reason is (
        OrphanReason.DELETE_OVERDUE
    )


async def test_a_parent_created_after_the_listing_is_found(bk: BookKeeper, zk: ZooKeeper) -> None:
    """The audit looks a missing parent up again before flagging its child."""
    from dlog.ledger import orphans

    await put(bk, md(2, create_context=child_of(1)))
    real = bk.metadata_store.list_ledgers

    async def listing_then_parent_created() -> list[int]:
        ids = await real()
        await put(bk, md(1))
        return ids

    bk.metadata_store.list_ledgers = listing_then_parent_created  # type: ignore[method-assign]
    try:
        assert await orphans.audit_orphans(bk, grace_ms=0, now_ms=NOW) == []
    finally:
        bk.metadata_store.list_ledgers = real  # type: ignore[method-assign]
