"""Blocking twins of the ledger client, for scripts and threads.

    with SyncBookKeeper("zk+hierarchical://127.0.0.1:2181/ledgers") as bk:
        wh = bk.create_ledger(password=b"pw")
        wh.append(b"hello")
        wh.close()

Every call runs its async twin on a shared background event loop.
"""

from __future__ import annotations

from collections.abc import Mapping

from dlog.conf.client import ClientConfig
from dlog.ledger.client import BookKeeper
from dlog.ledger.metadata import DigestType, LedgerCloseContext, LedgerCreateContext, LedgerMetadata
from dlog.ledger.read_handle import LedgerEntry, ReadHandle
from dlog.ledger.write_handle import WriteHandle
from dlog.loop_thread import LoopThread, default_loop_thread

__all__ = ["SyncBookKeeper", "SyncReadHandle", "SyncWriteHandle"]


class _SyncHandle:
    def __init__(self, handle: WriteHandle | ReadHandle, runner: LoopThread) -> None:
        self.handle = handle
        self._run = runner.run

    @property
    def ledger_id(self) -> int:
        return self.handle.ledger_id

    @property
    def last_add_confirmed(self) -> int:
        return self.handle.last_add_confirmed

    @property
    def metadata(self) -> LedgerMetadata:
        return self.handle.metadata


class SyncWriteHandle(_SyncHandle):
    handle: WriteHandle

    @property
    def length(self) -> int:
        return self.handle.length

    def append(self, data: bytes) -> int:
        return self._run(self.handle.append(data))

    def append_many(self, items: list[bytes]) -> list[int]:
        """Append pipelined and wait for all (much faster than one by one)."""

        async def go() -> list[int]:
            import asyncio

            return list(await asyncio.gather(*(self.handle.append_nowait(d) for d in items)))

        return self._run(go())

    def force(self) -> int:
        return self._run(self.handle.force())

    def close(self, close_context: LedgerCloseContext | None = None) -> None:
        self._run(self.handle.close(close_context))


class SyncReadHandle(_SyncHandle):
    handle: ReadHandle

    @property
    def is_closed(self) -> bool:
        return self.handle.is_closed

    def read(self, first: int, last: int) -> list[LedgerEntry]:
        return self._run(self.handle.read(first, last))

    def read_unconfirmed(self, first: int, last: int) -> list[LedgerEntry]:
        return self._run(self.handle.read_unconfirmed(first, last))

    def read_last_add_confirmed(self) -> int:
        return self._run(self.handle.read_last_add_confirmed())

    def read_lac_long_poll(self, previous_lac: int, timeout: float) -> int:
        return self._run(self.handle.read_lac_long_poll(previous_lac, timeout))

    def close(self) -> None:
        self._run(self.handle.close())


class SyncBookKeeper:
    def __init__(
        self,
        metadata_service_uri: str | None = None,
        conf: ClientConfig | None = None,
        *,
        loop_thread: LoopThread | None = None,
    ) -> None:
        self._runner = loop_thread or default_loop_thread()
        self._run = self._runner.run

        async def make() -> BookKeeper:
            return await BookKeeper(metadata_service_uri, conf).start()

        self.client = self._run(make())

    def create_ledger(
        self,
        ensemble_size: int = 3,
        write_quorum: int = 2,
        ack_quorum: int = 2,
        digest_type: DigestType | int | str = DigestType.CRC32C,
        password: bytes = b"",
        custom_metadata: Mapping[str, bytes] | None = None,
        create_context: LedgerCreateContext | None = None,
    ) -> SyncWriteHandle:
        wh = self._run(
            self.client.create_ledger(
                ensemble_size,
                write_quorum,
                ack_quorum,
                digest_type,
                password,
                custom_metadata,
                create_context,
            )
        )
        return SyncWriteHandle(wh, self._runner)

    def open_ledger(
        self, ledger_id: int, password: bytes = b"", recovery: bool = True
    ) -> SyncReadHandle:
        return SyncReadHandle(
            self._run(self.client.open_ledger(ledger_id, password, recovery)), self._runner
        )

    def delete_ledger(self, ledger_id: int) -> None:
        self._run(self.client.delete_ledger(ledger_id))

    def list_ledgers(self) -> list[int]:
        return self._run(self.client.list_ledgers())

    def ledger_metadata(self, ledger_id: int) -> LedgerMetadata:
        return self._run(self.client.ledger_metadata(ledger_id))

    def close(self) -> None:
        self._run(self.client.close())

    def __enter__(self) -> SyncBookKeeper:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
