"""What the bookie and its journal writer process say over their two pipes.

Requests, bookie to writer, in order: ``GROUP`` frames (a group commit's
bytes: length prefixes and records, as they go into the journal file),
``RESUME`` (after ENOSPC, start a new file and take groups again) and
``FAILPOINTS`` (the failpoints a test armed in the bookie). Answers,
writer to bookie: one :class:`Ack` after each batch of groups it wrote and
synced, and one when it is ready. Acks count groups cumulatively, so the
bookie completes its oldest groups first, as the journal wrote them.

Pure codecs: no I/O here. Native byte order: both ends are one machine.
"""

from __future__ import annotations

import dataclasses
import struct

GROUP = 1
RESUME = 2
FAILPOINTS = 3
KINDS = (GROUP, RESUME, FAILPOINTS)

_REQUEST = struct.Struct("=BII")  # kind, records, nbytes
REQUEST_HEADER_SIZE = _REQUEST.size

#: Ack.status: the batch is durable.
OK = 0
#: Ack.status: the writer had failed before this batch and wrote none of it.
STILL_FAILED = -1
# A positive Ack.status is the errno of a failure in this batch.

_ACK = struct.Struct("=iQQQdddQQQQQH")
ACK_HEADER_SIZE = _ACK.size


def group_header(records: int, nbytes: int) -> bytes:
    return _REQUEST.pack(GROUP, records, nbytes)


def resume_request() -> bytes:
    return _REQUEST.pack(RESUME, 0, 0)


def failpoints_request(spec: str) -> bytes:
    data = spec.encode()
    return _REQUEST.pack(FAILPOINTS, 0, len(data)) + data


@dataclasses.dataclass(frozen=True, slots=True)
class Request:
    kind: int
    records: int
    payload: bytes


class RequestReader:
    """Cuts the request stream into requests (a frame may arrive in pieces)."""

    def __init__(self) -> None:
        self._buf = b""

    def feed(self, data: bytes) -> list[Request]:
        buf = self._buf + data if self._buf else data
        out: list[Request] = []
        pos = 0
        end = len(buf)
        while end - pos >= REQUEST_HEADER_SIZE:
            kind, records, nbytes = _REQUEST.unpack_from(buf, pos)
            if kind not in KINDS:
                raise ValueError(f"journal pipe: unknown request kind {kind} at {pos}")
            start = pos + REQUEST_HEADER_SIZE
            if end - start < nbytes:
                break
            out.append(Request(kind, records, buf[start : start + nbytes]))
            pos = start + nbytes
        self._buf = buf[pos:]
        return out

    @property
    def pending(self) -> int:
        """Bytes of a request not yet complete."""
        return len(self._buf)


@dataclasses.dataclass(frozen=True, slots=True)
class Ack:
    status: int
    groups: int  # groups answered so far, this ack's included
    file_id: int  # the journal file and offset everything answered ends at
    offset: int
    taken: float  # time.monotonic(): read from the pipe, written, synced
    written: float
    synced: float
    writes: int  # the writer's cumulative counters
    fsyncs: int
    bytes_written: int
    rolls: int
    records_synced: int
    message: str = ""

    def encode(self) -> bytes:
        msg = self.message.encode()[:65535]
        return (
            _ACK.pack(
                self.status,
                self.groups,
                self.file_id,
                self.offset,
                self.taken,
                self.written,
                self.synced,
                self.writes,
                self.fsyncs,
                self.bytes_written,
                self.rolls,
                self.records_synced,
                len(msg),
            )
            + msg
        )


class AckReader:
    """Cuts the answer stream into :class:`Ack` values."""

    def __init__(self) -> None:
        self._buf = b""

    def feed(self, data: bytes) -> list[Ack]:
        buf = self._buf + data if self._buf else data
        out: list[Ack] = []
        pos = 0
        while len(buf) - pos >= ACK_HEADER_SIZE:
            fields = _ACK.unpack_from(buf, pos)
            (status, groups, file_id, offset, taken, written, synced) = fields[:7]
            (writes, fsyncs, nbytes, rolls, records, msg_len) = fields[7:]
            start = pos + ACK_HEADER_SIZE
            if len(buf) - start < msg_len:
                break
            message = buf[start : start + msg_len].decode(errors="replace")
            out.append(
                Ack(
                    status,
                    groups,
                    file_id,
                    offset,
                    taken,
                    written,
                    synced,
                    writes,
                    fsyncs,
                    nbytes,
                    rolls,
                    records,
                    message,
                )
            )
            pos = start + msg_len
        self._buf = buf[pos:]
        return out
