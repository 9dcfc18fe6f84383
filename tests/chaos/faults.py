"""The nemesis's faults, one scenario class each.

A fault picks a target among those it may hit now (:meth:`Fault.targets`),
injects, and says how long until it heals (0: the fault is a single blow,
such as a kill the supervisor repairs by itself). The nemesis keeps the
cluster able to make progress: at most ``max_bookies_down`` bookies are
killed, paused or full at once, so an ensemble of 3 out of 5 bookies can
always be formed; and one ZooKeeper outage at a time.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import os
import random
import shutil
from pathlib import Path
from typing import Any, ClassVar

from tests.chaos.cluster import ChaosCluster, pause, resume
from tests.chaos.supervisor import Supervisor

__all__ = ["FAULTS", "Fault", "NemesisContext"]


@dataclasses.dataclass
class NemesisContext:
    cluster: ChaosCluster
    supervisor: Supervisor
    rng: random.Random
    #: How long a pause lasts: longer than a ZooKeeper session (s).
    pause_seconds: float
    max_bookies_down: int = 2
    bookies_down: set[int] = dataclasses.field(default_factory=set)
    zookeeper_down: bool = False
    proxies_down: set[int] = dataclasses.field(default_factory=set)

    def bookies_up(self) -> list[int]:
        if len(self.bookies_down) >= self.max_bookies_down or self.zookeeper_down:
            return []
        return [i for i in range(len(self.cluster.sandbox.bookies)) if i not in self.bookies_down]


class Fault:
    name: ClassVar[str]
    weight: ClassVar[float] = 1.0

    def targets(self, ctx: NemesisContext) -> list[str]:
        raise NotImplementedError

    async def inject(self, ctx: NemesisContext, target: str) -> tuple[float, dict[str, Any]]:
        """Do it; return (seconds until :meth:`heal`, what was done)."""
        raise NotImplementedError

    async def heal(self, ctx: NemesisContext, target: str) -> None:
        return None


def _index(target: str) -> int:
    return int(target.rsplit("-", 1)[1])


class KillBookie(Fault):
    """kill -9 a bookie; start it again some seconds later."""

    name = "kill-bookie"

    def targets(self, ctx: NemesisContext) -> list[str]:
        return [f"bookie-{i}" for i in ctx.bookies_up()]

    async def inject(self, ctx: NemesisContext, target: str) -> tuple[float, dict[str, Any]]:
        ctx.bookies_down.add(_index(target))
        await asyncio.to_thread(ctx.cluster.kill, target)
        return ctx.rng.uniform(3, 12), {}

    async def heal(self, ctx: NemesisContext, target: str) -> None:
        try:
            await asyncio.to_thread(ctx.cluster.start_bookie, _index(target))
        finally:
            ctx.bookies_down.discard(_index(target))


class KillProxy(Fault):
    name = "kill-proxy"

    def targets(self, ctx: NemesisContext) -> list[str]:
        n = len(ctx.cluster.sandbox.proxies)
        if ctx.proxies_down or ctx.zookeeper_down:
            return []
        return [f"proxy-{i}" for i in range(n)]

    async def inject(self, ctx: NemesisContext, target: str) -> tuple[float, dict[str, Any]]:
        ctx.proxies_down.add(_index(target))
        await asyncio.to_thread(ctx.cluster.kill, target)
        return ctx.rng.uniform(2, 8), {}

    async def heal(self, ctx: NemesisContext, target: str) -> None:
        try:
            await asyncio.to_thread(ctx.cluster.start_proxy, _index(target))
        finally:
            ctx.proxies_down.discard(_index(target))


class _KillActor(Fault):
    role: ClassVar[str]

    def targets(self, ctx: NemesisContext) -> list[str]:
        return ctx.supervisor.names(self.role)

    async def inject(self, ctx: NemesisContext, target: str) -> tuple[float, dict[str, Any]]:
        pid = ctx.supervisor.kill(target)
        return 0.0, {"pid": pid}


class KillWriter(_KillActor):
    """kill -9 a direct writer: the next incarnation takes the stream over
    (and fences whatever the dead one had in flight)."""

    name = "kill-writer"
    role = "writer"


class KillConsumer(_KillActor):
    name = "kill-consumer"
    role = "consumer"


class KillAuditor(Fault):
    name = "kill-auditor"
    weight = 0.5

    def __init__(self) -> None:
        self._down = False  # killed here, not started again yet

    def targets(self, ctx: NemesisContext) -> list[str]:
        # An AutoRecovery that exited on its own (it cannot start while
        # ZooKeeper restarts: it reports that and exits, as upstream's does)
        # is a target too: its "kill" finds it dead, and the heal starts it
        # again, as an operator's supervisor would.
        return [] if self._down or ctx.cluster.auditor is None else ["autorecovery"]

    async def inject(self, ctx: NemesisContext, target: str) -> tuple[float, dict[str, Any]]:
        assert ctx.cluster.auditor is not None
        exited = ctx.cluster.auditor.poll()
        self._down = True
        await asyncio.to_thread(ctx.cluster.kill_auditor)
        return ctx.rng.uniform(2, 6), {} if exited is None else {"had_exited": exited}

    async def heal(self, ctx: NemesisContext, target: str) -> None:
        try:
            await asyncio.to_thread(ctx.cluster.start_auditor)
        finally:
            self._down = False


class PauseProcess(Fault):
    """SIGSTOP a process for longer than its ZooKeeper session, then
    SIGCONT it. A paused writer or consumer is replaced meanwhile, so when
    it wakes it is a zombie that must meet the fence."""

    name = "pause"
    weight = 1.5

    def __init__(self) -> None:
        self._paused: dict[str, int | None] = {}

    def targets(self, ctx: NemesisContext) -> list[str]:
        out = ctx.supervisor.names("writer") + ctx.supervisor.names("consumer")
        out += [f"bookie-{i}" for i in ctx.bookies_up()]
        if not ctx.proxies_down and not ctx.zookeeper_down:
            out += [f"proxy-{i}" for i in range(len(ctx.cluster.sandbox.proxies))]
        return out

    async def inject(self, ctx: NemesisContext, target: str) -> tuple[float, dict[str, Any]]:
        seconds = ctx.pause_seconds
        if target.startswith("bookie-"):
            ctx.bookies_down.add(_index(target))
            pid = ctx.cluster.bookie_pid(_index(target))
        elif target.startswith("proxy-"):
            ctx.proxies_down.add(_index(target))
            pid = ctx.cluster.proxy_pid(_index(target))
        else:
            p = ctx.supervisor.detach_and_pause(target)
            pid = p.pid if p is not None else None
        if pid is not None and not target.startswith(("writer", "consumer")):
            pause(pid)
        self._paused[target] = pid
        return seconds, {"pid": pid, "seconds": seconds}

    async def heal(self, ctx: NemesisContext, target: str) -> None:
        pid = self._paused.pop(target, None)
        if pid is not None:
            resume(pid)
        if target.startswith("bookie-"):
            ctx.bookies_down.discard(_index(target))
        elif target.startswith("proxy-"):
            ctx.proxies_down.discard(_index(target))


class FillLedgerDisk(Fault):
    """Fill the small tmpfs holding one bookie's ledger directory (the
    bookie turns read-only), then free it again."""

    name = "fill-disk"
    BALLAST = "chaos-ballast"

    def targets(self, ctx: NemesisContext) -> list[str]:
        i = ctx.cluster.small_disk_bookie
        return [f"bookie-{i}"] if i in ctx.bookies_up() else []

    async def inject(self, ctx: NemesisContext, target: str) -> tuple[float, dict[str, Any]]:
        ctx.bookies_down.add(_index(target))
        path = ctx.cluster.ledger_dir(_index(target)) / self.BALLAST
        written = await asyncio.to_thread(_fill, path)
        return ctx.rng.uniform(15, 30), {"ballast_bytes": written}

    async def heal(self, ctx: NemesisContext, target: str) -> None:
        path = ctx.cluster.ledger_dir(_index(target)) / self.BALLAST
        path.unlink(missing_ok=True)
        ctx.bookies_down.discard(_index(target))


def _fill(path: Path) -> int:
    """Write zeros until ENOSPC, less 256 KB (the bookie must still be able
    to write its checkpoint mark, as on a real disk that is *nearly* full)."""
    st = shutil.disk_usage(path.parent)
    size = max(0, st.free - 256 * 1024)
    written = 0
    chunk = b"\0" * (1 << 20)
    with open(path, "wb") as f:
        try:
            while written + len(chunk) <= size:
                f.write(chunk)
                written += len(chunk)
        except OSError:
            pass
    return written


class CorruptEntryLog(Fault):
    """Flip bytes inside a bookie's entry log (one it is not appending to):
    entries there fail their digest or their framing; readers fall back to
    other replicas, and the auditor's verification has them re-replicated."""

    name = "corrupt-entry-log"

    def targets(self, ctx: NemesisContext) -> list[str]:
        out = []
        for i in ctx.bookies_up():
            if _entry_logs(ctx.cluster.ledger_dir(i)):
                out.append(f"bookie-{i}")
        return out

    async def inject(self, ctx: NemesisContext, target: str) -> tuple[float, dict[str, Any]]:
        logs = _entry_logs(ctx.cluster.ledger_dir(_index(target)))
        path = ctx.rng.choice(logs)
        offsets = _flip(path, ctx.rng, start=1024, count=ctx.rng.randint(1, 4))
        return 0.0, {"file": path.name, "offsets": offsets}


