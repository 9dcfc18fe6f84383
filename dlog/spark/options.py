"""Options of the ``dlog`` Spark source: parsing and validation.

Every error names the option it is about, e.g.::

    dlog source option 'startingPosition': 'abc' is not a DLSN, 'earliest' or 'latest'

Spark hands a Python data source its options with lower-cased keys; names
are matched case-insensitively here, and ``dlog.*`` settings are mapped back
to their canonical DistributedLog spelling.

============================  ==============================================================
option                        meaning
============================  ==============================================================
``uri``                       namespace URI, ``distributedlog://host:port/path`` (required)
``stream``                    a stream, or a comma-separated list of streams (required; also
                              accepted as the path: ``.load("events")``)
``startingPosition``          ``earliest`` (default), ``latest``, or a DLSN: the first record
                              read is the first one at or after that DLSN. Also a JSON object
                              ``{"stream": position, ...}`` (streams not named: ``earliest``)
``endingPosition``            batch reads only: ``latest`` (default: what is durable when the
                              query is planned), ``earliest`` (nothing), or a DLSN: the last
                              record read is the last one at or before it (inclusive). Also a
                              JSON object per stream (streams not named: ``latest``)
``subscription``              a subscriber id. A new query starts just after its last commit
                              (when it has one; else at ``startingPosition``); a streaming
                              query advances it as Spark commits batches (batch reads only
                              read it)
``maxRecordsPerTrigger``      streaming: at most this many records per micro-batch, over all
                              streams
``entriesPerPartition``       at most this many ledger entries per Spark partition (default
                              256; a segment is one partition or several)
``dlog.<key>``                any DistributedLog setting (DLogConfig key), e.g.
                              ``dlog.bkc.readEntryTimeoutSec=10`` or
                              ``dlog.logSegmentBasedSubscriptionsStoreEnabled=true``
============================  ==============================================================

DLSNs are accepted in every form :func:`dlog.dlsn.parse_dlsn` reads: the
base64 form tools print (and that the ``dlsn`` column holds), ``S/E/N`` and
DistributedLog's ``DLSN{logSegmentSequenceNo=S, entryId=E, slotId=N}``.
"""

from __future__ import annotations

import dataclasses
import json
import re
from collections.abc import Mapping
from typing import Any

from dlog.conf.dlog import KEY_ALIASES, DLogConfig
from dlog.dlsn import DLSN, NonInclusiveLowerBound, parse_dlsn
from dlog.errors import (
    ConfigError,
    DLogError,
    InvalidDLSNError,
    InvalidStreamNameError,
    LogNotFoundError,
)
from dlog.log_metadata import validate_stream_name
from dlog.uri import parse_namespace_uri

__all__ = [
    "DEFAULT_ENTRIES_PER_PARTITION",
    "EARLIEST",
    "LATEST",
    "DlogSourceError",
    "DlogSourceOptionError",
    "DlogSourceStreamNotFoundError",
    "Position",
    "SourceOptions",
    "before",
    "parse_options",
    "source_error",
]

DEFAULT_ENTRIES_PER_PARTITION = 256
DLOG_PREFIX = "dlog."

#: Canonical names of the source's own options (Spark lower-cases them).
OPTIONS = (
    "uri",
    "stream",
    "startingPosition",
    "endingPosition",
    "subscription",
    "maxRecordsPerTrigger",
    "entriesPerPartition",
)
_CANONICAL = {name.lower(): name for name in OPTIONS}


class DlogSourceError(DLogError):
    """The dlog Spark source cannot do what was asked. The message is one
    line: Spark buries it in a long text (``dlog.spark.source_error`` finds
    it there), and ``dlog.spark.check_options`` shows it alone."""

    code = 400  # DistributedLog BAD_REQUEST
    default_message = "the dlog Spark source cannot do what was asked"

    def __init__(self, message: str | None = None) -> None:
        if message:  # the text of a wrapped error may span lines
            message = " ".join(part.strip() for part in message.splitlines() if part.strip())
        super().__init__(message)


class DlogSourceOptionError(DlogSourceError, ValueError):
    """An option of the dlog Spark source is missing or invalid."""

    def __init__(self, option: str, message: str) -> None:
        self.option = option
        super().__init__(f"dlog source option {option!r}: {message}")


class DlogSourceStreamNotFoundError(DlogSourceOptionError, LogNotFoundError):
    """A stream of the ``stream`` option does not exist (``streams``: every
    one missing). Also a LogNotFoundError, as the library raises for it."""

    code = LogNotFoundError.code

    def __init__(self, streams: tuple[str, ...], uri: str) -> None:
        self.streams = streams
        if len(streams) == 1:
            what = f"stream {streams[0]!r} does not exist"
        else:
            what = f"streams {', '.join(map(repr, streams))} do not exist"
        super().__init__("stream", f"{what} in namespace {uri}")


