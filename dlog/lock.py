"""Stream ownership: an ephemeral-sequential lock in ZooKeeper.

Each contender creates ``<lock>/member_<seq>`` (ephemeral, sequential, its
data naming the owner). The lowest sequence number owns the stream. A
contender that is not first waits for its predecessor to go, up to
``lockTimeoutSeconds``, then gives up with an error that names the owner.
The lock is lost when the ZooKeeper session expires: the holder must stop
writing at once (its ephemeral node is gone and a new owner may already
be fencing its segments).
"""

from __future__ import annotations

import asyncio
import logging
import os
import socket
import uuid
from collections.abc import Callable

from dlog.errors import LockingError, OwnershipAcquireFailedError
from dlog.zk import KazooState, NodeExistsError, NoNodeError, ZooKeeper

log = logging.getLogger(__name__)

MEMBER_PREFIX = "member_"


def client_id() -> str:
    """What a lock node says about its owner (shown to the loser)."""
    return f"{socket.gethostname()}:{os.getpid()}:{uuid.uuid4().hex[:8]}"


class DistributedLock:
    def __init__(self, zk: ZooKeeper, path: str, *, owner: str | None = None) -> None:
        self.zk = zk
        self.path = path
        self.owner = owner or client_id()
        self.node: str | None = None
        self.session_id: int | None = None
        self.lost = False
        self._listeners: list[Callable[[], object]] = []
        zk.add_state_listener(self._on_state)

    def on_lost(self, callback: Callable[[], object]) -> None:
        """Called once if ownership is lost (session expired)."""
        self._listeners.append(callback)

    @property
    def held(self) -> bool:
        return self.node is not None and not self.lost

    async def acquire(self, timeout: float) -> None:
        """Become the owner, or raise OwnershipAcquireFailedError after ``timeout``."""
        try:
            # Not retried: an attempt whose answer was lost would leave a
            # member node of this very session queued ahead of it.
            created = await self.zk.create(
                f"{self.path}/{MEMBER_PREFIX}",
                self.owner.encode(),
                ephemeral=True,
                sequence=True,
                makepath=True,
                retry=False,
            )
        except NodeExistsError:  # pragma: no cover - sequential nodes never collide
            raise LockingError(f"could not create a lock node under {self.path}") from None
        self.session_id = self.zk.session_id
        name = created.rsplit("/", 1)[1]
        loop = asyncio.get_running_loop()
        deadline = loop.time() + max(0.0, timeout)
        try:
            while True:
                members = sorted(
                    (
                        c
                        for c in await self.zk.get_children(self.path)
                        if c.startswith(MEMBER_PREFIX)
                    ),
                    key=lambda c: c[len(MEMBER_PREFIX) :],
                )
                if name not in members:
                    raise LockingError(f"lock node {created} vanished (session expired?)")
                position = members.index(name)
                if position == 0:
                    self.node = created
                    log.info("acquired %s as %s", self.path, self.owner)
                    return
                remaining = deadline - loop.time()
                if remaining <= 0:
                    holder = await self._holder(members[0])
                    raise OwnershipAcquireFailedError(
                        f"{self.path} is owned by {holder or 'another writer (just released)'}; "
                        f"gave up after {timeout:g}s (lockTimeoutSeconds)",
                        owner=holder,
                    )
                gone = asyncio.Event()

                def wake(_event: object, ev: asyncio.Event = gone) -> None:
                    ev.set()

                predecessor = f"{self.path}/{members[position - 1]}"
                if await self.zk.exists(predecessor, watch=wake) is None:
                    continue
                try:
                    async with asyncio.timeout(remaining):
                        await gone.wait()
                except TimeoutError:
                    pass
        except BaseException:
            try:
                await self.zk.delete(created)
            except Exception:
                pass
            raise

    @staticmethod
    async def holder(zk: ZooKeeper, path: str) -> str | None:
        """What the current owner's lock node at ``path`` says; None if unowned."""
        try:
            members = [c for c in await zk.get_children(path) if c.startswith(MEMBER_PREFIX)]
        except NoNodeError:
            return None
        for member in sorted(members, key=lambda c: c[len(MEMBER_PREFIX) :]):
            try:
                data, _ = await zk.get(f"{path}/{member}")
            except NoNodeError:
                continue  # it just went: the next one owns it
            return data.decode(errors="replace") or member
        return None

    async def _holder(self, member: str) -> str | None:
        """What the holder's lock node says about it; None if it just went."""
        try:
            data, _ = await self.zk.get(f"{self.path}/{member}")
            return data.decode(errors="replace") or member
        except NoNodeError:
            return None

    async def release(self) -> None:
        node, self.node = self.node, None
        self.zk.remove_state_listener(self._on_state)
        if node is not None and not self.lost:
            try:
                await self.zk.delete(node)
            except NoNodeError:
                pass
            except Exception as e:
                log.warning("could not delete lock node %s: %s (it goes with the session)", node, e)

    def _on_state(self, state: str) -> None:
        if state == KazooState.LOST and self.node is not None and not self.lost:
            self.lost = True
            log.error("lost ownership of %s: ZooKeeper session expired", self.path)
            for cb in self._listeners:
                try:
                    cb()
                except Exception:
                    log.exception("lock-lost callback failed")
