"""What a bookie publishes in its registration znode (pure, no I/O).

BookKeeper >= 4.12 writes ``BookieServiceInfoFormat`` (DataFormats.proto),
serialized as protobuf binary, as the data of ``<ledgers>/available/<id>``
and ``available/readonly/<id>``: the bookie's endpoints and a map of
properties. Older bookies leave the data empty; BookKeeper then assumes one
``bookie-rpc`` endpoint at the host and port of the bookie id, with no
properties, and so does :func:`decode_registration`.

dlog bookies also publish :data:`WRITE_CLOSE_PROPERTY` (a dlog extension):
only they understand BP-32's WRITE_CLOSE (operation 100); a BookKeeper
bookie fails to decode it and closes the connection, failing every other
request on it, so clients send it only where this property says so.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from types import MappingProxyType

from google.protobuf.message import DecodeError

from dlog.errors import ProtocolError
from dlog.protocol.data_formats_pb2 import BookieServiceInfoFormat

__all__ = [
    "BOOKIE_ENDPOINT_ID",
    "BOOKIE_RPC_PROTOCOL",
    "CONTROL_ENDPOINT_ID",
    "GRPC_PROTOCOL",
    "WRITE_CLOSE_PROPERTY",
    "BookieServiceInfo",
    "Endpoint",
    "decode",
    "decode_registration",
    "encode",
    "legacy_info",
]

#: Upstream's id and protocol of the bookie's own RPC endpoint
#: (BookieService.publishInfo, BookieServiceInfoUtils).
BOOKIE_ENDPOINT_ID = "bookie"
BOOKIE_RPC_PROTOCOL = "bookie-rpc"
#: dlog extension: the gRPC control plane (health and admin) when
#: grpcServerEnabled, on the port it bound.
CONTROL_ENDPOINT_ID = "grpc-control"
GRPC_PROTOCOL = "grpc"
#: dlog extension: "true" when the bookie handles BP-32 WRITE_CLOSE. The
#: "dlog." prefix keeps it clear of any key BookKeeper may define.
WRITE_CLOSE_PROPERTY = "dlog.writeClose"


@dataclass(frozen=True)
class Endpoint:
    id: str
    port: int
    host: str
    protocol: str
    auth: tuple[str, ...] = ()
    extensions: tuple[str, ...] = ()


@dataclass(frozen=True)
class BookieServiceInfo:
    endpoints: tuple[Endpoint, ...] = ()
    properties: Mapping[str, str] = field(default_factory=lambda: MappingProxyType({}), hash=False)

    @property
    def supports_write_close(self) -> bool:
        """Whether WRITE_CLOSE may be sent: only on the bookie's own word."""
        return self.properties.get(WRITE_CLOSE_PROPERTY) == "true"


def encode(info: BookieServiceInfo) -> bytes:
    """Protobuf binary, deterministic so equal infos give equal znode data."""
    fmt = BookieServiceInfoFormat()
    for e in info.endpoints:
        ep = fmt.endpoints.add(id=e.id, port=e.port, host=e.host, protocol=e.protocol)
        ep.auth.extend(e.auth)
        ep.extensions.extend(e.extensions)
    fmt.properties.update(info.properties)
    return fmt.SerializeToString(deterministic=True)


def decode(data: bytes) -> BookieServiceInfo:
    """Parse non-empty ``BookieServiceInfoFormat`` bytes; ProtocolError if
    they are not that message."""
    fmt = BookieServiceInfoFormat()
    try:
        fmt.ParseFromString(data)
    except DecodeError as e:
        raise ProtocolError(f"not a BookieServiceInfoFormat: {e}") from None
    return BookieServiceInfo(
        endpoints=tuple(
            Endpoint(
                id=e.id,
                port=e.port,
                host=e.host,
                protocol=e.protocol,
                auth=tuple(e.auth),
                extensions=tuple(e.extensions),
            )
            for e in fmt.endpoints
        ),
        properties=MappingProxyType(dict(fmt.properties)),
    )


def legacy_info(bookie_id: str) -> BookieServiceInfo:
    """What an empty registration means (BookKeeper before 4.12): one
    ``bookie-rpc`` endpoint at the id's host:port, no properties. An id that
    is not host:port gives no endpoint, never an error."""
    host, sep, port = bookie_id.rpartition(":")
    if not sep or not host or not port.isdigit():
        return BookieServiceInfo()
    return BookieServiceInfo(endpoints=(Endpoint(bookie_id, int(port), host, BOOKIE_RPC_PROTOCOL),))


def decode_registration(bookie_id: str, data: bytes | None) -> BookieServiceInfo:
    """A registration znode's data, never refused: a bookie is registered
    whatever it wrote. Empty data (before 4.12) and content that is not
    ``BookieServiceInfoFormat`` both read as the legacy info, which
    advertises nothing, so no extension is used on a guess."""
    if not data:
        return legacy_info(bookie_id)
    try:
        return decode(data)
    except ProtocolError:
        return legacy_info(bookie_id)
