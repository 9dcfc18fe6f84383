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
from typing import Any

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
    #: A view of what was fed to the reader (see :meth:`RequestReader.feed`).
    payload: bytes | memoryview


class _FrameReader:
    """Cuts a stream of frames (a fixed header whose last field is the
    length of the bytes after it) into (header fields, body) pairs: a frame
    may arrive in pieces, and many in one read.

    What is fed may be a view of a buffer the caller reads into again and
    again (no fresh allocation per read: the journal writer's 4 MiB reads
    each cost about 30 page faults per 120 KB otherwise). The bodies of the
    frames it completes are then views of it too, valid until the caller
    reads into it again; the part of a frame still incomplete is copied."""

    def __init__(self, header: struct.Struct) -> None:
        self._header = header
        self._buf = b""

    def check(self, fields: tuple[Any, ...]) -> None:
        """Refuse a bad header as soon as it is read, not once its body
        (whose length may be garbage too) has arrived."""

    def frames(self, data: bytes | memoryview) -> list[tuple[tuple[Any, ...], bytes | memoryview]]:
        buf = self._buf + data if self._buf else data
        head = self._header
        out: list[tuple[tuple[Any, ...], bytes | memoryview]] = []
        pos = 0
        end = len(buf)
        while end - pos >= head.size:
            fields = head.unpack_from(buf, pos)
            self.check(fields)
            start = pos + head.size
            if end - start < fields[-1]:
                break
            out.append((fields, buf[start : start + fields[-1]]))
            pos = start + fields[-1]
        self._buf = bytes(buf[pos:]) if pos < end else b""
        return out

    @property
    def pending(self) -> int:
        """Bytes of a frame not yet complete."""
        return len(self._buf)


class RequestReader(_FrameReader):
    """Cuts the request stream into requests."""

    def __init__(self) -> None:
        super().__init__(_REQUEST)

    def check(self, fields: tuple[Any, ...]) -> None:
        if fields[0] not in KINDS:
            raise ValueError(f"journal pipe: unknown request kind {fields[0]}")

    def feed(self, data: bytes | memoryview) -> list[Request]:
        """The requests ``data`` completes; their payloads are views of
        ``data`` when it is a view, valid until its buffer is reused."""
        return [Request(kind, records, body) for (kind, records, _), body in self.frames(data)]


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


class AckReader(_FrameReader):
    """Cuts the answer stream into :class:`Ack` values."""

    def __init__(self) -> None:
        super().__init__(_ACK)

    def feed(self, data: bytes | memoryview) -> list[Ack]:
        # The header's fields are Ack's, in order, but for the message's
        # length, which the message itself replaces.
        return [
            Ack(*(*fields[:-1], bytes(body).decode(errors="replace")))
            for fields, body in self.frames(data)
        ]
