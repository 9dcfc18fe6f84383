"""A consumer: a reader that starts after its subscription's last commit.

    consumer = await log.subscribe("billing")
    async for record in consumer:
        handle(record)
        await consumer.commit(record)   # durable before it returns

Names follow what Kafka and Pulsar users know: read, commit, committed,
seek, close. Opening a consumer takes ownership of its subscription (with
the log-segment store, an older owner is fenced).
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

from dlog.dlsn import DLSN
from dlog.errors import EndOfStreamError, IllegalStateError
from dlog.reader import LogReader
from dlog.record import LogRecordWithDLSN
from dlog.stream import StreamContext
from subscriptions.store import SubscriptionsStore


class Consumer:
    """Get one with ``await log.subscribe(subscriber_id)``."""

    def __init__(self, ctx: StreamContext, store: SubscriptionsStore, subscriber_id: str) -> None:
        self.ctx = ctx
        self.subscriber_id = subscriber_id
        self.store = store
        self._reader: LogReader | None = None
        self._last: DLSN | None = None
        self._closed = False

    @property
    def stream(self) -> str:
        return self.ctx.name

    async def _open(self) -> Consumer:
        position = await self.store.acquire(self.subscriber_id)
        self._reader = await LogReader.open(self.ctx, from_dlsn=position.next())
        return self

    @property
    def position(self) -> DLSN | None:
        """DLSN of the last record read (not necessarily committed)."""
        return self._last

    async def read(self, timeout: float | None = None) -> LogRecordWithDLSN | None:
        """The next record, or None if none arrives within ``timeout``."""
        record = await self._live_reader().read_next(timeout)
        if record is not None:
            self._last = record.dlsn
        return record

    async def read_bulk(self, n: int, timeout: float | None = None) -> list[LogRecordWithDLSN]:
        records = await self._live_reader().read_bulk(n, timeout)
        if records:
            self._last = records[-1].dlsn
        return records

    def __aiter__(self) -> AsyncIterator[LogRecordWithDLSN]:
        return self._iterate()

    async def _iterate(self) -> AsyncIterator[LogRecordWithDLSN]:
        while True:
            try:
                record = await self.read(timeout=1.0)
            except EndOfStreamError:
                return
            if record is not None:
                yield record

    async def commit(self, record_or_dlsn: LogRecordWithDLSN | DLSN | None = None) -> DLSN:
        """Commit a record (or DLSN; default: the last record read). Returns
        once the position is durable; committing an older one is a no-op."""
        dlsn = self._to_commit(record_or_dlsn)
        await self.store.advance_commit_position(self.subscriber_id, dlsn)
        return dlsn

    def commit_nowait(
        self, record_or_dlsn: LogRecordWithDLSN | DLSN | None = None
    ) -> asyncio.Future[None]:
        """Start committing (as :meth:`commit`) without waiting: the future
        resolves once the position is durable. Keeps many commits in flight
        without a coroutine each; call it from the event loop."""
        dlsn = self._to_commit(record_or_dlsn)
        return self.store.advance_commit_position_nowait(self.subscriber_id, dlsn)

    def _to_commit(self, record_or_dlsn: LogRecordWithDLSN | DLSN | None) -> DLSN:
        if self._closed:
            # Committing would take the released subscription back.
            raise IllegalStateError(f"consumer {self.subscriber_id!r} is closed")
        if record_or_dlsn is None:
            if self._last is None:
                raise IllegalStateError("nothing has been read yet, so there is nothing to commit")
            return self._last
        if isinstance(record_or_dlsn, DLSN):
            return record_or_dlsn
        return record_or_dlsn.dlsn

    async def committed(self) -> DLSN:
        """The durable committed position."""
        return await self.store.get_last_commit_position(self.subscriber_id)

    async def seek(self, dlsn: DLSN) -> None:
        """Read from ``dlsn`` on (nothing is committed by seeking)."""
        if self._reader is not None:
            await self._reader.close()
        self._reader = await LogReader.open(self.ctx, from_dlsn=dlsn)
        self._last = None

    async def close(self) -> None:
        """Stop reading and release the subscription (its position stays)."""
        if self._closed:
            return
        self._closed = True
        if self._reader is not None:
            await self._reader.close()
        await self.store.release(self.subscriber_id)

    async def __aenter__(self) -> Consumer:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    def _live_reader(self) -> LogReader:
        if self._closed or self._reader is None:
            raise IllegalStateError(f"consumer {self.subscriber_id!r} is closed")
        return self._reader
