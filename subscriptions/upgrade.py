"""Move older dlog releases' log-segment subscriber records beside a
DistributedLog position, so Java readers see where each consumer is.

Older releases kept a log-segment subscription's record (``HEADER`` +
``Subscription``) in the subscriber znode itself, which Java's
``ZKSubscriptionStateStore`` reads as an invalid DLSN and so as "from the
start". :func:`move_inline_records` rewrites each such subscriber in one
transaction, a compare-and-set on the znode's version: the znode gets the
record's ``last_commit_dlsn`` in DistributedLog's format and the record
moves, unchanged, to the ``segment`` child (see :mod:`subscriptions.format`).

Nothing about the subscription changes but where its record is, so no
segment needs fencing. An older release's owner still appending to the
segment keeps doing so safely; its next segment switch, a compare-and-set
at its own version, fails and it stops (SubscriptionFencedError), as when
any other process takes over. Because that interrupts a running consumer,
a subscriber with a live owner is refused, as ``dlog namespace upgrade``
refuses streams with live writers. Reading needs none of this: every
store reads the inline record too, and a consumer's first write moves it.
"""

from __future__ import annotations

import logging

from dlog.errors import LogError, SubscriptionFencedError
from dlog.zk import (
    BadVersionError,
    NodeExistsError,
    NoNodeError,
    TransactionOp,
    ZooKeeper,
    first_error,
)
from subscriptions.format import HEADER, RECORD, decode_record, encode_zk_position
from subscriptions.store import ATTEMPTS, OWNER

log = logging.getLogger(__name__)

__all__ = ["LiveSubscriberError", "move_inline_records"]


class LiveSubscriberError(LogError):
    """A subscriber with an inline record has a live owner: moving the record
    would stop that consumer at its next segment switch."""


async def move_inline_records(
    zk: ZooKeeper, subscribers_path: str, *, dry_run: bool = False
) -> list[str]:
    """Move every inline record under ``subscribers_path``; returns the
    subscribers moved (or, in a dry run, that would be). Checks every one
    for a live owner before moving any."""
    try:
        ids = sorted(await zk.get_children(subscribers_path))
    except NoNodeError:
        return []
    inline = []
    for sid in ids:
        path = f"{subscribers_path}/{sid}"
        try:
            data, _ = await zk.get(path)
        except NoNodeError:
            continue
        if not data.startswith(HEADER):
            continue
        owner = await zk.exists(f"{path}/{OWNER}")
        if owner is not None:
            raise LiveSubscriberError(
                f"{path} is owned by a live consumer (session 0x{owner.ephemeralOwner:x}); "
                f"stop it first"
            )
        inline.append(sid)
    if dry_run:
        return inline
    moved = [sid for sid in inline if await _move(zk, f"{subscribers_path}/{sid}")]
    for sid in moved:
        log.info(
            "moved the subscription record of %s/%s to its %s child", subscribers_path, sid, RECORD
        )
    return moved


async def _move(zk: ZooKeeper, path: str) -> bool:
    """One subscriber; False if it is no longer inline (or gone)."""
    for _ in range(ATTEMPTS):
        try:
            data, stat = await zk.get(path)
        except NoNodeError:
            return False
        if not data.startswith(HEADER):
            return False  # a consumer's write moved it meanwhile
        record = decode_record(data, path)
        ops: list[TransactionOp] = [
            ("set_data", (path, encode_zk_position(record.last_commit)), {"version": stat.version}),
            ("create", (f"{path}/{RECORD}", bytes(data)), {}),
        ]
        error = first_error(await zk.transaction(ops))
        if error is None:
            return True
        if not isinstance(error, (BadVersionError, NodeExistsError, NoNodeError)):
            raise error
        # Changed meanwhile (or our own retried write landed): look again.
    raise SubscriptionFencedError(f"{path} kept changing while its record was moved")
