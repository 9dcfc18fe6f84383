"""Blocking twins of the ledger client, for scripts and threads.

    with SyncBookKeeper("zk+hierarchical://127.0.0.1:2181/ledgers") as bk:
        wh = bk.create_ledger(password=b"pw")
        wh.append(b"hello")
        wh.close()

Every call runs its async twin (:class:`~dlog.ledger.client.BookKeeper`,
:class:`~dlog.ledger.write_handle.WriteHandle`,
:class:`~dlog.ledger.read_handle.ReadHandle`) on a shared background event
loop; each class is declared with :mod:`dlog.blocking`, as dlog.sync's are.
"""

from __future__ import annotations

import asyncio
from typing import TypeVar

from dlog.blocking import ClosingTwin, Twin, blocking, nowait
from dlog.conf.bookkeeper import ClientConfig
from dlog.errors import BKError
from dlog.ledger.client import BookKeeper
from dlog.ledger.metadata import LedgerMetadata
from dlog.ledger.read_handle import ReadHandle
from dlog.ledger.write_handle import WriteHandle
from dlog.loop_thread import LoopThread, default_loop_thread

__all__ = ["SyncBookKeeper", "SyncReadHandle", "SyncWriteHandle"]

H = TypeVar("H", WriteHandle, ReadHandle)


class _SyncHandle(Twin[H], wraps="handle"):
    """What both handles have; the async handle is ``.handle``."""

    handle: H

    @property
    def ledger_id(self) -> int:
        return self.handle.ledger_id

    @property
    def last_add_confirmed(self) -> int:
        return self.handle.last_add_confirmed

    @property
    def metadata(self) -> LedgerMetadata:
        return self.handle.metadata

    @property
    def length(self) -> int:
        return self.handle.length

    @property
    def is_closed(self) -> bool:
        return self.handle.is_closed


class SyncWriteHandle(_SyncHandle[WriteHandle]):
    """A ledger open for writing (see :class:`dlog.ledger.write_handle.WriteHandle`)."""

    @property
    def last_add_pushed(self) -> int:
        return self.handle.last_add_pushed

    @property
    def lac_published(self) -> int:
        return self.handle.lac_published

    @property
    def pending(self) -> int:
        return self.handle.pending

    @property
    def metadata_version(self) -> int:
        return self.handle.metadata_version

    @property
    def error(self) -> BKError | None:
        return self.handle.error

    @property
    def skipped_bookies(self) -> dict[int, str]:
        return self.handle.skipped_bookies

    append = blocking(WriteHandle.append)
    append_nowait = nowait(WriteHandle.append_nowait)

    def append_many(self, items: list[bytes]) -> list[int]:
        """Append pipelined and wait for all (much faster than one by one)."""

        async def go() -> list[int]:
            return list(await asyncio.gather(*(self.handle.append_nowait(d) for d in items)))

        return self._run(go())

    force = blocking(WriteHandle.force)
    write_lac = blocking(WriteHandle.write_lac)
    wait_pending = blocking(WriteHandle.wait_pending)
    close = blocking(WriteHandle.close)


class SyncReadHandle(_SyncHandle[ReadHandle]):
    """A ledger open for reading (see :class:`dlog.ledger.read_handle.ReadHandle`)."""

    @property
    def metadata_version(self) -> int:
        return self.handle.metadata_version

    read = blocking(ReadHandle.read)
    read_unconfirmed = blocking(ReadHandle.read_unconfirmed)
    read_entry = blocking(ReadHandle.read_entry)
    read_last_entry = blocking(ReadHandle.read_last_entry)
    read_last_add_confirmed = blocking(ReadHandle.read_last_add_confirmed)
    read_lac_long_poll = blocking(ReadHandle.read_lac_long_poll)
    close = blocking(ReadHandle.close)


class SyncBookKeeper(ClosingTwin[BookKeeper], wraps="client"):
    """A started ledger client (see :class:`dlog.ledger.client.BookKeeper`);
    the async client is ``.client``."""

    client: BookKeeper

    def __init__(
        self,
        metadata_service_uri: str | None = None,
        conf: ClientConfig | None = None,
        *,
        loop_thread: LoopThread | None = None,
    ) -> None:
        runner = loop_thread or default_loop_thread()

        async def make() -> BookKeeper:
            return await BookKeeper(metadata_service_uri, conf).start()

        super().__init__(runner.run(make()), runner)

    create_ledger = blocking(BookKeeper.create_ledger, wrap=SyncWriteHandle)
    open_ledger = blocking(BookKeeper.open_ledger, wrap=SyncReadHandle)
    generate_ledger_id = blocking(BookKeeper.generate_ledger_id)
    delete_ledger = blocking(BookKeeper.delete_ledger)
    list_ledgers = blocking(BookKeeper.list_ledgers)
    ledger_metadata = blocking(BookKeeper.ledger_metadata)
    close = blocking(BookKeeper.close)
