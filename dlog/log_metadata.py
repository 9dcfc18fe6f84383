"""Stream metadata in ZooKeeper, laid out as DistributedLog lays it out.

Under a namespace path (the path of a ``distributedlog://host:port/path``
URI) every stream has a znode, and under it the log of its unpartitioned
"partition", ``<default>`` (DistributedLog's ``unpartitionedStreamName``),
holds the znodes DistributedLog keeps (``LogMetadata`` /
``ZKLogStreamMetadataStore``), so a Java client sees dlog's streams::

    <ns>                     namespace binding (DLMetadata, see NamespaceBinding)
    <ns>/<stream>            stream znode, empty
    <ns>/<stream>/<default>  log root, empty
        maxtxid              highest transaction id written, decimal ("0" at first)
        version              layout version, 4-byte big-endian int -1 (LAYOUT_VERSION)
        lock                 writer lock (children are lock waiters)
        readLock             reader lock
        ledgers              max segment sequence number, decimal ("0" = none yet)
            inprogress_%018d segment metadata (dlog.segment), one per segment
            logrecs_%018d
        subscribers          one child per subscriber (commit positions)
        allocation           (DistributedLog's per-log ledger allocator; dlog has none)

Data formats are DistributedLog's: decimal strings
(``DLUtils.serializeLogSegmentSequenceNumber`` / ``serializeTransactionId``,
i.e. ``Long.toString``) and DistributedLog's segment strings. Older dlog
releases kept the log's znodes directly under ``<ns>/<stream>``; such a
stream is refused with :class:`LegacyLayoutError` until ``dlog namespace
upgrade`` (:mod:`dlog.layout_upgrade`) moves it, so new code never creates
a second log beside it.

Compare-and-set is on znode versions. Multi-znode changes (creating a
stream, starting and completing a segment) are single ZooKeeper
transactions. :mod:`dlog.zk` retries transient ZooKeeper errors; the
writes that may meet their own earlier attempt run under
:meth:`ZooKeeper.retry <dlog.zk.ZooKeeper.retry>`, and one retried after a
connection loss that finds that attempt landed counts as done.
"""

from __future__ import annotations

import asyncio
import dataclasses
import json
import logging
import re
from collections.abc import Callable, Sequence
from typing import Any

from dlog.errors import (
    InvalidStreamNameError,
    LogError,
    LogExistsError,
    LogMetadataVersionError,
    LogNotFoundError,
    MetadataError,
    ZooKeeperError,
)
from dlog.segment import LogSegmentMetadata, parse_znode_name
from dlog.uri import MetadataServiceUri, parse_metadata_service_uri
from dlog.zk import (
    BadVersionError,
    NodeExistsError,
    NoNodeError,
    NotEmptyError,
    Retry,
    TransactionOp,
    WatchedEvent,
    ZooKeeper,
    first_error,
)

log = logging.getLogger(__name__)

__all__ = [
    "ALLOCATION",
    "LAYOUT_VERSION",
    "LAYOUT_VERSION_DATA",
    "LEDGERS",
    "LEGACY_CHILDREN",
    "LOCK",
    "MAXTXID",
    "MAX_STREAM_NAME_BYTES",
    "READ_LOCK",
    "RESERVED_NAMES",
    "SUBSCRIBERS",
    "UNPARTITIONED",
    "VERSION",
    "LegacyLayoutError",
    "LogMetadataStore",
    "LogPaths",
    "NamespaceBinding",
    "bind_namespace",
    "bound_ancestor",
    "decode_long",
    "encode_long",
    "read_namespace_binding",
    "validate_stream_name",
]

# Children of a stream root (DistributedLog's LogMetadata path constants).
LEDGERS = "ledgers"
MAXTXID = "maxtxid"
LOCK = "lock"
READ_LOCK = "readLock"
SUBSCRIBERS = "subscribers"
VERSION = "version"
ALLOCATION = "allocation"
#: The log under a stream (DistributedLog's BKDL_UNPARTITIONED_STREAM_NAME_DEFAULT).
UNPARTITIONED = "<default>"
#: DistributedLog's LogMetadata.LAYOUT_VERSION, stored in ``version`` as a
#: 4-byte big-endian int (ZKLogStreamMetadataStore.intToBytes).
LAYOUT_VERSION = -1
LAYOUT_VERSION_DATA = LAYOUT_VERSION.to_bytes(4, "big", signed=True)
#: The znodes older dlog releases kept directly under ``<ns>/<stream>``.
LEGACY_CHILDREN = (LEDGERS, MAXTXID, LOCK, READ_LOCK, SUBSCRIBERS)

#: Names a stream may not have: the children of a stream root (a flat
#: namespace would not collide with them, but a tool or person reading
#: paths would be misled), DistributedLog's other per-stream znodes and its
#: unpartitioned stream name.
RESERVED_NAMES = frozenset(
    {LEDGERS, MAXTXID, LOCK, READ_LOCK, SUBSCRIBERS, VERSION, ALLOCATION, UNPARTITIONED}
)
MAX_STREAM_NAME_BYTES = 255

#: No segment sequence number assigned yet (DistributedLog's UNASSIGNED_LOGSEGMENT_SEQNO).
UNASSIGNED_SEQNO = 0