def _entry_logs(ledger_dir: Path) -> list[Path]:
    """Entry logs except the newest (still being appended to); garbage
    collection may remove any of them meanwhile."""
    found = []
    for p in (ledger_dir / "current").glob("*.log"):
        with contextlib.suppress(FileNotFoundError):
            st = p.stat()
            found.append((st.st_mtime, st.st_size, p))
    found.sort()
    return [p for _, size, p in found[:-1] if size > 4096]


def _flip(
    path: Path, rng: random.Random, *, start: int, count: int, end: int | None = None
) -> list[int]:
    size = path.stat().st_size
    end = size if end is None else min(end, size)
    if end <= start:
        return []
    offsets = sorted(rng.randrange(start, end) for _ in range(count))
    fd = os.open(path, os.O_RDWR)
    try:
        for off in offsets:
            b = os.pread(fd, 1, off)
            os.pwrite(fd, bytes([b[0] ^ (1 << rng.randrange(8))]), off)
        os.fsync(fd)
    finally:
        os.close(fd)
    return offsets


class CorruptJournal(Fault):
    """kill -9 a bookie, flip bytes in its newest journal (entries not yet
    checkpointed are replayed from there), and start it again: replay
    stops at a damaged length or stores a damaged entry, and the auditor
    finds the replica missing or bad."""

    name = "corrupt-journal"

    def targets(self, ctx: NemesisContext) -> list[str]:
        return [f"bookie-{i}" for i in ctx.bookies_up()]

    async def inject(self, ctx: NemesisContext, target: str) -> tuple[float, dict[str, Any]]:
        i = _index(target)
        ctx.bookies_down.add(i)
        await asyncio.to_thread(ctx.cluster.kill, target)
        journals = sorted(
            (ctx.cluster.journal_dir(i) / "current").glob("*.txn"), key=lambda p: p.stat().st_mtime
        )
        done: dict[str, Any] = {}
        if journals:
            path = journals[-1]
            done = {
                "file": path.name,
                "offsets": _flip(path, ctx.rng, start=4096, count=ctx.rng.randint(1, 3)),
            }
        return 1.0, done

    async def heal(self, ctx: NemesisContext, target: str) -> None:
        try:
            await asyncio.to_thread(ctx.cluster.start_bookie, _index(target))
        finally:
            ctx.bookies_down.discard(_index(target))


class RestartZooKeeper(Fault):
    """kill -9 ZooKeeper and start it again on the same data: sessions
    shorter than the outage expire, the others resume."""

    name = "restart-zookeeper"
    weight = 0.7

    def targets(self, ctx: NemesisContext) -> list[str]:
        if ctx.zookeeper_down or ctx.bookies_down or ctx.proxies_down:
            return []
        return ["zookeeper"]

    async def inject(self, ctx: NemesisContext, target: str) -> tuple[float, dict[str, Any]]:
        ctx.zookeeper_down = True
        await asyncio.to_thread(ctx.cluster.kill, "zookeeper")
        return ctx.rng.uniform(1, 5), {}

    async def heal(self, ctx: NemesisContext, target: str) -> None:
        try:
            await asyncio.to_thread(ctx.cluster.start_zookeeper)
        finally:
            ctx.zookeeper_down = False


FAULTS: list[type[Fault]] = [
    KillBookie,
    KillWriter,
    KillConsumer,
    KillProxy,
    KillAuditor,
    PauseProcess,
    FillLedgerDisk,
    CorruptEntryLog,
    CorruptJournal,
    RestartZooKeeper,
]
