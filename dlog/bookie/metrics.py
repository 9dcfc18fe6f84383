"""Prometheus metrics of one bookie, in its own registry so several
bookies can live in one process (tests) without clashing.

Hot-path metrics (per request, per journal group) are loop-local
(:mod:`dlog.loop_metrics`); gauges refreshed once a second use prometheus_client.
"""

from __future__ import annotations

import gc
import time
from typing import Any

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram

from dlog.loop_metrics import LoopMetrics


class BookieMetrics:
    def __init__(self, registry: CollectorRegistry | None = None) -> None:
        r = self.registry = registry or CollectorRegistry()
        loop = self.loop = LoopMetrics(r)
        self.add_latency = loop.histogram(
            "bookie_add_entry_latency_seconds",
            "From an add request's arrival to its response (durable).",
        )
        self.read_latency = loop.histogram(
            "bookie_read_entry_latency_seconds",
            "From a read request's arrival to its response (long polls excluded).",
        )
        self.journal_add_latency = loop.histogram(
            "bookie_journal_add_latency_seconds",
            "From a journal group's first record to the fsync that made it durable "
            "(counted for each record of the group).",
        )
        self.journal_fsync_latency = loop.histogram(
            "bookie_journal_fsync_latency_seconds",
            "Duration of one journal fdatasync (one per batch of groups).",
        )
        # The stages of an add's journal latency, so a tail can be traced:
        # queue + write + fsync + callback = arrival in the journal to response.
        # Queue and callback are counted per record, as the adds wait them;
        # write and fsync per batch, as the operations they are.
        self.journal_queue_latency = loop.histogram(
            "bookie_journal_queue_latency_seconds",
            "From a journal group's first record to the journal's writer process taking it "
            "(group wait plus queueing behind the batch being written), counted "
            "for each record of the group.",
        )
        self.journal_write_latency = loop.histogram(
            "bookie_journal_write_latency_seconds",
            "Writing one batch of groups to the journal file (before its fsync).",
        )
        self.journal_callback_latency = loop.histogram(
            "bookie_journal_callback_latency_seconds",
            "From a batch's fsync to its callbacks having run on the event loop "
            "(the wake-up of the loop plus the responses), counted for each record "
            "of the batch.",
        )
        self.journal_group_size = loop.histogram(
            "bookie_journal_group_entries",
            "Records per journal group commit.",
            buckets=(1, 2, 5, 10, 20, 50, 100, 200, 500, 1000, 5000),
        )
        self.flush_latency = loop.histogram(
            "bookie_ledger_storage_flush_latency_seconds",
            "Duration of a ledger storage flush (write cache to entry logs and index).",
        )
        self.checkpoint_latency = loop.histogram(
            "bookie_checkpoint_latency_seconds", "Duration of a checkpoint."
        )
        self.loop_lag = loop.histogram(
            "bookie_event_loop_lag_seconds",
            "How late the event loop runs a timer: time it was blocked.",
        )
        self.requests = loop.counter(
            "bookie_requests",
            "Requests answered, by operation and status.",
            ["operation", "status"],
        )
        self.throttled_adds = loop.counter(
            "bookie_throttled_adds", "Adds that had to wait for write cache space."
        )
        self.flush_turns = loop.counter(
            "bookie_ledger_storage_flush_turns",
            "Turns the event loop lent paced flushes (dlog.bookie.pacer), by outcome: "
            "granted; overrun (a slice outlasted its turn and ran beside the loop); "
            "missed (the flush waited for a turn in vain and went on without one).",
            ["outcome"],
        )
        self.write_close = loop.counter(
            "bookie_write_close_requests", "BP-32 write-close hints received.", ["known"]
        )
        self.closed_connections = loop.counter(
            "bookie_connections_closed",
            "Client connections closed, by reason: peer (the client closed it), idle, "
            "frame_timeout, buffer_limit, frame_too_large, undecodable, shutdown.",
            ["reason"],
        )
        self.in_progress_pauses = loop.counter(
            "bookie_in_progress_limit_pauses",
            "Times the bookie stopped reading requests because maxAddsInProgressLimit "
            "or maxReadsInProgressLimit was reached.",
            ["operation"],
        )
        self.journal_queue = Gauge(
            "bookie_journal_queue_size", "Records waiting to be durable in the journal.", registry=r
        )
        self.write_cache_size = Gauge(
            "bookie_write_cache_size_bytes",
            "Bytes held in the write cache (both halves).",
            registry=r,
        )
        self.read_cache_size = Gauge(
            "bookie_read_cache_size_bytes", "Bytes held in the read-ahead cache.", registry=r
        )
        self.read_only = Gauge("bookie_read_only", "1 while the bookie is read-only.", registry=r)
        self.connections = Gauge("bookie_connections", "Open client connections.", registry=r)
        # Read at scrape time through set_function (see BookieServer): no lock per request.
        self.adds_in_progress = Gauge(
            "bookie_adds_in_progress", "Adds received and not yet answered.", registry=r
        )
        self.reads_in_progress = Gauge(
            "bookie_reads_in_progress",
            "Entry and LAC reads received and not yet answered (long polls excluded).",
            registry=r,
        )
        # Garbage collection (updated by the collector's thread, a few times
        # a cycle: plain prometheus_client objects).
        self.gc_reclaimed_bytes = Counter(
            "bookie_gc_reclaimed_bytes",
            "Entry log bytes given back to the disk, by how: a log with no live entry "
            "removed whole, or a log compacted.",
            ["how"],
            registry=r,
        )
        self.gc_reclaimed_logs = Counter(
            "bookie_gc_reclaimed_entry_logs",
            "Entry logs removed, by how (whole, compacted).",
            ["how"],
            registry=r,
        )
        self.gc_rewritten_bytes = Counter(
            "bookie_gc_compaction_rewritten_bytes",
            "Live entry bytes compaction copied into new logs.",
            registry=r,
        )
        self.gc_deleted_ledgers = Counter(
            "bookie_gc_deleted_ledgers",
            "Ledgers whose data this bookie dropped, by why (deleted, overreplicated).",
            ["why"],
            registry=r,
        )
        self.gc_live_ratio = Gauge(
            "bookie_gc_live_ratio",
            "Live fraction of the bytes in sealed entry logs, as of the last collection.",
            registry=r,
        )
        self.gc_cycle_latency = Histogram(
            "bookie_gc_cycle_seconds",
            "Duration of one garbage collection cycle, by kind (gc, minor, major).",
            ["kind"],
            registry=r,
        )
        self.gc_pause = Histogram(
            "bookie_python_gc_pause_seconds",
            "Python's cyclic garbage collector: each collection, by generation. It runs "
            "in whichever thread allocated, holding the interpreter lock, so a full "
            "collection stalls the event loop too.",
            ["generation"],
            buckets=(0.0005, 0.001, 0.002, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 1.0),
            registry=r,
        )
        self.buffered_frame_bytes = Gauge(
            "bookie_buffered_frame_bytes",
            "Bytes of incomplete request frames held across all connections.",
            registry=r,
        )


def observe_gc_pauses(histogram: Histogram) -> None:
    """Time every collection of Python's garbage collector into ``histogram``
    (labelled by generation), for the life of the process."""
    started = [0.0]
    children = [histogram.labels(generation=str(g)) for g in range(3)]

    def callback(phase: str, info: dict[str, Any]) -> None:
        if phase == "start":
            started[0] = time.perf_counter()
        else:
            children[info["generation"]].observe(time.perf_counter() - started[0])

    gc.callbacks.append(callback)
