"""Log segment metadata: the ``;``-separated strings DistributedLog keeps in
``<stream>/<default>/ledgers/<segment znode>`` (format code only, no I/O).

Format, as DistributedLog's ``LogSegmentMetadata`` writes it
(``getFinalisedData``) and reads it (``parseData``):

* Field 0, ``versionStatusCount``, is a signed 64-bit decimal packing the
  metadata version (bits 0-7), a status byte (bits 8-15, whose low two bits
  are the truncation status), the region id (bits 28-31) and, for completed
  segments only, the record count (bits 32-63). Bits 16-27 are unused.
* The remaining fields depend on the version and on whether the segment is
  in progress (every field a signed decimal):

  ====  ==========================================  ====================================
  ver   in progress                                 completed
  ====  ==========================================  ====================================
  1     1;ledger;firstTx                            vsc;ledger;firstTx;lastTx;completion
  2     vsc;ledger;firstTx;seq                      vsc;ledger;firstTx;lastTx;completion;
                                                    seq;lastEntry;lastSlot
  3, 4  ... ;seq;minActiveEntry;minActiveSlot       ... ;lastSlot;minActiveEntry;minActiveSlot
  5     ... ;minActiveSlot;startSequenceId          ... ;minActiveSlot;startSequenceId
  ====  ==========================================  ====================================

  Version 5 written out in full, in progress:
  ``vsc;ledgerId;firstTxId;logSegmentSeqNo;minActiveEntryId;minActiveSlotId;startSequenceId``;
  completed:
  ``vsc;ledgerId;firstTxId;lastTxId;completionTime;logSegmentSeqNo;lastEntryId;lastSlotId;minActiveEntryId;minActiveSlotId;startSequenceId``.

* Version 1 (no sequence number, which reads as 0; its writer never set
  status or region bits) is rejected unless ``skip_min_version_check`` is
  given, as DistributedLog's ``parseData(..., skipMinVersionCheck)`` does;
  version 0 and anything above 5 are always rejected.
* Sequence number 0 is accepted (DistributedLog's own tests build segments
  without one); real streams start at 1.

Sequence ids: a segment without a stored start sequence id (version < 5, or
``-1``, DistributedLog's ``UNASSIGNED_SEQUENCE_ID``, which Java writers store
in every in-progress segment) starts at ``Long.MIN_VALUE + (seq << 32)``
(``getStartSequenceId``); readers give the first in-progress version-5
segment the id after the last completed one instead
(``PerStreamLogSegmentCache``): see :func:`assign_start_sequence_ids`.

Parsing here is stricter than DistributedLog's (which uses
``Long.parseLong`` and ignores stray bits): numbers must be canonical
decimals in the int64 range, unused and undefined status bits must be zero,
an in-progress segment must not carry a record count, and the znode name, if
given, must agree with the data. Anything else raises
:class:`~dlog.errors.MetadataError` naming the problem; an unknown version
raises :class:`~dlog.errors.UnsupportedMetadataVersionError`.
"""

from __future__ import annotations

import dataclasses
import enum
import re
import time
from collections.abc import Iterable
from typing import Any

from dlog.dlsn import DLSN
from dlog.errors import IllegalStateError, MetadataError, UnsupportedMetadataVersionError

__all__ = [
    "COMPLETED_PREFIX",
    "CURRENT_VERSION",
    "EMPTY_LOGSEGMENT_TXID",
    "INPROGRESS_PREFIX",
    "INVALID_TXID",
    "OLDEST_SUPPORTED_VERSION",
    "UNASSIGNED_SEQUENCE_ID",
    "LogSegmentMetadata",
    "TruncationStatus",
    "assign_start_sequence_ids",
    "completed_znode_name",
    "inprogress_znode_name",
    "parse_znode_name",
    "start_sequence_id_after",
]

# DistributedLog's LogSegmentMetadataVersion values that matter here.
VERSION_V1_ORIGINAL = 1
VERSION_V2_LEDGER_SEQNO = 2
VERSION_V3_MIN_ACTIVE_DLSN = 3
VERSION_V4_ENVELOPED_ENTRIES = 4
VERSION_V5_SEQUENCE_ID = 5
CURRENT_VERSION = VERSION_V5_SEQUENCE_ID
OLDEST_SUPPORTED_VERSION = VERSION_V2_LEDGER_SEQNO

