"""What a stream's parts need of their namespace, handed down to them.

The writer, the readers and the subscriptions stores of a stream all
need the same few things: the stream's name and configuration, the
ZooKeeper session, the ledger client, the stream's metadata, the ledger
password and the BP-44 data set its ledgers belong to. The facade
(:class:`dlog.log.LogManager`) builds one :class:`StreamContext` and
passes it down, as kazoo hands its client to a recipe: the parts never
reach back up into the facade or the namespace.

Namespace-wide tools below the facade (subscription migration) take the
namespace as a :class:`StreamCatalog`, the narrow face of it they use.
"""

from __future__ import annotations

import dataclasses
from typing import TYPE_CHECKING, Protocol

from dlog.ledger.appender import LedgerSpec

if TYPE_CHECKING:
    from dlog.conf.dlog import DLogConfig
    from dlog.ledger.client import BookKeeper
    from dlog.log_metadata import LogMetadataStore, LogPaths
    from dlog.zk import ZooKeeper

__all__ = ["HasStreamContext", "StreamCatalog", "StreamContext"]


@dataclasses.dataclass(frozen=True, eq=False)
class StreamContext:
    """One stream of one open namespace."""

    name: str
    conf: DLogConfig
    zk: ZooKeeper
    bk: BookKeeper
    #: The namespace's stream metadata (segments, max txid, paths).
    metadata: LogMetadataStore
    #: The namespace's URI, for messages.
    namespace_uri: str
    #: The BP-44 data set of the stream's ledgers: ``<namespace path>/<stream>``.
    data_set: str

    @property
    def password(self) -> bytes:
        """The password of the stream's ledgers (``bkDigestPW``)."""
        return self.conf.bk_digest_pw.encode()

    @property
    def paths(self) -> LogPaths:
        return self.metadata.paths(self.name)

    def ledger_spec(self) -> LedgerSpec:
        """How the stream's ledgers (segments, subscription segments) are created."""
        conf = self.conf
        return LedgerSpec(
            ensemble_size=conf.ensemble_size,
            write_quorum_size=conf.write_quorum_size,
            ack_quorum_size=conf.ack_quorum_size,
            digest_type=conf.bk_digest_type,
            password=self.password,
        )


class HasStreamContext(Protocol):
    """Anything opened on a stream that can hand out its context."""

    @property
    def context(self) -> StreamContext: ...


class StreamCatalog(Protocol):
    """The face of a namespace that namespace-wide tools use
    (:class:`dlog.namespace.Namespace` is one)."""

    @property
    def uri(self) -> str: ...

    async def get_logs(self, prefix: str | None = None) -> list[str]: ...

    async def log_exists(self, name: str) -> bool: ...

    async def open_log(self, name: str) -> HasStreamContext: ...
