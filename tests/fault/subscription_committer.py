"""A fork server ("zygote") of committing consumers, for kill -9 tests.

Starting a Python process that imports dlog costs about a second; a test
that kills a consumer a hundred times would spend most of its time there.
So one zygote process imports everything once, and on each command from
the test forks a child that runs one consumer round with its own asyncio
loop, ZooKeeper session and bookie connections. The zygote itself never
starts a thread or an event loop (it checks before every fork), so each
child starts from a clean, single-threaded copy.

A child takes ownership of the subscription (a fencing takeover), then
commits increasing DLSNs ``(1, n, 0)`` with up to ``depth`` commits in
flight until it is killed, and writes one line per event to its pipe:

* ``FOUND <segment> <next> <previous>``: the znode as it found it;
* ``OPENED``: the namespace is open, the takeover starts;
* ``START <seq> <entry> <slot>``: the position ``acquire`` returned;
* ``SEND <n> <t>``: it is about to call ``advance_commit_position``;
* ``ACK <n> <t>``: that call returned (the commit is durable);
* ``ERROR <text>``: a commit or the takeover failed; it exits with code 3.

``t`` is ``time.monotonic()``, one clock for every process on the host, so
a test can tell which commits were sent after it killed a bookie.

Run as ``python subscription_committer.py <socket fd>``; tests use
:class:`Zygote`, which starts it and hands it one pipe per child.
"""

from __future__ import annotations

import asyncio
import contextlib
import ctypes
import importlib
import json
import os
import random
import signal
import socket
import subprocess
import sys
import threading
import time
import traceback
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

SUBSCRIBER = "consumer"
STREAM = "stream"
#: A child that writes nothing for this long is stuck (the store hangs);
#: the test fails with the child's transcript and log instead of waiting.
HANG_SECONDS = 60.0

#: What a child needs, imported once, in the zygote.
PRELOAD = (
    "dlog.conf.dlog",
    "dlog.dlsn",
    "dlog.namespace",
    "subscriptions.format",
    "subscriptions.log_segment",
    "subscriptions.zk_store",
)

_PR_SET_PDEATHSIG = 1


def _die_with_parent() -> None:
    """SIGKILL this process when its parent dies, so no consumer outlives
    a crashed test and keeps committing."""
    ctypes.CDLL(None, use_errno=True).prctl(_PR_SET_PDEATHSIG, signal.SIGKILL)


# ----------------------------------------------------------------------------
# the child: one consumer round
# ----------------------------------------------------------------------------
async def _consume(out: int, params: dict[str, Any]) -> None:
    from dlog.conf.dlog import DLogConfig
    from dlog.dlsn import DLSN
    from dlog.namespace import Namespace
    from subscriptions.format import SegmentSubscription

    def emit(line: str) -> None:
        os.write(out, (line + "\n").encode())

    conf = DLogConfig.load(
        overrides={
            "bkc.metadataServiceUri": params["ledgers_uri"],
            "ensemble-size": 3,
            "write-quorum-size": 2,
            "ack-quorum-size": 2,
            "zkSessionTimeoutSeconds": 4,
            "logSegmentBasedSubscriptionsStoreEnabled": True,
            "subscriptionSegmentMaxEntries": params["max_entries"],
        }
    )
    ns = await Namespace.open(params["uri"], conf, bind=True)
    store = (await ns.open_log(STREAM)).subscriptions
    znode, _ = await store.read_znode(SUBSCRIBER)
    if isinstance(znode, SegmentSubscription):
        emit(f"FOUND {znode.segment_id} {znode.next_segment_id} {znode.previous_segment_id}")
    else:
        emit("FOUND None None None")
    emit("OPENED")
    start = await store.acquire(SUBSCRIBER)
    emit(f"START {start[0]} {start[1]} {start[2]}")
    n = max(params["first"], start[1] + 1)
    slots = asyncio.Semaphore(params["depth"])
    tasks: set[asyncio.Task[None]] = set()

    async def commit(entry: int) -> None:
        try:
            await store.advance_commit_position(SUBSCRIBER, DLSN(1, entry, 0))
        except BaseException as e:
            emit(f"ERROR commit {entry}: {e!r}")
            traceback.print_exc()
            os._exit(3)
        emit(f"ACK {entry} {time.monotonic():.6f}")
        slots.release()

    while True:
        await slots.acquire()
        emit(f"SEND {n} {time.monotonic():.6f}")
        task = asyncio.get_running_loop().create_task(commit(n))
        tasks.add(task)
        task.add_done_callback(tasks.discard)
        n += 1


