"""The ``dlog`` Spark data source: batch and structured streaming reads.

    import dlog.spark
    dlog.spark.register(spark)
    df = (spark.read.format("dlog")
          .option("uri", "distributedlog://127.0.0.1:2181/messaging")
          .option("stream", "events,clicks")
          .load())

Options: see :mod:`dlog.spark.options`. Schema: :data:`dlog.spark.reader.SCHEMA`.

Offsets (structured streaming)
------------------------------

An offset is ``{stream: dlsn}`` (the DLSN in its base64 form) for every
stream of the ``stream`` option. It is the *last record included*: a
micro-batch ``(start, end]`` reads each stream's records with ``start < dlsn
<= end``. So a committed offset is exactly what a subscription stores (the
DLSN of the last record processed) and the two convert into each other with
no off-by-one:

* the initial offset of a new query (no checkpoint) is, per stream, the
  subscription's last commit when ``subscription`` is set and it has
  committed; else ``startingPosition``: ``earliest`` is
  ``NonInclusiveLowerBound`` (``1/0/-1``, below every record), ``latest``
  the stream's last DLSN (so only records written later are read) and an
  explicit DLSN ``S/E/N`` the position just before it, ``S/E/N-1``, so the
  first record read is the first at or after ``S/E/N``;
* a query restarted from its checkpoint resumes from the checkpoint (Spark
  does not ask the source for an initial offset then);
* ``latestOffset`` is each stream's last DLSN (the last durable record,
  found from segment metadata and the LAC), capped by the target of
  ``Trigger.AvailableNow``. With ``maxRecordsPerTrigger`` the end lands on
  the exact DLSN of the N-th record after the start (N shared fairly over
  the streams), so batches neither skip nor repeat records;
* ``commit(end)`` advances the subscription of each stream to ``end`` in the
  stream's subscriptions store (the ZooKeeper or the log-segment store, per
  ``logSegmentBasedSubscriptionsStoreEnabled``, settable as
  ``dlog.logSegmentBasedSubscriptionsStoreEnabled``). Spark calls it only
  after the batch is in the commit log. Spark calls it for batch N when it
  plans batch N+1, so the last batch of a run would never be committed; the
  source therefore also commits the *start* of every ``latestOffset`` call
  (Spark only asks for a new end once the batch ending at that start is in
  the commit log), which covers the last batch of a ``Trigger.AvailableNow``
  run. A restart therefore never skips data: the subscription is at most
  as far as Spark's own commit log.
"""

from __future__ import annotations

import json
from collections.abc import Iterator, Mapping
from typing import Any

from pyspark.sql.datasource import (
    DataSource,
    DataSourceReader,
    DataSourceStreamReader,
    InputPartition,
)
from pyspark.sql.types import StructType

from dlog.dlsn import DLSN, parse_dlsn
from dlog.errors import DLogError, InvalidDLSNError
from dlog.spark.options import DlogSourceError, SourceOptions, parse_options
from dlog.spark.planning import DlogPartition, DriverSession
from dlog.spark.reader import SCHEMA, read_partition

try:  # pyspark >= 4.2
    from pyspark.sql.streaming.datasource import (
        ReadAllAvailable,
        ReadLimit,
        ReadMaxRows,
        SupportsTriggerAvailableNow,
    )
except ImportError:  # pragma: no cover - older pyspark: no admission control
    ReadAllAvailable = ReadLimit = ReadMaxRows = None  # type: ignore[assignment,misc]

    class SupportsTriggerAvailableNow:  # type: ignore[no-redef]
        pass


__all__ = ["DlogBatchReader", "DlogDataSource", "DlogStreamReader", "check_options"]


def check_options(options: Mapping[str, Any], *, streaming: bool = False) -> SourceOptions:
    """Check ``options`` on the driver, before any query, as the source will:
    parse them, open the namespace (never binding it), check every stream
    exists and find where a new query would start (the subscription's last
    commit, ``startingPosition``). Returns the parsed options.

    Spark runs the source's own checks in a Python worker and wraps their
    error in a long one of its own (Python and JVM tracebacks); this raises
    the DlogSourceError itself, whose message is one line. ``streaming``:
    check them for ``readStream`` (no ``endingPosition``)."""
    parsed = parse_options(options)
    if streaming:
        parsed.check_streaming()
    with DriverSession(parsed) as session:
        try:
            session.check_streams()
            session.start_bounds()
        except DlogSourceError:
            raise
        except DLogError as e:
            raise DlogSourceError(
                f"cannot check stream(s) {', '.join(parsed.streams)} of namespace {parsed.uri}: "
                f"{type(e).__name__}: {e}"
            ) from e
    return parsed


class DlogDataSource(DataSource):
    """``spark.read.format("dlog")`` and ``spark.readStream.format("dlog")``."""

    def __init__(self, options: Mapping[str, str]) -> None:
        super().__init__(options)  # type: ignore[arg-type]
        self.parsed = parse_options(options)

    @classmethod
    def name(cls) -> str:
        return "dlog"

    def schema(self) -> str:
        # Called by load(): a missing namespace or stream fails here, naming
        # the option, rather than when the first action runs.
        with DriverSession(self.parsed) as session:
            session.check_streams()
        return SCHEMA

    def reader(self, schema: StructType) -> DataSourceReader:
        return DlogBatchReader(self.parsed)

    def streamReader(self, schema: StructType) -> DataSourceStreamReader:
        self.parsed.check_streaming()
        return DlogStreamReader(self.parsed)


