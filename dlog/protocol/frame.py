"""BookKeeper v3 framing: a 4-byte big-endian length, then the payload.

Kept apart from any connection logic so both the bookie and the client use
the same codec, and so it can be fuzzed on its own.
"""

from __future__ import annotations

from dlog.errors import ProtocolError

HEADER_SIZE = 4
DEFAULT_MAX_FRAME_SIZE = 5 * 1024 * 1024


class FrameTooLargeError(ProtocolError):
    default_message = "frame exceeds the maximum frame size"


def encode_frame(payload: bytes) -> bytes:
    """Prefix ``payload`` with its 4-byte big-endian length."""
    return len(payload).to_bytes(4, "big") + payload


class FrameDecoder:
    """Incremental decoder: :meth:`feed` bytes as they arrive, get whole
    frame payloads back. A length over ``max_frame_size`` (or a negative
    one) raises :class:`FrameTooLargeError`; the caller closes the stream."""

    __slots__ = ("_buf", "max_frame_size")

    def __init__(self, max_frame_size: int = DEFAULT_MAX_FRAME_SIZE) -> None:
        self._buf = bytearray()
        self.max_frame_size = max_frame_size

    @property
    def buffered(self) -> int:
        return len(self._buf)

    def feed(self, data: bytes) -> list[bytes]:
        buf = self._buf
        buf += data
        frames: list[bytes] = []
        pos = 0
        end = len(buf)
        limit = self.max_frame_size
        while end - pos >= HEADER_SIZE:
            size = int.from_bytes(buf[pos : pos + 4], "big", signed=True)
            if size < 0 or size > limit:
                raise FrameTooLargeError(
                    f"frame of {size} bytes exceeds nettyMaxFrameSizeBytes={limit}"
                    if size >= 0
                    else f"negative frame length {size}"
                )
            if end - pos - HEADER_SIZE < size:
                break
            start = pos + HEADER_SIZE
            frames.append(bytes(buf[start : start + size]))
            pos = start + size
        if pos:
            del buf[:pos]
        return frames
