"""Keeps the workload's actors running: one process per slot (a writer of
stream s1, a consumer of subscriber c2, ...). When a slot's process exits
(killed, broken, fenced) a new incarnation starts, with a new ``proc`` name
in the history. A paused process is *detached* from its slot first, so its
replacement takes over while it sleeps: that is how a zombie writer or
consumer meets the fence when it wakes.
"""

from __future__ import annotations

import contextlib
import dataclasses
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

__all__ = ["Slot", "Supervisor"]


@dataclasses.dataclass
class Slot:
    name: str  # e.g. "writer-s1"
    role: str
    args: list[str]
    restart: bool = True
    incarnation: int = 0
    process: subprocess.Popen[bytes] | None = None
    starts: int = 0
    exits: dict[int, int] = dataclasses.field(default_factory=dict)


@contextlib.contextmanager
def _sigterm_held() -> Iterator[None]:
    """Start children with SIGTERM blocked: it stays pending in the child
    (a signal mask is inherited and survives exec) until the actor's main()
    has its handler and lets it through. A stop that arrives while the
    interpreter is still starting (a replacement started just before the
    workload is stopped) then ends the actor cleanly instead of killing it
    with SIGTERM's default action.

    The mask is set here, on the calling thread, around the spawn, not by a
    ``preexec_fn``: that forces a real fork(), whose at-fork handlers in
    grpcio (loaded in this process by other tests) restart gRPC's poller
    in the child, where closing inherited descriptors before exec makes it
    abort (grpc/grpc#43055; the actor exited -6). A SIGTERM sent to this
    process meanwhile stays pending until the mask is restored."""
    old = signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGTERM})
    try:
        yield
    finally:
        signal.pthread_sigmask(signal.SIG_SETMASK, old)


class Supervisor:
    def __init__(self, directory: Path, history: Path, uri: str, seed: int) -> None:
        self.directory = directory
        self.history = history
        self.uri = uri
        self.seed = seed
        self.slots: dict[str, Slot] = {}
        self.zombies: list[tuple[Slot, subprocess.Popen[bytes]]] = []
        self.stopping = False
        (directory / "logs").mkdir(parents=True, exist_ok=True)

    def add(self, name: str, role: str, args: list[str], *, restart: bool = True) -> Slot:
        slot = Slot(name, role, args, restart)
        self.slots[name] = slot
        self._start(slot)
        return slot

    def _start(self, slot: Slot) -> None:
        slot.incarnation += 1
        slot.starts += 1
        proc = f"{slot.name}-{slot.incarnation}"
        cmd = [
            sys.executable,
            "-m",
            "tests.chaos.workload",
            slot.role,
            "--uri",
            self.uri,
            "--history",
            str(self.history),
            "--proc",
            proc,
            "--seed",
            str(self.seed * 1000 + slot.incarnation),
            *slot.args,
        ]
        env = dict(os.environ, PYTHONUNBUFFERED="1")
        with open(self.directory / "logs" / f"{slot.name}.log", "ab") as out, _sigterm_held():
            slot.process = subprocess.Popen(
                cmd, stdin=subprocess.DEVNULL, stdout=out, stderr=subprocess.STDOUT, env=env
            )
        self._note(slot, slot.process, "started")

    def _note(self, slot: Slot, p: subprocess.Popen[bytes], what: str) -> None:
        """A line in the slot's log from the supervisor: when each
        incarnation started and how it ended, so an exit code in the report
        can be matched with what that process logged (an incarnation that
        logs nothing still shows)."""
        proc = p.args[p.args.index("--proc") + 1] if isinstance(p.args, list) else "?"
        stamp = time.strftime("%Y-%m-%d %H:%M:%S")
        line = f"{stamp} supervisor: {proc} (pid {p.pid}) {what}\n"
        with open(self.directory / "logs" / f"{slot.name}.log", "a") as f:
            f.write(line)

    def poll(self) -> None:
        """Start a new incarnation of every slot whose process ended."""
        for slot, z in list(self.zombies):
            if z.poll() is not None:
                self.zombies.remove((slot, z))
                slot.exits[z.returncode] = slot.exits.get(z.returncode, 0) + 1
                self._note(slot, z, f"exited {z.returncode}")
        if self.stopping:
            return
        for slot in self.slots.values():
            p = slot.process
            if p is not None and p.poll() is not None:
                slot.exits[p.returncode] = slot.exits.get(p.returncode, 0) + 1
                self._note(slot, p, f"exited {p.returncode}")
                slot.process = None
            if slot.process is None and slot.restart:
                self._start(slot)

    def names(self, role: str) -> list[str]:
        return [s.name for s in self.slots.values() if s.role == role and s.process is not None]

    def kill(self, name: str) -> int | None:
        """SIGKILL the slot's process; the next :meth:`poll` replaces it."""
        slot = self.slots[name]
        p = slot.process
        if p is None or p.poll() is not None:
            return None
        p.kill()
        p.wait()
        return p.pid

    def detach_and_pause(self, name: str) -> subprocess.Popen[bytes] | None:
        """SIGSTOP the slot's process and let a new incarnation take its
        place at once; the caller SIGCONTs the zombie later."""
        slot = self.slots[name]
        p = slot.process
        if p is None or p.poll() is not None:
            return None
        os.kill(p.pid, signal.SIGSTOP)
        slot.process = None
        self.zombies.append((slot, p))
        self._start(slot)
        return p

    def stop(self, timeout: float = 60.0) -> dict[str, int]:
        """SIGTERM every actor (zombies are woken first) and wait; SIGKILL
        whatever is left. Returns each slot's last exit code."""
        self.stopping = True
        for _, z in self.zombies:
            with contextlib.suppress(ProcessLookupError):
                os.kill(z.pid, signal.SIGCONT)
        procs = [(s, s.process) for s in self.slots.values() if s.process is not None]
        procs += self.zombies
        self.zombies = []
        for slot, p in procs:
            if p.poll() is None:
                self._note(slot, p, "sent SIGTERM (stopping the workload)")
                p.terminate()
        deadline = time.monotonic() + timeout
        codes: dict[str, int] = {}
        for slot, p in procs:
            try:
                code = p.wait(max(0.1, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                p.kill()
                p.wait()
                code = -1000  # did not stop when told: a hang, reported as a crash
            slot.exits[code] = slot.exits.get(code, 0) + 1
            self._note(slot, p, f"exited {code}")
            codes[slot.name] = code
            if slot.process is p:
                slot.process = None
        return codes
