"""Driver side of the dlog Spark source: which entries a query reads.

Positions are *bounds*: a read covers the records ``lower < dlsn <= upper``
of a stream (``lower`` exclusive, ``upper`` inclusive). Planning turns that
range into Spark partitions using segment metadata only (plus the LAC of an
in-progress segment): one partition per segment, or, for a segment with
more than ``entriesPerPartition`` entries, one per run of at most that many
entries. A partition carries a few numbers (stream, segment, ledger id,
start sequence id, first/last entry, the two bounds, the ledger metadata
service) and executors read its entries straight from the bookies
(:mod:`dlog.spark.reader`), so records never pass through the driver.

As the library's reader does, truncated segments are skipped, a partially
truncated segment is read from its min active DLSN, a completed segment
ends at its last entry and an in-progress one at its LAC.

``maxRecordsPerTrigger`` needs the DLSN of the N-th record after a
position. Records are counted with segment metadata (a completed segment's
record count) and record *positions* (each user record's 1-based index in
its segment, in its header): a handful of single-entry reads per stream per
trigger (the entries holding the start and end bounds, then an
interpolation search), never the data itself. The search and the planning
are pure functions over segment metadata and an entry-reading callback, so
they are unit-tested without bookies (tests/unit/test_spark_planning.py).
"""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import Callable, Coroutine, Iterable, Mapping, Sequence
from typing import TYPE_CHECKING, Any, NamedTuple, TypeVar

from pyspark.sql.datasource import InputPartition

from dlog.dlsn import DLSN, NonInclusiveLowerBound
from dlog.errors import DLogError, LogEmptyError, LogNotFoundError
from dlog.record import FLAG_CONTROL, FLAG_END_OF_STREAM, LogRecordWithDLSN
from dlog.segment import LogSegmentMetadata, assign_start_sequence_ids
from dlog.segment_reader import read_entry_records, readable_lac
from dlog.spark.options import (
    DlogSourceError,
    DlogSourceOptionError,
    DlogSourceStreamNotFoundError,
    SourceOptions,
)

if TYPE_CHECKING:
    from dlog.ledger.client import BookKeeper
    from dlog.loop_thread import LoopThread
    from dlog.sync import SyncLogManager, SyncSubscriptionsStore

log = logging.getLogger(__name__)

__all__ = [
    "MAX_DLSN",
    "DlogPartition",
    "DriverSession",
    "EntryRecord",
    "Span",
    "allocate",
    "available",
    "count_through",
    "limited_end",
    "locate",
    "plan_stream",
    "spans",
]

_INT64_MAX = (1 << 63) - 1
#: Above every DLSN: the upper bound of "everything durable".
MAX_DLSN = DLSN(_INT64_MAX, _INT64_MAX, _INT64_MAX)
_USER_MASK = FLAG_CONTROL | FLAG_END_OF_STREAM
T = TypeVar("T")


# ---------------------------------------------------------------------------
# partitions
# ---------------------------------------------------------------------------


class DlogPartition(InputPartition):
    """The entries ``first_entry..last_entry`` of one segment, and the DLSN
    bounds ``lower < dlsn <= upper`` of the records to keep. Small and
    picklable: Spark sends it to an executor."""

    def __init__(
        self,
        stream: str,
        segment: int,
        ledger_id: int,
        start_sequence_id: int,
        first_entry: int,
        last_entry: int,
        lower: Sequence[int],
        upper: Sequence[int],
        metadata_service_uri: str,
    ) -> None:
        self.stream = stream
        self.segment = segment
        self.ledger_id = ledger_id
        self.start_sequence_id = start_sequence_id
        self.first_entry = first_entry
        self.last_entry = last_entry
        self.lower = tuple(lower)
        self.upper = tuple(upper)
        self.metadata_service_uri = metadata_service_uri

    @property
    def value(self) -> tuple[Any, ...]:  # InputPartition's attribute
        return self._key()

    def _key(self) -> tuple[Any, ...]:
        return (
            self.stream,
            self.segment,
            self.ledger_id,
            self.start_sequence_id,
            self.first_entry,
            self.last_entry,
            self.lower,
            self.upper,
            self.metadata_service_uri,
        )

    def __eq__(self, other: object) -> bool:
        return isinstance(other, DlogPartition) and self._key() == other._key()

    def __hash__(self) -> int:
        return hash(self._key())

    def __repr__(self) -> str:
        return (
            f"DlogPartition({self.stream!r}, segment={self.segment}, ledger={self.ledger_id}, "
            f"entries={self.first_entry}..{self.last_entry}, "
            f"({'/'.join(map(str, self.lower))}, {'/'.join(map(str, self.upper))}])"
        )


