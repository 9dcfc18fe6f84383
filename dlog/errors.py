"""One exception hierarchy for all of dlog.

Every error carries the status code its upstream system uses (BookKeeper's
``BKException.Code`` for storage errors, DistributedLog's thrift
``StatusCode`` for log errors) and a ``retriable`` flag, so callers and the
retry policy in :mod:`dlog.retry` decide from data, not from class names.
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


class ZKError(BKError):
    code = -9
    retriable = True
    default_message = "ZooKeeper operation failed"


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


class CorruptedFileError(BookieError):
    """A journal, entry log or index file is not in the expected format."""

    default_message = "file is corrupted"


# ---------------------------------------------------------------------------
# DistributedLog errors (codes from DistributedLog's thrift StatusCode)
# ---------------------------------------------------------------------------


class DLError(DLogError):
    """A log-level error. ``code`` is DistributedLog's StatusCode."""

    code = 500
    default_message = "internal server error"


class InvalidStreamNameError(DLError, ValueError):
    code = 602
    default_message = "invalid stream name"


class LogNotFoundError(DLError):
    code = 510
    default_message = "log not found"


class LogExistsError(DLError):
    code = 522
    default_message = "log already exists"


class LogEmptyError(DLError):
    code = 509
    default_message = "log is empty"


class LockingError(DLError):
    code = 504
    default_message = "could not acquire or lost the stream lock"


class OwnershipAcquireFailedError(LockingError):
    """Another writer holds the stream's lock."""

    default_message = "another writer owns the stream"


class WriteFencedError(DLError):
    """This writer was fenced by a newer owner of the stream."""

    code = 504
    default_message = "writer was fenced by a newer owner"


class ZooKeeperError(DLError):
    code = 505
    retriable = True
    default_message = "ZooKeeper error"


class MetadataError(DLError):
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


class BKTransmitError(DLError):
    code = 507
    retriable = True
    default_message = "failed to transmit to bookkeeper"


class FlushTimeoutError(DLError):
    code = 508
    retriable = True
    default_message = "flush timed out"


class TruncatedTransactionError(DLError):
    code = 511
    default_message = "position has been truncated"


class EndOfStreamError(DLError):
    code = 512
    default_message = "end of stream reached"


class TransactionIdOutOfOrderError(DLError):
    code = 513
    default_message = "transaction id out of order"

    def __init__(self, last_txid: int, txid: int) -> None:
        self.last_txid = last_txid
        self.txid = txid
        super().__init__(f"transaction id {txid} is smaller than the last written {last_txid}")


class LogWriteError(DLError):
    """A log write failed (DistributedLog's WriteException)."""

    code = 514
    default_message = "write failed"


class StreamUnavailableError(DLError):
    code = 515
    retriable = True
    default_message = "stream unavailable"


class WriteCancelledError(DLError):
    code = 516
    default_message = "write cancelled"


class OverCapacityError(DLError):
    code = 517
    retriable = True
    default_message = "over capacity"


class StreamNotReadyError(DLError):
    code = 518
    retriable = True
    default_message = "stream not ready"


class InvalidEnvelopedEntryError(DLError):
    code = 520
    default_message = "invalid enveloped entry"


class ChecksumFailedError(DLError):
    code = 523
    default_message = "checksum failed"


class AlreadyClosedError(DLError):
    code = 502
    default_message = "already closed"


class IllegalStateError(DLError):
    code = 603
    default_message = "illegal state"


class InvalidRecordError(DLError, ValueError):
    """Bytes that should hold a record, a record set or a DLSN do not."""

    code = 520
    default_message = "invalid record bytes"


class InvalidDLSNError(InvalidRecordError):
    default_message = "invalid DLSN"


class RecordTooLargeError(DLError, ValueError):
    code = 413
    default_message = "record too large"


class ReadCancelledError(DLError):
    code = 1002
    default_message = "read cancelled"


class LogReadError(DLError):
    code = 1001
    default_message = "log read error"


class RetryableReadError(DLError):
    code = 1000
    retriable = True
    default_message = "retryable read error"


class IdleReaderError(DLError):
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


class SubscriptionNotFoundError(DLError):
    code = 510
    default_message = "subscription not found"


class MigrationError(DLError):
    code = 603
    default_message = "migration refused"


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
