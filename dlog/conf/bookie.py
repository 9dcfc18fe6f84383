"""Bookie settings, with BookKeeper's ServerConfiguration key names and defaults."""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Iterator

from dlog.conf.base import Config, setting
from dlog.uri import check_metadata_service_uri

DB_LEDGER_STORAGE = "org.apache.bookkeeper.bookie.storage.ldb.DbLedgerStorage"


def _non_empty(value: list[str]) -> str | None:
    return None if value else "needs at least one directory"


def _physical_memory_mb() -> int:
    try:
        return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") // (1024 * 1024)
    except (ValueError, OSError):
        return 4096


@dataclasses.dataclass(frozen=True)
class BookieConfig(Config):
    title = "dlog bookie configuration (BookKeeper ServerConfiguration key names)"

    # -- server ------------------------------------------------------------
    bookie_port: int = setting(
        "bookiePort", 3181, "TCP port the bookie listens on.", min=1, max=65535
    )
    advertised_address: str = setting(
        "advertisedAddress",
        "",
        "Address clients use to reach this bookie, and part of its id. Empty means "
        "the address the host name resolves to.",
    )
    bookie_id: str = setting(
        "bookieId", "", "Explicit bookie id. Empty means <advertisedAddress>:<bookiePort>."
    )
    netty_max_frame_size_bytes: int = setting(
        "nettyMaxFrameSizeBytes",
        5 * 1024 * 1024,
        "Largest frame accepted on a connection; a bigger one closes that connection.",
        min=1024,
        unit="bytes",
    )
    max_adds_in_progress_limit: int = setting(
        "maxAddsInProgressLimit",
        0,
        "Most adds in progress (received, not yet answered) on the bookie; at the "
        "limit it stops reading from connections until an add completes (0 = unlimited).",
        min=0,
    )
    max_reads_in_progress_limit: int = setting(
        "maxReadsInProgressLimit",
        0,
        "Most reads in progress (entry and LAC reads; long polls waiting for the LAC "
        "do not count) on the bookie; at the limit it stops reading from connections "
        "until a read completes (0 = unlimited).",
        min=0,
    )
    frame_read_timeout_ms: int = setting(
        "frameReadTimeoutMs",
        30000,
        "A frame whose first bytes arrived must arrive in full within this time, or the "
        "connection is closed. Time the bookie itself stops reading (back-pressure) does "
        "not count (0 = no limit).",
        min=0,
        unit="ms",
    )
    connection_idle_timeout_ms: int = setting(
        "connectionIdleTimeoutMs",
        0,
        "Close a connection that sent no request for this long and has none "
        "outstanding (0 = never). Off by default: an idle connection holds a few KiB, "
        "and a request racing the close fails like a lost bookie, making a writer "
        "change its ensemble.",
        min=0,
        unit="ms",
    )
    max_buffered_frame_bytes: int = setting(
        "maxBufferedFrameBytes",
        128 * 1024 * 1024,
        "Most bytes of incomplete frames buffered across all connections; past it the "
        "connections whose frames have waited longest are closed (0 = unlimited). At "
        "least nettyMaxFrameSizeBytes.",
        min=0,
        unit="bytes",
    )
    metadata_service_uri: str = setting(
        "metadataServiceUri",
        "zk+hierarchical://localhost:2181/ledgers",
        "Where ledger metadata and bookie registrations live.",
        check=check_metadata_service_uri,
    )
    zk_timeout: int = setting("zkTimeout", 10000, "ZooKeeper session timeout.", min=1000, unit="ms")
    event_loop_stall_dump_threshold_ms: int = setting(
        "eventLoopStallDumpThresholdMs",
        0,
        "When the event loop serving requests has not run for this long, log every "
        "thread's Python stack (a WARNING in the bookie's log), once per stall. The "
        "watchdog is a thread that reads the stacks holding the interpreter lock, so a "
        "stall that is one C call holding the lock is caught as it ends, its caller "
        "still on the stack. For tracing latency spikes; 0 turns it off (dlog "
        "extension).",
        min=0,
        unit="ms",
    )
    enable_statistics: bool = setting(
        "enableStatistics", True, "Serve Prometheus metrics over HTTP."
    )
    prometheus_stats_http_address: str = setting(
        "prometheusStatsHttpAddress", "0.0.0.0", "Address of the Prometheus metrics endpoint."
    )
    prometheus_stats_http_port: int = setting(
        "prometheusStatsHttpPort",
        8000,
        "Port of the Prometheus metrics endpoint.",
        min=0,
        max=65535,
    )
    http_server_enabled: bool = setting(
        "httpServerEnabled",
        False,
        "Serve the HTTP admin API (PUT /api/v1/bookie/gc triggers garbage collection, "
        "as `dlog shell triggergc` does; GET /api/v1/bookie/gc and /api/v1/bookie/gc_details "
        "report on it).",
    )
    http_server_port: int = setting(
        "httpServerPort",
        8080,
        "Port of the HTTP admin API (0 = any free port).",
        min=0,
        max=65535,
    )
    grpc_server_enabled: bool = setting(
        "grpcServerEnabled",
        False,
        "Serve the gRPC control plane: the standard grpc.health.v1.Health service (NOT_SERVING "
        "while the bookie is read-only or shutting down) and dlog's admin API (`dlog admin`); "
        "`dlog autorecovery` serves it too (dlog extension). Needs the `server` extra.",
    )
    grpc_server_address: str = setting(
        "grpcServerAddress",
        "0.0.0.0",
        "Address the gRPC control plane listens on (dlog extension).",
    )
    grpc_server_port: int = setting(
        "grpcServerPort",
        4181,
        "Port of the gRPC control plane (0 = any free port; a bookie publishes the port it "
        "bound in its registration, endpoint `grpc-control`) (dlog extension).",
        min=0,
        max=65535,
    )
    num_read_worker_threads: int = setting(
        "numReadWorkerThreads", 8, "Threads that read entries from disk.", min=1, max=256
    )
    read_only_mode_enabled: bool = setting(
        "readOnlyModeEnabled",
        True,
        "Turn read-only when every ledger directory is full, instead of shutting down.",
    )
    disk_usage_threshold: float = setting(
        "diskUsageThreshold",
        0.95,
        "Fraction of a disk in use above which its ledger directory is full.",
        min=0.0,
        max=1.0,
    )
    disk_usage_warn_threshold: float = setting(
        "diskUsageWarnThreshold",
        0.95,
        "Fraction of a disk in use above which a warning is logged.",
        min=0.0,
        max=1.0,
    )
    disk_usage_lwm_threshold: float = setting(
        "diskUsageLwmThreshold",
        0.90,
        "A full directory becomes writable again below this fraction.",
        min=0.0,
        max=1.0,
    )
    disk_check_interval: int = setting(
        "diskCheckInterval", 10000, "How often disk usage is checked.", min=10, unit="ms"
    )

    # -- journal -----------------------------------------------------------
    journal_directories: list[str] = setting(
        "journalDirectories",
        ["/tmp/bk-txn"],
        "Journal directories (comma-separated).",
        check=_non_empty,
    )
    journal_max_group_wait_msec: int = setting(
        "journalMaxGroupWaitMSec",
        2,
        "Longest an entry waits for its group to be written and synced.",
        min=0,
        unit="ms",
    )
    journal_buffered_writes_threshold: int = setting(
        "journalBufferedWritesThreshold",
        524288,
        "Write and sync a group once it holds this many bytes.",
        min=1,
        unit="bytes",
    )
    journal_buffered_entries_threshold: int = setting(
        "journalBufferedEntriesThreshold",
        0,
        "Write and sync a group once it holds this many entries (0 = off).",
        min=0,
    )
    journal_flush_when_queue_empty: bool = setting(
        "journalFlushWhenQueueEmpty",
        False,
        "Write and sync as soon as no more entries are waiting, without waiting for the group timer.",
    )
    journal_sync_data: bool = setting(
        "journalSyncData",
        True,
        "fdatasync the journal before acknowledging adds. Turning it off loses "
        "acknowledged entries on power loss.",
    )
    journal_pre_alloc_size_mb: int = setting(
        "journalPreAllocSizeMB",
        16,
        "Journal files grow in preallocated steps of this size.",
        min=1,
        unit="MiB",
    )
    journal_write_buffer_size_kb: int = setting(
        "journalWriteBufferSizeKB",
        64,
        "Journal write buffer: bytes gathered before a write() to the journal file. "
        "Small groups share a write; a bigger group is written in pieces of this size.",
        min=4,
        unit="KiB",
    )
    journal_alignment_size: int = setting(
        "journalAlignmentSize",
        512,
        "Each group is padded to this alignment.",
        check=lambda v: None if v >= 512 and v & (v - 1) == 0 else "must be a power of two >= 512",
        unit="bytes",
    )
    journal_max_size_mb: int = setting(
        "journalMaxSizeMB", 2048, "Roll to a new journal file past this size.", min=1, unit="MiB"
    )
    journal_max_backups: int = setting(
        "journalMaxBackups", 5, "Journal files older than the last checkpoint to keep.", min=0
    )
    journal_queue_size: int = setting(
        "journalQueueSize",
        10000,
        "Records that may wait for the journal before the bookie stops reading new requests (back-pressure).",
        min=1,
    )

    # -- ledger storage ----------------------------------------------------
    ledger_directories: list[str] = setting(
        "ledgerDirectories",
        ["/tmp/bk-data"],
        "Ledger (entry log and index) directories.",
        check=_non_empty,
    )
    ledger_storage_class: str = setting(
        "ledgerStorageClass",
        DB_LEDGER_STORAGE,
        "Ledger storage implementation. Only DbLedgerStorage is provided.",
        choices=[DB_LEDGER_STORAGE],
    )
    log_size_limit: int = setting(
        "logSizeLimit",
        1024 * 1024 * 1024,
        "Rotate an entry log once it reaches this size.",
        min=1024 * 1024,
        unit="bytes",
    )
    flush_interval: int = setting(
        "flushInterval",
        10000,
        "Checkpoint period: flush ledger storage, persist lastMark, delete old journals.",
        min=10,
        unit="ms",
    )
    flush_entrylog_bytes: int = setting(
        "flushEntrylogBytes",
        0,
        "fsync an entry log after this many bytes are written to it (0 = only at flush).",
        min=0,
        unit="bytes",
    )
    entry_log_per_ledger_enabled: bool = setting(
        "entryLogPerLedgerEnabled",
        False,
        "Give each ledger its own entry log (EntryLogManagerForEntryLogPerLedger).",
    )
    maximum_number_of_active_entry_logs: int = setting(
        "maximumNumberOfActiveEntryLogs",
        500,
        "With entry log per ledger: most entry logs open for writing at once.",
        min=1,
    )
    entrylog_map_access_expiry_time_in_seconds: int = setting(
        "entrylogMapAccessExpiryTimeInSeconds",
        300,
        "With entry log per ledger: rotate a ledger's log this long after its last add.",
        min=1,
        unit="s",
    )
    gc_wait_time: int = setting(
        "gcWaitTime",
        600000,
        "How often the garbage collector runs: it drops the data of deleted ledgers, "
        "removes entry logs with no live entry and compacts the rest by the thresholds below.",
        min=1,
        unit="ms",
    )
    gc_overreplicated_ledger_wait_time: int = setting(
        "gcOverreplicatedLedgerWaitTime",
        86400000,
        "How often the garbage collector looks for ledgers stored here whose ensembles no "
        "longer include this bookie (over-replicated, after re-replication) and drops them.",
        min=1,
        unit="ms",
    )
    minor_compaction_threshold: float = setting(
        "minorCompactionThreshold",
        0.2,
        "Minor compaction rewrites an entry log whose live fraction is below this "
        "(0 disables minor compaction).",
        min=0.0,
        max=1.0,
    )
    minor_compaction_interval: int = setting(
        "minorCompactionInterval",
        3600,
        "Time between minor compactions (0 or less disables them).",
        unit="s",
    )
    major_compaction_threshold: float = setting(
        "majorCompactionThreshold",
        0.8,
        "Major compaction rewrites an entry log whose live fraction is below this "
        "(0 disables major compaction).",
        min=0.0,
        max=1.0,
    )
    major_compaction_interval: int = setting(
        "majorCompactionInterval",
        86400,
        "Time between major compactions (0 or less disables them).",
        unit="s",
    )
    is_throttle_by_bytes: bool = setting(
        "isThrottleByBytes",
        False,
        "Limit compaction by compactionRateByBytes instead of compactionRateByEntries.",
    )
    compaction_rate_by_entries: int = setting(
        "compactionRateByEntries",
        1000,
        "Most entries compaction rewrites per second (unless isThrottleByBytes).",
        min=1,
        unit="entries/s",
    )
    compaction_rate_by_bytes: int = setting(
        "compactionRateByBytes",
        1000000,
        "Most bytes compaction rewrites per second (with isThrottleByBytes).",
        min=1,
        unit="bytes/s",
    )
    is_force_gc_allow_when_no_space: bool = setting(
        "isForceGCAllowWhenNoSpace",
        False,
        "When every ledger directory is full, run garbage collection and compaction at "
        "once (and keep running them) to win space back.",
    )
    db_storage_write_cache_max_size_mb: int = setting(
        "dbStorage_writeCacheMaxSizeMb",
        0,
        "Write cache size, split into two halves (double buffer). 0 means 25% of "
        "physical memory, at most 2048.",
        min=0,
        unit="MiB",
    )
    db_storage_read_ahead_cache_max_size_mb: int = setting(
        "dbStorage_readAheadCacheMaxSizeMb",
        0,
        "Read-ahead cache size. 0 means 25% of physical memory, at most 2048.",
        min=0,
        unit="MiB",
    )
    db_storage_read_ahead_cache_batch_size: int = setting(
        "dbStorage_readAheadCacheBatchSize",
        100,
        "Entries read ahead after a read that misses the caches.",
        min=0,
    )
    db_storage_flush_max_cpu_percent: int = setting(
        "dbStorage_flushMaxCpuPercent",
        25,
        "dlog: the largest share of the event loop's time a background write-cache "
        "flush may take. It shares Python's interpreter lock with the event loop "
        "serving requests: it sleeps after each slice of its work (or waits for the "
        "loop's next turn, dbStorage_flushLendTurns) so that it takes at most this "
        "share, and a checkpoint's flush is spread out instead of halving the loop's "
        "capacity while it runs. Not applied while the active half of the write "
        "cache is over half full, or at shutdown. 100 turns pacing off.",
        min=1,
        max=100,
        unit="%",
    )
    db_storage_flush_lend_turns: bool = setting(
        "dbStorage_flushLendTurns",
        False,
        "dlog: a paced flush runs its slices in turns the event loop lends it: the "
        "loop stops for at most 0.5 ms and waits, without the interpreter lock, "
        "while a slice runs, instead of the flush sleeping between slices and the "
        "loop waiting for the lock on switch intervals. Worth it only while a "
        "slice is long in Python: with today's flush, turns gave a worse add p99 "
        "at half load (see dlog.bookie.pacer).",
    )
    db_storage_flush_thread_nice: int = setting(
        "dbStorage_flushThreadNice",
        10,
        "dlog: how much lower the CPU priority (Linux nice value, added to the "
        "process's, at most 19) of the storage thread that flushes the write cache "
        "is. A checkpoint's flush copies hundreds of MB into entry logs in the "
        "kernel, without the interpreter lock; at a lower priority "
        "the kernel gives a core to the event loop and the journal's writer first "
        "when they wake, as RocksDB lowers its compaction threads'. The flush still "
        "gets every core they leave idle (and adds waiting for it leave the loop "
        "idle). An unprivileged process cannot raise a priority again, so the "
        "thread keeps it. 0 leaves it as the process's; ignored outside Linux.",
        min=0,
        max=19,
    )
    db_storage_max_throttle_time_ms: int = setting(
        "dbStorage_maxThrottleTimeMs",
        10000,
        "How long an add waits for write cache space before failing with ETOOMANYREQUESTS.",
        min=0,
        unit="ms",
    )
    # -- AutoRecovery: the auditor and replication workers -----------------------
    auto_recovery_daemon_enabled: bool = setting(
        "autoRecoveryDaemonEnabled",
        False,
        "Run AutoRecovery (an auditor candidate and a replication worker) inside this "
        "bookie's process; `dlog autorecovery` runs it as a daemon of its own instead.",
    )
    lost_bookie_recovery_delay: int = setting(
        "lostBookieRecoveryDelay",
        0,
        "How long a bookie may be gone before the auditor marks its ledgers under-replicated "
        "(a bookie back within it costs no copying). Once the auditor has stored it in "
        "ZooKeeper, `dlog shell lostbookierecoverydelay --set` changes it at run time.",
        min=0,
        unit="s",
    )
    auditor_periodic_bookie_check_interval: int = setting(
        "auditorPeriodicBookieCheckInterval",
        86400,
        "How often the auditor compares every ledger's ensembles with the registered "
        "bookies and marks ledgers on missing bookies (0 = never).",
        min=0,
        unit="s",
    )
    auditor_periodic_check_interval: int = setting(
        "auditorPeriodicCheckInterval",
        604800,
        "How often the auditor asks each bookie of each ledger which entries it holds "
        "(GetListOfEntriesOfLedger) and marks ledgers with missing entries (0 = never).",
        min=0,
        unit="s",
    )
    auditor_ledger_verification_percentage: int = setting(
        "auditorLedgerVerificationPercentage",
        0,
        "The percentage of a ledger fragment's entries the periodic entries check (and a "
        "replication worker deciding what to copy) reads from each bookie that should hold "
        "them, besides the fragment's first and last entries, which are always read (0 = "
        "only those). An entry that is missing, cannot be read or fails its digest check "
        "marks the fragment bad on that bookie. Upstream only checks that reads succeed; "
        "dlog also verifies each entry's digest, so a corrupt replica on a live bookie is "
        "replaced.",
        min=0,
        max=100,
    )
    auditor_periodic_orphaned_ledger_check_interval: int = setting(
        "auditorPeriodicOrphanedLedgerCheckInterval",
        3600,
        "How often the auditor lists orphaned ledgers (BP-44) under the ORPHANED znode "
        "(0 = never). Once stored in ZooKeeper, `dlog shell orphanauditinterval --set` "
        "changes it at run time (dlog extension).",
        min=0,
        unit="s",
    )
    orphaned_ledger_grace_period: int = setting(
        "orphanedLedgerGracePeriod",
        3600,
        "A ledger closed with expectDeleteAfter that still exists this long after that "
        "instant is listed as orphaned (DELETE_OVERDUE) (dlog extension, BP-44).",
        min=0,
        unit="s",
    )
    rereplication_entry_batch_size: int = setting(
        "rereplicationEntryBatchSize",
        10,
        "Entries a replication worker copies at once.",
        min=1,
    )
    open_ledger_rereplication_grace_period: int = setting(
        "openLedgerRereplicationGracePeriod",
        30000,
        "How long a replication worker leaves an open ledger's last fragment to its "
        "writer before it fences the ledger to replicate it.",
        min=0,
        unit="ms",
    )
    lock_release_of_failed_ledger_grace_period: int = setting(
        "lockReleaseOfFailedLedgerGracePeriod",
        300000,
        "How long a replication worker keeps the lock of a ledger it failed to replicate "
        "before another worker may try (a ledger it cannot fix yet is not retried in a loop).",
        min=0,
        unit="ms",
    )
    rw_rereplicate_backoff_ms: int = setting(
        "rwRereplicateBackoffMs",
        5000,
        "How long a replication worker waits after a failed attempt before taking the next ledger.",
        min=0,
        unit="ms",
    )

    def _cross_checks(self) -> Iterator[tuple[str, str]]:
        if 0 < self.max_buffered_frame_bytes < self.netty_max_frame_size_bytes:
            yield (
                "maxBufferedFrameBytes",
                f"must be 0 or at least nettyMaxFrameSizeBytes ({self.netty_max_frame_size_bytes})"
                ", or a largest frame could never be received",
            )
        if self.disk_usage_lwm_threshold > self.disk_usage_threshold:
            yield (
                "diskUsageLwmThreshold",
                f"must not exceed diskUsageThreshold ({self.disk_usage_threshold})",
            )
        if self.minor_compaction_threshold > self.major_compaction_threshold:
            yield (
                "minorCompactionThreshold",
                f"must not exceed majorCompactionThreshold ({self.major_compaction_threshold})",
            )
        for key, interval in (
            ("minorCompactionInterval", self.minor_compaction_interval),
            ("majorCompactionInterval", self.major_compaction_interval),
        ):
            if 0 < interval * 1000 < self.gc_wait_time:
                yield (key, f"must be 0 or at least gcWaitTime ({self.gc_wait_time} ms)")
        if len(set(self.journal_directories)) != len(self.journal_directories):
            yield ("journalDirectories", "lists a directory twice")
        if len(set(self.ledger_directories)) != len(self.ledger_directories):
            yield ("ledgerDirectories", "lists a directory twice")

    # -- derived values ------------------------------------------------------
    @property
    def write_cache_bytes(self) -> int:
        mb = self.db_storage_write_cache_max_size_mb or min(2048, _physical_memory_mb() // 4)
        return mb * 1024 * 1024

    @property
    def read_cache_bytes(self) -> int:
        mb = self.db_storage_read_ahead_cache_max_size_mb or min(2048, _physical_memory_mb() // 4)
        return mb * 1024 * 1024

    def resolved_bookie_id(self) -> str:
        if self.bookie_id:
            return self.bookie_id
        return f"{self.resolved_address()}:{self.bookie_port}"

    def resolved_address(self) -> str:
        if self.advertised_address:
            return self.advertised_address
        import socket

        try:
            return socket.gethostbyname(socket.gethostname())
        except OSError:
            return "127.0.0.1"
