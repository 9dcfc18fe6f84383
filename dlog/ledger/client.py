"""The ledger client: create, open, recover and delete ledgers.

async with BookKeeper("zk+hierarchical://127.0.0.1:2181/ledgers") as bk:
    wh = await bk.create_ledger(password=b"secret")
    await wh.append(b"hello")
    await wh.close()
    rh = await bk.open_ledger(wh.ledger_id, b"secret")
    entries = await rh.read(0, rh.last_add_confirmed)
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Mapping

from dlog.conf.bookkeeper import ClientConfig
from dlog.errors import (
    EOK,
    ClientClosedError,
    IncorrectParameterError,
    UnauthorizedAccessError,
)
from dlog.ledger.bookie_client import BookieClientPool
from dlog.ledger.bookie_watcher import BookieWatcher
from dlog.ledger.metadata import (
    DigestType,
    LedgerCloseContext,
    LedgerCreateContext,
    LedgerMetadata,
)
from dlog.ledger.metadata_store import LedgerMetadataStore
from dlog.ledger.placement import EnsemblePlacementPolicy
from dlog.ledger.read_handle import ReadHandle
from dlog.ledger.recovery import recover
from dlog.ledger.write_handle import WriteHandle
from dlog.loop_metrics import LoopMetrics
from dlog.uri import parse_metadata_service_uri
from dlog.zk import ZooKeeper

log = logging.getLogger(__name__)

__all__ = ["BookKeeper", "LedgerCloseContext", "LedgerCreateContext"]


class BookKeeper:
    """A connection to a BookKeeper-compatible cluster (bookies + ZooKeeper)."""

    def __init__(
        self,
        metadata_service_uri: str | None = None,
        conf: ClientConfig | None = None,
        *,
        zk: ZooKeeper | None = None,
    ) -> None:
        if conf is None:
            conf = (
                ClientConfig()
                if metadata_service_uri is None
                else ClientConfig.load(metadataServiceUri=metadata_service_uri)
            )
        elif metadata_service_uri is not None:
            conf = conf.with_overrides({"metadataServiceUri": metadata_service_uri})
        self.conf = conf
        self.uri = parse_metadata_service_uri(conf.metadata_service_uri)
        self._own_zk = zk is None
        self.zk = zk or ZooKeeper(self.uri.hosts, timeout=conf.zk_timeout / 1000.0)
        self.metadata_store = LedgerMetadataStore(
            self.zk, self.uri.ledgers_root, conf.ledger_metadata_version
        )
        self.watcher = BookieWatcher(self.zk, self.uri.ledgers_root)
        self.pool = BookieClientPool(connect_timeout=conf.client_connect_timeout_millis / 1000.0)
        self.placement = EnsemblePlacementPolicy(
            conf.bookie_failure_history_expiration_msec / 1000.0
        )
        self.metrics = LoopMetrics()
        self.write_close_outcomes = self.metrics.counter(
            "ledger_client_write_close",
            "BP-32 write-close outcomes per closed ledger, among the bookies sent one.",
            ["outcome"],
        )
        self.write_close_skipped = self.metrics.counter(
            "ledger_client_write_close_skipped",
            "Bookies not sent a BP-32 write close: their registration does not advertise it.",
        )
        self.ensemble_change_unavailable = self.metrics.counter(
            "ledger_client_ensemble_change_unavailable",
            "Bookies of a writing ledger's ensemble that failed when no writable bookie could "
            "replace them: the ledger's writes failed (delayEnsembleChange=false) or went on "
            "at the ack quorum (true).",
        )
        self.closed = False
        self._started = False
        self._background: set[asyncio.Task[object]] = set()

    # -- lifecycle -------------------------------------------------------------
    async def start(self) -> BookKeeper:
        if self._started:
            return self
        if self._own_zk:
            await self.zk.start(timeout=self.conf.zk_timeout / 1000.0)
        await self.watcher.start()
        self._started = True
        return self

    async def close(self) -> None:
        if self.closed:
            return
        self.closed = True
        if self._background:
            await asyncio.wait(self._background, timeout=2.0)
        self.watcher.close()
        await self.pool.close()
        if self._own_zk:
            await self.zk.stop()

    async def __aenter__(self) -> BookKeeper:
        return await self.start()

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    def _check_open(self) -> None:
        if self.closed:
            raise ClientClosedError("the BookKeeper client is closed")

    # -- ledgers ----------------------------------------------------------------
    async def create_ledger(
        self,
        ensemble_size: int = 3,
        write_quorum: int = 2,
        ack_quorum: int = 2,
        digest_type: DigestType | int | str = DigestType.CRC32C,
        password: bytes = b"",
        custom_metadata: Mapping[str, bytes] | None = None,
        create_context: LedgerCreateContext | None = None,
        *,
        ledger_id: int | None = None,
    ) -> WriteHandle:
        """Create a ledger on ``ensemble_size`` writable bookies and open it
        for writing. ``ledger_id`` (from :meth:`generate_ledger_id`) creates
        it under an id the caller recorded beforehand (BookKeeper's
        createLedgerAdv); LedgerExistsError if that id is taken. With
        ``ledgerMetadataVersion=3`` the create context is not stored."""
        self._check_open()
        if not ensemble_size >= write_quorum >= ack_quorum >= 1:
            raise IncorrectParameterError(
                f"need ensemble >= write quorum >= ack quorum >= 1, got E={ensemble_size} "
                f"W={write_quorum} A={ack_quorum}"
            )
        if isinstance(digest_type, str):
            try:
                digest_type = DigestType[digest_type.upper()]
            except KeyError:
                raise IncorrectParameterError(f"unknown digest type {digest_type!r}") from None
        ensemble = self.placement.new_ensemble(ensemble_size, self.watcher.writable)
        if ledger_id is None:
            ledger_id = await self.metadata_store.generate_ledger_id()
        md = LedgerMetadata(
            ledger_id=ledger_id,
            ensemble_size=ensemble_size,
            write_quorum_size=write_quorum,
            ack_quorum_size=ack_quorum,
            ensembles=((0, tuple(ensemble)),),
            digest_type=DigestType(int(digest_type)),
            password=password,
            # BP-44: lifespan prediction needs the creation time, so a create
            # context stores it whatever storeSystemtimeAsLedgerCreationTime says.
            ctime=int(time.time() * 1000)
            if self.conf.store_systemtime_as_ledger_creation_time or create_context is not None
            else None,
            custom_metadata=dict(custom_metadata or {}),
            create_context=create_context,
        )
        md, version = await self.metadata_store.create(md)
        log.debug("created ledger %d on %s", ledger_id, ensemble)
        return WriteHandle(self, md, version, password)

    async def generate_ledger_id(self) -> int:
        """Reserve a ledger id without creating the ledger."""
        self._check_open()
        return await self.metadata_store.generate_ledger_id()

    async def open_ledger(
        self, ledger_id: int, password: bytes = b"", recovery: bool = True
    ) -> ReadHandle:
        """Open a ledger for reading. With ``recovery`` (the default) an open
        ledger is fenced and closed first, so its end is final; without it
        the ledger is tailed through its LAC."""
        self._check_open()
        md, version = await self.metadata_store.read(ledger_id)
        if md.password != password:
            raise UnauthorizedAccessError(f"wrong password for ledger {ledger_id}")
        handle = ReadHandle(self, md, version, password)
        if recovery and not md.is_closed:
            await recover(self, handle, password)
        elif not md.is_closed:
            handle.start_watch()
        return handle

    async def delete_ledger(self, ledger_id: int) -> None:
        """Delete a ledger's metadata. Its entries stay on the bookies until bookie
        garbage collection (not built yet) reclaims them; nothing can read them."""
        self._check_open()
        await self.metadata_store.read(ledger_id)  # NoSuchLedgerError when absent
        await self.metadata_store.delete(ledger_id)

    async def list_ledgers(self) -> list[int]:
        self._check_open()
        return await self.metadata_store.list_ledgers()

    async def ledger_metadata(self, ledger_id: int) -> LedgerMetadata:
        self._check_open()
        md, _ = await self.metadata_store.read(ledger_id)
        return md

    def writable_bookies(self) -> frozenset[str]:
        return self.watcher.writable

    def readonly_bookies(self) -> frozenset[str]:
        return self.watcher.readonly

    # -- BP-32 --------------------------------------------------------------------
    def send_write_close(self, ledger_id: int, master_key: bytes, ensemble: list[str]) -> None:
        """Tell the ensemble no more writes will come, in the background.
        Advisory: the outcome is logged and counted, never raised."""
        if not self.conf.advisory_write_close_enabled or self.closed:
            return
        task = asyncio.get_running_loop().create_task(
            self._write_close(ledger_id, master_key, ensemble)
        )
        self._background.add(task)
        task.add_done_callback(self._background.discard)

    async def _write_close(self, ledger_id: int, master_key: bytes, ensemble: list[str]) -> None:
        """Send WRITE_CLOSE only to bookies whose registration advertises
        it: a BookKeeper bookie cannot decode operation 100 and closes the
        connection, failing every other request in flight on it. The
        others are skipped; the hint is advisory."""

        async def one(bookie: str) -> bool | None:
            try:
                info = await self.watcher.service_info(bookie)
            except Exception:
                info = None  # unknown: never guess
            if info is None or not info.supports_write_close:
                self.write_close_skipped.inc()
                return None
            try:
                conn = await self.pool.get(bookie)
                resp = await conn.write_close(
                    ledger_id, master_key, timeout=self.conf.add_entry_timeout_sec
                )
                return resp.status == EOK
            except Exception:
                return False

        sent = [r for r in await asyncio.gather(*(one(b) for b in ensemble)) if r is not None]
        ok = sum(sent)
        if not sent:
            outcome = "skipped"
        else:
            outcome = "success" if ok == len(sent) else "partial" if ok else "failed"
        self.write_close_outcomes.inc(labels=(outcome,))
        level = logging.DEBUG if outcome in ("success", "skipped") else logging.INFO
        log.log(
            level,
            "ledger %d: advisory write close %s (%d/%d bookies, %d skipped)",
            ledger_id,
            outcome,
            ok,
            len(sent),
            len(ensemble) - len(sent),
        )