# DistributedLogConstants.
INVALID_TXID = -999
EMPTY_LOGSEGMENT_TXID = -99
UNASSIGNED_SEQUENCE_ID = -1
LOCAL_REGION_ID = 0
INPROGRESS_PREFIX = "inprogress"
COMPLETED_PREFIX = "logrecs"

# versionStatusCount layout.
_VERSION_MASK = 0xFF
_STATUS_SHIFT = 8
_STATUS_MASK = 0xFF << _STATUS_SHIFT
_UNUSED_MASK = 0x0FFF0000
_REGION_SHIFT = 28
_REGION_MASK = 0xF << _REGION_SHIFT
_COUNT_SHIFT = 32
_TRUNCATION_MASK = 0x3
MAX_REGION_ID = 0xF

_INT64_MIN = -(1 << 63)
_INT64_MAX = (1 << 63) - 1
_INT32_MAX = (1 << 31) - 1

_NUMBER = re.compile(r"0|-?[1-9][0-9]*", re.ASCII)
_ZNODE_NAME = re.compile(r"(inprogress|logrecs)_([0-9]{18,19})", re.ASCII)

# Number of ';'-separated fields: version -> (in progress, completed).
_FIELD_COUNTS = {1: (3, 5), 2: (4, 8), 3: (6, 10), 4: (6, 10), 5: (7, 11)}


class TruncationStatus(enum.IntEnum):
    """Low two bits of a segment's status byte."""

    ACTIVE = 0
    PARTIALLY_TRUNCATED = 1
    TRUNCATED = 2


def inprogress_znode_name(log_segment_sequence_no: int) -> str:
    """``inprogress_%018d``, DistributedLog's name (logSegmentNameVersion 1)."""
    return f"{INPROGRESS_PREFIX}_{log_segment_sequence_no:018d}"


def completed_znode_name(log_segment_sequence_no: int) -> str:
    """``logrecs_%018d``, DistributedLog's name (logSegmentNameVersion 1)."""
    return f"{COMPLETED_PREFIX}_{log_segment_sequence_no:018d}"


def parse_znode_name(name: str) -> tuple[bool, int] | None:
    """``(in_progress, sequence number)`` of a canonical segment znode name,
    or ``None`` for any other name (DistributedLog's pre-1 names such as
    ``inprogress_<hex txid>`` included)."""
    m = _ZNODE_NAME.fullmatch(name)
    if m is None:
        return None
    seq = int(m.group(2))
    if seq > _INT64_MAX or f"{seq:018d}" != m.group(2):
        return None
    return m.group(1) == INPROGRESS_PREFIX, seq


def _check_int(name: str, value: Any, lo: int = _INT64_MIN, hi: int = _INT64_MAX) -> None:
    if type(value) is not int:
        raise TypeError(f"{name} must be an int, not {type(value).__name__}")
    if not lo <= value <= hi:
        raise ValueError(f"{name} must be in [{lo}, {hi}], got {value}")


