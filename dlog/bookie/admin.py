"""What a bookie answers on the gRPC admin API (:mod:`dlog.control`).

Kept beside the core rather than in :mod:`dlog.control`, which must not
know the bookie: the control server only calls these providers.
"""

from __future__ import annotations

import asyncio
import shutil
from collections.abc import Callable
from pathlib import Path
from typing import Any

from dlog.bookie.bookie import Bookie
from dlog.control import AdminProviders
from dlog.errors import BookieError, NoNodeError
from dlog.ledger.metadata_store import LedgerMetadataStore
from dlog.protocol import admin_pb2 as pb
from dlog.zk import ZooKeeper


def _usage(d: Path, full: bool) -> pb.DirectoryUsage:
    try:
        u = shutil.disk_usage(d)
    except OSError:
        return pb.DirectoryUsage(path=str(d), full=full)
    used = (u.total - u.free) / u.total if u.total else 1.0
    return pb.DirectoryUsage(
        path=str(d), total_bytes=u.total, free_bytes=u.free, used_fraction=used, full=full
    )


class BookieAdmin:
    """Admin providers over one started bookie; ``port`` is its bookie-rpc port."""

    def __init__(self, core: Bookie, port: Callable[[], int]) -> None:
        self.core = core
        self._port = port

    def providers(self) -> AdminProviders:
        return AdminProviders(
            bookie_info=self.bookie_info,
            list_bookies=self.list_bookies,
            ledger_metadata=self.ledger_metadata,
            trigger_gc=self.trigger_gc,
        )

    async def bookie_info(self) -> pb.BookieInfo:
        core = self.core
        full = core.disk.full if core.disk is not None else set()
        storage = core.storage
        return pb.BookieInfo(
            bookie_id=core.bookie_id,
            read_only=core.read_only,
            read_only_reasons=sorted(core.read_only_reasons),
            ledger_directories=[_usage(d, d in full) for d in core.ledger_dirs],
            journal_directories=[_usage(d, d in full) for d in core.journal_dirs],
            journal_pending_records=core.journal_pending(),
            journal_queue_size=core.conf.journal_queue_size,
            write_cache_bytes=storage.write_cache_size if storage is not None else 0,
            write_cache_entries=sum(sd.write_cache_count for sd in storage.dirs)
            if storage is not None
            else 0,
            write_cache_max_bytes=core.conf.write_cache_bytes,
            read_cache_bytes=storage.read_cache_size if storage is not None else 0,
            port=self._port(),
        )

    async def list_bookies(self) -> pb.ListBookiesResponse:
        zk = self._zk()
        available = f"{self.core.uri.ledgers_root}/available"
        writable = [c for c in await zk.get_children(available) if c != "readonly"]
        try:
            read_only = await zk.get_children(f"{available}/readonly")
        except NoNodeError:
            read_only = []
        return pb.ListBookiesResponse(writable=sorted(writable), read_only=sorted(read_only))

    async def ledger_metadata(self, ledger_id: int) -> pb.LedgerMetadata:
        store = LedgerMetadataStore(self._zk(), self.core.uri.ledgers_root)
        md, version = await store.read(ledger_id)
        return pb.LedgerMetadata(
            ledger_id=ledger_id,
            ensemble_size=md.ensemble_size,
            write_quorum_size=md.write_quorum_size,
            ack_quorum_size=md.ack_quorum_size,
            state=md.state.name,
            last_entry_id=md.last_entry_id,
            length=md.length,
            digest_type=md.digest_type.name,
            ctime=md.ctime or 0,
            ensembles=[
                pb.Ensemble(first_entry_id=first, bookies=list(bookies))
                for first, bookies in md.ensembles
            ],
            custom_metadata=dict(md.custom_metadata),
            version=version,
        )

    async def trigger_gc(self, request: pb.TriggerGcRequest) -> pb.TriggerGcResponse:
        gc = self.core.gc
        if gc is None:
            raise BookieError("the garbage collector is not running")
        done = gc.trigger(force_major=request.force_major, force_minor=request.force_minor)
        message = f"Triggered GC on BookieServer: {self.core.bookie_id}"
        if not request.wait:
            done.add_done_callback(_consume)
            return pb.TriggerGcResponse(message=message)
        stats = await asyncio.shield(done)
        return pb.TriggerGcResponse(
            message=message,
            completed=True,
            cycles=stats.cycles,
            deleted_ledgers=stats.deleted_ledgers,
            removed_logs=stats.removed_logs,
            removed_bytes=stats.removed_bytes,
            compacted_logs=stats.compacted_logs,
            compacted_freed_bytes=stats.compacted_freed_bytes,
        )

    def _zk(self) -> ZooKeeper:
        if self.core.zk is None:
            raise BookieError("the bookie is not started")
        return self.core.zk


def _consume(fut: asyncio.Future[Any]) -> None:
    """A collection nobody waits for: retrieve its outcome so a failure is
    not reported as never retrieved (the collector logs it)."""
    if not fut.cancelled():
        fut.exception()
