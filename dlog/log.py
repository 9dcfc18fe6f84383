"""One stream of a namespace: its writer, readers, positions and upkeep.

The facade over the stream's parts. It builds the stream's
:class:`~dlog.stream.StreamContext` and hands it down to the writer, the
readers, the subscriptions store and its consumers, and keeps track of
what it opened so that closing the stream closes them.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING

from dlog import positions, retention
from dlog.dlsn import DLSN
from dlog.reader import LogReader
from dlog.stream import StreamContext
from dlog.writer import LogWriter
from subscriptions.consumer import Consumer
from subscriptions.factory import configured_store
from subscriptions.store import SubscriptionsStore

if TYPE_CHECKING:
    from dlog.conf.dlog import DLogConfig
    from dlog.ledger.client import BookKeeper
    from dlog.log_metadata import LogMetadataStore
    from dlog.zk import ZooKeeper

logger = logging.getLogger(__name__)


class LogManager:
    """A stream (DistributedLog's DistributedLogManager). Get one with
    ``await namespace.open_log(name)``."""

    def __init__(
        self,
        name: str,
        *,
        conf: DLogConfig,
        zk: ZooKeeper,
        bk: BookKeeper,
        metadata: LogMetadataStore,
        namespace_uri: str,
    ) -> None:
        self.name = name
        self.conf = conf
        self.context = StreamContext(
            name=name,
            conf=conf,
            zk=zk,
            bk=bk,
            metadata=metadata,
            namespace_uri=namespace_uri,
            data_set=f"{metadata.namespace_path}/{name}",
        )
        #: The namespace's stream metadata (segments, max txid, paths).
        self.store = metadata
        self._subscriptions: SubscriptionsStore | None = None
        self._readers: set[LogReader] = set()
        self._writers: set[LogWriter] = set()
        self._consumers: set[Consumer] = set()

    def __repr__(self) -> str:
        return f"LogManager({self.data_set!r})"

    @property
    def password(self) -> bytes:
        """The password of the stream's ledgers (``bkDigestPW``)."""
        return self.context.password

    @property
    def data_set(self) -> str:
        """The BP-44 data set of this stream's ledgers."""
        return self.context.data_set

    # -- writers and readers -------------------------------------------------
    async def open_writer(
        self, *, owner: str | None = None, lock_timeout: float | None = None
    ) -> LogWriter:
        """Become the stream's single writer (fencing any previous one).

        ``owner`` is what the lock node says about this writer (a write
        proxy puts its address there, for the proxies it redirects);
        ``lock_timeout`` (seconds) overrides ``lockTimeoutSeconds``: 0 gives
        up at once, with OwnershipAcquireFailedError naming the owner."""
        writer = await LogWriter(self.context, owner=owner, lock_timeout=lock_timeout)._open()
        self._writers.add(writer)
        return writer

    async def open_reader(
        self, from_dlsn: DLSN | None = None, from_txid: int | None = None
    ) -> LogReader:
        """A reader starting at ``from_dlsn`` (default: the first record) or at
        the first record whose txid is at least ``from_txid``."""
        reader = await LogReader.open(self.context, from_dlsn=from_dlsn, from_txid=from_txid)
        self._readers.add(reader)
        return reader

    # -- subscriptions ------------------------------------------------------------
    @property
    def subscriptions(self) -> SubscriptionsStore:
        """This stream's SubscriptionsStore: the log-segment store when
        ``logSegmentBasedSubscriptionsStoreEnabled``, else ZooKeeper's."""
        if self._subscriptions is None:
            self._subscriptions = configured_store(self.context)
        return self._subscriptions

    async def subscribe(self, subscriber_id: str) -> Consumer:
        """A consumer reading from just after ``subscriber_id``'s last commit;
        this process becomes the subscription's owner."""
        consumer = await Consumer(self.context, self.subscriptions, subscriber_id)._open()
        self._consumers.add(consumer)
        return consumer

    # -- positions -----------------------------------------------------------------
    async def get_first_dlsn(self) -> DLSN:
        """DLSN of the first record that is not truncated."""
        return await positions.first_dlsn(self.context)

    async def get_last_dlsn(self) -> DLSN:
        """DLSN of the last durable record (LogEmptyError when there is none)."""
        return await positions.last_dlsn(self.context)

    async def get_last_txid(self) -> int:
        return await positions.last_txid(self.context)

    async def get_record_count(self) -> int:
        """Records not truncated (an in-progress segment counts up to its LAC)."""
        return await positions.record_count(self.context)

    # -- upkeep --------------------------------------------------------------------
    async def truncate(self, dlsn: DLSN) -> bool:
        """Mark every record before ``dlsn`` truncated: whole completed
        segments become TRUNCATED, the completed segment holding ``dlsn``
        PARTIALLY_TRUNCATED from ``dlsn`` on. Readers skip truncated data;
        retention deletes truncated segments and their ledgers."""
        return await retention.truncate(self.context, dlsn)

    async def purge_expired(self) -> list[int]:
        """Delete completed segments past ``logSegmentRetentionHours`` and
        truncated ones, always keeping the newest completed segment.
        Returns the deleted sequence numbers."""
        return await retention.purge_expired(self.context)

    async def close(self) -> None:
        """Close this stream's consumers, readers, writers and subscriptions."""
        for consumer in list(self._consumers):
            await consumer.close()
        self._consumers.clear()
        for reader in list(self._readers):
            await reader.close()
        self._readers.clear()
        for writer in list(self._writers):
            await writer.close()
        self._writers.clear()
        if self._subscriptions is not None:
            await self._subscriptions.close()