_INT64_MIN = -(1 << 63)
_INT64_MAX = (1 << 63) - 1
_DECIMAL = re.compile(r"0|-?[1-9][0-9]*", re.ASCII)
#: Longest decimal int64 text: ``-9223372036854775808``.
_INT64_TEXT_MAX = 20
_READ_CONCURRENCY = 32
_CAS_ATTEMPTS = 10
_LIST_ATTEMPTS = 5


# ---------------------------------------------------------------------------
# names and encodings
# ---------------------------------------------------------------------------


def _name_problem(name: object) -> str | None:
    """Why ``name`` is not a valid stream name, or None."""
    if not isinstance(name, str):
        return f"must be a str, not {type(name).__name__}"
    if not name:
        return "must not be empty"
    try:
        size = len(name.encode("utf-8"))
    except UnicodeEncodeError:
        return "is not valid Unicode (lone surrogate)"
    if size > MAX_STREAM_NAME_BYTES:
        return f"is {size} bytes long; the limit is {MAX_STREAM_NAME_BYTES}"
    if name.startswith("."):
        return "starts with '.', which DistributedLog reserves (e.g. '.allocation_pool')"
    if name in RESERVED_NAMES:
        return f"is reserved ({', '.join(sorted(RESERVED_NAMES))})"
    for i, c in enumerate(name):
        o = ord(c)
        if c == "/":
            return f"contains '/' at {i}; dlog stream names are flat"
        if c in "<>":
            return f"contains {c!r} at {i}"
        if o < 0x20 or 0x7F <= o <= 0x9F:
            return f"contains control character U+{o:04X} at {i}"
        if c.isspace():
            return f"contains whitespace U+{o:04X} at {i}"
        if o > 0xFFFF:
            # DistributedLog checks UTF-16 units and so rejects every surrogate pair.
            return f"contains U+{o:04X} at {i}, outside the Basic Multilingual Plane"
        if 0xD800 <= o <= 0xF8FF or o >= 0xFFF0 or not c.isprintable():
            return f"contains a non-printable or private-use character U+{o:04X} at {i}"
    return None


def validate_stream_name(name: str) -> str:
    """Return ``name`` if it is a valid stream name, else raise
    :class:`InvalidStreamNameError` saying why.

    DistributedLog's rules (``DLUtils.validateAndNormalizeName``): no leading
    '.', no NUL, '<', '>' or space, no empty, '.' or '..' path components,
    no control or private-use characters. dlog is stricter where those rules
    allow path tricks or confusion: no '/' at all (DistributedLog accepts
    hierarchical names and strips a leading '/'), no whitespace or other
    non-printable characters, at most 255 UTF-8 bytes, and not one of
    :data:`RESERVED_NAMES`.
    """
    problem = _name_problem(name)
    if problem is not None:
        shown = repr(name[:80]) if isinstance(name, str) else repr(name)
        raise InvalidStreamNameError(f"invalid stream name {shown}: {problem}")
    return name


def encode_long(value: int) -> bytes:
    """DistributedLog's encoding of ``ledgers`` and ``maxtxid`` data (``Long.toString``)."""
    if type(value) is not int or not _INT64_MIN <= value <= _INT64_MAX:
        raise ValueError(f"not an int64: {value!r}")
    return str(value).encode("ascii")


def decode_long(data: bytes, what: str) -> int:
    """Strict inverse of :func:`encode_long`. Empty data reads as 0, as
    DistributedLog reads znodes it created empty; anything else that is not
    a canonical int64 decimal is a :class:`MetadataError` (DistributedLog
    would silently read it as 0)."""
    if not data:
        return 0
    try:
        text = bytes(data).decode("ascii")
    except UnicodeDecodeError:
        text = None
    if text is None or not _DECIMAL.fullmatch(text):
        raise MetadataError(f"{what}: expected a decimal integer, found {bytes(data)[:60]!r}")
    if len(text) > _INT64_TEXT_MAX:  # before int(): it refuses > 4300 digits with ValueError
        raise MetadataError(
            f"{what}: {text[:40]}... ({len(text)} digits) is outside the int64 range"
        )
    value = int(text)
    if not _INT64_MIN <= value <= _INT64_MAX:
        raise MetadataError(f"{what}: {text} is outside the int64 range")
    return value


class LegacyLayoutError(LogError):
    """The stream is in the layout of older dlog releases (no ``<default>``
    level): refused rather than shadowed by a second, empty log."""


@dataclasses.dataclass(frozen=True)
class LogPaths:
    """Every znode path of one stream: ``stream`` is ``<ns>/<stream>``,
    ``root`` the log root ``<ns>/<stream>/<default>`` the others hang off."""

    name: str
    stream: str
    root: str
    ledgers: str
    maxtxid: str
    lock: str
    read_lock: str
    subscribers: str
    version: str

    @property
    def legacy_ledgers(self) -> str:
        """Where older dlog releases kept ``ledgers`` (``<ns>/<stream>/ledgers``)."""
        return f"{self.stream}/{LEDGERS}"

    def segment(self, znode_name: str) -> str:
        """Path of the segment znode ``znode_name`` (e.g. ``logrecs_000000000000000001``)."""
        if parse_znode_name(znode_name) is None:
            raise ValueError(f"{znode_name!r} is not a log segment znode name")
        return f"{self.ledgers}/{znode_name}"

    def subscriber(self, subscriber_id: str) -> str:
        """Path of subscriber ``subscriber_id``'s znode."""
        if not subscriber_id or "/" in subscriber_id or subscriber_id in (".", ".."):
            raise ValueError(f"invalid subscriber id {subscriber_id!r}")
        return f"{self.subscribers}/{subscriber_id}"


