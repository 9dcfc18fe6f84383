"""The bookie's connection limits: BookKeeper's keys and defaults, the new
keys' defaults and checks, and the decoder handing back the good frames
that came before an oversized one."""

from __future__ import annotations

import pytest

from dlog.conf.bookie import BookieConfig
from dlog.errors import ConfigError
from dlog.protocol.frame import FrameDecoder, FrameTooLargeError, encode_frame

KEYS = [
    "maxAddsInProgressLimit",
    "maxReadsInProgressLimit",
    "frameReadTimeoutMs",
    "connectionIdleTimeoutMs",
    "maxBufferedFrameBytes",
]


def test_defaults() -> None:
    props = BookieConfig().to_properties()
    # BookKeeper's ServerConfiguration: 0 = unlimited for both.
    assert props["maxAddsInProgressLimit"] == 0
    assert props["maxReadsInProgressLimit"] == 0
    assert props["frameReadTimeoutMs"] == 30000
    assert props["connectionIdleTimeoutMs"] == 0
    assert props["maxBufferedFrameBytes"] == 128 * 1024 * 1024


def test_keys_load_into_their_attributes() -> None:
    c = BookieConfig.from_mapping(
        {
            "maxAddsInProgressLimit": 7,
            "maxReadsInProgressLimit": 8,
            "frameReadTimeoutMs": 9,
            "connectionIdleTimeoutMs": 10,
            "maxBufferedFrameBytes": 6 * 1024 * 1024,
        }
    )
    assert c.max_adds_in_progress_limit == 7
    assert c.max_reads_in_progress_limit == 8
    assert c.frame_read_timeout_ms == 9
    assert c.connection_idle_timeout_ms == 10
    assert c.max_buffered_frame_bytes == 6 * 1024 * 1024


@pytest.mark.parametrize("key", KEYS)
def test_negative_values_are_refused(key: str) -> None:
    with pytest.raises(ConfigError, match=key):
        BookieConfig.from_mapping({key: -1})


def test_buffer_cap_must_hold_a_largest_frame() -> None:
    with pytest.raises(ConfigError, match="maxBufferedFrameBytes"):
        BookieConfig.from_mapping({"maxBufferedFrameBytes": 5 * 1024 * 1024 - 1})
    small = BookieConfig.from_mapping(
        {"nettyMaxFrameSizeBytes": 65536, "maxBufferedFrameBytes": 65536}
    )
    assert small.max_buffered_frame_bytes == 65536
    assert BookieConfig.from_mapping({"maxBufferedFrameBytes": 0}).max_buffered_frame_bytes == 0


def test_oversized_header_returns_the_good_frames_before_it() -> None:
    dec = FrameDecoder(max_frame_size=100)
    data = encode_frame(b"one") + encode_frame(b"two") + (101).to_bytes(4, "big") + b"rest"
    with pytest.raises(FrameTooLargeError) as exc:
        dec.feed(data)
    assert [bytes(f) for f in exc.value.frames] == [b"one", b"two"]
    assert dec.buffered == 0
    # Split across feeds: the buffered start of the bad header is dropped too.
    dec = FrameDecoder(max_frame_size=100)
    assert dec.feed(encode_frame(b"ok") + b"\x00") == [b"ok"]
    with pytest.raises(FrameTooLargeError) as exc:
        dec.feed(b"\x00\x00\x65")
    assert exc.value.frames == []
    assert dec.buffered == 0
