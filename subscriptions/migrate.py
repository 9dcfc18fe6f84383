"""Convert subscriptions between the ZooKeeper and the log-segment formats.

    results = await migrate_subscriptions(namespace, "log-segment")
    results = await migrate_subscriptions(namespace, "zk", streams=["events"], dry_run=True)

``dlog subscriptions migrate --to log-segment|zk`` runs this. For each
subscriber of each stream (or of the streams named) it:

1. reads the position and the znode format with an admin read (which never
   fences anyone);
2. if the znode is already in the target format, stops there: "already",
   nothing written (a second run is a no-op);
3. otherwise converts it the way a consumer of the target store would: the
   target store takes ownership (``acquire``) and releases it gracefully
   (``release``). The log-segment target then leaves
   ``Subscription{segment_id unset, last_commit_dlsn = position}``; the
   ZooKeeper target leaves DistributedLog's base64 DLSN;
4. verifies with a second admin read that the znode is in the target format
   and that the position is the one before, or a later one (a live consumer
   committed meanwhile), never an earlier one.

With ``dry_run`` only step 1 runs and each result says what would happen.

Rollout, as Kafka moved offsets out of ZooKeeper (dual read, rolling
restart, cut over, reversible): upgrade every consumer (both stores read
both formats), then restart consumers with
``logSegmentBasedSubscriptionsStoreEnabled`` on (each converts its own
subscription when it opens it), then run the migration to convert the
subscriptions nobody is consuming. Rolling back is the same with the flag
off and ``--to zk``.

Why no interleaving with live consumers loses or regresses a position
---------------------------------------------------------------------

Converting *takes ownership*, exactly as a consumer of the target store
does when it opens a subscription, so the guarantees are the stores':

* From log-segment to ZooKeeper: the new owner reads the znode (version V),
  *recovers* the segment it names (the ledger is fenced on the bookies, so
  no append can be acknowledged on it afterwards, and every acknowledged
  append is on an ack quorum that recovery reads) and takes the later of its
  last record and ``last_commit_dlsn``: every acknowledged commit is
  included. It then writes the position with a compare-and-set at version
  V: if the old owner switched segments meanwhile the write fails and the
  conversion is retried from the top. The old owner's next commit fails on
  the fenced ledger (SubscriptionFencedError), so nothing it acknowledges
  can be lost afterwards.
* From ZooKeeper to log-segment: the new owner reads the position at
  version V and its first znode write is a compare-and-set at V. A commit
  by a live ZooKeeper-store consumer after the read bumps the version, the
  conversion fails and is retried from the top (so it carries that commit);
  a commit before the read is carried. Once the znode is in the log-segment
  format, the old consumer's next compare-and-set fails, it re-reads the
  znode, sees the other format and raises SubscriptionFencedError.
* Positions only move forward in both stores, a release writes the owned
  (durable) position, and the verification compares against the position
  read *before* converting: it fails loudly on a regression.

A fenced consumer stops; when it is restarted it opens the subscription
again and reads the converted position. If it is restarted with the *old*
flag it converts the subscription back (again without losing anything):
run the migration after flipping the flag, or the verification may report
that the subscription was converted back. The same happens if a
ZooKeeper-store consumer ignores SubscriptionFencedError and commits again:
that store does not remember being fenced, so its next commit takes the
subscription over again.

A ZooKeeper-store consumer has no ownership to take away: converting it to
the log-segment format needs one compare-and-set between two of its commits
(read, new ledger id, write). Against a consumer committing back to back
the conversion can keep losing that race; it is retried ``ATTEMPTS`` times
with a random pause and then reported as FAILED (nothing is lost; run it
again, or flip the consumer's flag first).
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
import random
from collections.abc import Callable, Iterable

from dlog.dlsn import DLSN
from dlog.errors import LogNotFoundError, SubscriptionFencedError
from dlog.stream import StreamCatalog, StreamContext
from subscriptions.factory import store_for
from subscriptions.format import SEGMENT_FORMAT, ZK_FORMAT
from subscriptions.store import SubscriptionsStore

log = logging.getLogger(__name__)

__all__ = [
    "ALREADY",
    "CONVERTED",
    "DRY_RUN",
    "FAILED",
    "MigrationResult",
    "format_word",
    "migrate_stream",
    "migrate_subscriber",
    "migrate_subscriptions",
    "plan",
    "store_for",
    "target_format",
]

CONVERTED = "converted"
ALREADY = "already"
DRY_RUN = "dry-run"
FAILED = "FAILED"

#: Attempts at converting one subscriber when a live owner keeps changing it.
ATTEMPTS = 8

_TARGETS = {
    "zk": ZK_FORMAT,
    "zookeeper": ZK_FORMAT,
    "log-segment": SEGMENT_FORMAT,
    "log_segment": SEGMENT_FORMAT,
    "logsegment": SEGMENT_FORMAT,
    "segment": SEGMENT_FORMAT,
}


def target_format(name: str) -> str:
    """``zk``/``zookeeper`` or ``log-segment``: the znode format (ZK_FORMAT
    or SEGMENT_FORMAT); ValueError for anything else. (Tools print a
    format in the word the user gave, :func:`format_word`.)"""
    fmt = _TARGETS.get(format_word(name))
    if fmt is None:
        raise ValueError(
            f"unknown subscriptions format {name!r}: expected zk (or zookeeper) or log-segment"
        )
    return fmt


def format_word(name: str) -> str:
    """A format name as the user spelt it, normalised for printing back:
    ``--to zk`` prints ``zk``, ``--to zookeeper`` prints ``zookeeper``."""
    return name.strip().lower()


@dataclasses.dataclass(frozen=True)
class MigrationResult:
    """One row of ``dlog subscriptions migrate``."""

    stream: str
    subscriber_id: str
    format_before: str | None
    format_after: str | None
    position_before: DLSN | None
    position_after: DLSN | None
    result: str  # CONVERTED, ALREADY, DRY_RUN or FAILED
    reason: str | None = None

    @property
    def ok(self) -> bool:
        return self.result != FAILED

    @property
    def result_text(self) -> str:
        return f"{FAILED}: {self.reason}" if self.result == FAILED else self.result


def _describe_error(e: BaseException) -> str:
    text = str(e) or type(e).__name__
    return f"{type(e).__name__}: {text}" if type(e).__name__ not in text else text


async def migrate_subscriber(
    ctx: StreamContext,
    subscriber_id: str,
    fmt: str,
    *,
    dry_run: bool = False,
    reader: SubscriptionsStore | None = None,
    attempts: int = ATTEMPTS,
) -> MigrationResult:
    """Convert one subscriber to ``fmt`` (see the module docstring).
    Never raises for a subscriber that cannot be converted: the result says
    FAILED and why."""
    own_reader = reader is None
    if reader is None:
        reader = store_for(ctx, ZK_FORMAT)  # only reads: never writes, never fences
    stream = ctx.name

    def row(**kw: object) -> MigrationResult:
        return MigrationResult(stream=stream, subscriber_id=subscriber_id, **kw)  # type: ignore[arg-type]

    before = None
    try:
        before = await reader.describe(subscriber_id)
        if before.format == "none":
            return row(
                format_before=None,
                format_after=None,
                position_before=None,
                position_after=None,
                result=FAILED,
                reason="no such subscriber (deleted meanwhile?)",
            )
        if before.format == fmt:
            return row(
                format_before=before.format,
                format_after=before.format,
                position_before=before.position,
                position_after=before.position,
                result=ALREADY,
            )
        if dry_run:
            return row(
                format_before=before.format,
                format_after=fmt,
                position_before=before.position,
                position_after=before.position,
                result=DRY_RUN,
            )
        acquired = await _convert(ctx, subscriber_id, fmt, attempts)
        after = await reader.describe(subscriber_id)
        problem = None
        if after.format != fmt:
            problem = (
                f"the znode is in the {after.format} format after converting: a consumer in "
                f"that format took the subscription back (flip its flag, then migrate again)"
            )
        elif after.position < before.position:
            problem = f"the position went back from {before.position} to {after.position}"
        elif after.position < acquired:
            problem = f"the position went back from {acquired} (converted) to {after.position}"
        return row(
            format_before=before.format,
            format_after=after.format,
            position_before=before.position,
            position_after=after.position,
            result=FAILED if problem else CONVERTED,
            reason=problem,
        )
    except asyncio.CancelledError:
        raise
    except Exception as e:
        log.info("stream %s: migrating subscriber %s failed: %s", stream, subscriber_id, e)
        return row(
            format_before=before.format if before is not None else None,
            format_after=None,
            position_before=before.position if before is not None else None,
            position_after=None,
            result=FAILED,
            reason=_describe_error(e),
        )
    finally:
        if own_reader:
            await reader.close()


async def _convert(ctx: StreamContext, subscriber_id: str, fmt: str, attempts: int) -> DLSN:
    """Take ownership with a ``fmt`` store and release it gracefully;
    retried when a live owner changes the znode under the conversion.
    Returns the position the conversion took over."""
    for attempt in range(1, attempts + 1):
        store = store_for(ctx, fmt)
        try:
            position = await store.acquire(subscriber_id)
            await store.release(subscriber_id)
            return position
        except SubscriptionFencedError as e:
            if attempt == attempts:
                raise
            log.info(
                "stream %s: subscriber %s changed while converting (%s); retrying",
                ctx.name,
                subscriber_id,
                e,
            )
            await asyncio.sleep(random.uniform(0.0, 0.02 * attempt))
        finally:
            await store.close()
    raise AssertionError("unreachable")


async def plan(ns: StreamCatalog, streams: Iterable[str] | None = None) -> list[tuple[str, str]]:
    """(stream, subscriber) pairs to migrate, sorted; a stream named in
    ``streams`` that does not exist raises LogNotFoundError."""
    if streams is None:
        names = sorted(await ns.get_logs())
    else:
        names = list(dict.fromkeys(streams))
        for name in names:
            if not await ns.log_exists(name):
                raise LogNotFoundError(f"stream {name!r} does not exist in {ns.uri}")
    out = []
    for name in names:
        reader = store_for((await ns.open_log(name)).context, ZK_FORMAT)
        out += [(name, sid) for sid in await reader.list_subscribers()]
    return out


async def migrate_stream(
    ctx: StreamContext,
    fmt: str,
    subscriber_ids: Iterable[str] | None = None,
    *,
    dry_run: bool = False,
    on_result: Callable[[MigrationResult], None] | None = None,
) -> list[MigrationResult]:
    """Migrate a stream's subscribers (all of them by default), one by one."""
    reader = store_for(ctx, ZK_FORMAT)
    try:
        ids = (
            list(subscriber_ids) if subscriber_ids is not None else await reader.list_subscribers()
        )
        results = []
        for sid in ids:
            r = await migrate_subscriber(ctx, sid, fmt, dry_run=dry_run, reader=reader)
            results.append(r)
            if on_result is not None:
                on_result(r)
        return results
    finally:
        await reader.close()


async def migrate_subscriptions(
    ns: StreamCatalog,
    to: str,
    *,
    streams: Iterable[str] | None = None,
    dry_run: bool = False,
    on_plan: Callable[[list[tuple[str, str]]], None] | None = None,
    on_result: Callable[[MigrationResult], None] | None = None,
) -> list[MigrationResult]:
    """Migrate every subscriber of ``streams`` (default: every stream of the
    namespace) to the format ``to`` (``log-segment`` or ``zk``).

    ``on_plan`` gets the (stream, subscriber) pairs before any work starts,
    ``on_result`` each result as it is known (for progress bars)."""
    fmt = target_format(to)
    todo = await plan(ns, streams)
    if on_plan is not None:
        on_plan(todo)
    by_stream: dict[str, list[str]] = {}
    for stream, sid in todo:
        by_stream.setdefault(stream, []).append(sid)
    results: list[MigrationResult] = []
    for stream, ids in by_stream.items():
        ctx = (await ns.open_log(stream)).context
        results += await migrate_stream(ctx, fmt, ids, dry_run=dry_run, on_result=on_result)
    return results
