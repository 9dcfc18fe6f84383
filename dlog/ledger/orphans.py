"""BP-44 orphaned-ledger audit: find orphans by a full metadata scan, and
keep the ``<ledgers root>/ORPHANED`` index (:mod:`dlog.protocol.orphans`)
equal to what the last audit found.

A ledger is orphaned when (BP-44):

* ``DELETE_OVERDUE``: it is closed, its close context has ``expectDeleteAfter``,
  and it still exists more than ``grace_ms`` after that instant;
* ``BROKEN_PARENT_REF``: its create context names a ``childOfLedger`` that
  does not exist.

The auditor (:mod:`dlog.autorecovery.auditor`) runs :func:`audit_orphans`
periodically; ``dlog shell listorphaned`` reads the index with
:func:`list_orphaned`, without scanning.
"""

from __future__ import annotations

import asyncio
import logging
import time
from typing import TYPE_CHECKING

from dlog.errors import MetadataSerializationError, NoSuchLedgerError
from dlog.ledger.metadata import LedgerMetadata
from dlog.protocol import orphans as fmt
from dlog.protocol.orphans import Orphan, OrphanReason
from dlog.zk import NodeExistsError, NoNodeError, ZooKeeper

if TYPE_CHECKING:
    from dlog.ledger.client import BookKeeper

log = logging.getLogger(__name__)

__all__ = ["Orphan", "OrphanReason", "audit_orphans", "find_orphan", "list_orphaned"]

#: Metadata reads (and ORPHANED writes) an audit keeps in flight at once.
AUDIT_CONCURRENCY = 32


def find_orphan(
    md: LedgerMetadata, *, now_ms: int, grace_ms: int, existing: frozenset[int] | set[int]
) -> Orphan | None:
    """Why ``md``'s ledger is orphaned, or None. ``existing``: ledger ids
    known to exist (a parent not in it is checked again before flagging)."""
    close = md.close_context
    if (
        md.is_closed
        and close is not None
        and close.expect_delete_after_ms is not None
        and now_ms > close.expect_delete_after_ms + grace_ms
    ):
        return Orphan(md.ledger_id, OrphanReason.DELETE_OVERDUE, close.expect_delete_after_ms)
    create = md.create_context
    if (
        create is not None
        and create.child_of_ledger is not None
        and create.child_of_ledger not in existing
    ):
        return Orphan(md.ledger_id, OrphanReason.BROKEN_PARENT_REF, create.child_of_ledger)
    return None


async def audit_orphans(
    bk: BookKeeper, *, grace_ms: int, now_ms: int | None = None
) -> list[Orphan]:
    """Scan every ledger's metadata, then make ``ORPHANED`` hold exactly the
    orphans found (add new ones, update changed ones, remove those that are
    gone or no longer orphaned). Returns them sorted by ledger id.

    A ledger deleted during the scan is skipped; one whose metadata does not
    parse is logged and skipped; a parent missing from the listing is looked
    up again before its child is flagged (it may have been created since)."""
    if now_ms is None:
        now_ms = int(time.time() * 1000)
    store = bk.metadata_store
    ids = await store.list_ledgers()
    existing = set(ids)
    sem = asyncio.Semaphore(AUDIT_CONCURRENCY)

    async def check(ledger_id: int) -> Orphan | None:
        async with sem:
            try:
                md, _ = await store.read(ledger_id)
            except NoSuchLedgerError:
                return None  # deleted since the listing
            except MetadataSerializationError as e:
                log.warning("orphan audit: skipping ledger %d: %s", ledger_id, e)
                return None
            orphan = find_orphan(md, now_ms=now_ms, grace_ms=grace_ms, existing=existing)
            if (
                orphan is not None
                and orphan.reason is OrphanReason.BROKEN_PARENT_REF
                and await store.exists(orphan.argument)
            ):
                return None  # parent created after the listing
            return orphan

    found = [o for o in await asyncio.gather(*(check(i) for i in ids)) if o is not None]
    found.sort()
    await _rewrite_index(bk.zk, store.ledgers_root, found, sem)
    log.info(
        "orphan audit: %d ledger(s) scanned, %d orphaned (%d delete overdue, %d broken parent)",
        len(ids),
        len(found),
        sum(o.reason is OrphanReason.DELETE_OVERDUE for o in found),
        sum(o.reason is OrphanReason.BROKEN_PARENT_REF for o in found),
    )
    return found


async def _rewrite_index(
    zk: ZooKeeper, ledgers_root: str, found: list[Orphan], sem: asyncio.Semaphore
) -> None:
    base = fmt.orphaned_path(ledgers_root)
    await zk.ensure_path(base)
    wanted = {o.ledger_id: fmt.encode(o) for o in found}
    children = await zk.get_children(base)

    async def put(ledger_id: int, data: bytes) -> None:
        path = fmt.orphan_znode(ledgers_root, ledger_id)
        async with sem:
            try:
                current, _ = await zk.get(path)
            except NoNodeError:
                try:
                    await zk.create(path, data)
                except NodeExistsError:  # a concurrent audit (or a retried create)
                    await zk.set(path, data)
                return
            if current != data:
                await zk.set(path, data)

    async def drop(name: str) -> None:
        async with sem:
            try:
                await zk.delete(f"{base}/{name}")
            except NoNodeError:
                pass

    stale = [c for c in children if fmt.parse_child(c) not in wanted]
    await asyncio.gather(
        *(put(lid, data) for lid, data in wanted.items()), *(drop(c) for c in stale)
    )


async def list_orphaned(zk: ZooKeeper, ledgers_root: str) -> list[Orphan]:
    """What the last audit recorded under ``ORPHANED``, sorted by ledger id
    (no metadata scan). Empty when no audit ran yet. A record that does not
    parse is logged and left out."""
    base = fmt.orphaned_path(ledgers_root)
    try:
        children = await zk.get_children(base)
    except NoNodeError:
        return []
    sem = asyncio.Semaphore(AUDIT_CONCURRENCY)

    async def one(name: str) -> Orphan | None:
        ledger_id = fmt.parse_child(name)
        if ledger_id is None:
            log.warning("ignoring unexpected znode %s/%s", base, name)
            return None
        async with sem:
            try:
                data, _ = await zk.get(f"{base}/{name}")
            except NoNodeError:
                return None  # removed by an audit meanwhile
        try:
            return fmt.decode(ledger_id, data)
        except MetadataSerializationError as e:
            log.warning("ignoring %s/%s: %s", base, name, e)
            return None

    return sorted(o for o in await asyncio.gather(*(one(c) for c in children)) if o is not None)
