"""dlog's znode layout against upstream DistributedLog's, written out as data.

Facts (apache/distributedlog, distributedlog-core): ``LogMetadata``
(``getLogRootPath`` = ``<ns>/<stream>/<logIdentifier>``, the ``*_PATH``
constants, ``LAYOUT_VERSION = -1``), ``LogMetadataForReader``
(``SUBSCRIBERS_PATH``), ``DistributedLogConfiguration``
(``BKDL_UNPARTITIONED_STREAM_NAME_DEFAULT = "<default>"``) and
``ZKLogStreamMetadataStore`` (``intToBytes``: 4 bytes big-endian;
``createMissingMetadata`` creates the stream and log root empty, ``maxtxid``
"0", ``version``, ``lock``, ``readLock``, ``ledgers`` "0"; ``logExists``
checks ``<root>/ledgers`` only).
"""

from __future__ import annotations

from dlog.log_metadata import LAYOUT_VERSION_DATA, LogMetadataStore

NS = "/messaging/ns"
UPSTREAM_PATHS = {
    "stream": "/messaging/ns/orders",
    "root": "/messaging/ns/orders/<default>",
    "ledgers": "/messaging/ns/orders/<default>/ledgers",
    "maxtxid": "/messaging/ns/orders/<default>/maxtxid",
    "lock": "/messaging/ns/orders/<default>/lock",
    "read_lock": "/messaging/ns/orders/<default>/readLock",
    "version": "/messaging/ns/orders/<default>/version",
    "subscribers": "/messaging/ns/orders/<default>/subscribers",
}
#: intToBytes(LogMetadata.LAYOUT_VERSION), LAYOUT_VERSION = -1.
UPSTREAM_VERSION_DATA = bytes([0xFF, 0xFF, 0xFF, 0xFF])


def test_paths_are_upstream_paths() -> None:
    p = LogMetadataStore(None, NS).paths("orders")  # type: ignore[arg-type]
    assert {k: getattr(p, k) for k in UPSTREAM_PATHS} == UPSTREAM_PATHS
    assert p.subscriber("app") == "/messaging/ns/orders/<default>/subscribers/app"
    assert (
        p.segment("logrecs_000000000000000001")
        == "/messaging/ns/orders/<default>/ledgers/logrecs_000000000000000001"
    )


def test_version_znode_holds_upstream_layout_version() -> None:
    assert LAYOUT_VERSION_DATA == UPSTREAM_VERSION_DATA
