"""Choosing a subscriptions store: the one place that builds them.

``logSegmentBasedSubscriptionsStoreEnabled`` picks the store a stream's
consumers use (:func:`configured_store`); tools that must write one
format whatever the flag says (migration, ``dlog subscriptions reset``,
which keeps a subscriber's format) name it (:func:`store_for`). Both
stores read both formats.
"""

from __future__ import annotations

from dlog.conf.dlog import DLogConfig
from dlog.stream import StreamContext
from subscriptions.format import SEGMENT_FORMAT, ZK_FORMAT
from subscriptions.log_segment import LogSegmentSubscriptionsStore
from subscriptions.store import SubscriptionsStore
from subscriptions.zk_store import ZKSubscriptionsStore

__all__ = ["configured_format", "configured_store", "store_for"]


def store_for(ctx: StreamContext, fmt: str) -> SubscriptionsStore:
    """A new store of one stream writing ``fmt`` (ZK_FORMAT or SEGMENT_FORMAT)."""
    if fmt == SEGMENT_FORMAT:
        return LogSegmentSubscriptionsStore(ctx)
    if fmt == ZK_FORMAT:
        return ZKSubscriptionsStore(ctx)
    raise ValueError(f"unknown subscriptions format {fmt!r}")


def configured_format(conf: DLogConfig) -> str:
    """The format ``logSegmentBasedSubscriptionsStoreEnabled`` selects."""
    return SEGMENT_FORMAT if conf.log_segment_based_subscriptions_store_enabled else ZK_FORMAT


def configured_store(ctx: StreamContext) -> SubscriptionsStore:
    """The store the stream's configuration selects."""
    return store_for(ctx, configured_format(ctx.conf))