@dataclasses.dataclass(frozen=True)
class Span:
    """The part of one segment inside a range: entries ``first_entry ..
    last_entry`` and records ``lower < dlsn <= upper``."""

    segment: LogSegmentMetadata
    lower: DLSN
    upper: DLSN
    first_entry: int
    last_entry: int


def spans(
    segments: Iterable[LogSegmentMetadata],
    lower: DLSN,
    upper: DLSN | None,
    last_entry_of: Callable[[LogSegmentMetadata], int],
    *,
    trust_upper: bool = False,
) -> list[Span]:
    """The segments (and entries of each) that hold records ``lower < dlsn
    <= upper``; ``upper`` None means everything durable now.

    ``last_entry_of(segment)`` is the LAC of an in-progress segment (only
    called for those). With ``trust_upper`` an upper bound inside an
    in-progress segment is known to be at or below its LAC (it was a record
    DLSN when it was chosen), which saves the LAC read."""
    top = MAX_DLSN if upper is None else upper
    out: list[Span] = []
    if top <= lower:
        return out
    for seg in segments:
        seq = seg.log_segment_sequence_no
        if seq < lower[0]:
            continue
        if seq > top[0]:
            break
        if seg.is_truncated:
            continue
        if not seg.in_progress and (seg.record_count == 0 or seg.last_entry_id < 0):
            continue
        lo = lower
        if seg.is_partially_truncated:
            floor = DLSN(seq, seg.min_active_entry_id, seg.min_active_slot_id - 1)
            if floor > lo:
                lo = floor
        first = max(lo[1], 0) if lo[0] == seq else 0
        if not seg.in_progress:
            last = seg.last_entry_id
            if top[0] == seq:
                last = min(last, top[1])
        elif top[0] == seq and trust_upper:
            last = top[1]
        else:
            last = last_entry_of(seg)
            if top[0] == seq:
                last = min(last, top[1])
        if last < first:
            continue
        out.append(Span(seg, lo, top, first, last))
    return out


def plan_stream(
    stream: str,
    segments: Iterable[LogSegmentMetadata],
    lower: DLSN,
    upper: DLSN | None,
    entries_per_partition: int,
    last_entry_of: Callable[[LogSegmentMetadata], int],
    metadata_service_uri: str,
    *,
    trust_upper: bool = False,
) -> list[DlogPartition]:
    """Partitions reading the records ``lower < dlsn <= upper`` of a stream:
    one per segment, split into runs of at most ``entries_per_partition``
    entries."""
    if entries_per_partition < 1:
        raise ValueError("entries_per_partition must be at least 1")
    out: list[DlogPartition] = []
    for span in spans(segments, lower, upper, last_entry_of, trust_upper=trust_upper):
        seg = span.segment
        for first in range(span.first_entry, span.last_entry + 1, entries_per_partition):
            out.append(
                DlogPartition(
                    stream,
                    seg.log_segment_sequence_no,
                    seg.ledger_id,
                    seg.effective_start_sequence_id,
                    first,
                    min(first + entries_per_partition - 1, span.last_entry),
                    span.lower,
                    span.upper,
                    metadata_service_uri,
                )
            )
    return out


# ---------------------------------------------------------------------------
# counting records by position (for maxRecordsPerTrigger)
# ---------------------------------------------------------------------------


class EntryRecord(NamedTuple):
    """What counting needs of a record: its DLSN, its position in the
    segment and whether it is a user record (control and end-of-stream
    records repeat the position of the user record before them)."""

    dlsn: DLSN
    position: int
    user: bool


#: ``read(segment, entry_id)`` -> the records of that entry, in order.
EntryReader = Callable[[LogSegmentMetadata, int], Sequence[EntryRecord]]


def _count_before(records: Sequence[EntryRecord]) -> int:
    """User records of the segment before the first record of an entry."""
    first = records[0]
    return first.position - 1 if first.user else first.position