def _clean_namespace_path(path: str) -> str:
    if not isinstance(path, str) or not path.startswith("/") or path == "/":
        raise ValueError(f"namespace path must be an absolute znode path, got {path!r}")
    path = path.rstrip("/")
    parts = path.split("/")[1:]
    if any(p in ("", ".", "..") for p in parts):
        raise ValueError(f"invalid namespace path {path!r}")
    return path


def _from_seqno(
    named: list[tuple[int, bool, str]], from_seqno: int | None
) -> list[tuple[int, bool, str]]:
    """Of ``(sequence number, in progress, znode name)``: those from
    ``from_seqno`` on (all if None), and the one below that decides their
    start sequence ids (:func:`assign_start_sequence_ids` numbers only the
    stream's first in-progress segment, from the completed one before it):
    the first in-progress segment if it is below, else the last completed."""
    if from_seqno is None:
        return named
    keep = [n for n in named if n[0] >= from_seqno]
    below = [n for n in named if n[0] < from_seqno]
    in_progress = [n for n in below if n[1]]
    if in_progress:
        keep.append(min(in_progress))
    elif below:
        keep.append(max(below))
    return keep


# ---------------------------------------------------------------------------
# the store
# ---------------------------------------------------------------------------


class LogMetadataStore:
    """Create, list, delete streams and read and change their segments,
    ``ledgers`` and ``maxtxid`` under one namespace path."""

    def __init__(self, zk: ZooKeeper, namespace_path: str) -> None:
        self.zk = zk
        self.namespace_path = _clean_namespace_path(namespace_path)
        self._namespace_ready = False

    def __repr__(self) -> str:
        return f"LogMetadataStore({self.zk.hosts!r}, {self.namespace_path!r})"

    def paths(self, name: str) -> LogPaths:
        validate_stream_name(name)
        stream = f"{self.namespace_path}/{name}"
        root = f"{stream}/{UNPARTITIONED}"
        return LogPaths(
            name=name,
            stream=stream,
            root=root,
            version=f"{root}/{VERSION}",
            ledgers=f"{root}/{LEDGERS}",
            maxtxid=f"{root}/{MAXTXID}",
            lock=f"{root}/{LOCK}",
            read_lock=f"{root}/{READ_LOCK}",
            subscribers=f"{root}/{SUBSCRIBERS}",
        )

    # -- plumbing ----------------------------------------------------------------
    async def _transaction(
        self, ops: Sequence[tuple[str, tuple[Any, ...], dict[str, Any]]]
    ) -> tuple[int | None, BaseException | None, int]:
        """Run ``ops`` atomically, retried as a whole. Returns ``(index of
        the failed op, its error, attempts made)``, ``(None, None, n)`` on
        success; after more than one attempt the failure may be the first
        attempt's own changes, applied although its answer was lost."""
        call = Retry(self.zk.retry_policy)
        results = await call(self.zk.transaction, ops)
        err = first_error(results)
        return (None if err is None else results.index(err)), err, call.attempts

    async def _exists(self, path: str) -> bool:
        return await self.zk.exists(path) is not None

    async def _ensure_namespace(self) -> None:
        if not self._namespace_ready:
            await self.zk.ensure_path(self.namespace_path)
            self._namespace_ready = True

    async def _not_found_or(self, name: str, error: Exception) -> Exception:
        """``LogNotFoundError`` if the stream is gone, else ``error``."""
        return error if await self.log_exists(name) else self._not_found(name)

    def _not_found(self, name: str) -> LogNotFoundError:
        return LogNotFoundError(f"log {name!r} does not exist in {self.namespace_path}")

    # -- streams -----------------------------------------------------------------
    def _legacy(self, p: LogPaths) -> LegacyLayoutError:
        return LegacyLayoutError(
            f"log {p.name!r} at {p.stream} is in the layout of older dlog releases "
            f"(no {UNPARTITIONED} level); run `dlog namespace upgrade` on the namespace "
            "before using it"
        )

    async def _check_layout(self, p: LogPaths) -> None:
        """:class:`LegacyLayoutError` if the stream (or part of it, while an
        upgrade is unfinished) is still in the old layout."""
        if await self._exists(p.legacy_ledgers):
            raise self._legacy(p)

    async def create_log(self, name: str) -> None:
        """Create the stream's znode, its log root and the log's znodes, with
        DistributedLog's initial data, in one transaction (the order of
        ``ZKLogStreamMetadataStore.createMissingMetadata``).
        :class:`LogExistsError` if it exists, :class:`LegacyLayoutError` if
        it exists in the old layout: the transaction creates and deletes the
        old ``ledgers`` path, which fails if it is there (no read first, so
        a retried call meets only its own transaction)."""
        p = self.paths(name)
        zero = encode_long(0)
        log_ops: list[TransactionOp] = [
            ("create", (p.legacy_ledgers, b""), {}),
            ("delete", (p.legacy_ledgers,), {}),
            ("create", (p.root, b""), {}),
            ("create", (p.maxtxid, zero), {}),
            ("create", (p.version, LAYOUT_VERSION_DATA), {}),
            ("create", (p.lock, b""), {}),
            ("create", (p.read_lock, b""), {}),
            ("create", (p.ledgers, encode_long(UNASSIGNED_SEQNO)), {}),
            ("create", (p.subscribers, b""), {}),
        ]
        with_stream = True  # the stream znode may exist alone (a delete cut short)
        retried = False
        for _ in range(4):
            await self._ensure_namespace()
            ops = [("create", (p.stream, b""), {}), *log_ops] if with_stream else log_ops
            index, err, attempts = await self._transaction(ops)
            retried = retried or attempts > 1
            if err is None:
                log.debug("created log %s", p.root)
                return
            if index is not None and not with_stream:
                index += 1  # as if the stream create were there
            if isinstance(err, NodeExistsError) and index == 0:
                with_stream = False
                continue
            if isinstance(err, NodeExistsError) and index == 1:
                raise self._legacy(p)
            if isinstance(err, NodeExistsError):
                note = (
                    " (an earlier attempt of this call, cut off by a connection loss, "
                    "may have created it)"
                    if retried
                    else ""
                )
                raise LogExistsError(f"log {name!r} already exists at {p.root}{note}")
            if isinstance(err, NoNodeError) and index in (0, 1):
                # namespace or stream removed underneath us: recreate
                self._namespace_ready = False
                with_stream = True
                continue
            raise ZooKeeperError(f"create log {name}: {type(err).__name__}: {err}")
        raise ZooKeeperError(f"create log {name}: namespace {self.namespace_path} keeps changing")

    async def log_exists(self, name: str) -> bool:
        """Whether the stream exists (its ``ledgers`` znode, as DistributedLog's
        ``logExists`` checks). :class:`LegacyLayoutError` for a stream in the
        old layout, which needs ``dlog namespace upgrade``."""
        p = self.paths(name)
        stat, legacy = await asyncio.gather(
            self.zk.exists(p.ledgers), self._exists(p.legacy_ledgers)
        )
        if legacy:
            raise self._legacy(p)
        return stat is not None

    async def get_logs(self, prefix: str | None = None) -> list[str]:
        """Names of the namespace's streams (starting with ``prefix``), sorted.
        Children that are not valid stream names (DistributedLog's
        ``.allocation_pool`` and the like) are not streams."""
        try:
            children = await self.zk.get_children(self.namespace_path)
        except NoNodeError:
            return []
        return sorted(
            c
            for c in children
            if _name_problem(c) is None and (prefix is None or c.startswith(prefix))
        )

    async def delete_log(self, name: str) -> list[int]:
        """Delete the stream's znodes; returns the ledger ids of its segments
        (in segment order) for the caller to delete. The metadata goes first,
        so a crash before the ledgers are deleted leaks them (DistributedLog
        deletes the ledgers first); a segment created concurrently is still
        collected, as the delete is redone when the tree changes under it."""
        p = self.paths(name)
        await self._check_layout(p)  # its segments are not where get_segments looks
        if not await self._exists(p.stream):
            raise self._not_found(name)
        ledger_ids: dict[int, None] = {}
        for _ in range(_LIST_ATTEMPTS):
            try:
                segments = await self.get_segments(name)
            except LogNotFoundError:
                segments = []  # half-created or half-deleted: still remove the rest
            for seg, _version in segments:
                ledger_ids.setdefault(seg.ledger_id)
            try:
                await self.zk.delete_recursive(p.stream)
            except NotEmptyError:
                continue  # a znode appeared while deleting: collect it too
            log.debug("deleted log %s", p.stream)
            return list(ledger_ids)
        raise ZooKeeperError(f"delete log {name}: znodes keep appearing under {p.stream}")

    # -- segments ------------------------------------------------------------------
    async def _read_segment(
        self, p: LogPaths, znode: str, sem: asyncio.Semaphore
    ) -> tuple[LogSegmentMetadata, int] | None:
        async with sem:
            try:
                data, stat = await self.zk.get(p.segment(znode))
            except NoNodeError:
                return None
        return LogSegmentMetadata.parse(data, znode), stat.version

    async def get_segments(
        self,
        name: str,
        watch: Callable[[WatchedEvent], Any] | None = None,
        *,
        from_seqno: int | None = None,
    ) -> list[tuple[LogSegmentMetadata, int]]:
        """The stream's segments with their znode versions, in DistributedLog's
        order (sequence number, in-progress first). ``watch`` is a one-shot
        children watch on ``ledgers``. :class:`LogNotFoundError` if the
        stream does not exist.

        With ``from_seqno``, only the segments from that sequence number on,
        and the one before them that their start sequence ids depend on (see
        :func:`assign_start_sequence_ids`): a tailing reader lists its
        stream at every segment it moves to, and reading every znode of a
        long stream each time would cost it a round trip per segment kept."""
        p = self.paths(name)
        sem = asyncio.Semaphore(_READ_CONCURRENCY)
        for attempt in range(_LIST_ATTEMPTS):
            # The watch goes on the first listing only: if the list changes
            # before we are done, that change fires it.
            named = await self._segment_names(p, watch if attempt == 0 else None)
            names = [n for _, _, n in _from_seqno(named, from_seqno)]
            read = await asyncio.gather(*(self._read_segment(p, n, sem) for n in names))
            if any(r is None for r in read):
                continue  # a segment was completed or deleted meanwhile: list again
            segments = [r for r in read if r is not None]
            segments.sort(key=lambda sv: sv[0].sort_key)
            return segments
        raise ZooKeeperError(f"list segments of {name}: the list keeps changing")

    async def _segment_names(
        self, p: LogPaths, watch: Callable[[WatchedEvent], Any] | None = None
    ) -> list[tuple[int, bool, str]]:
        try:
            children = await self.zk.get_children(p.ledgers, watch=watch)
        except NoNodeError:
            raise self._not_found(p.name) from None
        named: list[tuple[int, bool, str]] = []
        for child in children:
            parsed = parse_znode_name(child)
            if parsed is None:
                log.warning("log %s: ignoring unexpected znode %s/%s", p.name, p.ledgers, child)
            else:
                named.append((parsed[1], parsed[0], child))
        named.sort()
        return named

    async def segment_names(self, name: str) -> list[tuple[int, bool, str]]:
        """``(sequence number, in progress, znode name)`` of the stream's
        segments, by sequence number, from their znode names alone (one
        listing, no segment read). :class:`LogNotFoundError` if the stream
        does not exist."""
        return await self._segment_names(self.paths(name))

    async def get_segment(self, name: str, znode_name: str) -> tuple[LogSegmentMetadata, int]:
        """One segment by znode name, with its version."""
        p = self.paths(name)
        try:
            data, stat = await self.zk.get(p.segment(znode_name))
        except NoNodeError:
            raise await self._not_found_or(
                name, LogMetadataVersionError(f"log {name!r} has no segment {znode_name}")
            ) from None
        return LogSegmentMetadata.parse(data, znode_name), stat.version

    async def _holds(self, path: str, data: bytes) -> int | None:
        """Version of the znode at ``path`` if it holds exactly ``data`` (how a
        write retried after a connection loss recognises its own earlier
        attempt), else None."""
        try:
            current, stat = await self.zk.get(path)
        except NoNodeError:
            return None
        return int(stat.version) if current == data else None

    async def create_segment(self, name: str, seg: LogSegmentMetadata) -> int:
        """Create ``seg``'s znode; in the same transaction compare-and-set
        ``ledgers`` to its sequence number and raise ``maxtxid`` to its
        transaction ids if they are higher (as DistributedLog's
        ``startLogSegment`` does). Returns the new znode's version.

        The sequence number must follow the stream's max (any number for a
        stream that has none yet); otherwise, or when another process
        changes ``ledgers`` or creates the same segment first,
        :class:`LogMetadataVersionError`."""
        p = self.paths(name)
        path = p.segment(seg.znode_name)
        data = seg.serialize()
        seq = seg.log_segment_sequence_no
        top_txid = seg.first_txid if seg.in_progress else max(seg.first_txid, seg.last_txid)
        for _ in range(_CAS_ATTEMPTS):
            # Both reads at once: starting a segment holds up the writes
            # queued behind a roll, one ZooKeeper round trip each.
            (max_seq, seq_version), (max_txid, txid_version) = await asyncio.gather(
                self.get_max_seqno(name), self.get_max_txid(name)
            )
            if max_seq != UNASSIGNED_SEQNO and seq != max_seq + 1:
                landed = await self._holds(path, data)
                if landed is not None and max_seq == seq:
                    return landed  # our own earlier call
                raise LogMetadataVersionError(
                    f"log {name!r}: segment {seq} does not follow the max segment "
                    f"sequence number {max_seq}"
                )
            ops: list[tuple[str, tuple[Any, ...], dict[str, Any]]] = [
                ("create", (path, data), {}),
                ("set_data", (p.ledgers, encode_long(seq)), {"version": seq_version}),
            ]
            if top_txid > max_txid:
                ops.append(
                    ("set_data", (p.maxtxid, encode_long(top_txid)), {"version": txid_version})
                )
            index, err, attempts = await self._transaction(ops)
            if err is None:
                log.debug("log %s: created segment %s", name, seg.znode_name)
                return 0
            if attempts > 1:
                landed = await self._holds(path, data)
                if landed is not None:
                    return landed
            if index == 2 and isinstance(err, BadVersionError):
                continue  # maxtxid moved: re-read it and try again
            if isinstance(err, NoNodeError):
                raise await self._not_found_or(
                    name, ZooKeeperError(f"create segment {path}: {err}")
                )
            if isinstance(err, NodeExistsError):
                raise LogMetadataVersionError(f"log {name!r}: segment {path} already exists")
            if isinstance(err, BadVersionError):
                raise LogMetadataVersionError(
                    f"log {name!r}: max segment sequence number changed while creating "
                    f"segment {seq}"
                )
            raise ZooKeeperError(f"create segment {path}: {type(err).__name__}: {err}")
        raise LogMetadataVersionError(f"log {name!r}: maxtxid keeps changing")

    async def complete_segment(
        self,
        name: str,
        inprogress_seg: LogSegmentMetadata,
        version: int,
        completed_seg: LogSegmentMetadata,
    ) -> int:
        """Replace the in-progress znode (if still at ``version``) by
        ``completed_seg``'s and raise ``maxtxid`` to its last transaction id
        if higher, in one transaction (DistributedLog's
        ``completeAndCloseLogSegment``). Returns the completed znode's version.

        The in-progress znode changed or gone: :class:`LogMetadataVersionError`."""
        if not isinstance(inprogress_seg, LogSegmentMetadata) or not isinstance(
            completed_seg, LogSegmentMetadata
        ):
            raise TypeError("complete_segment(name, inprogress_seg, version, completed_seg)")
        if type(version) is not int:
            raise TypeError(f"version must be an int, not {type(version).__name__}")
        if not inprogress_seg.in_progress:
            raise ValueError(f"{inprogress_seg.znode_name} is not an in-progress segment")
        if completed_seg.in_progress:
            raise ValueError("completed_seg is still in progress")
        same = ("log_segment_sequence_no", "ledger_id", "first_txid")
        for field in same:
            if getattr(inprogress_seg, field) != getattr(completed_seg, field):
                raise ValueError(f"the completed segment has a different {field}")
        p = self.paths(name)
        old_path = p.segment(inprogress_seg.znode_name)
        new_path = p.segment(completed_seg.znode_name)
        data = completed_seg.serialize()
        for _ in range(_CAS_ATTEMPTS):
            max_txid, txid_version = await self.get_max_txid(name)
            ops: list[tuple[str, tuple[Any, ...], dict[str, Any]]] = [
                ("delete", (old_path,), {"version": version}),
                ("create", (new_path, data), {}),
            ]
            if completed_seg.last_txid > max_txid:
                ops.append(
                    (
                        "set_data",
                        (p.maxtxid, encode_long(completed_seg.last_txid)),
                        {"version": txid_version},
                    )
                )
            index, err, attempts = await self._transaction(ops)
            if err is None:
                log.debug("log %s: completed segment %s", name, completed_seg.znode_name)
                return 0
            if attempts > 1:
                landed = await self._holds(new_path, data)
                if landed is not None and not await self._exists(old_path):
                    return landed  # our own earlier attempt
            if index == 2 and isinstance(err, BadVersionError):
                continue
            if index == 0 and isinstance(err, (NoNodeError, BadVersionError)):
                what = (
                    "is gone"
                    if isinstance(err, NoNodeError)
                    else f"is no longer at version {version}"
                )
                raise await self._not_found_or(
                    name, LogMetadataVersionError(f"log {name!r}: {old_path} {what}")
                )
            if isinstance(err, NodeExistsError):
                raise LogMetadataVersionError(f"log {name!r}: {new_path} already exists")
            if isinstance(err, NoNodeError):
                raise await self._not_found_or(name, ZooKeeperError(f"complete {old_path}: {err}"))
            raise ZooKeeperError(f"complete segment {old_path}: {type(err).__name__}: {err}")
        raise LogMetadataVersionError(f"log {name!r}: maxtxid keeps changing")

    async def update_segment(self, name: str, seg: LogSegmentMetadata, version: int) -> int:
        """Replace a segment's metadata if its znode is still at ``version``
        (truncation status, min active DLSN...); returns the new version."""
        p = self.paths(name)
        path = p.segment(seg.znode_name)
        data = seg.serialize()
        try:
            stat = await self.zk.retry(self.zk.set, path, data, version=version)
        except NoNodeError:
            raise await self._not_found_or(
                name, LogMetadataVersionError(f"log {name!r}: segment {path} is gone")
            ) from None
        except BadVersionError as e:
            if e.attempts > 1:
                landed = await self._holds(path, data)
                if landed is not None and landed > version:
                    return landed
            raise LogMetadataVersionError(
                f"log {name!r}: segment {path} is no longer at version {version}"
            ) from None
        return int(stat.version)

    async def delete_segment(self, name: str, seg: LogSegmentMetadata, version: int = -1) -> None:
        """Delete a segment's znode if still at ``version`` (-1: any). A
        segment already gone is not an error (DistributedLog's purge treats
        it the same way)."""
        p = self.paths(name)
        path = p.segment(seg.znode_name)
        try:
            await self.zk.delete(path, version=version)
        except NoNodeError:
            log.debug("log %s: segment %s already gone", name, path)
        except BadVersionError:
            raise LogMetadataVersionError(
                f"log {name!r}: segment {path} is no longer at version {version}"
            ) from None

    # -- ledgers / maxtxid data ---------------------------------------------------------
    async def _read_long(self, name: str, path: str) -> tuple[int, int]:
        try:
            data, stat = await self.zk.get(path)
        except NoNodeError:
            raise self._not_found(name) from None
        return decode_long(data, path), int(stat.version)

    async def get_max_seqno(self, name: str) -> tuple[int, int]:
        """``(max segment sequence number, znode version)`` from ``ledgers``
        (0 until the first segment is created)."""
        return await self._read_long(name, self.paths(name).ledgers)

    async def get_max_txid(self, name: str) -> tuple[int, int]:
        """``(highest transaction id recorded, znode version)`` from ``maxtxid``."""
        return await self._read_long(name, self.paths(name).maxtxid)

    async def set_max_txid(self, name: str, txid: int, version: int) -> int:
        """Store ``txid`` in ``maxtxid`` if it is still at ``version``;
        returns the new version."""
        p = self.paths(name)
        data = encode_long(txid)
        try:
            stat = await self.zk.retry(self.zk.set, p.maxtxid, data, version=version)
        except NoNodeError:
            raise self._not_found(name) from None
        except BadVersionError as e:
            if e.attempts > 1:
                landed = await self._holds(p.maxtxid, data)
                if landed is not None and landed > version:
                    return landed
            raise LogMetadataVersionError(
                f"log {name!r}: maxtxid is no longer at version {version}"
            ) from None
        return int(stat.version)