@dataclasses.dataclass(frozen=True, kw_only=True)
class LogSegmentMetadata:
    """One log segment: a ledger plus its place in the stream.

    Fields not stored by the segment's form (e.g. ``last_txid`` of an
    in-progress segment, ``start_sequence_id`` before version 5) must hold
    DistributedLog's defaults, so that every instance serializes and parses
    back to itself."""

    version: int = CURRENT_VERSION
    ledger_id: int
    first_txid: int
    last_txid: int = INVALID_TXID
    completion_time: int = 0
    log_segment_sequence_no: int
    last_entry_id: int = -1
    last_slot_id: int = -1
    min_active_entry_id: int = 0
    min_active_slot_id: int = 0
    start_sequence_id: int = UNASSIGNED_SEQUENCE_ID
    truncation_status: TruncationStatus = TruncationStatus.ACTIVE
    region_id: int = LOCAL_REGION_ID
    record_count: int = 0
    in_progress: bool = True

    def __post_init__(self) -> None:
        _check_int("version", self.version)
        if self.version not in _FIELD_COUNTS:
            raise ValueError(
                f"version must be {VERSION_V1_ORIGINAL}..{CURRENT_VERSION}, got {self.version}"
            )
        if type(self.in_progress) is not bool:
            raise TypeError("in_progress must be a bool")
        _check_int("ledger_id", self.ledger_id, 0)
        _check_int("first_txid", self.first_txid)
        _check_int("last_txid", self.last_txid)
        _check_int("completion_time", self.completion_time, 0)
        _check_int("log_segment_sequence_no", self.log_segment_sequence_no, 0)
        _check_int("last_entry_id", self.last_entry_id, -1)
        _check_int("last_slot_id", self.last_slot_id, -1)
        _check_int("min_active_entry_id", self.min_active_entry_id, 0)
        _check_int("min_active_slot_id", self.min_active_slot_id, 0)
        _check_int("start_sequence_id", self.start_sequence_id)
        _check_int("region_id", self.region_id, 0, MAX_REGION_ID)
        _check_int("record_count", self.record_count, 0, _INT32_MAX)
        try:
            status = TruncationStatus(self.truncation_status)
        except ValueError:
            raise ValueError(f"unknown truncation status {self.truncation_status!r}") from None
        object.__setattr__(self, "truncation_status", status)
        if self.in_progress:
            unstored = {
                "last_txid": (self.last_txid, INVALID_TXID),
                "completion_time": (self.completion_time, 0),
                "last_entry_id": (self.last_entry_id, -1),
                "last_slot_id": (self.last_slot_id, -1),
                "record_count": (self.record_count, 0),
            }
            for name, (value, default) in unstored.items():
                if value != default:
                    raise ValueError(
                        f"an in-progress segment does not store {name}; it must be "
                        f"{default}, got {value}"
                    )
        if self.version == VERSION_V1_ORIGINAL and (
            self.log_segment_sequence_no != 0
            or self.last_entry_id != -1
            or self.last_slot_id != -1
            or self.region_id != LOCAL_REGION_ID
            or self.truncation_status is not TruncationStatus.ACTIVE
        ):
            raise ValueError(
                "version 1 stores no sequence number, last DLSN, region or status "
                "(they must be 0, -1, -1, 0 and ACTIVE)"
            )
        if self.version < VERSION_V3_MIN_ACTIVE_DLSN and (
            self.min_active_entry_id != 0 or self.min_active_slot_id != 0
        ):
            raise ValueError(f"version {self.version} does not store the min active DLSN")
        if (
            self.version < VERSION_V5_SEQUENCE_ID
            and self.start_sequence_id != UNASSIGNED_SEQUENCE_ID
        ):
            raise ValueError(f"version {self.version} does not store the start sequence id")

    # -- names and positions -----------------------------------------------------
    @property
    def znode_name(self) -> str:
        """``inprogress_%018d`` or ``logrecs_%018d`` by sequence number."""
        seq = self.log_segment_sequence_no
        return inprogress_znode_name(seq) if self.in_progress else completed_znode_name(seq)

    @property
    def first_dlsn(self) -> DLSN:
        return DLSN(self.log_segment_sequence_no, 0, 0)

    @property
    def last_dlsn(self) -> DLSN:
        """Position of the segment's last record; as in DistributedLog it is
        ``(seq, -1, -1)`` while the segment is in progress."""
        return DLSN(self.log_segment_sequence_no, self.last_entry_id, self.last_slot_id)

    @property
    def min_active_dlsn(self) -> DLSN:
        """First position not truncated (``first_dlsn`` unless partially truncated)."""
        return DLSN(self.log_segment_sequence_no, self.min_active_entry_id, self.min_active_slot_id)

    @property
    def is_truncated(self) -> bool:
        return self.truncation_status is TruncationStatus.TRUNCATED

    @property
    def is_partially_truncated(self) -> bool:
        return self.truncation_status is TruncationStatus.PARTIALLY_TRUNCATED

    @property
    def is_non_truncated(self) -> bool:
        return self.truncation_status is TruncationStatus.ACTIVE

    @property
    def supports_sequence_id(self) -> bool:
        return self.version >= VERSION_V5_SEQUENCE_ID

    @property
    def effective_start_sequence_id(self) -> int:
        """The start sequence id records of this segment count from:
        DistributedLog's ``getStartSequenceId``, i.e. the stored one, or
        ``Long.MIN_VALUE + (seq << 32)`` (Java long arithmetic) when the
        version has none or it is unassigned, so that such ids are negative
        and still ordered by segment."""
        if self.supports_sequence_id and self.start_sequence_id != UNASSIGNED_SEQUENCE_ID:
            return self.start_sequence_id
        return _wrap_int64(_INT64_MIN + (self.log_segment_sequence_no << 32))

    @property
    def sort_key(self) -> tuple[int, int]:
        """DistributedLog's segment order: by sequence number, and an
        in-progress segment before a completed one with the same number."""
        return (self.log_segment_sequence_no, 0 if self.in_progress else 1)

    # -- copies --------------------------------------------------------------------
    def complete(
        self,
        *,
        last_txid: int,
        record_count: int,
        last_entry_id: int,
        last_slot_id: int,
        start_sequence_id: int | None = None,
        completion_time: int | None = None,
    ) -> LogSegmentMetadata:
        """The completed copy of this in-progress segment (DistributedLog's
        ``completeLogSegment``); ``completion_time`` defaults to now, in ms,
        and ``start_sequence_id`` to the one the segment started with. A
        version without one ignores ``start_sequence_id``, as DistributedLog's
        serialized form does."""
        if not self.in_progress:
            raise IllegalStateError(f"segment {self.log_segment_sequence_no} is already completed")
        if completion_time is None:
            completion_time = int(time.time() * 1000)
        if not self.supports_sequence_id:
            start_sequence_id = None
        return dataclasses.replace(
            self,
            in_progress=False,
            last_txid=last_txid,
            record_count=record_count,
            last_entry_id=last_entry_id,
            last_slot_id=last_slot_id,
            start_sequence_id=self.start_sequence_id
            if start_sequence_id is None
            else start_sequence_id,
            completion_time=completion_time,
        )

    def truncate_to(self, dlsn: DLSN) -> LogSegmentMetadata:
        """A copy marked partially truncated, its records before ``dlsn`` gone
        (DistributedLog's ``setLogSegmentPartiallyTruncated``)."""
        if dlsn.log_segment_sequence_no != self.log_segment_sequence_no:
            raise ValueError(f"{dlsn} is not in segment {self.log_segment_sequence_no}")
        if self.is_truncated:
            raise IllegalStateError(
                f"segment {self.log_segment_sequence_no} is already fully truncated"
            )
        if self.version < VERSION_V3_MIN_ACTIVE_DLSN:
            raise IllegalStateError(f"version {self.version} segments have no min active DLSN")
        return dataclasses.replace(
            self,
            truncation_status=TruncationStatus.PARTIALLY_TRUNCATED,
            min_active_entry_id=dlsn.entry_id,
            min_active_slot_id=dlsn.slot_id,
        )

    def mark_truncated(self) -> LogSegmentMetadata:
        """A copy marked truncated (DistributedLog's ``setLogSegmentTruncated``)."""
        return dataclasses.replace(self, truncation_status=TruncationStatus.TRUNCATED)

    def mark_active(self) -> LogSegmentMetadata:
        """A copy marked not truncated (DistributedLog's ``setLogSegmentActive``)."""
        return dataclasses.replace(self, truncation_status=TruncationStatus.ACTIVE)

    # -- wire form -----------------------------------------------------------------------
    @property
    def version_status_count(self) -> int:
        """Field 0 of the serialized form (a signed int64)."""
        vsc = self.version
        vsc |= (int(self.truncation_status) & 0xFF) << _STATUS_SHIFT
        vsc |= (self.region_id & MAX_REGION_ID) << _REGION_SHIFT
        if not self.in_progress:
            vsc |= self.record_count << _COUNT_SHIFT
        return vsc  # record_count <= INT32_MAX keeps this within int64

    def serialize(self) -> bytes:
        """The znode data DistributedLog writes for this segment."""
        fields: list[int] = [self.version_status_count, self.ledger_id, self.first_txid]
        if self.version == VERSION_V1_ORIGINAL:
            if not self.in_progress:
                fields += [self.last_txid, self.completion_time]
        elif self.in_progress:
            fields.append(self.log_segment_sequence_no)
        else:
            fields += [
                self.last_txid,
                self.completion_time,
                self.log_segment_sequence_no,
                self.last_entry_id,
                self.last_slot_id,
            ]
        if self.version >= VERSION_V3_MIN_ACTIVE_DLSN:
            fields += [self.min_active_entry_id, self.min_active_slot_id]
        if self.version >= VERSION_V5_SEQUENCE_ID:
            fields.append(self.start_sequence_id)
        return ";".join(str(f) for f in fields).encode("ascii")

    @classmethod
    def parse(
        cls,
        data: bytes | bytearray | memoryview | str,
        znode_name: str | None = None,
        *,
        skip_min_version_check: bool = False,
    ) -> LogSegmentMetadata:
        """Strict inverse of :meth:`serialize`.

        ``znode_name`` (a name or a full path), when given, must be the
        canonical name of the parsed segment. ``skip_min_version_check``
        admits version 1, as DistributedLog's flag of that name does."""
        where = f" in {znode_name}" if znode_name else ""
        text = _decode(data, where)
        parts = text.split(";")
        numbers: list[int] = []
        for i, part in enumerate(parts):
            if not _NUMBER.fullmatch(part):
                raise MetadataError(
                    f"malformed log segment metadata{where}: field {i} {part[:40]!r} "
                    f"is not a decimal integer: {text[:200]!r}"
                )
            value = int(part)
            if not _INT64_MIN <= value <= _INT64_MAX:
                raise MetadataError(
                    f"malformed log segment metadata{where}: field {i} {part!r} "
                    f"is outside the int64 range"
                )
            numbers.append(value)
        vsc = numbers[0]
        version = vsc & _VERSION_MASK
        if version == VERSION_V1_ORIGINAL and skip_min_version_check:
            pass
        elif version < OLDEST_SUPPORTED_VERSION:
            raise UnsupportedMetadataVersionError(
                f"log segment metadata version {version}{where} is no longer supported "
                f"(oldest supported: {OLDEST_SUPPORTED_VERSION}): {text[:200]!r}"
            )
        if version > CURRENT_VERSION:
            raise UnsupportedMetadataVersionError(
                f"log segment metadata version {version}{where} is newer than the newest "
                f"supported ({CURRENT_VERSION}): {text[:200]!r}"
            )
        n_inprogress, n_completed = _FIELD_COUNTS[version]
        if len(numbers) == n_inprogress:
            in_progress = True
        elif len(numbers) == n_completed:
            in_progress = False
        else:
            raise MetadataError(
                f"malformed log segment metadata{where}: version {version} has "
                f"{n_inprogress} fields (in progress) or {n_completed} (completed), "
                f"got {len(numbers)}: {text[:200]!r}"
            )
        if vsc & _UNUSED_MASK:
            raise MetadataError(
                f"malformed log segment metadata{where}: unused bits 16-27 are set in {vsc:#x}"
            )
        status = (vsc & _STATUS_MASK) >> _STATUS_SHIFT
        if status & ~_TRUNCATION_MASK:
            raise MetadataError(
                f"malformed log segment metadata{where}: undefined status bits set ({status:#x})"
            )
        if status == 3:
            raise MetadataError(
                f"malformed log segment metadata{where}: truncation status 3 is undefined"
            )
        region_id = (vsc & _REGION_MASK) >> _REGION_SHIFT
        record_count = vsc >> _COUNT_SHIFT  # arithmetic shift, as DistributedLog's
        if in_progress and record_count != 0:
            raise MetadataError(
                f"malformed log segment metadata{where}: an in-progress segment carries "
                f"a record count ({record_count})"
            )
        if record_count < 0:
            raise MetadataError(
                f"malformed log segment metadata{where}: negative record count {record_count}"
            )
        kw: dict[str, Any] = {
            "version": version,
            "truncation_status": TruncationStatus(status),
            "region_id": region_id,
            "record_count": record_count,
            "in_progress": in_progress,
            "ledger_id": numbers[1],
            "first_txid": numbers[2],
        }
        rest = numbers[3:]
        if version == VERSION_V1_ORIGINAL:
            kw["log_segment_sequence_no"] = 0
            if not in_progress:
                kw["last_txid"], kw["completion_time"] = rest
            rest = []
        elif in_progress:
            kw["log_segment_sequence_no"] = rest.pop(0)
        else:
            (
                kw["last_txid"],
                kw["completion_time"],
                kw["log_segment_sequence_no"],
                kw["last_entry_id"],
                kw["last_slot_id"],
            ) = rest[:5]
            rest = rest[5:]
        if version >= VERSION_V3_MIN_ACTIVE_DLSN:
            kw["min_active_entry_id"], kw["min_active_slot_id"] = rest[:2]
            rest = rest[2:]
        if version >= VERSION_V5_SEQUENCE_ID:
            kw["start_sequence_id"] = rest.pop(0)
        try:
            segment = cls(**kw)
        except (TypeError, ValueError) as e:
            raise MetadataError(
                f"invalid log segment metadata{where}: {e}: {text[:200]!r}"
            ) from None
        if znode_name and version != VERSION_V1_ORIGINAL:  # v1 names were by txid
            name = znode_name.rsplit("/", 1)[-1]
            if name != segment.znode_name:
                raise MetadataError(
                    f"log segment znode {name!r} does not match its data, which describes "
                    f"{segment.znode_name!r}"
                )
        return segment