def segment_total(seg: LogSegmentMetadata, last_entry: int, read: EntryReader) -> int:
    """User records in a segment (an in-progress one up to ``last_entry``)."""
    if not seg.in_progress:
        return seg.record_count
    for entry_id in range(last_entry, -1, -1):
        records = read(seg, entry_id)
        if records:
            return records[-1].position
    return 0


def count_through(seg: LogSegmentMetadata, dlsn: DLSN, last_entry: int, read: EntryReader) -> int:
    """User records of ``seg`` at or before ``dlsn`` (entries up to
    ``last_entry`` exist). Reads at most the entry holding ``dlsn``."""
    seq = seg.log_segment_sequence_no
    if dlsn[0] < seq or (dlsn[0] == seq and dlsn[1] < 0):
        return 0
    if dlsn[0] > seq or dlsn[1] > last_entry:
        return segment_total(seg, last_entry, read)
    for entry_id in range(dlsn[1], -1, -1):
        records = read(seg, entry_id)
        if not records:
            continue  # no records in this entry: look at the one before
        if entry_id < dlsn[1]:
            return records[-1].position
        through = [r for r in records if r.dlsn <= dlsn]
        return through[-1].position if through else _count_before(records)
    return 0


def locate(
    seg: LogSegmentMetadata,
    target: int,
    lo: int,
    count_lo: int,
    hi: int,
    count_hi: int,
    read: EntryReader,
) -> DLSN:
    """DLSN of the user record at position ``target`` of ``seg``, known to
    lie in entries ``lo..hi``, with about ``count_lo`` user records before
    entry ``lo`` and ``count_hi`` up to the end of entry ``hi``.

    Interpolation search (records per entry are usually even), alternating
    with bisection so that uneven entries still take O(log n) reads."""
    probes = 0
    while lo <= hi:
        if probes % 2 == 0 and count_hi > count_lo:
            guess = lo + (target - count_lo - 1) * (hi - lo + 1) // (count_hi - count_lo)
        else:
            guess = (lo + hi) // 2
        guess = min(max(guess, lo), hi)
        probes += 1
        records = read(seg, guess)
        probe = guess
        while not records and probe < hi:  # an entry with no records: step on
            probe += 1
            records = read(seg, probe)
        if not records:
            hi = guess - 1
            continue
        before_entry = _count_before(records)
        after_entry = records[-1].position
        if target <= before_entry:
            hi, count_hi = guess - 1, before_entry
        elif target > after_entry:
            lo, count_lo = probe + 1, after_entry
        else:
            for r in records:
                if r.user and r.position == target:
                    return r.dlsn
            break
    raise DlogSourceError(
        f"segment {seg.log_segment_sequence_no} (ledger {seg.ledger_id}): no record at "
        f"position {target}; its entries do not number their records densely"
    )


def available(span_list: Sequence[Span], read: EntryReader) -> list[tuple[Span, int, int]]:
    """(span, user records through its lower bound, through its upper
    bound) for each span: the span holds ``hi - lo`` records."""
    out = []
    for span in span_list:
        lo = count_through(span.segment, span.lower, span.last_entry, read)
        hi = count_through(span.segment, span.upper, span.last_entry, read)
        out.append((span, lo, max(lo, hi)))
    return out


def limited_end(counted: Sequence[tuple[Span, int, int]], n: int, read: EntryReader) -> DLSN | None:
    """DLSN of the ``n``-th record (1-based) of the counted spans; None when
    they hold fewer than ``n``."""
    if n < 1:
        raise ValueError("n must be at least 1")
    for span, lo, hi in counted:
        if n <= hi - lo:
            return locate(span.segment, lo + n, span.first_entry, lo, span.last_entry, hi, read)
        n -= hi - lo
    return None


