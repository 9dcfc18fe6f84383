"""BookieServiceInfoFormat, the data of a bookie's registration znode.

Expected bytes are written out by hand from upstream's field numbers
(DataFormats.proto: endpoints = 6, properties = 7; Endpoint id 1, port 2,
host 3, protocol 4, auth 5, extensions 6), so they check the wire format,
not the generated code against itself.
"""

from __future__ import annotations

import pytest

from dlog.errors import ProtocolError
from dlog.protocol.bookie_service_info import (
    BOOKIE_RPC_PROTOCOL,
    WRITE_CLOSE_PROPERTY,
    BookieServiceInfo,
    Endpoint,
    decode,
    decode_registration,
    encode,
    legacy_info,
)


def _ld(field: int, payload: bytes) -> bytes:
    """A length-delimited field (wire type 2), lengths under 128."""
    return bytes([field << 3 | 2, len(payload)]) + payload


ENDPOINT = (
    _ld(1, b"bookie")
    + bytes([2 << 3, 0xED, 0x18])  # port 3181, varint
    + _ld(3, b"10.0.0.1")
    + _ld(4, b"bookie-rpc")
    + _ld(5, b"sasl")
    + _ld(6, b"tls")
)
PROPERTY = _ld(1, WRITE_CLOSE_PROPERTY.encode()) + _ld(2, b"true")
UPSTREAM_BYTES = _ld(6, ENDPOINT) + _ld(7, PROPERTY)
INFO = BookieServiceInfo(
    (Endpoint("bookie", 3181, "10.0.0.1", "bookie-rpc", ("sasl",), ("tls",)),),
    {WRITE_CLOSE_PROPERTY: "true"},
)


def test_encode_is_upstreams_wire_format() -> None:
    assert encode(INFO) == UPSTREAM_BYTES


def test_decode_upstreams_bytes() -> None:
    info = decode(UPSTREAM_BYTES)
    assert info == INFO
    assert info.supports_write_close


def test_equal_infos_encode_equally_whatever_the_property_order() -> None:
    a = BookieServiceInfo((), {"a": "1", "b": "2", "c": "3"})
    b = BookieServiceInfo((), {"c": "3", "a": "1", "b": "2"})
    assert encode(a) == encode(b)
    assert decode(encode(a)).properties == {"a": "1", "b": "2", "c": "3"}


@pytest.mark.parametrize("value", ["false", "TRUE", "1", ""])
def test_write_close_needs_exactly_true(value: str) -> None:
    assert not BookieServiceInfo((), {WRITE_CLOSE_PROPERTY: value}).supports_write_close


def test_upstream_bookie_without_the_property_does_not_support_write_close() -> None:
    info = decode(_ld(6, ENDPOINT) + _ld(7, _ld(1, b"other") + _ld(2, b"true")))
    assert not info.supports_write_close


def test_empty_registration_is_the_legacy_info() -> None:
    for data in (b"", None):
        info = decode_registration("10.0.0.2:3181", data)
        assert info == legacy_info("10.0.0.2:3181")
        assert info.endpoints == (Endpoint("10.0.0.2:3181", 3181, "10.0.0.2", BOOKIE_RPC_PROTOCOL),)
        assert dict(info.properties) == {}
        assert not info.supports_write_close


def test_legacy_info_of_an_id_that_is_not_host_port_has_no_endpoint() -> None:
    assert legacy_info("my-bookie").endpoints == ()
    assert legacy_info("host:notaport").endpoints == ()


def test_legacy_content_is_accepted_and_advertises_nothing() -> None:
    with pytest.raises(ProtocolError):
        decode(b"127.0.0.1:3181")
    info = decode_registration("127.0.0.1:3181", b"127.0.0.1:3181")
    assert info == legacy_info("127.0.0.1:3181")
    assert not info.supports_write_close