def assign_start_sequence_ids(
    segments: Iterable[LogSegmentMetadata],
) -> list[LogSegmentMetadata]:
    """``segments`` (ascending) as DistributedLog's readers see them: the
    first in-progress version-5 segment starts where the last completed one
    ended (``PerStreamLogSegmentCache.getLogSegments``).

    Java writers store ``-1`` in an in-progress segment and only fix the id on
    completion, so without this a tailing reader would number that segment's
    records differently from a Java reader."""
    out = sorted(segments, key=lambda s: s.sort_key)
    start = UNASSIGNED_SEQUENCE_ID
    for i, seg in enumerate(out):
        if not seg.in_progress:
            start = (
                _wrap_int64(seg.effective_start_sequence_id + seg.record_count)
                if seg.supports_sequence_id
                else UNASSIGNED_SEQUENCE_ID
            )
            continue
        if seg.supports_sequence_id:
            out[i] = dataclasses.replace(
                seg, start_sequence_id=0 if start == UNASSIGNED_SEQUENCE_ID else start
            )
        break
    return out


def start_sequence_id_after(previous: LogSegmentMetadata | None) -> int:
    """Start sequence id of the segment following ``previous`` (completed,
    or ``None`` for the first): DistributedLog's
    ``DLUtils.computeStartSequenceId``, which starts over at 0 after a
    segment of a version without sequence ids."""
    if previous is None or not previous.supports_sequence_id:
        return 0
    return _wrap_int64(previous.effective_start_sequence_id + previous.record_count)


def _wrap_int64(value: int) -> int:
    """``value`` as a Java long would hold it (two's complement overflow)."""
    return (value + (1 << 63)) % (1 << 64) - (1 << 63)


def _decode(data: bytes | bytearray | memoryview | str, where: str) -> str:
    if isinstance(data, str):
        text = data
    elif isinstance(data, (bytes, bytearray, memoryview)):
        try:
            text = bytes(data).decode("ascii")
        except UnicodeDecodeError:
            raise MetadataError(
                f"malformed log segment metadata{where}: not ASCII: {bytes(data)[:80]!r}"
            ) from None
    else:
        raise TypeError(f"log segment metadata must be bytes, not {type(data).__name__}")
    if not text:
        raise MetadataError(f"malformed log segment metadata{where}: empty")
    if len(text) > 1024:
        raise MetadataError(
            f"malformed log segment metadata{where}: {len(text)} bytes is far too long"
        )
    return text
