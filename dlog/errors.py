"""One exception hierarchy for all of dlog.

Every error carries the status code its upstream system uses and a
``retriable`` flag, so callers and the retry policy in :mod:`dlog.retry`
decide from data, not from class names (as aiokafka's errors do)::

    DLogError                      root; DistributedLog's UNEXPECTED (600)
    ├── ConfigError                a bad configuration key or value
    ├── BKError                    ledger client errors: BookKeeper's BKException.Code
    ├── BookieError                bookie server errors: BookieException.Code
    │   └── BookieIOError          a disk failed (JournalError is also an OSError)
    └── LogError                   log errors: DistributedLog's thrift StatusCode
        └── ZooKeeperError         ZK_EXCEPTION (505); ``zk_code`` is ZooKeeper's
                                   KeeperException.Code (NoNodeError, ...)

:mod:`dlog.zk` is the one place that talks to kazoo: it turns every kazoo
exception into a :class:`ZooKeeperError`, so no other module needs to know
kazoo's classes.
"""

from __future__ import annotations

from typing import ClassVar


class DLogError(Exception):
    """Base of every error raised by dlog."""

    code: ClassVar[int] = 600  # DistributedLog UNEXPECTED
    retriable: ClassVar[bool] = False
    default_message: ClassVar[str] = "unexpected error"

    def __init__(self, message: str | None = None) -> None:
        super().__init__(message or self.default_message)

    @property
    def message(self) -> str:
        return str(self.args[0]) if self.args else self.default_message

    def __repr__(self) -> str:
        return f"{type(self).__name__}(code={self.code}, message={self.message!r})"

    def clone(self) -> DLogError:
        """A fresh instance of the same error (for failing many callers with
        one cause without sharing a traceback), whatever ``__init__`` takes."""
        new = type(self).__new__(type(self))
        new.args = self.args
        new.__dict__.update(self.__dict__)
        return new


class ConfigError(DLogError, ValueError):
    """A configuration key is unknown or its value is invalid."""

    code = 400  # DistributedLog BAD_REQUEST
    default_message = "invalid configuration"

    def __init__(self, key: str, message: str) -> None:
        self.key = key
        super().__init__(f"{key}: {message}")


# ---------------------------------------------------------------------------
# BookKeeper client errors (codes from BKException.Code)
# ---------------------------------------------------------------------------


class BKError(DLogError):
    """A ledger operation failed. ``code`` is BookKeeper's BKException code."""

    code = -999
    default_message = "unexpected condition"


class ReadError(BKError):
    code = -1
    retriable = True
    default_message = "error while reading ledger"


class QuorumError(BKError):
    code = -2
    default_message = "invalid quorum size on ensemble size"


class NoBookieAvailableError(BKError):
    code = -3
    retriable = True
    default_message = "no bookie available"


class DigestMismatchError(BKError):
    code = -5
    default_message = "entry digest does not match"


class NotEnoughBookiesError(BKError):
    code = -6
    retriable = True
    default_message = "not enough bookies available"

    def __init__(self, needed: int, found: int, detail: str = "") -> None:
        self.needed = needed
        self.found = found
        extra = f" ({detail})" if detail else ""
        super().__init__(f"not enough bookies: needed {needed}, found {found} writable{extra}")


class NoSuchLedgerError(BKError):
    code = -7
    default_message = "no such ledger"


class BookieHandleNotAvailableError(BKError):
    code = -8
    retriable = True
    default_message = "bookie handle is not available"


class LedgerRecoveryError(BKError):
    code = -10
    retriable = True
    default_message = "ledger recovery failed"


class LedgerClosedError(BKError):
    code = -11
    default_message = "ledger is closed"


class WriteError(BKError):
    code = -12
    retriable = True
    default_message = "write failed on bookie"


class NoSuchEntryError(BKError):
    code = -13
    default_message = "no such entry"


class IncorrectParameterError(BKError, ValueError):
    code = -14
    default_message = "incorrect parameter"


class ProtocolError(BKError):
    """The peer sent something that is not BookKeeper's v3 protocol."""

    code = -16
    default_message = "protocol error"


class MetadataVersionError(BKError):
    code = -17
    retriable = True
    default_message = "metadata version changed underneath us"


class MetaStoreError(BKError):
    code = -18
    retriable = True
    default_message = "metadata store operation failed"


class ClientClosedError(BKError):
    code = -19
    default_message = "client is closed"


class LedgerExistsError(BKError):
    code = -20
    default_message = "ledger already exists"


class AddEntryQuorumTimeoutError(BKError):
    code = -21
    retriable = True
    default_message = "timed out waiting for the ack quorum"


class OperationTimeoutError(BKError):
    """An operation timed out (BookKeeper's TimeoutException)."""

    code = -23
    retriable = True
    default_message = "operation timed out"