def _child(out: int, params: dict[str, Any]) -> None:
    """Runs in the forked child; never returns."""
    code = 3
    try:
        _die_with_parent()
        log = os.open(params["log"], os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
        os.dup2(log, 2)
        os.close(log)
        import logging

        logging.basicConfig(
            stream=sys.stderr,
            level=logging.INFO,
            format="%(asctime)s %(name)s %(levelname)s %(message)s",
            force=True,
        )
        logging.getLogger("kazoo").setLevel(logging.WARNING)
        logging.getLogger("subscriptions").setLevel(logging.DEBUG)  # rolls, too
        random.seed()  # every child starts from the zygote's random state otherwise
        asyncio.run(_consume(out, params))
    except BaseException as e:
        with contextlib.suppress(BaseException):
            os.write(out, f"ERROR {e!r}\n".encode())
            traceback.print_exc()
    finally:
        os._exit(code)


# ----------------------------------------------------------------------------
# the zygote
# ----------------------------------------------------------------------------
def _check_single_threaded() -> None:
    threads = threading.enumerate()
    if threads != [threading.main_thread()]:
        raise RuntimeError(f"the zygote must not fork with threads running: {threads}")
    local = getattr(asyncio.get_event_loop_policy(), "_local", None)
    if getattr(local, "_loop", None) is not None:
        raise RuntimeError("the zygote must not fork with an event loop set")


def _serve(sock: socket.socket) -> None:
    for module in PRELOAD:
        importlib.import_module(module)
    children: set[int] = set()
    _check_single_threaded()
    sock.send(json.dumps({"ready": os.getpid()}).encode())
    try:
        while True:
            msg, fds, _, _ = socket.recv_fds(sock, 65536, 1)
            if not msg:
                return  # the test closed its end
            cmd = json.loads(msg)
            if cmd["op"] == "spawn":
                _check_single_threaded()
                pid = os.fork()
                if pid == 0:
                    sock.close()
                    _child(fds[0], cmd["params"])
                os.close(fds[0])
                children.add(pid)
                sock.send(json.dumps({"pid": pid}).encode())
            elif cmd["op"] == "reap":
                _, status = os.waitpid(cmd["pid"], 0)
                children.discard(cmd["pid"])
                sock.send(json.dumps({"status": status}).encode())
    finally:
        for pid in children:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
            with contextlib.suppress(ChildProcessError):
                os.waitpid(pid, 0)


# ----------------------------------------------------------------------------
# the test's side
# ----------------------------------------------------------------------------
Position = tuple[int, int, int]


@dataclass
class Transcript:
    """What one child wrote, parsed as it arrives."""

    found: tuple[str, str, str] | None = None
    opened: bool = False
    start: Position | None = None
    sent: list[int] = field(default_factory=list)
    sent_at: dict[int, float] = field(default_factory=dict)
    acks: list[int] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)
    lines: int = 0
    tail: deque[str] = field(default_factory=lambda: deque(maxlen=20))

    def feed(self, line: str) -> None:
        self.lines += 1
        self.tail.append(line)
        kind, _, rest = line.partition(" ")
        args = rest.split()
        if kind == "SEND":
            n = int(args[0])
            self.sent.append(n)
            self.sent_at[n] = float(args[1])
        elif kind == "ACK":
            self.acks.append(int(args[0]))
        elif kind == "START":
            self.start = (int(args[0]), int(args[1]), int(args[2]))
        elif kind == "OPENED":
            self.opened = True
        elif kind == "FOUND":
            self.found = (args[0], args[1], args[2])
        else:
            self.errors.append(line)

    def acked_sent_after(self, t: float, since: int = 0) -> int:
        """How many acknowledged commits were sent after time ``t``."""
        return sum(1 for n in self.acks[since:] if self.sent_at[n] > t)