#: The last line of a Python traceback for an error of dlog's, as Spark
#: copies it into its own error's text.
_DLOG_ERROR_LINE = re.compile(r"^dlog(?:\.\w+)*\.(\w*Error): (.+)$", re.MULTILINE)


def source_error(exc: BaseException) -> str | None:
    """The one-line message of the dlog error behind ``exc``, None if there
    is none. Spark runs a Python data source in worker processes and wraps
    what it raises in an error of its own (AnalysisException,
    StreamingQueryException, PythonException) whose text holds the whole
    Python traceback and often the JVM's stack: this finds the dlog error's
    line in that text (the last one: the error actually raised)."""
    if isinstance(exc, DlogSourceError):
        return str(exc)
    if isinstance(exc, DLogError):
        return f"{type(exc).__name__}: {exc}"
    found = _DLOG_ERROR_LINE.findall(str(exc))
    if not found:
        return None
    name, message = found[-1]
    return message.strip() if name.startswith("DlogSource") else f"{name}: {message.strip()}"


@dataclasses.dataclass(frozen=True)
class Position:
    """``earliest``, ``latest`` or a DLSN (see the module doc for what each
    means as a start and as an end)."""

    kind: str  # "earliest", "latest" or "dlsn"
    dlsn: DLSN | None = None

    def __str__(self) -> str:
        return self.kind if self.dlsn is None else f"{self.dlsn[0]}/{self.dlsn[1]}/{self.dlsn[2]}"


EARLIEST = Position("earliest")
LATEST = Position("latest")


def before(dlsn: DLSN) -> DLSN:
    """The exclusive lower bound that makes ``dlsn`` the first position read:
    ``(s, e, n - 1)``. DLSNs order as tuples, so no record lies strictly
    between it and ``dlsn`` (``(s, e, -1)`` is above every slot of entry
    ``e - 1``)."""
    return DLSN(dlsn[0], dlsn[1], dlsn[2] - 1)


@dataclasses.dataclass(frozen=True)
class SourceOptions:
    """The parsed, validated options (picklable: this travels to Spark's
    Python workers with the data source)."""

    uri: str
    streams: tuple[str, ...]
    starting: tuple[tuple[str, Position], ...]
    ending: tuple[tuple[str, Position], ...]
    ending_given: bool
    subscription: str | None
    max_records_per_trigger: int | None
    entries_per_partition: int
    dlog_settings: tuple[tuple[str, str], ...]

    def check_streaming(self) -> None:
        """DlogSourceOptionError for what only a batch read takes."""
        if self.ending_given:
            raise DlogSourceOptionError(
                "endingPosition", "is for batch reads (spark.read) only, not for readStream"
            )

    def starting_for(self, stream: str) -> Position:
        return dict(self.starting)[stream]

    def ending_for(self, stream: str) -> Position:
        return dict(self.ending)[stream]

    def config(self) -> DLogConfig:
        """The DLogConfig of the ``dlog.*`` options (validated at parse time)."""
        return DLogConfig.load(overrides=dict(self.dlog_settings))

    def start_bound(self, stream: str, latest: DLSN | None) -> DLSN:
        """Exclusive lower bound for ``startingPosition`` (``latest`` is the
        stream's last DLSN, None when it has no records)."""
        pos = self.starting_for(stream)
        if pos.kind == "earliest":
            return NonInclusiveLowerBound
        if pos.kind == "latest":
            return latest if latest is not None else NonInclusiveLowerBound
        assert pos.dlsn is not None
        return before(pos.dlsn)


def _fail(option: str, message: str) -> DlogSourceOptionError:
    return DlogSourceOptionError(option, message)


def _parse_position(option: str, text: str) -> Position:
    value = text.strip()
    lowered = value.lower()
    if lowered == "earliest":
        return EARLIEST
    if lowered == "latest":
        return LATEST
    try:
        dlsn = parse_dlsn(value)
    except InvalidDLSNError:
        raise _fail(option, f"{text!r} is not a DLSN, 'earliest' or 'latest'") from None
    if dlsn[0] < 1 or dlsn[1] < 0 or dlsn[2] < 0:
        raise _fail(
            option,
            f"{text!r} is not a record position: the segment sequence number must be "
            "at least 1 and the entry and slot ids at least 0",
        )
    return Position("dlsn", dlsn)


def _parse_positions(
    option: str, raw: str | None, streams: tuple[str, ...], default: Position
) -> tuple[tuple[str, Position], ...]:
    if raw is None:
        return tuple((s, default) for s in streams)
    text = raw.strip()
    if text.startswith("{"):
        try:
            per_stream = json.loads(text)
        except json.JSONDecodeError as e:
            raise _fail(option, f"{raw!r} is not valid JSON ({e.msg})") from None
        if not isinstance(per_stream, dict):
            raise _fail(option, "a JSON value must be an object {stream: position}")
        unknown = sorted(set(per_stream) - set(streams))
        if unknown:
            raise _fail(
                option,
                f"names stream(s) {', '.join(map(repr, unknown))} that option 'stream' "
                f"does not list ({', '.join(streams)})",
            )
        out = []
        for s in streams:
            value = per_stream.get(s)
            if value is None:
                out.append((s, default))
            elif not isinstance(value, str):
                raise _fail(option, f"position of stream {s!r} must be a string, not {value!r}")
            else:
                out.append((s, _parse_position(option, value)))
        return tuple(out)
    pos = _parse_position(option, text)
    return tuple((s, pos) for s in streams)