class LedgerFencedError(BKError):
    code = -101
    default_message = "ledger has been fenced; no more entries can be added"


class UnauthorizedAccessError(BKError):
    code = -102
    default_message = "master key does not match"


class WriteOnReadOnlyBookieError(BKError):
    code = -104
    retriable = True
    default_message = "bookie is read-only"


class TooManyRequestsError(BKError):
    code = -105
    retriable = True
    default_message = "too many requests; bookie is applying back-pressure"


class LedgerIdOverflowError(BKError):
    code = -106
    default_message = "ledger id overflow"


class MetadataSerializationError(BKError):
    code = -107
    default_message = "ledger metadata could not be (de)serialized"


# ---------------------------------------------------------------------------
# Bookie server-side errors (raised inside the bookie, answered as StatusCode)
# ---------------------------------------------------------------------------


class BookieError(DLogError):
    """An error inside the bookie server. ``code`` is BookieException.Code."""

    code = -100
    default_message = "illegal bookie operation"


class InvalidCookieError(BookieError):
    code = -102
    default_message = "invalid environment cookie"


class CookieNotFoundError(InvalidCookieError):
    code = -105
    default_message = "cookie not found"


class BookieIOError(BookieError):
    """A disk operation failed; the bookie answers EIO."""

    code = -100
    retriable = True
    default_message = "bookie I/O error"


class DiskFullError(BookieIOError):
    default_message = "all ledger directories are full"


class JournalError(BookieIOError, OSError):
    """A journal write or sync failed. Also an OSError, as the bookie's I/O
    paths catch OSError and decide from ``errno`` (ENOSPC: read-only until
    there is room again)."""

    default_message = "journal I/O error"

    def __init__(self, message: str | None = None, *, errno: int | None = None) -> None:
        super().__init__(message)
        self.errno = errno
        self.strerror = self.message


class CorruptedFileError(BookieError):
    """A journal, entry log or index file is not in the expected format."""

    default_message = "file is corrupted"


# ---------------------------------------------------------------------------
# DistributedLog errors (codes from DistributedLog's thrift StatusCode)
# ---------------------------------------------------------------------------


class LogError(DLogError):
    """A log-level error (DistributedLog's DLException). ``code`` is
    DistributedLog's StatusCode."""

    code = 500
    default_message = "internal server error"


class InvalidStreamNameError(LogError, ValueError):
    code = 602
    default_message = "invalid stream name"


class LogNotFoundError(LogError):
    code = 510
    default_message = "log not found"


class LogExistsError(LogError):
    code = 522
    default_message = "log already exists"


class NamespaceNotFoundError(LogNotFoundError):
    """The namespace was never bound to bookies (DistributedLog's builder
    refuses it: "No bkdl config bound under dl uri"). Creating one is an
    explicit step, so a mistyped URI cannot create a namespace."""

    default_message = "namespace not found"


class NamespaceExistsError(LogExistsError):
    """The namespace is already bound, to other bookies than asked for."""

    default_message = "namespace already exists"


class LogEmptyError(LogError):
    code = 509
    default_message = "log is empty"


class LockingError(LogError):
    code = 504
    default_message = "could not acquire or lost the stream lock"


class OwnershipAcquireFailedError(LockingError):
    """Another writer holds the stream's lock. ``owner`` is what its lock
    node says about it (a write proxy's is its DLSocketAddress), when known."""

    default_message = "another writer owns the stream"

    def __init__(self, message: str | None = None, *, owner: str | None = None) -> None:
        self.owner = owner
        super().__init__(message)


class WriteFencedError(LogError):
    """This writer was fenced by a newer owner of the stream."""

    code = 504
    default_message = "writer was fenced by a newer owner"


class MetadataError(LogError):
    code = 506
    default_message = "metadata exception"


class UnsupportedMetadataVersionError(MetadataError):
    code = 521
    default_message = "unsupported metadata version"


class LogMetadataVersionError(MetadataError):
    """A log's metadata znode (a segment, ``ledgers``, ``maxtxid``) is no
    longer at the version the caller read: another process changed it first
    (DistributedLog reports a ZooKeeper BADVERSION here). Re-read before
    deciding anything; retrying the same write cannot succeed."""

    default_message = "log metadata changed underneath us"


class BKTransmitError(LogError):
    code = 507
    retriable = True
    default_message = "failed to transmit to bookkeeper"


class FlushTimeoutError(LogError):
    code = 508
    retriable = True
    default_message = "flush timed out"


class TruncatedTransactionError(LogError):
    code = 511
    default_message = "position has been truncated"


class EndOfStreamError(LogError):
    code = 512
    default_message = "end of stream reached"


