"""Move streams written by older dlog releases into DistributedLog's layout.

Older releases kept a log's znodes directly under ``<ns>/<stream>``; the
layout DistributedLog (and so a Java client) reads puts them under
``<ns>/<stream>/<default>`` with a ``version`` znode (see
:mod:`dlog.log_metadata`). :func:`upgrade_namespace` copies each old
stream's znodes (data and children, recursively) to the new place, adds
``version`` and deletes the old znodes: in one ZooKeeper transaction when
it fits, else copy then delete, in an order a second run resumes from.
While the old ``ledgers`` znode exists the new code refuses the stream,
and it is deleted last, so a half-moved stream is never read as a log.
"""

from __future__ import annotations

import dataclasses
import logging

from dlog.errors import LogError
from dlog.log_metadata import (
    LAYOUT_VERSION_DATA,
    LEDGERS,
    LEGACY_CHILDREN,
    LogMetadataStore,
    LogPaths,
)
from dlog.zk import NodeExistsError, NoNodeError, TransactionOp, ZooKeeper, first_error

log = logging.getLogger(__name__)

__all__ = ["LiveHolderError", "StreamUpgrade", "upgrade_namespace"]

#: Bytes of one transaction's znode paths and data we allow; ZooKeeper's
#: jute.maxbuffer (the request size limit) defaults to 1 MB.
MAX_TRANSACTION_BYTES = 512 * 1024
_OP_OVERHEAD = 64


class LiveHolderError(LogError):
    """A writer lock, read lock or subscriber owner of an old-layout stream is
    held (an ephemeral znode): moving it would strand its holder."""


@dataclasses.dataclass(frozen=True)
class StreamUpgrade:
    """What the upgrade did (or, in a dry run, would do) to one stream."""

    name: str
    znodes: int  # znodes moved (0: already in the new layout)
    transaction: bool  # in one transaction (else copy-then-delete)


@dataclasses.dataclass(frozen=True)
class _Node:
    rel: str  # path relative to the old stream znode, e.g. "ledgers/logrecs_..."
    data: bytes


async def _snapshot(zk: ZooKeeper, p: LogPaths) -> list[_Node]:
    """The old-layout znodes of a stream, parents before children.
    :class:`LiveHolderError` on any ephemeral znode (a live holder)."""
    nodes: list[_Node] = []

    async def walk(rel: str) -> None:
        try:
            data, stat = await zk.get(f"{p.stream}/{rel}")
            children = await zk.get_children(f"{p.stream}/{rel}")
        except NoNodeError:
            return
        if stat.ephemeralOwner:
            raise LiveHolderError(
                f"stream {p.name!r}: {p.stream}/{rel} is held by a live session "
                f"0x{stat.ephemeralOwner:x}; stop its writers and subscribers first"
            )
        nodes.append(_Node(rel, bytes(data)))
        for child in sorted(children):
            await walk(f"{rel}/{child}")

    for top in LEGACY_CHILDREN:
        await walk(top)
    return nodes


def _delete_order(nodes: list[_Node]) -> list[_Node]:
    """Children before parents, the old ``ledgers`` znode last: it marks the
    stream as not yet upgraded."""
    return sorted(reversed(nodes), key=lambda n: n.rel == LEDGERS)


async def _copy(zk: ZooKeeper, p: LogPaths, nodes: list[_Node], stop_after: int | None) -> None:
    """Create the new-layout znodes one by one; those a previous run made
    get the old data again. ``stop_after`` simulates an interruption."""
    await _create_or_set(zk, p.root, b"")
    for i, node in enumerate(nodes):
        if stop_after is not None and i >= stop_after:
            return
        await _create_or_set(zk, f"{p.root}/{node.rel}", node.data)
    await _create_or_set(zk, p.version, LAYOUT_VERSION_DATA)


async def _create_or_set(zk: ZooKeeper, path: str, data: bytes) -> None:
    try:
        await zk.create(path, data)
    except NodeExistsError:
        await zk.set(path, data)


async def _upgrade_stream(
    zk: ZooKeeper,
    store: LogMetadataStore,
    name: str,
    *,
    dry_run: bool,
    max_transaction_bytes: int,
    stop_after: int | None,
) -> StreamUpgrade:
    p = store.paths(name)
    nodes = await _snapshot(zk, p)
    if not nodes:
        return StreamUpgrade(name, 0, False)
    resumed = await zk.exists(p.root) is not None
    size = sum(len(p.root) + len(n.rel) + len(n.data) + _OP_OVERHEAD for n in nodes) * 2
    in_one = not resumed and stop_after is None and size <= max_transaction_bytes
    if dry_run:
        return StreamUpgrade(name, len(nodes), in_one)
    if in_one:
        ops: list[TransactionOp] = [("create", (p.root, b""), {})]
        ops += [("create", (f"{p.root}/{n.rel}", n.data), {}) for n in nodes]
        ops.append(("create", (p.version, LAYOUT_VERSION_DATA), {}))
        ops += [("delete", (f"{p.stream}/{n.rel}",), {}) for n in _delete_order(nodes)]
        err = first_error(await zk.transaction(ops))
        if err is None:
            log.info("upgraded stream %s (%d znodes, one transaction)", name, len(nodes))
            return StreamUpgrade(name, len(nodes), True)
        log.info("stream %s: transaction failed (%s); copying then deleting", name, err)
        nodes = await _snapshot(zk, p)  # changed or partly done meanwhile: start over
    await _copy(zk, p, nodes, stop_after)
    if stop_after is not None:
        return StreamUpgrade(name, len(nodes), False)
    for node in _delete_order(nodes):
        try:
            await zk.delete(f"{p.stream}/{node.rel}")
        except NoNodeError:
            pass
    log.info("upgraded stream %s (%d znodes, copy then delete)", name, len(nodes))
    return StreamUpgrade(name, len(nodes), False)


async def upgrade_namespace(
    zk: ZooKeeper,
    ns_path: str,
    *,
    dry_run: bool = False,
    max_transaction_bytes: int = MAX_TRANSACTION_BYTES,
    _stop_after: int | None = None,
) -> list[StreamUpgrade]:
    """Move every old-layout stream of the namespace into the new layout;
    returns one entry per stream (``znodes == 0``: nothing to do). Checks
    every stream for live holders before moving any. ``_stop_after`` (tests
    only) stops each copy after that many znodes, as a crash would."""
    store = LogMetadataStore(zk, ns_path)
    names = await store.get_logs()
    for name in names:
        await _snapshot(zk, store.paths(name))  # refuse before changing anything
    return [
        await _upgrade_stream(
            zk,
            store,
            name,
            dry_run=dry_run,
            max_transaction_bytes=max_transaction_bytes,
            stop_after=_stop_after,
        )
        for name in names
    ]
