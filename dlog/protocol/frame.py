"""BookKeeper v3 framing: a 4-byte big-endian length, then the payload.

Kept apart from any connection logic so both the bookie and the client use
the same codec, and so it can be fuzzed on its own.
"""

from __future__ import annotations

from dlog.errors import ProtocolError

HEADER_SIZE = 4
DEFAULT_MAX_FRAME_SIZE = 5 * 1024 * 1024


class FrameTooLargeError(ProtocolError):
    """A frame length over the limit (or negative). ``frames`` holds the good
    frames decoded before it in the same :meth:`FrameDecoder.feed`, so a
    server can still answer them before it closes the connection."""

    default_message = "frame exceeds the maximum frame size"

    def __init__(self, message: str | None = None, frames: list[memoryview] | None = None) -> None:
        super().__init__(message)
        self.frames: list[memoryview] = frames or []


def encode_frame(payload: bytes) -> bytes:
    """Prefix ``payload`` with its 4-byte big-endian length."""
    return len(payload).to_bytes(4, "big") + payload


class FrameDecoder:
    """Incremental decoder: :meth:`feed` bytes as they arrive, get whole
    frame payloads back. A length over ``max_frame_size`` (or a negative
    one) raises :class:`FrameTooLargeError` carrying the frames before it,
    and drops whatever was buffered; the caller closes the stream.

    Payloads are zero-copy ``memoryview`` slices of immutable ``bytes``, so
    they stay valid after the next :meth:`feed`; protobuf parses them
    directly. A large frame arriving in many chunks is joined once, when
    it is complete."""

    __slots__ = ("_chunks", "_buffered", "_needed", "max_frame_size")

    def __init__(self, max_frame_size: int = DEFAULT_MAX_FRAME_SIZE) -> None:
        self._chunks: list[bytes] = []
        self._buffered = 0
        self._needed = 0  # bytes needed before the pending frame is complete
        self.max_frame_size = max_frame_size

    @property
    def buffered(self) -> int:
        return self._buffered

    def feed(self, data: bytes) -> list[memoryview]:
        if self._chunks:
            self._chunks.append(data)
            self._buffered += len(data)
            if self._buffered < self._needed:
                return []
            data = b"".join(self._chunks)
            self._chunks = []
            self._buffered = 0
        view = memoryview(data)
        frames: list[memoryview] = []
        pos = 0
        end = len(data)
        limit = self.max_frame_size
        needed = HEADER_SIZE
        while end - pos >= HEADER_SIZE:
            size = int.from_bytes(view[pos : pos + 4], "big", signed=True)
            if size < 0 or size > limit:
                self._chunks = []
                self._buffered = 0
                raise FrameTooLargeError(
                    f"frame of {size} bytes exceeds nettyMaxFrameSizeBytes={limit}"
                    if size >= 0
                    else f"negative frame length {size}",
                    frames,
                )
            start = pos + HEADER_SIZE
            if end - start < size:
                needed = HEADER_SIZE + size
                break
            frames.append(view[start : start + size])
            pos = start + size
        if pos < end:
            rest = bytes(view[pos:])
            self._chunks = [rest]
            self._buffered = len(rest)
            self._needed = needed
        return frames