class TransactionIdOutOfOrderError(LogError):
    code = 513
    default_message = "transaction id out of order"

    def __init__(self, last_txid: int, txid: int) -> None:
        self.last_txid = last_txid
        self.txid = txid
        super().__init__(f"transaction id {txid} is smaller than the last written {last_txid}")


class LogWriteError(LogError):
    """A log write failed (DistributedLog's WriteException)."""

    code = 514
    default_message = "write failed"


class StreamUnavailableError(LogError):
    code = 515
    retriable = True
    default_message = "stream unavailable"


class WriteCancelledError(LogError):
    code = 516
    default_message = "write cancelled"


class OverCapacityError(LogError):
    code = 517
    retriable = True
    default_message = "over capacity"


class StreamNotReadyError(LogError):
    code = 518
    retriable = True
    default_message = "stream not ready"


class RequestDeniedError(LogError):
    code = 403
    default_message = "request denied"


class ServiceUnavailableError(LogError):
    """The write proxy is shutting down or takes no new streams."""

    code = 503
    retriable = True
    default_message = "service unavailable"


class RegionUnavailableError(LogError):
    code = 519
    retriable = True
    default_message = "region unavailable"


class TooManyStreamsError(LogError):
    """The write proxy owns as many streams as ``maxAcquiredPartitionsPerProxy``
    allows; another proxy may take the stream."""

    code = 524
    retriable = True
    default_message = "too many streams"


class ThriftProtocolError(LogError):
    """A peer sent bytes that are not a DistributedLogService thrift message
    (framed transport, binary protocol)."""

    code = 600
    default_message = "malformed thrift message"


class WriteOutcomeUnknownError(LogError):
    """The connection to a write proxy dropped after a write was sent and
    before its answer came: the record may or may not be in the stream.
    Not retried, so that an acknowledged record is never written twice."""

    code = 600
    default_message = "write outcome unknown"


class InvalidEnvelopedEntryError(LogError):
    code = 520
    default_message = "invalid enveloped entry"


class ChecksumFailedError(LogError):
    code = 523
    default_message = "checksum failed"


class AlreadyClosedError(LogError):
    code = 502
    default_message = "already closed"


class IllegalStateError(LogError):
    code = 603
    default_message = "illegal state"


class InvalidRecordError(LogError, ValueError):
    """Bytes that should hold a record, a record set or a DLSN do not."""

    code = 520
    default_message = "invalid record bytes"


class InvalidDLSNError(InvalidRecordError):
    default_message = "invalid DLSN"


class RecordTooLargeError(LogError, ValueError):
    code = 413
    default_message = "record too large"


class ReadCancelledError(LogError):
    code = 1002
    default_message = "read cancelled"


class LogReadError(LogError):
    code = 1001
    default_message = "log read error"


class RetryableReadError(LogError):
    code = 1000
    retriable = True
    default_message = "retryable read error"


class IdleReaderError(LogError):
    code = 1000
    retriable = True
    default_message = "reader has been idle for too long"


class SubscriptionFencedError(LockingError):
    """Another process took ownership of this subscription."""

    default_message = "subscription is owned by another process"


class SubscriptionCorruptedError(MetadataError):
    """A subscriber's znode points at a segment ledger that does not exist.

    Never read as "position = last_commit_dlsn": commits acknowledged on
    that segment would be lost. An operator resets the position
    (``dlog subscriptions reset``) after deciding where to resume."""

    default_message = "subscription segment is missing"


class SubscriptionNotFoundError(LogError):
    code = 510
    default_message = "subscription not found"


class MigrationError(LogError):
    code = 603
    default_message = "migration refused"


# ---------------------------------------------------------------------------
# ZooKeeper errors (DistributedLog's ZK_EXCEPTION; zk_code from ZooKeeper's
# KeeperException.Code). dlog.zk raises these for kazoo's exceptions.
# ---------------------------------------------------------------------------

# KeeperException.Code values (kazoo's exception codes are the same).
ZK_OK = 0
ZK_SYSTEMERROR = -1
ZK_RUNTIMEINCONSISTENCY = -2
ZK_CONNECTIONLOSS = -4
ZK_OPERATIONTIMEOUT = -7
ZK_NONODE = -101
ZK_BADVERSION = -103
ZK_NODEEXISTS = -110
ZK_NOTEMPTY = -111
ZK_SESSIONEXPIRED = -112


