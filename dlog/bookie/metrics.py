"""Prometheus metrics of one bookie, in its own registry so several
bookies can live in one process (tests) without clashing."""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram

_LATENCY_BUCKETS = (
    0.0001,
    0.00025,
    0.0005,
    0.001,
    0.002,
    0.005,
    0.01,
    0.025,
    0.05,
    0.1,
    0.25,
    0.5,
    1.0,
    2.5,
    10.0,
)


class BookieMetrics:
    def __init__(self, registry: CollectorRegistry | None = None) -> None:
        r = self.registry = registry or CollectorRegistry()
        self.add_latency = Histogram(
            "bookie_add_entry_latency_seconds",
            "From an add request's arrival to its response (durable).",
            registry=r,
            buckets=_LATENCY_BUCKETS,
        )
        self.read_latency = Histogram(
            "bookie_read_entry_latency_seconds",
            "From a read request's arrival to its response (long polls excluded).",
            registry=r,
            buckets=_LATENCY_BUCKETS,
        )
        self.journal_add_latency = Histogram(
            "bookie_journal_add_latency_seconds",
            "From a journal group's first record to the fsync that made it durable.",
            registry=r,
            buckets=_LATENCY_BUCKETS,
        )
        self.journal_fsync_latency = Histogram(
            "bookie_journal_fsync_latency_seconds",
            "Duration of one journal fdatasync.",
            registry=r,
            buckets=_LATENCY_BUCKETS,
        )
        self.journal_group_size = Histogram(
            "bookie_journal_group_entries",
            "Records per journal group commit.",
            registry=r,
            buckets=(1, 2, 5, 10, 20, 50, 100, 200, 500, 1000, 5000),
        )
        self.journal_queue = Gauge(
            "bookie_journal_queue_size", "Records waiting to be durable in the journal.", registry=r
        )
        self.flush_latency = Histogram(
            "bookie_ledger_storage_flush_latency_seconds",
            "Duration of a ledger storage flush (write cache to entry logs and index).",
            registry=r,
            buckets=_LATENCY_BUCKETS,
        )
        self.checkpoint_latency = Histogram(
            "bookie_checkpoint_latency_seconds",
            "Duration of a checkpoint.",
            registry=r,
            buckets=_LATENCY_BUCKETS,
        )
        self.write_cache_size = Gauge(
            "bookie_write_cache_size_bytes",
            "Bytes held in the write cache (both halves).",
            registry=r,
        )
        self.read_cache_size = Gauge(
            "bookie_read_cache_size_bytes", "Bytes held in the read-ahead cache.", registry=r
        )
        self.requests = Counter(
            "bookie_requests",
            "Requests answered, by operation and status.",
            ["operation", "status"],
            registry=r,
        )
        self.throttled_adds = Counter(
            "bookie_throttled_adds", "Adds that had to wait for write cache space.", registry=r
        )
        self.write_close = Counter(
            "bookie_write_close_requests",
            "BP-32 write-close hints received.",
            ["known"],
            registry=r,
        )
        self.read_only = Gauge("bookie_read_only", "1 while the bookie is read-only.", registry=r)
        self.connections = Gauge("bookie_connections", "Open client connections.", registry=r)
        self.closed_connections = Counter(
            "bookie_protocol_errors",
            "Connections closed for a protocol violation.",
            ["reason"],
            registry=r,
        )