def allocate(limit: int, wanted: Mapping[str, int], first: int = 0) -> dict[str, int]:
    """Share ``limit`` records between streams wanting ``wanted[s]``: equal
    shares, what one stream does not need goes to the others. ``first``
    rotates which streams get the remainder when it does not divide."""
    names = list(wanted)
    if names:
        k = first % len(names)
        names = names[k:] + names[:k]
    got = dict.fromkeys(names, 0)
    remaining = limit
    active = [s for s in names if wanted[s] > 0]
    while remaining > 0 and active:
        share = max(1, remaining // len(active))
        for s in active:
            give = min(share, wanted[s] - got[s], remaining)
            got[s] += give
            remaining -= give
            if remaining == 0:
                break
        active = [s for s in active if got[s] < wanted[s]]
    return {s: got[s] for s in wanted}


# ---------------------------------------------------------------------------
# the driver's view of the namespace
# ---------------------------------------------------------------------------


def _entry_records(records: Iterable[LogRecordWithDLSN]) -> list[EntryRecord]:
    return [EntryRecord(r.dlsn, r.position, not (r.flags & _USER_MASK)) for r in records]


class DriverSession:
    """The namespace as the driver uses it: metadata, LACs, last DLSNs,
    subscriptions; single entries only to count records. Opens the namespace
    without binding it (a typo in ``uri`` must not create a namespace) as a
    blocking :class:`~dlog.sync.SyncNamespace` on a loop thread of its own
    process (fork-safe); what only the async side offers (segment lists,
    single entries of a segment) runs on that namespace's loop thread.

    Blocking; close it (or use ``with``)."""

    def __init__(self, options: SourceOptions, loop_thread: LoopThread | None = None) -> None:
        from dlog.sync import SyncNamespace

        self.options = options
        try:
            self.namespace = SyncNamespace.open(
                options.uri, options.config(), loop_thread=loop_thread, bind=False
            )
        except LogNotFoundError as e:
            raise DlogSourceOptionError("uri", str(e)) from None
        except DLogError as e:
            raise DlogSourceOptionError(
                "uri", f"cannot open namespace {options.uri}: {type(e).__name__}: {e}"
            ) from None
        binding = self.namespace.namespace.binding
        assert binding is not None
        self.metadata_service_uri: str = binding.metadata_service_uri
        self._logs: dict[str, SyncLogManager] = {}
        self._stores: dict[str, SyncSubscriptionsStore] = {}
        self._closed: bool = False

    def _run(self, coro: Coroutine[Any, Any, T]) -> T:
        """Run ``coro`` on the namespace's loop thread (for the calls that
        have no blocking twin: segments and their entries)."""
        return self.namespace.loop_thread.run(coro)

    def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        try:
            self.namespace.close()
        except Exception:  # closing must not hide the error being raised
            log.debug("closing the namespace failed", exc_info=True)

    def __enter__(self) -> DriverSession:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- streams --------------------------------------------------------------
    def check_streams(self) -> None:
        """DlogSourceStreamNotFoundError naming every stream of the option
        that does not exist (one error, not one per run)."""
        missing = tuple(s for s in self.options.streams if not self.namespace.log_exists(s))
        if missing:
            raise DlogSourceStreamNotFoundError(missing, self.options.uri)

    def _no_stream(self, stream: str) -> DlogSourceStreamNotFoundError:
        return DlogSourceStreamNotFoundError((stream,), self.options.uri)

    def log(self, stream: str) -> SyncLogManager:
        lm = self._logs.get(stream)
        if lm is None:
            if not self.namespace.log_exists(stream):
                raise self._no_stream(stream)
            lm = self._logs[stream] = self.namespace.open_log(stream)
        return lm

    def segments(self, stream: str) -> list[LogSegmentMetadata]:
        lm = self.log(stream)
        try:
            pairs = self._run(lm.log.store.get_segments(stream))
        except LogNotFoundError:
            raise self._no_stream(stream) from None
        return assign_start_sequence_ids(seg for seg, _ in pairs)

    def lac(self, seg: LogSegmentMetadata) -> int:
        """The last entry readable now in an in-progress segment (-1: none)."""
        return self._run(readable_lac(self._bk, seg, self._password))

    def last_dlsn(self, stream: str) -> DLSN | None:
        try:
            return self.log(stream).get_last_dlsn()
        except LogEmptyError:
            return None

    @property
    def _bk(self) -> BookKeeper:
        return self.namespace.namespace.bk

    @property
    def _password(self) -> bytes:
        return self.namespace.conf.bk_digest_pw.encode()

    def entry_reader(self) -> EntryReader:
        """A cached single-entry reader for counting (see module doc)."""
        cache: dict[tuple[int, int], list[EntryRecord]] = {}

        def read(seg: LogSegmentMetadata, entry_id: int) -> list[EntryRecord]:
            key = (seg.ledger_id, entry_id)
            records = cache.get(key)
            if records is None:
                records = cache[key] = _entry_records(
                    self._run(read_entry_records(self._bk, seg, self._password, entry_id))
                )
            return records

        return read

    # -- subscriptions ------------------------------------------------------------
    def _store(self, stream: str) -> SyncSubscriptionsStore:
        store = self._stores.get(stream)
        if store is None:
            store = self._stores[stream] = self.log(stream).subscriptions
        return store

    def committed(self, stream: str, subscriber_id: str) -> DLSN | None:
        """The subscription's last commit, None if it never committed.
        Reading never fences the subscription's owner."""
        info = self._store(stream).describe(subscriber_id)
        if info.format == "none":
            return None
        return info.position

    def commit(self, stream: str, subscriber_id: str, dlsn: DLSN) -> None:
        """Advance the subscription (a no-op unless ``dlsn`` is past it)."""
        self._store(stream).advance_commit_position(subscriber_id, dlsn)

    # -- planning --------------------------------------------------------------------
    def plan(
        self, bounds: Mapping[str, tuple[DLSN, DLSN | None]], *, trust_upper: bool = False
    ) -> list[DlogPartition]:
        """Partitions for ``{stream: (lower, upper)}``, streams in option order."""
        out: list[DlogPartition] = []
        for stream in self.options.streams:
            if stream not in bounds:
                continue
            lower, upper = bounds[stream]
            out.extend(
                plan_stream(
                    stream,
                    self.segments(stream),
                    lower,
                    upper,
                    self.options.entries_per_partition,
                    self.lac,
                    self.metadata_service_uri,
                    trust_upper=trust_upper,
                )
            )
        return out

    def start_bounds(self) -> dict[str, DLSN]:
        """Exclusive lower bound per stream where a new query starts: just
        after the subscription's last commit when it has one, else
        ``startingPosition``."""
        opts = self.options
        out: dict[str, DLSN] = {}
        for stream in opts.streams:
            committed = None
            if opts.subscription is not None:
                committed = self.committed(stream, opts.subscription)
            if committed is not None:
                out[stream] = committed
            elif opts.starting_for(stream).kind == "latest":
                out[stream] = opts.start_bound(stream, self.last_dlsn(stream))
            else:
                self.log(stream)  # the stream must exist
                out[stream] = opts.start_bound(stream, None)
        return out

    def batch_bounds(self) -> dict[str, tuple[DLSN, DLSN | None]]:
        """(lower, upper) per stream for a batch read (upper None: everything
        durable at planning time)."""
        lowers = self.start_bounds()
        out: dict[str, tuple[DLSN, DLSN | None]] = {}
        for stream in self.options.streams:
            end = self.options.ending_for(stream)
            if end.kind == "latest":
                upper = None
            elif end.kind == "earliest":
                upper = NonInclusiveLowerBound
            else:
                upper = end.dlsn
            out[stream] = (lowers[stream], upper)
        return out

    def end_offsets(
        self,
        starts: Mapping[str, DLSN],
        caps: Mapping[str, DLSN | None],
        limit: int | None,
        rotate: int = 0,
    ) -> dict[str, DLSN]:
        """End offset per stream: ``caps[s]`` (a record DLSN, None when the
        stream has no records), or with ``limit`` the DLSN of the record that
        makes ``limit`` records over all streams (never past the cap)."""
        ends: dict[str, DLSN] = {}
        wanted: dict[str, int] = {}
        counted: dict[str, list[tuple[Span, int, int]]] = {}
        read = self.entry_reader()
        for stream in self.options.streams:
            start, cap = starts[stream], caps.get(stream)
            if cap is None or cap <= start:
                ends[stream] = start
                continue
            ends[stream] = cap
            if limit is None:
                continue
            span_list = spans(self.segments(stream), start, cap, self.lac, trust_upper=True)
            counted[stream] = available(span_list, read)
            wanted[stream] = sum(hi - lo for _, lo, hi in counted[stream])
        if limit is None or not wanted:
            return ends
        if sum(wanted.values()) <= limit:
            return ends
        shares = allocate(limit, wanted, rotate)
        for stream, n in shares.items():
            if n == 0:
                ends[stream] = starts[stream]
            elif n < wanted[stream]:
                end = limited_end(counted[stream], n, read)
                if end is not None:
                    ends[stream] = end
        return ends