class Child:
    """One consumer round: a forked process, its transcript, and kill -9."""

    def __init__(self, zygote: Zygote, pid: int, out: int, log: Path, name: str) -> None:
        self.zygote = zygote
        self.pid = pid
        self.log = log
        self.name = name
        self.transcript = Transcript()
        self.status: int | None = None
        self._cond = threading.Condition()
        self._eof = False
        self._reader = threading.Thread(target=self._read, args=(out,), daemon=True)
        self._reader.start()

    def _read(self, out: int) -> None:
        buf = b""
        try:
            while chunk := os.read(out, 65536):
                buf += chunk
                *lines, buf = buf.split(b"\n")
                with self._cond:
                    for line in lines:
                        self.transcript.feed(line.decode())
                    self._cond.notify_all()
        finally:
            os.close(out)
            with self._cond:
                self._eof = True
                self._cond.notify_all()

    def wait_for(self, pred: Callable[[Transcript], bool], what: str) -> Transcript:
        """Block until ``pred(transcript)``; fail if the child errs, dies or
        writes nothing for HANG_SECONDS."""
        with self._cond:
            seen = -1
            while not pred(self.transcript):
                if self.transcript.errors or self._eof:
                    raise AssertionError(f"{self.name}: died waiting for {what}\n{self.report()}")
                if self.transcript.lines == seen:
                    raise AssertionError(
                        f"{self.name}: no output for {HANG_SECONDS:.0f}s waiting for {what} "
                        f"(a hang?)\n{self.report()}"
                    )
                seen = self.transcript.lines
                self._cond.wait(HANG_SECONDS)
            return self.transcript

    def kill(self) -> Transcript:
        """kill -9, read what it wrote before dying, reap it."""
        os.kill(self.pid, signal.SIGKILL)
        self._reader.join()
        self.status = self.zygote.reap(self.pid)
        if self.transcript.errors:
            raise AssertionError(f"{self.name}: failed\n{self.report()}")
        assert os.WIFSIGNALED(self.status) and os.WTERMSIG(self.status) == signal.SIGKILL, (
            f"{self.name}: wait status {self.status}, not a SIGKILL\n{self.report()}"
        )
        return self.transcript

    def report(self) -> str:
        t = self.transcript
        try:
            log = "\n".join(self.log.read_text(errors="replace").splitlines()[-40:])
        except OSError:
            log = "(no log)"
        return (
            f"pid {self.pid}, start {t.start}, {len(t.sent)} sent, {len(t.acks)} acked\n"
            f"last lines:\n  " + "\n  ".join(t.tail) + f"\nlog {self.log}:\n{log}"
        )


class Zygote:
    """The test's handle on the fork server."""

    def __init__(self, workdir: Path) -> None:
        self.workdir = workdir
        workdir.mkdir(parents=True, exist_ok=True)
        self.sock, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        env = dict(os.environ)
        root = str(Path(__file__).resolve().parents[2])
        env["PYTHONPATH"] = os.pathsep.join(filter(None, [root, env.get("PYTHONPATH")]))
        with open(workdir / "zygote.log", "ab") as log:
            self.proc = subprocess.Popen(
                [sys.executable, __file__, str(theirs.fileno())],
                pass_fds=[theirs.fileno()],
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                env=env,
            )
        theirs.close()
        self.children: list[Child] = []
        ready = self._recv()
        assert "ready" in ready, ready

    def _recv(self) -> dict[str, Any]:
        msg = self.sock.recv(65536)
        if not msg:
            log = (self.workdir / "zygote.log").read_text(errors="replace")
            raise AssertionError(f"the zygote died:\n{log}")
        return json.loads(msg)

    def spawn(self, name: str, **params: Any) -> Child:
        log = self.workdir / f"{name}.log"
        r, w = os.pipe()
        try:
            cmd = {"op": "spawn", "params": {**params, "log": str(log)}}
            socket.send_fds(self.sock, [json.dumps(cmd).encode()], [w])
        finally:
            os.close(w)
        child = Child(self, self._recv()["pid"], r, log, name)
        self.children.append(child)
        return child

    def reap(self, pid: int) -> int:
        self.sock.send(json.dumps({"op": "reap", "pid": pid}).encode())
        return int(self._recv()["status"])

    def close(self) -> None:
        for child in self.children:
            if child.status is None:
                with contextlib.suppress(ProcessLookupError):
                    os.kill(child.pid, signal.SIGKILL)
        self.sock.close()  # the zygote reaps what is left and exits
        try:
            self.proc.wait(30)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()

    def __enter__(self) -> Zygote:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


if __name__ == "__main__":
    _die_with_parent()
    _serve(socket.socket(fileno=int(sys.argv[1])))