def _parse_int(option: str, raw: str | None, default: int | None, minimum: int) -> int | None:
    if raw is None:
        return default
    try:
        value = int(str(raw).strip().replace("_", ""))
    except ValueError:
        raise _fail(option, f"{raw!r} is not an integer") from None
    if value < minimum:
        raise _fail(option, f"must be at least {minimum}, got {value}")
    return value


def _dlog_keys() -> dict[str, str]:
    """lower-cased key -> canonical DLogConfig key (aliases included)."""
    keys = {k.lower(): k for k in DLogConfig.setting_keys()}
    keys.update({alias.lower(): alias for alias in KEY_ALIASES})
    return keys


def _parse_dlog_settings(settings: Mapping[str, str]) -> tuple[tuple[str, str], ...]:
    known = _dlog_keys()
    out: dict[str, str] = {}
    for key, value in settings.items():
        name = key[len(DLOG_PREFIX) :]
        canonical = known.get(name.lower())
        if canonical is None:
            raise _fail(
                key,
                f"{name!r} is not a dlog setting (DLogConfig key, e.g. "
                "'dlog.bkc.readEntryTimeoutSec' or 'dlog.logSegmentBasedSubscriptionsStoreEnabled')",
            )
        out[canonical] = value
    try:
        DLogConfig.load(overrides=out)
    except ConfigError as e:
        message = str(e).split(": ", 1)[1] if ": " in str(e) else str(e)
        raise _fail(f"{DLOG_PREFIX}{e.key}", message) from None
    return tuple(sorted(out.items()))


def parse_options(options: Mapping[str, Any]) -> SourceOptions:
    """Validate Spark's options (any key case); DlogSourceOptionError naming
    the option on the first problem found."""
    own: dict[str, str] = {}
    settings: dict[str, str] = {}
    for key, value in options.items():
        if value is None:
            continue
        lowered = key.lower()
        if lowered.startswith(DLOG_PREFIX):
            settings[key] = str(value)
            continue
        canonical = _CANONICAL.get(lowered)
        if lowered == "path":  # .load("events")
            if "stream" in {k.lower() for k in options}:
                raise _fail(
                    "stream", "give the stream(s) as option 'stream' or as the path, not both"
                )
            canonical = "stream"
        if canonical is None:
            raise _fail(key, f"unknown option (the dlog source takes {', '.join(OPTIONS)}, dlog.*)")
        own[canonical] = str(value)

    uri = own.get("uri", "").strip()
    if not uri:
        raise _fail(
            "uri", "is required: the namespace URI, e.g. distributedlog://127.0.0.1:2181/messaging"
        )
    try:
        parse_namespace_uri(uri)
    except ValueError as e:
        raise _fail("uri", f"{uri!r} is not a namespace URI ({e})") from None

    raw_streams = own.get("stream", "")
    streams = tuple(s.strip() for s in raw_streams.split(",") if s.strip())
    if not streams:
        raise _fail("stream", "is required: a stream name or a comma-separated list of names")
    for s in streams:
        try:
            validate_stream_name(s)
        except InvalidStreamNameError as e:
            raise _fail("stream", str(e)) from None
    duplicates = sorted({s for s in streams if streams.count(s) > 1})
    if duplicates:
        raise _fail("stream", f"lists {', '.join(map(repr, duplicates))} more than once")

    subscription = own.get("subscription")
    if subscription is not None:
        subscription = subscription.strip()
        from subscriptions.format import validate_subscriber_id

        try:
            validate_subscriber_id(subscription)
        except InvalidStreamNameError as e:
            raise _fail("subscription", str(e)) from None

    return SourceOptions(
        uri=uri,
        streams=streams,
        starting=_parse_positions(
            "startingPosition", own.get("startingPosition"), streams, EARLIEST
        ),
        ending=_parse_positions("endingPosition", own.get("endingPosition"), streams, LATEST),
        ending_given="endingPosition" in own,
        subscription=subscription,
        max_records_per_trigger=_parse_int(
            "maxRecordsPerTrigger", own.get("maxRecordsPerTrigger"), None, 1
        ),
        entries_per_partition=_parse_int(  # type: ignore[arg-type]
            "entriesPerPartition", own.get("entriesPerPartition"), DEFAULT_ENTRIES_PER_PARTITION, 1
        ),
        dlog_settings=_parse_dlog_settings(settings),
    )