class ZooKeeperError(LogError):
    """A ZooKeeper operation failed.

    ``code`` is DistributedLog's ZK_EXCEPTION, ``bk_code`` BookKeeper's
    ZKException code (-9) for ledger-level callers, and ``zk_code`` the
    KeeperException code ZooKeeper (or kazoo) reported. ``attempts`` is how
    many times the call that raised it was tried: above 1, an earlier
    attempt may have been applied although its answer was lost, so a write
    that now meets NodeExists or BadVersion may be meeting itself.
    Retriable: the same call may work later (another server, a new session)."""

    code = 505
    bk_code: ClassVar[int] = -9
    zk_code: int = ZK_SYSTEMERROR
    retriable = True
    default_message = "ZooKeeper error"
    attempts: int = 1

    def __init__(
        self, message: str | None = None, *, zk_code: int | None = None, path: str | None = None
    ) -> None:
        super().__init__(message)
        if zk_code is not None:
            self.zk_code = zk_code
        self.path = path

    def __repr__(self) -> str:
        return (
            f"{type(self).__name__}(code={self.code}, zk_code={self.zk_code}, "
            f"message={self.message!r})"
        )


class ConnectionLossError(ZooKeeperError):
    """The connection dropped before the answer came: the operation may or
    may not have been applied. The client reconnects on its own."""

    zk_code = ZK_CONNECTIONLOSS
    default_message = "connection to ZooKeeper lost"


class ZooKeeperTimeoutError(ZooKeeperError):
    """No answer in time (ZooKeeper's OPERATIONTIMEOUT, or kazoo's client
    side timeout); the outcome is unknown, as after a connection loss.
    BookKeeper's own timeout is :class:`OperationTimeoutError`."""

    zk_code = ZK_OPERATIONTIMEOUT
    default_message = "ZooKeeper operation timed out"


class SessionExpiredError(ZooKeeperError):
    """The session is gone, and with it its ephemeral znodes (locks,
    registrations). The client opens a new session on its own."""

    zk_code = ZK_SESSIONEXPIRED
    default_message = "ZooKeeper session expired"


class ZooKeeperClosedError(SessionExpiredError):
    """The client was stopped; nothing more will be sent with it."""

    retriable = False
    default_message = "ZooKeeper client is closed"


class NoNodeError(ZooKeeperError):
    zk_code = ZK_NONODE
    retriable = False
    default_message = "znode does not exist"


class NodeExistsError(ZooKeeperError):
    zk_code = ZK_NODEEXISTS
    retriable = False
    default_message = "znode already exists"


class BadVersionError(ZooKeeperError):
    """A compare-and-set lost: the znode is no longer at the version given."""

    zk_code = ZK_BADVERSION
    retriable = False
    default_message = "znode version does not match"


class NotEmptyError(ZooKeeperError):
    zk_code = ZK_NOTEMPTY
    retriable = False
    default_message = "znode has children"


class RolledBackError(ZooKeeperError):
    """A transaction op that was not applied because another op of the same
    transaction failed (its result, not a failure of its own)."""

    zk_code = ZK_OK
    retriable = False
    default_message = "rolled back with its transaction"


# ---------------------------------------------------------------------------
# Wire status codes <-> errors
# ---------------------------------------------------------------------------

# BookKeeper v3 StatusCode values (formats.md section 1).
EOK = 0
ENOLEDGER = 402
ENOENTRY = 403
EBADREQ = 404
EIO = 501
EUA = 502
EBADVERSION = 503
EFENCED = 504
EREADONLY = 505
ETOOMANYREQUESTS = 506
EUNKNOWNLEDGERSTATE = 507

_STATUS_TO_ERROR: dict[int, type[BKError]] = {
    ENOLEDGER: NoSuchLedgerError,
    ENOENTRY: NoSuchEntryError,
    EBADREQ: ProtocolError,
    EIO: WriteError,
    EUA: UnauthorizedAccessError,
    EBADVERSION: ProtocolError,
    EFENCED: LedgerFencedError,
    EREADONLY: WriteOnReadOnlyBookieError,
    ETOOMANYREQUESTS: TooManyRequestsError,
    EUNKNOWNLEDGERSTATE: ReadError,
}

STATUS_NAMES: dict[int, str] = {
    EOK: "EOK",
    ENOLEDGER: "ENOLEDGER",
    ENOENTRY: "ENOENTRY",
    EBADREQ: "EBADREQ",
    EIO: "EIO",
    EUA: "EUA",
    EBADVERSION: "EBADVERSION",
    EFENCED: "EFENCED",
    EREADONLY: "EREADONLY",
    ETOOMANYREQUESTS: "ETOOMANYREQUESTS",
    EUNKNOWNLEDGERSTATE: "EUNKNOWNLEDGERSTATE",
}


def error_for_status(status: int, context: str = "") -> BKError:
    """Map a bookie's wire status to the client error it means."""
    cls = _STATUS_TO_ERROR.get(status, BKError)
    name = STATUS_NAMES.get(status, str(status))
    suffix = f": {context}" if context else ""
    return cls(f"{cls.default_message} (bookie answered {name}){suffix}")
