"""Log (namespace, writer, reader) settings, with DistributedLog's key names.

Keys and defaults follow DistributedLog's ``DistributedLogConfiguration``.
Where DistributedLog reads a setting under a current key and a deprecated
one (``bkcEnsembleSize`` / ``ensemble-size``, ``readAheadBatchSize`` /
``ReadAheadBatchSize`` ...), the current key is the setting's key and the
deprecated spelling is accepted as an alias (giving both is an error rather
than DistributedLog's silent preference). Where dlog deliberately picks a
different default, the doc string gives DistributedLog's and the reason.
Keys DistributedLog does not have are marked "dlog extension".

BookKeeper client settings live under the ``bkc.`` prefix (DistributedLog
passes ``bkc.*`` through to the BookKeeper client the same way), e.g.
``bkc.addEntryTimeoutSec=5``.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator, Mapping
from typing import Any

from dlog.conf.base import Config, Problems, nested, setting
from dlog.conf.bookkeeper import ClientConfig

__all__ = ["DIGEST_TYPES", "DLogConfig", "KEY_ALIASES"]

_INT32_MAX = 2**31 - 1
_MIB = 1024 * 1024
#: A record set (one ledger entry) never exceeds this (formats.md section 6).
MAX_RECORD_SET_SIZE = _MIB - 4 * 1024

DIGEST_TYPES = ("CRC32", "CRC32C", "HMAC", "DUMMY")
COMPRESSION_TYPES = ("none", "lz4")

#: Deprecated DistributedLog keys that DistributedLog still reads, mapped to
#: the key dlog stores the value under.
KEY_ALIASES: dict[str, str] = {
    "ensemble-size": "bkcEnsembleSize",
    "write-quorum-size": "bkcWriteQuorumSize",
    "ack-quorum-size": "bkcAckQuorumSize",
    "first-logsegment-sequence-number": "firstLogsegmentSequenceNumber",
    "ReadAheadBatchSize": "readAheadBatchSize",
    "ReadAheadMaxEntries": "readAheadMaxRecords",
    "ReadAheadWaitTime": "readAheadWaitTime",
}


@dataclasses.dataclass(frozen=True)
class DLogConfig(Config):
    title = "dlog log configuration (DistributedLog DistributedLogConfiguration key names)"

    # -- ZooKeeper -------------------------------------------------------------
    zk_session_timeout_seconds: int = setting(
        "zkSessionTimeoutSeconds",
        30,
        "Session timeout of the ZooKeeper client that holds log metadata and the "
        "writer lock. A writer whose session expires loses its lock.",
        min=1,
        unit="s",
    )
    zk_connection_timeout_seconds: int = setting(
        "zkConnectionTimeoutSeconds",
        0,
        "dlog extension: how long opening a namespace waits for a ZooKeeper connection "
        "before failing. 0 means zkSessionTimeoutSeconds. DistributedLog has no key for "
        "it (its ZooKeeper client builder derives the connection timeout from the session "
        "timeout); BookKeeper's zkTimeout is the ledger client's session timeout. The dlog "
        "command line defaults to 5 so that an unreachable ZooKeeper is reported quickly.",
        min=0,
        unit="s",
    )
    lock_timeout_seconds: int = setting(
        "lockTimeoutSeconds",
        30,
        "How long a writer waits to acquire a stream's lock held by another writer "
        "before failing with OwnershipAcquireFailed. 0 means try once.",
        min=0,
        unit="s",
    )
    first_log_segment_sequence_number: int = setting(
        "firstLogsegmentSequenceNumber",
        1,
        "Sequence number of a new stream's first log segment (DistributedLog spells "
        "the key with a lower-case 's' in 'segment'; the deprecated "
        "'first-logsegment-sequence-number' is accepted too).",
        min=1,
    )
    create_stream_if_not_exists: bool = setting(
        "createStreamIfNotExists",
        True,
        "Opening a missing stream (Namespace.open_log, dlog write) creates it; otherwise it "
        "fails with LogNotFound. Never creates a namespace (dlog namespace create does).",
    )

    # -- ledgers (BookKeeper placement and digest) ----------------------------------
    ensemble_size: int = setting(
        "bkcEnsembleSize",
        3,
        "Bookies in each log segment's ledger ensemble (deprecated key 'ensemble-size' accepted).",
        min=1,
    )
    write_quorum_size: int = setting(
        "bkcWriteQuorumSize",
        3,
        "Bookies each entry is written to (deprecated key 'write-quorum-size' accepted).",
        min=1,
    )
    ack_quorum_size: int = setting(
        "bkcAckQuorumSize",
        2,
        "Bookie acknowledgements an entry needs to be durable (deprecated key "
        "'ack-quorum-size' accepted).",
        min=1,
    )
    bk_digest_pw: str = setting(
        "digestPw",
        "",
        "Password of every ledger dlog creates (DistributedLog's key; its accessor is "
        "getBKDigestPW). Readers must use the same password.",
    )
    bk_digest_type: str = setting(
        "bkDigestType",
        "CRC32C",
        "dlog extension: digest type of new ledgers. DistributedLog always uses CRC32; "
        "dlog defaults to CRC32C, which is hardware accelerated (and computed in C by "
        "the crc32c package). Existing ledgers are read with the type in their metadata.",
        choices=DIGEST_TYPES,
    )

    # -- log segments: rolling and retention -----------------------------------------
    log_segment_rolling_minutes: int = setting(
        "logSegmentRollingMinutes",
        120,
        "A writer starts a new log segment after this long. 0 disables time-based rolling.",
        min=0,
        unit="min",
    )
    max_log_segment_bytes: int = setting(
        "maxLogSegmentBytes",
        256 * _MIB,
        "A writer starts a new log segment once the current one holds this many bytes.",
        min=1024,
        unit="bytes",
    )
    log_segment_retention_hours: int = setting(
        "logSegmentRetentionHours",
        72,
        "Completed log segments older than this are deleted (with explicit truncation, "
        "only those already marked truncated).",
        min=0,
        unit="h",
    )
    explicit_truncation_by_app: bool = setting(
        "explicitTruncationByApp",
        False,
        "Only segments the application truncated are removed by retention.",
    )
    retention_check_interval_minutes: int = setting(
        "retentionCheckIntervalMinutes",
        10,
        "dlog extension: how often a writer looks for segments past retention and "
        "deletes them (DistributedLog checks when it rolls a segment).",
        min=1,
        unit="min",
    )

    # -- writer: transmit ----------------------------------------------------------
    writer_output_buffer_size: int = setting(
        "writerOutputBufferSize",
        262144,
        "Bytes of records a writer batches into one ledger entry before sending it. "
        "DistributedLog's default is 1024 bytes with periodic flush off; dlog uses "
        "256 KiB with a 2 ms periodic flush: under load entries fill up to 256 KiB "
        "(few, large bookie writes give high throughput) while a record written when "
        "none of the writer's entries is in flight goes at once, and one buffered "
        "behind entries in flight waits at most periodicFlushFrequencyMilliSeconds "
        "(bounded latency). 0 sends every record as its own entry. At most "
        "1 MiB - 4 KiB, the record-set limit.",
        min=0,
        max=MAX_RECORD_SET_SIZE,
        unit="bytes",
    )
    periodic_flush_frequency_milli_seconds: int = setting(
        "periodicFlushFrequencyMilliSeconds",
        2,
        "A writer sends a partly filled entry after at most this long; sooner, and "
        "with everything buffered, when its entries in flight have all completed, and "
        "at once (at the end of the event loop's pass) when none is in flight, since "
        "batching only pays while the pipe is busy. DistributedLog's default is 0 (no "
        "periodic flush); dlog uses 2 ms so that a buffered record never waits for "
        "more traffic (see writerOutputBufferSize). 0 disables it, which is only "
        "valid with writerOutputBufferSize=0.",
        min=0,
        max=60000,
        unit="ms",
    )
    enable_immediate_flush: bool = setting(
        "enableImmediateFlush",
        False,
        "Once an entry's add completes, publish the last add confirmed at once (an "
        "explicit LAC, where DistributedLog writes a control record), even while later "
        "entries are in flight, so that tailing readers see that entry without waiting "
        "for the next one. Without it the LAC rides on the next entry, or is published "
        "once the writer is idle. Does not send buffered records sooner: for the lowest "
        "latency pair it with writerOutputBufferSize=0. DistributedLog's default false, "
        "kept.",
    )
    log_flush_timeout_seconds: int = setting(
        "logFlushTimeoutSeconds",
        30,
        "A flush (or a write waiting on one) that takes longer fails with FlushTimeout.",
        min=1,
        unit="s",
    )
    compression_type: str = setting(
        "compressionType",
        "none",
        "Compression of record sets written to ledgers: none or lz4, the only codecs "
        "DistributedLog defines (CompressionCodec.Type), so Java readers decode both.",
        choices=COMPRESSION_TYPES,
    )

    # -- reader ----------------------------------------------------------------------
    reader_idle_warn_threshold_millis: int = setting(
        "readerIdleWarnThresholdMillis",
        120000,
        "A reader that got no record for this long logs a warning.",
        min=0,
        unit="ms",
    )
    reader_idle_error_threshold_millis: int = setting(
        "readerIdleErrorThresholdMillis",
        _INT32_MAX,
        "A read that got no record for this long (none read ahead either) fails with "
        "IdleReaderError, and so does every later read of that reader. "
        "DistributedLog's default is Integer.MAX_VALUE, i.e. never; kept (0 is never too).",
        min=0,
        max=_INT32_MAX,
        unit="ms",
    )
    read_ahead_batch_size: int = setting(
        "readAheadBatchSize",
        64,
        "Entries a reader requests from bookies in one read-ahead round "
        "(deprecated key 'ReadAheadBatchSize' accepted). DistributedLog's default is "
        "2, far too small for a Python reader where each round trip costs more than "
        "decoding a batch: dlog reads 64.",
        min=1,
        max=10000,
    )
    read_ahead_max_records: int = setting(
        "readAheadMaxRecords",
        100000,
        "Records a reader caches ahead of the application (deprecated key "
        "'ReadAheadMaxEntries' accepted). DistributedLog's default is 10; dlog "
        "caches 100000 so that read-ahead keeps bookies busy while the application "
        "consumes a batch.",
        min=1,
    )
    read_ahead_wait_time: int = setting(
        "readAheadWaitTime",
        200,
        "How long read-ahead backs off after a retriable read error before reading "
        "again, doubling on each error in a row up to 4 times this (deprecated key "
        "'ReadAheadWaitTime' accepted). A full cache needs no wait: read-ahead resumes "
        "as soon as the application takes a record.",
        min=1,
        unit="ms",
    )
    read_lac_long_poll_timeout: int = setting(
        "readLACLongPollTimeout",
        1000,
        "A reader at the tail asks bookies to hold a last-add-confirmed read up to "
        "this long for new entries (long poll).",
        min=1,
        unit="ms",
    )

    # -- subscriptions (dlog extensions) -------------------------------------------------
    log_segment_based_subscriptions_store_enabled: bool = setting(
        "logSegmentBasedSubscriptionsStoreEnabled",
        False,
        "dlog extension: keep subscriber commit positions in a log-segment based "
        "store instead of one ZooKeeper znode per subscriber (DistributedLog's only store). "
        "Java DistributedLog consumers still read each subscriber's znode: it holds the "
        "position as of the subscription's last segment switch.",
    )
    subscription_segment_max_entries: int = setting(
        "subscriptionSegmentMaxEntries",
        50000,
        "dlog extension: the subscriptions store starts a new segment after this many entries.",
        min=1,
    )
    subscription_segment_max_bytes: int = setting(
        "subscriptionSegmentMaxBytes",
        16 * _MIB,
        "dlog extension: the subscriptions store starts a new segment after this many bytes.",
        min=1024,
        unit="bytes",
    )
    subscription_segment_max_age_minutes: int = setting(
        "subscriptionSegmentMaxAgeMinutes",
        240,
        "dlog extension: the subscriptions store starts a new segment after this long.",
        min=1,
        unit="min",
    )

    # -- the write proxy (dlog proxy) -------------------------------------------------------
    per_writer_outstanding_write_limit: int = setting(
        "perWriterOutstandingWriteLimit",
        -1,
        "Write proxy: records one stream may have accepted and not yet durable; a "
        "request that would go past it is refused whole with OVER_CAPACITY (see "
        "outstandingWriteLimitDarkmode). -1 means no limit (DistributedLog's default).",
        min=-1,
    )
    global_outstanding_write_limit: int = setting(
        "globalOutstandingWriteLimit",
        -1,
        "Write proxy: the same limit across all the streams one proxy owns. -1 means no "
        "limit (DistributedLog's default).",
        min=-1,
    )
    outstanding_write_limit_darkmode: bool = setting(
        "outstandingWriteLimitDarkmode",
        True,
        "Write proxy: true only counts requests past an outstanding-write limit (metric "
        'proxy_over_capacity_total{dark="true"}) and writes them; false refuses them '
        "with OVER_CAPACITY. DistributedLog's default, true, kept: set false to enforce "
        "the limits.",
    )
    max_acquired_partitions_per_proxy: int = setting(
        "maxAcquiredPartitionsPerProxy",
        -1,
        "Write proxy: the most streams one proxy owns at once; a request for one more "
        "is answered TOO_MANY_STREAMS (clients try another proxy). -1 means no limit "
        "(DistributedLog's default).",
        min=-1,
    )
    server_port: int = setting(
        "server_port",
        0,
        "Write proxy: the thrift port (DistributedLog ServerConfiguration). 0 picks a "
        "free port, printed when the proxy starts (DistributedLog's default).",
        min=0,
        max=65535,
    )
    server_shard: int = setting(
        "server_shard",
        -1,
        "Write proxy: its shard id, part of the address it is known by "
        "(1;<shard>;<host>:<port>, DistributedLog's DLSocketAddress) in stream lock "
        "nodes and FOUND answers.",
        min=-1,
    )
    server_graceful_shutdown_period_ms: int = setting(
        "server_graceful_shutdown_period_ms",
        0,
        "Write proxy: on shutdown, how long it answers as DOWN (health NOT_SERVING, no "
        "new streams) before it releases its streams, so that clients move away first.",
        min=0,
        unit="ms",
    )
    grpc_server_enabled: bool = setting(
        "grpcServerEnabled",
        False,
        "dlog extension: the write proxy serves the gRPC control plane: grpc.health.v1.Health "
        "(NOT_SERVING while it accepts no new streams or shuts down) and dlog's admin API "
        "(its owned streams, `dlog admin streams`).",
    )
    grpc_server_address: str = setting(
        "grpcServerAddress",
        "0.0.0.0",
        "dlog extension: the address the write proxy's gRPC control plane listens on.",
    )
    grpc_server_port: int = setting(
        "grpcServerPort",
        4182,
        "dlog extension: the port of the write proxy's gRPC control plane (0 = any free port).",
        min=0,
        max=65535,
    )
    server_max_frame_bytes: int = setting(
        "server_max_frame_bytes",
        16 * _MIB,
        "dlog extension: the largest thrift frame (one request) the write proxy reads; a "
        "longer one closes that connection.",
        min=1024,
        unit="bytes",
    )

    # -- BookKeeper client -----------------------------------------------------------------
    bkc: ClientConfig = nested(
        "bkc.",
        ClientConfig,
        "BookKeeper client settings, under the 'bkc.' prefix as in DistributedLog.",
    )

    # -- derived values ----------------------------------------------------------------
    @property
    def zk_connect_timeout(self) -> int:
        """Seconds to wait for a ZooKeeper connection (zkConnectionTimeoutSeconds,
        else the session timeout)."""
        return self.zk_connection_timeout_seconds or self.zk_session_timeout_seconds

    # -- loading -------------------------------------------------------------------------
    @classmethod
    def canonical_key(cls, key: str) -> str:
        """As :meth:`Config.canonical_key`, mapping DistributedLog's deprecated
        spellings (:data:`KEY_ALIASES`) to the current key."""
        return super().canonical_key(KEY_ALIASES.get(key, key))

    @classmethod
    def _resolve_keys(
        cls, values: Mapping[str, tuple[Any, str]], problems: Problems, prefix: str
    ) -> Mapping[str, tuple[Any, str]]:
        """Deprecated spellings become the current key; a key given in both
        (in one file, or one set of overrides) is an error."""
        resolved: dict[str, tuple[Any, str]] = {}
        alias_of: dict[str, str] = {}
        for key, (value, source) in values.items():
            target = KEY_ALIASES.get(key, key)
            if target in resolved:
                first = alias_of[target]
                problems.add(prefix + target, f"given twice, as {first!r} and as {key!r}", source)
                continue
            resolved[target] = (value, source)
            alias_of[target] = key
        return resolved

    def _cross_checks(self) -> Iterator[tuple[str, str]]:
        if self.write_quorum_size > self.ensemble_size:
            yield (
                "bkcWriteQuorumSize",
                f"must not exceed bkcEnsembleSize ({self.ensemble_size}), "
                f"got {self.write_quorum_size}",
            )
        if self.ack_quorum_size > self.write_quorum_size:
            yield (
                "bkcAckQuorumSize",
                f"must not exceed bkcWriteQuorumSize ({self.write_quorum_size}), "
                f"got {self.ack_quorum_size}",
            )
        if self.writer_output_buffer_size > 0 and self.periodic_flush_frequency_milli_seconds == 0:
            yield (
                "periodicFlushFrequencyMilliSeconds",
                "must be > 0 when writerOutputBufferSize > 0; otherwise a buffered "
                "record can wait indefinitely for more records to fill the entry",
            )
        if self.reader_idle_error_threshold_millis < self.reader_idle_warn_threshold_millis:
            yield (
                "readerIdleErrorThresholdMillis",
                f"must not be below readerIdleWarnThresholdMillis "
                f"({self.reader_idle_warn_threshold_millis}), "
                f"got {self.reader_idle_error_threshold_millis}",
            )