def _read(partition: InputPartition, options: SourceOptions) -> Iterator[Any]:
    if not isinstance(partition, DlogPartition):
        return iter(())  # Spark's placeholder when there is nothing to read
    return read_partition(partition, options)


class DlogBatchReader(DataSourceReader):
    """A batch read: partitions planned on the driver from metadata, read on
    executors."""

    def __init__(self, options: SourceOptions) -> None:
        self.options = options

    def partitions(self) -> list[InputPartition]:
        with DriverSession(self.options) as session:
            return list(session.plan(session.batch_bounds()))

    def read(self, partition: InputPartition) -> Iterator[Any]:
        return _read(partition, self.options)


class DlogStreamReader(DataSourceStreamReader, SupportsTriggerAvailableNow):
    """A structured-streaming read (see the module doc for offsets).

    Spark keeps one instance per query in a Python process on the driver for
    offsets, partitions and commits; executors only call :meth:`read` (on a
    copy made before any of that, which never connects to the namespace)."""

    def __init__(self, options: SourceOptions) -> None:
        self.options = options
        self._session: DriverSession | None = None
        self._initial: dict[str, DLSN] | None = None
        self._target: dict[str, DLSN | None] | None = None
        self._committed: dict[str, DLSN] = {}
        self._latest: dict[str, str] | None = None
        self._triggers = 0

    def __getstate__(self) -> dict[str, Any]:
        state = self.__dict__.copy()
        state["_session"] = None
        return state

    # -- helpers -----------------------------------------------------------------
    @property
    def session(self) -> DriverSession:
        if self._session is None:
            self._session = DriverSession(self.options)
        return self._session

    def _encode(self, positions: Mapping[str, DLSN]) -> dict[str, str]:
        return {s: positions[s].serialize() for s in self.options.streams}

    def _decode(self, offset: Mapping[str, Any] | None) -> dict[str, DLSN]:
        """Per stream DLSNs of an offset; a stream the offset lacks (added to
        the ``stream`` option since the checkpoint) starts where a new query
        would."""
        offset = offset or {}
        out: dict[str, DLSN] = {}
        missing = []
        for stream in self.options.streams:
            text = offset.get(stream)
            if text is None:
                missing.append(stream)
                continue
            try:
                out[stream] = parse_dlsn(text)
            except (InvalidDLSNError, TypeError):
                raise DlogSourceError(
                    f"offset {json.dumps(offset)} of stream {stream!r} is not a DLSN: {text!r}"
                ) from None
        if missing:
            initial = self._initial_positions()
            for stream in missing:
                out[stream] = initial[stream]
        return out

    def _initial_positions(self) -> dict[str, DLSN]:
        if self._initial is None:
            self._initial = self.session.start_bounds()
        return self._initial

    def _commit(self, positions: Mapping[str, DLSN]) -> None:
        subscription = self.options.subscription
        if subscription is None:
            return
        for stream in self.options.streams:
            dlsn = positions.get(stream)
            if dlsn is None:
                continue
            done = self._committed.get(stream)
            if done is not None and dlsn <= done:
                continue
            self.session.commit(stream, subscription, dlsn)
            self._committed[stream] = dlsn

    # -- DataSourceStreamReader ------------------------------------------------------
    def initialOffset(self) -> dict[str, str]:
        return self._encode(self._initial_positions())

    def getDefaultReadLimit(self) -> Any:
        if ReadMaxRows is not None and self.options.max_records_per_trigger is not None:
            return ReadMaxRows(self.options.max_records_per_trigger)
        return ReadAllAvailable() if ReadAllAvailable is not None else None

    def prepareForTriggerAvailableNow(self) -> None:
        # The target: what is durable now. Later records wait for the next run.
        self._target = {s: self.session.last_dlsn(s) for s in self.options.streams}

    def latestOffset(self, start: dict | None = None, limit: Any = None) -> dict[str, str]:
        session = self.session
        if start is None:  # pyspark < 4.2 calls latestOffset() with no argument
            starts = self._initial_positions()
        else:
            starts = self._decode(start)
            if starts != self._initial:
                # Spark asks for a new end only once the batch ending at
                # ``start`` is in its commit log: safe to commit (and the only
                # commit the last batch of an AvailableNow run ever gets).
                self._commit(starts)
        latest = {s: session.last_dlsn(s) for s in self.options.streams}
        self._latest = {s: d.serialize() for s, d in latest.items() if d is not None} or None
        caps: dict[str, DLSN | None] = dict(latest)
        if self._target is not None:
            for s, target in self._target.items():
                cap = caps.get(s)
                caps[s] = None if target is None or cap is None else min(cap, target)
        max_rows = None
        if ReadMaxRows is not None and isinstance(limit, ReadMaxRows):
            max_rows = limit.max_rows
        self._triggers += 1
        ends = session.end_offsets(starts, caps, max_rows, rotate=self._triggers)
        return self._encode(ends)

    def reportLatestOffset(self) -> dict[str, str] | None:
        return self._latest

    def partitions(self, start: dict, end: dict) -> list[InputPartition]:
        starts, ends = self._decode(start), self._decode(end)
        bounds: dict[str, tuple[DLSN, DLSN | None]] = {
            s: (starts[s], ends[s]) for s in self.options.streams if ends[s] > starts[s]
        }
        if not bounds:
            return []
        return list(self.session.plan(bounds, trust_upper=True))

    def read(self, partition: InputPartition) -> Iterator[Any]:
        return _read(partition, self.options)

    def commit(self, end: dict) -> None:
        self._commit(self._decode(end))

    def stop(self) -> None:
        if self._session is not None:
            self._session.close()
            self._session = None