# ---------------------------------------------------------------------------
# namespace binding (DistributedLog's DLMetadata)
# ---------------------------------------------------------------------------

_DL_METADATA_FORMAT_VERSION = "1"
_DL_TYPE = "BKDL"
_DL_METADATA_PREFIX = f"{_DL_METADATA_FORMAT_VERSION}\n{_DL_TYPE}\n".encode()

# BKDLConfigFormat (DistributedLog's metadata.thrift): id -> (field, thrift JSON type).
_BKDL_FIELDS: dict[int, tuple[str, str]] = {
    1: ("bk_zk_servers", "str"),
    2: ("bk_ledgers_path", "str"),
    3: ("sanity_check_txnid", "tf"),
    4: ("encode_region_id", "tf"),
    5: ("bk_zk_servers_for_reader", "str"),
    6: ("dl_zk_servers", "str"),
    7: ("dl_zk_servers_for_reader", "str"),
    8: ("acl_root_path", "str"),
    9: ("first_log_segment_seq_no", "i64"),
    10: ("federated_namespace", "tf"),
}


@dataclasses.dataclass(frozen=True)
class NamespaceBinding:
    """Which BookKeeper cluster a namespace's logs live on: DistributedLog's
    ``BKDLConfig``, stored in the namespace znode as ``DLMetadata``.

    Wire form (``DLMetadata.serialize``): ``"1\\nBKDL\\n"`` followed by the
    thrift struct ``BKDLConfigFormat`` in Apache Thrift's TJSONProtocol,
    e.g. ``{"1":{"str":"zk1:2181"},"2":{"str":"/ledgers"},"3":{"tf":1},...}``,
    so DistributedLog's tools and clients can read a namespace dlog bound and
    the other way round. (thriftpy2's own JSON protocol is not Apache's, and
    its Apache JSON protocol only frames RPC messages, so the struct is
    written with :mod:`json` directly, field by field in id order as the
    Java generated code does.)"""

    bk_zk_servers: str
    bk_ledgers_path: str
    dl_zk_servers: str
    bk_zk_servers_for_reader: str | None = None
    dl_zk_servers_for_reader: str | None = None
    sanity_check_txnid: bool = True
    encode_region_id: bool = False
    acl_root_path: str | None = None
    first_log_segment_seq_no: int | None = None
    federated_namespace: bool = False

    def __post_init__(self) -> None:
        # Readers default to the writers' servers, as DistributedLog reads it.
        if self.bk_zk_servers_for_reader is None:
            object.__setattr__(self, "bk_zk_servers_for_reader", self.bk_zk_servers)
        if self.dl_zk_servers_for_reader is None:
            object.__setattr__(self, "dl_zk_servers_for_reader", self.dl_zk_servers)
        for f in ("bk_zk_servers", "bk_ledgers_path", "dl_zk_servers"):
            value = getattr(self, f)
            if not isinstance(value, str) or not value:
                raise ValueError(f"namespace binding needs {f}, got {value!r}")
        for f in ("sanity_check_txnid", "encode_region_id", "federated_namespace"):
            if type(getattr(self, f)) is not bool:
                raise TypeError(f"{f} must be a bool")
        seq = self.first_log_segment_seq_no
        if seq is not None and (type(seq) is not int or not _INT64_MIN <= seq <= _INT64_MAX):
            raise ValueError(f"first_log_segment_seq_no must be an int64, got {seq!r}")
        self.metadata_service_uri  # noqa: B018 - validates servers and ledgers path

    @classmethod
    def for_metadata_uri(
        cls, metadata_uri: str | MetadataServiceUri, dl_zk_servers: str
    ) -> NamespaceBinding:
        """A binding to the bookies registered under ``metadata_uri``."""
        uri = (
            metadata_uri
            if isinstance(metadata_uri, MetadataServiceUri)
            else parse_metadata_service_uri(metadata_uri)
        )
        return cls(
            bk_zk_servers=uri.hosts,
            bk_ledgers_path=uri.ledgers_root,
            dl_zk_servers=dl_zk_servers,
        )

    @property
    def metadata_service_uri(self) -> str:
        """BookKeeper's ``metadataServiceUri`` for the bound bookies."""
        hosts = self.bk_zk_servers.replace(";", ",")
        try:
            uri = parse_metadata_service_uri(f"zk+hierarchical://{hosts}{self.bk_ledgers_path}")
        except ValueError as e:
            raise ValueError(f"namespace binding names no usable bookie metadata: {e}") from None
        return str(uri)

    def serialize(self) -> bytes:
        struct: dict[str, dict[str, Any]] = {}
        for fid, (attr, ttype) in _BKDL_FIELDS.items():
            value = getattr(self, attr)
            if value is None or (attr == "federated_namespace" and not value):
                continue  # unset optional field (DistributedLog sets federated only if true)
            struct[str(fid)] = {ttype: int(value) if ttype == "tf" else value}
        body = json.dumps(struct, separators=(",", ":"), ensure_ascii=False)
        return f"{_DL_METADATA_FORMAT_VERSION}\n{_DL_TYPE}\n{body}".encode()

    @classmethod
    def parse(cls, data: bytes, where: str = "namespace") -> NamespaceBinding:
        """Strict inverse of :meth:`serialize`; reads what DistributedLog
        writes (unknown thrift fields are skipped, as thrift does)."""
        try:
            text = bytes(data).decode("utf-8")
        except UnicodeDecodeError:
            raise MetadataError(f"{where}: binding is not UTF-8: {bytes(data)[:80]!r}") from None
        lines = re.split(r"\r\n|\r|\n", text)
        if len(lines) < 3:
            raise MetadataError(f"{where}: binding is not DLMetadata: {text[:120]!r}")
        if lines[0] != _DL_METADATA_FORMAT_VERSION:
            raise MetadataError(
                f"{where}: DLMetadata format version {lines[0][:20]!r} is not "
                f"{_DL_METADATA_FORMAT_VERSION}"
            )
        if lines[1] != _DL_TYPE:
            raise MetadataError(f"{where}: DL type {lines[1][:20]!r} is not {_DL_TYPE}")
        try:
            doc = json.loads("".join(lines[2:]))
        except ValueError as e:
            raise MetadataError(f"{where}: BKDLConfig is not thrift JSON: {e}") from None
        except RecursionError:  # json nests by recursion: "[[[[..." must not escape
            raise MetadataError(f"{where}: BKDLConfig is nested too deeply") from None
        if not isinstance(doc, dict):
            raise MetadataError(f"{where}: BKDLConfig is not a thrift struct")
        kw: dict[str, Any] = {}
        for key, field in doc.items():
            if not key.isascii() or not key.isdigit() or len(key) > 5:  # thrift ids are i16
                raise MetadataError(f"{where}: BKDLConfig field id {key!r} is not a number")
            spec = _BKDL_FIELDS.get(int(key))
            if spec is None:
                continue
            attr, ttype = spec
            if not isinstance(field, dict) or list(field) != [ttype]:
                raise MetadataError(f"{where}: BKDLConfig field {key} ({attr}) is not a {ttype}")
            value = field[ttype]
            if ttype == "str" and not isinstance(value, str):
                raise MetadataError(f"{where}: BKDLConfig {attr} is not a string")
            if ttype in ("tf", "i64") and (type(value) is not int):
                raise MetadataError(f"{where}: BKDLConfig {attr} is not an integer")
            kw[attr] = (value != 0) if ttype == "tf" else value
        try:
            return cls(**kw)
        except (TypeError, ValueError) as e:
            raise MetadataError(f"{where}: invalid BKDLConfig: {e}") from None


