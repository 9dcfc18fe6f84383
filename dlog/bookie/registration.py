"""Bookie registration in ZooKeeper, and the cluster layout it lives in.

A bookie announces itself with an ephemeral ``<ledgers>/available/<id>``
(``available/readonly/<id>`` when read-only), and re-announces itself
after its ZooKeeper session expires. The znode's data is the bookie's
``BookieServiceInfoFormat`` (endpoints and properties), as BookKeeper >= 4.12
writes it; clients read from it which extensions the bookie understands.
A bookie started against an empty ZooKeeper creates the ``<ledgers>``
layout; several bookies may race to do it, so the layout is created in one
transaction and ``INSTANCEID`` decides the winner.
"""

from __future__ import annotations

import asyncio
import logging
import uuid

from dlog.ledger.layout import LAYOUT_DATA
from dlog.zk import (
    KazooState,
    NodeExistsError,
    NoNodeError,
    TransactionOp,
    ZooKeeper,
    first_error,
)

log = logging.getLogger(__name__)


CLUSTER_CHILDREN = ("available", "available/readonly", "cookies", "underreplication", "idgen")


async def init_cluster(zk: ZooKeeper, ledgers_root: str) -> str:
    """Create the ``<ledgers>`` layout if absent; returns the cluster's
    instance id. Safe when many bookies (or operators) run it at once."""
    parent = ledgers_root.rsplit("/", 1)[0]
    if parent:
        await zk.ensure_path(parent)
    instance_id = str(uuid.uuid4())
    ops: list[TransactionOp] = [("create", (ledgers_root, b""), {})]
    ops += [("create", (f"{ledgers_root}/{c}", b""), {}) for c in CLUSTER_CHILDREN]
    ops += [
        ("create", (f"{ledgers_root}/LAYOUT", LAYOUT_DATA), {}),
        ("create", (f"{ledgers_root}/INSTANCEID", instance_id.encode()), {}),
    ]
    results = await zk.transaction(ops)
    err = first_error(results)
    if err is None:
        log.info("created cluster layout at %s (instance %s)", ledgers_root, instance_id)
        return instance_id
    if not isinstance(err, NodeExistsError):
        raise err
    # Someone else created the root (maybe an operator, maybe partially):
    # fill in what is missing, one node at a time.
    for child in CLUSTER_CHILDREN:
        try:
            await zk.create(f"{ledgers_root}/{child}", b"")
        except NodeExistsError:
            pass
    try:
        await zk.create(f"{ledgers_root}/LAYOUT", LAYOUT_DATA)
    except NodeExistsError:
        data, _ = await zk.get(f"{ledgers_root}/LAYOUT")
        if b"HierarchicalLedgerManagerFactory" not in data:
            from dlog.errors import MetadataError

            raise MetadataError(
                f"{ledgers_root}/LAYOUT names an unsupported ledger manager: {data.decode(errors='replace')!r}"
            ) from None
    try:
        await zk.create(f"{ledgers_root}/INSTANCEID", instance_id.encode())
        return instance_id
    except NodeExistsError:
        data, _ = await zk.get(f"{ledgers_root}/INSTANCEID")
        return data.decode()


async def read_instance_id(zk: ZooKeeper, ledgers_root: str) -> str | None:
    try:
        data, _ = await zk.get(f"{ledgers_root}/INSTANCEID")
        return data.decode()
    except NoNodeError:
        return None


class BookieRegistration:
    """Keeps this bookie's ephemeral registration in place."""

    def __init__(
        self,
        zk: ZooKeeper,
        ledgers_root: str,
        bookie_id: str,
        *,
        session_timeout: float,
        data: bytes = b"",
    ) -> None:
        self.zk = zk
        #: The registration znode's data (encoded BookieServiceInfoFormat).
        self.data = data
        self.root = ledgers_root
        self.bookie_id = bookie_id
        self.read_only = False
        self.registered = False
        self._session_timeout = session_timeout
        self._task: asyncio.Task[None] | None = None
        self._lost = False
        self._closed = False
        zk.add_state_listener(self._on_state)

    def _path(self, read_only: bool) -> str:
        sub = "available/readonly" if read_only else "available"
        return f"{self.root}/{sub}/{self.bookie_id}"

    async def register(self, read_only: bool = False) -> None:
        """Create the ephemeral node (and drop the other one). A node left
        by this bookie's previous, dead session is waited out."""
        self.read_only = read_only
        path = self._path(read_only)
        deadline = asyncio.get_running_loop().time() + self._session_timeout * 2 + 5
        while True:
            try:
                await self.zk.create(path, self.data, ephemeral=True, makepath=True)
                break
            except NodeExistsError:
                stat = await self.zk.exists(path)
                if stat is None:
                    continue
                if stat.ephemeralOwner == self.zk.session_id:
                    break
                if asyncio.get_running_loop().time() > deadline:
                    raise
                log.info("waiting for the previous session's registration %s to expire", path)
                gone = asyncio.Event()

                def wake(_event: object, ev: asyncio.Event = gone) -> None:
                    ev.set()

                if await self.zk.exists(path, watch=wake) is None:
                    continue
                try:
                    async with asyncio.timeout(1.0):
                        await gone.wait()
                except TimeoutError:
                    pass
        try:
            await self.zk.delete(self._path(not read_only))
        except NoNodeError:
            pass
        self.registered = True
        log.info("registered bookie at %s", path)

    async def set_read_only(self, read_only: bool) -> None:
        if read_only == self.read_only and self.registered:
            return
        await self.register(read_only)

    async def unregister(self) -> None:
        self._closed = True
        self.zk.remove_state_listener(self._on_state)
        for ro in (False, True):
            try:
                await self.zk.delete(self._path(ro))
            except NoNodeError:
                pass
        self.registered = False

    def _on_state(self, state: str) -> None:
        if state == KazooState.LOST:
            self._lost = True
            self.registered = False
            log.warning(
                "ZooKeeper session expired; registration %s is gone", self._path(self.read_only)
            )
        elif state == KazooState.CONNECTED and self._lost and not self._closed:
            self._lost = False
            if self._task is None or self._task.done():
                self._task = asyncio.get_running_loop().create_task(self._reregister())

    async def _reregister(self) -> None:
        for attempt in range(1, 1000):
            if self._closed:
                return
            try:
                await self.register(self.read_only)
                log.info("re-registered after session expiry")
                return
            except Exception as e:  # keep trying: a bookie without registration is invisible
                log.warning("re-registration attempt %d failed: %s", attempt, e)
                await asyncio.sleep(min(5.0, 0.2 * attempt))
