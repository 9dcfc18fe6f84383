"""Marking ledgers under-replicated in ZooKeeper, readable by upstream's
auditor and replication workers (and theirs by us).

The marker's path and data format are in :mod:`dlog.protocol.underreplication`.
Marking follows upstream's ZkLedgerUnderreplicationManager: the first mark
creates the znode with the missing replicas and the time (ms); a later mark
adds the replicas not yet listed and refreshes the time, or changes nothing
when every replica is already listed (so the time says when the set last
grew).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable

from dlog.errors import BadVersionError, NodeExistsError, NoNodeError
from dlog.protocol import underreplication as fmt
from dlog.zk import ZooKeeper


def _now_ms() -> int:
    return int(time.time() * 1000)


async def mark_underreplicated(
    zk: ZooKeeper,
    ledgers_root: str,
    ledger_id: int,
    missing_replicas: Iterable[str],
    *,
    clock: Callable[[], int] = _now_ms,
) -> None:
    """Record that ``ledger_id`` lacks ``missing_replicas`` (bookie ids)."""
    path = fmt.ledger_znode(ledgers_root, ledger_id)
    missing = tuple(dict.fromkeys(missing_replicas))
    while True:
        try:
            await zk.create(
                path, fmt.encode(fmt.UnderreplicatedLedger(missing, clock())), makepath=True
            )
            return
        except NodeExistsError:
            pass
        try:
            data, stat = await zk.get(path)
        except NoNodeError:
            continue  # marked replicated meanwhile: create it again
        current = fmt.decode(data)
        added = tuple(r for r in missing if r not in current.replicas)
        if not added:
            return
        updated = fmt.UnderreplicatedLedger(current.replicas + added, clock())
        try:
            await zk.set(path, fmt.encode(updated), stat.version)
            return
        except (BadVersionError, NoNodeError):
            continue  # changed or removed underneath us: start over


async def get_underreplicated(
    zk: ZooKeeper, ledgers_root: str, ledger_id: int
) -> fmt.UnderreplicatedLedger | None:
    """The ledger's marker, or None when it is not marked under-replicated."""
    try:
        data, _ = await zk.get(fmt.ledger_znode(ledgers_root, ledger_id))
    except NoNodeError:
        return None
    return fmt.decode(data)