async def read_namespace_binding(zk: ZooKeeper, ns_path: str) -> NamespaceBinding | None:
    """The namespace's binding, or ``None`` if the znode is missing or empty
    (never bound, or unbound by DistributedLog's tool)."""
    ns_path = _clean_namespace_path(ns_path)
    try:
        data, _stat = await zk.get(ns_path)
    except NoNodeError:
        return None
    return NamespaceBinding.parse(data, ns_path) if data else None


async def bound_ancestor(zk: ZooKeeper, ns_path: str) -> str | None:
    """The path of a bound namespace above ``ns_path``, if any. A namespace
    created inside another would show up in it as a stream."""
    parts = _clean_namespace_path(ns_path).split("/")[1:]
    for depth in range(1, len(parts)):
        path = "/" + "/".join(parts[:depth])
        try:
            data, _stat = await zk.get(path)
        except NoNodeError:
            return None  # nothing deeper exists either
        if data.startswith(_DL_METADATA_PREFIX):
            return path
    return None


async def bind_namespace(
    zk: ZooKeeper,
    ns_path: str,
    default_metadata_uri: str | MetadataServiceUri,
    *,
    dl_zk_servers: str | None = None,
) -> NamespaceBinding:
    """The namespace's binding, binding it to ``default_metadata_uri`` first
    if it has none (creating the znode if need be).

    Race safe: the first binding stored wins (create, or compare-and-set on
    an empty znode's version); every other caller gets that binding."""
    ns_path = _clean_namespace_path(ns_path)
    mine = NamespaceBinding.for_metadata_uri(default_metadata_uri, dl_zk_servers or zk.hosts)
    data = mine.serialize()
    for _ in range(_CAS_ATTEMPTS):
        try:
            await zk.retry(zk.create, ns_path, data, makepath=True)
            log.info("bound namespace %s to %s", ns_path, mine.metadata_service_uri)
            return mine
        except NodeExistsError:
            pass
        try:
            current, stat = await zk.get(ns_path)
        except NoNodeError:
            continue  # deleted meanwhile: try creating it again
        if current:
            return NamespaceBinding.parse(current, ns_path)
        try:
            await zk.retry(zk.set, ns_path, data, version=stat.version)
            log.info("bound namespace %s to %s", ns_path, mine.metadata_service_uri)
            return mine
        except (BadVersionError, NoNodeError):
            continue  # someone else bound (or removed) it first: read theirs
    raise ZooKeeperError(f"bind {ns_path}: the namespace znode keeps changing")
