"""Service URIs: BookKeeper's metadata service URI and DistributedLog's namespace URI."""

from __future__ import annotations

import dataclasses
from urllib.parse import urlsplit

#: Ledger manager layouts we can read and write.
LEDGER_LAYOUTS = ("hierarchical",)


@dataclasses.dataclass(frozen=True)
class MetadataServiceUri:
    """``zk+hierarchical://host1:2181;host2:2181/ledgers``."""

    hosts: str  # kazoo connect string, comma-separated
    ledgers_root: str
    layout: str = "hierarchical"

    def __str__(self) -> str:
        return f"zk+{self.layout}://{self.hosts.replace(',', ';')}{self.ledgers_root}"


@dataclasses.dataclass(frozen=True)
class NamespaceUri:
    """``distributedlog://host:2181/path``."""

    hosts: str
    path: str

    def __str__(self) -> str:
        return f"distributedlog://{self.hosts}{self.path}"


def _split_hosts(netloc: str, uri: str) -> str:
    hosts = [h.strip() for h in netloc.replace(";", ",").split(",") if h.strip()]
    if not hosts:
        raise ValueError(f"{uri!r} names no ZooKeeper host")
    for h in hosts:
        host, _, port = h.rpartition(":")
        if not host or not port.isdigit() or not 0 < int(port) < 65536:
            raise ValueError(f"{uri!r}: {h!r} is not host:port")
    return ",".join(hosts)


def _clean_path(path: str, uri: str, what: str) -> str:
    if not path or path == "/":
        raise ValueError(f"{uri!r} has no {what} path")
    path = "/" + path.strip("/")
    if "//" in path or any(part in (".", "..") for part in path.split("/")[1:]):
        raise ValueError(f"{uri!r}: invalid {what} path {path!r}")
    return path


def parse_metadata_service_uri(uri: str) -> MetadataServiceUri:
    """Parse BookKeeper's ``metadataServiceUri``; ``zk://`` means hierarchical."""
    parts = urlsplit(uri)
    scheme = parts.scheme.lower()
    if scheme == "zk":
        layout = "hierarchical"
    elif scheme.startswith("zk+"):
        layout = scheme[3:]
    else:
        raise ValueError(f"{uri!r}: scheme must be zk or zk+hierarchical")
    if layout not in LEDGER_LAYOUTS:
        raise ValueError(f"{uri!r}: unsupported ledger layout {layout!r} (supported: hierarchical)")
    return MetadataServiceUri(
        hosts=_split_hosts(parts.netloc, uri),
        ledgers_root=_clean_path(parts.path, uri, "ledgers root"),
        layout=layout,
    )


def parse_namespace_uri(uri: str) -> NamespaceUri:
    """Parse a DistributedLog namespace URI (``distributedlog://``; the
    ``distributedlog-bk://`` spelling is accepted too)."""
    parts = urlsplit(uri)
    if parts.scheme.lower() not in ("distributedlog", "distributedlog-bk"):
        raise ValueError(f"{uri!r}: scheme must be distributedlog")
    return NamespaceUri(
        hosts=_split_hosts(parts.netloc, uri),
        path=_clean_path(parts.path, uri, "namespace"),
    )


def check_metadata_service_uri(value: str) -> str | None:
    """Config check: why ``value`` is not a metadata service URI, or None."""
    try:
        parse_metadata_service_uri(value)
    except ValueError as e:
        return str(e)
    return None
