"""dlog's own ledgers carry BP-44 contexts (stream and subscription
segments), and a segment whose delete fails is found by the orphan audit."""

from __future__ import annotations

import contextlib
import time

import pytest

from dlog.dlsn import DLSN
from dlog.ledger.metadata import CloseReason
from dlog.ledger.orphans import OrphanReason, audit_orphans, list_orphaned
from dlog.namespace import Namespace
from dlog.record import LogRecord
from dlog.zk import ZooKeeperError
from subscriptions.log_segment import LogSegmentSubscriptionsStore


@pytest.fixture
def open_ns(open_namespace):  # type: ignore[no-untyped-def]
    async def factory(**overrides: object) -> Namespace:
        return await open_namespace(logSegmentBasedSubscriptionsStoreEnabled=True, **overrides)

    return factory


async def test_stream_segments_carry_contexts(open_ns) -> None:  # type: ignore[no-untyped-def]
    ns = await open_ns(logSegmentRetentionHours=2)
    lm = await ns.open_log("ctx")
    writer = await lm.open_writer()
    await writer.write(LogRecord(1, b"a"))
    before = int(time.time() * 1000)
    await writer.close()
    ids = await ns.bk.list_ledgers()
    mds = [await ns.bk.ledger_metadata(i) for i in ids]
    segs = [m for m in mds if m.create_context and m.create_context.part_of_data_set]
    assert segs, mds
    md = segs[-1]
    ctx = md.create_context
    assert ctx is not None and ctx.created_by is not None
    assert (ctx.created_by.system, ctx.created_by.service) == ("dlog", "log-writer")
    assert ctx.part_of_data_set is not None and ctx.part_of_data_set.endswith("ctx")
    assert md.ctime is not None and md.is_closed and md.seal_time is not None
    close = md.close_context
    assert close is not None and close.reason is not None
    # expectDeleteAfter = close time + logSegmentRetentionHours
    assert close.expect_delete_after_ms is not None
    assert abs(close.expect_delete_after_ms - (before + 2 * 3600 * 1000)) < 60_000
    # healthy: not an orphan now
    assert md.ledger_id not in [o.ledger_id for o in await audit_orphans(ns.bk, grace_ms=0)]


async def test_a_subscription_segment_that_fails_to_delete_is_listed(open_ns, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    ns = await open_ns(subscriptionSegmentMaxEntries=3)
    store = (await ns.open_log("leak")).subscriptions
    assert isinstance(store, LogSegmentSubscriptionsStore)
    await store.advance_commit_position("s", DLSN(1, 1, 0))
    first = store._subs["s"].znode.segment_id
    md = await ns.bk.ledger_metadata(first)
    assert md.create_context is not None
    assert md.create_context.created_by is not None
    assert md.create_context.created_by.service == "subscriptions"
    assert md.create_context.part_of_data_set == store.data_set("s")

    async def refuse(ledger_id: int) -> None:
        raise ZooKeeperError("ZooKeeper went away")

    monkeypatch.setattr(ns.bk, "delete_ledger", refuse)
    for i in range(2, 40):
        await store.advance_commit_position("s", DLSN(1, i, 0))
        if store._subs["s"].znode.segment_id != first and first in await ns.bk.list_ledgers():
            md = await ns.bk.ledger_metadata(first)
            if md.is_closed:
                break
    assert store._subs["s"].znode.segment_id != first
    md = await ns.bk.ledger_metadata(first)  # switched away from, still there
    assert md.close_context is not None
    assert md.close_context.reason is CloseReason.MAX_ENTRY_COUNT_REACHED
    assert md.close_context.expect_delete_after_ms is not None
    later = md.close_context.expect_delete_after_ms + 1_001
    found = await audit_orphans(ns.bk, grace_ms=1_000, now_ms=later)
    assert [(o.ledger_id, o.reason) for o in found if o.ledger_id == first] == [
        (first, OrphanReason.DELETE_OVERDUE)
    ]
    listed = await list_orphaned(ns.bk.zk, ns.bk.metadata_store.ledgers_root)
    assert first in [o.ledger_id for o in listed]
    # the current segment is not an orphan
    assert store._subs["s"].znode.segment_id not in [o.ledger_id for o in listed]


async def test_a_stream_segment_past_retention_that_fails_to_delete_is_listed(  # type: ignore[no-untyped-def]
    open_ns, monkeypatch
) -> None:
    """Retention removes the segment from the stream, then its ledger's
    delete fails: the ledger is leaked, and the orphan audit lists it once
    its expectDeleteAfter (close time + retention) and the grace are past."""
    ns = await open_ns(
        logSegmentRetentionHours=0, maxLogSegmentBytes=2048, writerOutputBufferSize=1024
    )

    async def refuse(ledger_id: int) -> None:
        raise ZooKeeperError("ZooKeeper went away")

    monkeypatch.setattr(ns.bk, "delete_ledger", refuse)
    lm = await ns.open_log("ret")
    writer = await lm.open_writer()
    await writer.write_bulk([LogRecord(i, b"%04d" % i * 64) for i in range(200)])
    await writer.close()
    segment_ledgers = {
        m.ledger_id
        for m in [await ns.bk.ledger_metadata(i) for i in await ns.bk.list_ledgers()]
        if m.create_context and (m.create_context.part_of_data_set or "").endswith("ret")
    }
    assert len(segment_ledgers) > 2, segment_ledgers
    # The writer purges as it rolls; each purge fails at its first ledger.
    with contextlib.suppress(ZooKeeperError):
        while await lm.purge_expired():
            pass
    live = {s.ledger_id for s, _ in await lm.context.metadata.get_segments(lm.context.name)}
    leaked = segment_ledgers - live
    assert leaked, "retention removed no segment: the test proves nothing"
    closes = [(await ns.bk.ledger_metadata(i)).close_context for i in segment_ledgers]
    assert all(c is not None and c.expect_delete_after_ms is not None for c in closes), closes
    latest = max(c.expect_delete_after_ms for c in closes)  # type: ignore[union-attr,type-var]
    found = await audit_orphans(ns.bk, grace_ms=1_000, now_ms=latest + 1_001)
    overdue = {o.ledger_id for o in found if o.reason is OrphanReason.DELETE_OVERDUE}
    assert leaked <= overdue
    listed = {o.ledger_id for o in await list_orphaned(ns.bk.zk, ns.bk.metadata_store.ledgers_root)}
    assert leaked <= listed
    # Within the grace period nothing is listed yet.
    assert not await audit_orphans(ns.bk, grace_ms=3_600_000, now_ms=latest + 1_001)
