"""A whole dlog cluster on loopback in one directory: ZooKeeper, N bookies,
the cluster layout and a namespace bound to it.

    sandbox = Sandbox("/tmp/sb", bookies=3).start()
    ns = await Namespace.open(sandbox.namespace_uri)
    ...
    sandbox.stop()

The directory holds ``zookeeper/`` (data, ``zoo.cfg``, ``zookeeper.log``),
``bookie-<i>/`` per bookie (``journal/``, ``ledgers/``, ``bookie.conf``,
``bookie.log``) and ``sandbox.json``, which records the addresses, ports,
pids and directories so another process can :meth:`Sandbox.load` the
sandbox to stop it, restart a bookie or show its status.

Starting a directory that holds a stopped sandbox resumes it: the same
ports, so bookie cookies and the namespace binding (which names the
ZooKeeper port) stay valid, and the data survives.

Every method blocks (it waits for processes); from async code call it
through ``asyncio.to_thread``.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import json
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path
from typing import Any, Self

from dlog.sandbox.bookies import BookieProcess, wait_registered, wait_serving
from dlog.sandbox.ports import free_port, port_free
from dlog.sandbox.zookeeper import ZooKeeperServer

__all__ = [
    "STATE_FILE",
    "ProcessStatus",
    "Sandbox",
    "SandboxError",
    "SandboxNotFoundError",
    "SandboxRunningError",
    "pid_alive",
]

STATE_FILE = "sandbox.json"
STATE_VERSION = 1
DEFAULT_NAMESPACE = "/messaging"
DEFAULT_LEDGERS_ROOT = "/ledgers"


class SandboxError(RuntimeError):
    """A sandbox could not be started, loaded, stopped or changed."""


class SandboxNotFoundError(SandboxError):
    """The directory holds no ``sandbox.json``."""


class SandboxRunningError(SandboxError):
    """A sandbox is already running in the directory."""


# ---------------------------------------------------------------------------
# processes known by pid
# ---------------------------------------------------------------------------


def _proc_state(pid: int) -> str | None:
    """The state letter from /proc/<pid>/stat ('R', 'S', 'Z'...), None if gone,
    '?' where /proc is not available."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except FileNotFoundError:
        return None
    except OSError:
        return "?"
    # "pid (comm) state ...": comm may hold spaces and parentheses.
    return stat.rsplit(")", 1)[-1].split()[0]


def _cmdline(pid: int) -> str | None:
    try:
        return (
            Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
        )
    except OSError:
        return None


def pid_alive(pid: int | None, marker: str | None = None) -> bool:
    """Whether ``pid`` runs (zombies do not count) and, if ``marker`` is
    given and /proc is readable, whether its command line contains
    ``marker``, so that a pid reused by an unrelated process is not taken
    for ours."""
    if pid is None or pid <= 0:
        return False
    with contextlib.suppress(ChildProcessError, OSError):
        os.waitpid(pid, os.WNOHANG)  # reap it if it is our exited child
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        pass  # exists, owned by someone else: the marker check decides
    state = _proc_state(pid)
    if state is None or state in ("Z", "X"):
        return False
    if marker is not None and state != "?":
        cmdline = _cmdline(pid)
        if cmdline is not None and marker not in cmdline:
            return False
    return True


def _port_open(host: str, port: int, timeout: float = 0.5) -> bool:
    try:
        with socket.create_connection((host, port), timeout=timeout):
            return True
    except OSError:
        return False


@dataclasses.dataclass(eq=False)
class _Proc:
    """One sandbox process: a handle when we started it, else just a pid."""

    name: str
    host: str
    port: int
    directory: Path
    marker: str  # a path on its command line (its configuration file)
    pid: int | None = None
    metrics_port: int = 0  # its Prometheus endpoint's; 0: none (yet)
    process: subprocess.Popen[bytes] | None = dataclasses.field(default=None, repr=False)

    @property
    def address(self) -> str:
        return f"{self.host}:{self.port}"

    @property
    def metrics_url(self) -> str | None:
        return f"http://{self.host}:{self.metrics_port}/metrics" if self.metrics_port else None

    def alive(self) -> bool:
        if self.process is not None and self.process.pid == self.pid:
            return self.process.poll() is None
        return pid_alive(self.pid, self.marker)

    def signal(self, sig: int) -> None:
        if not self.alive() or self.pid is None:
            return
        with contextlib.suppress(ProcessLookupError):
            os.kill(self.pid, sig)

    def wait_gone(self, timeout: float) -> bool:
        deadline = time.monotonic() + timeout
        while True:
            if self.process is not None and self.process.pid == self.pid:
                try:
                    self.process.wait(max(0.0, deadline - time.monotonic()))
                    return True
                except subprocess.TimeoutExpired:
                    return False
            if not self.alive():
                return True
            if time.monotonic() >= deadline:
                return False
            time.sleep(0.05)

    def forget(self) -> None:
        self.pid = None
        self.process = None


def _terminate(procs: list[_Proc], timeout: float) -> list[str]:
    """SIGTERM every live process at once, wait for all, SIGKILL laggards.
    Returns the names of the processes that had to be killed."""
    live = [p for p in procs if p.alive()]
    for p in live:
        p.signal(signal.SIGTERM)
    killed = []
    deadline = time.monotonic() + timeout
    for p in live:
        if not p.wait_gone(max(0.0, deadline - time.monotonic())):
            killed.append(p.name)
            p.signal(signal.SIGKILL)
            p.wait_gone(5.0)
    for p in procs:
        p.forget()
    return killed


@dataclasses.dataclass(frozen=True)
class ProcessStatus:
    """One row of :meth:`Sandbox.status`."""

    name: str  # "zookeeper" or "bookie-<index>"
    index: int | None  # bookie or proxy index, None for ZooKeeper
    address: str  # host:port (a bookie's id)
    pid: int | None
    alive: bool  # the process runs
    listening: bool  # its port accepts connections
    directory: str
    metrics: str | None = None  # its Prometheus endpoint (bookies and proxies)


# ---------------------------------------------------------------------------
# the sandbox
# ---------------------------------------------------------------------------


class Sandbox:
    """ZooKeeper + ``bookies`` bookie processes + a bound namespace, in ``directory``.

    ``bookies`` are indexed from 0. ``zk_port`` 0 picks a free port (or, in a
    directory holding a stopped sandbox, the port it used before).
    ``bookie_settings`` are BookieConfig overrides for every bookie.
    """

    def __init__(
        self,
        directory: str | os.PathLike[str],
        *,
        bookies: int = 3,
        zk_port: int = 0,
        host: str = "127.0.0.1",
        namespace: str = DEFAULT_NAMESPACE,
        ledgers_root: str = DEFAULT_LEDGERS_ROOT,
        bookie_settings: dict[str, Any] | None = None,
        proxies: int | None = None,
    ) -> None:
        if bookies < 1:
            raise SandboxError(f"a sandbox needs at least one bookie, not {bookies}")
        if proxies is not None and proxies < 0:
            raise SandboxError(f"a sandbox cannot have {proxies} write proxies")
        self._requested_proxies = proxies
        self.directory = Path(directory).absolute()
        self.host = host
        self.namespace_path = namespace
        self.ledgers_root = ledgers_root
        self.bookie_settings = dict(bookie_settings or {})
        self.num_bookies = bookies
        self.detached = False
        self._requested_zk_port = zk_port
        self.zookeeper = _Proc(
            "zookeeper",
            host,
            zk_port,
            self.directory / "zookeeper",
            str(self.directory / "zookeeper" / "zoo.cfg"),
        )
        self.bookies: list[_Proc] = [self._bookie_proc(i, 0) for i in range(bookies)]
        self.proxies: list[_Proc] = [self._proxy_proc(i, 0) for i in range(proxies or 0)]

    def _bookie_proc(self, index: int, port: int) -> _Proc:
        d = self.directory / f"bookie-{index}"
        return _Proc(f"bookie-{index}", self.host, port, d, str(d / "bookie.conf"))

    def _proxy_proc(self, index: int, port: int) -> _Proc:
        d = self.directory / f"proxy-{index}"
        return _Proc(f"proxy-{index}", self.host, port, d, str(d / "dlog.conf"))

    @property
    def metrics_enabled(self) -> bool:
        """Whether bookies and proxies serve Prometheus metrics, each on a
        free port of its own: BookKeeper's ``enableStatistics`` (default
        true) among the bookie settings."""
        from dlog.conf.bookie import BookieConfig

        return BookieConfig.from_mapping(self.bookie_settings).enable_statistics

    def _metrics_port(self, p: _Proc) -> int:
        """``p``'s metrics port: the one it had, unless taken meanwhile."""
        if not p.metrics_port or not port_free(self.host, p.metrics_port):
            p.metrics_port = free_port(self.host)
        return p.metrics_port

    # -- addresses -------------------------------------------------------------
    @property
    def state_path(self) -> Path:
        return self.directory / STATE_FILE

    @property
    def zk_connect_string(self) -> str:
        return self.zookeeper.address

    @property
    def metadata_service_uri(self) -> str:
        return f"zk+hierarchical://{self.zk_connect_string}{self.ledgers_root}"

    @property
    def namespace_uri(self) -> str:
        return f"distributedlog://{self.zk_connect_string}{self.namespace_path}"

    @property
    def bookie_ids(self) -> list[str]:
        return [b.address for b in self.bookies]

    @property
    def proxy_endpoints(self) -> list[str]:
        """``host:port`` of each write proxy (for ``dlog write --proxy``)."""
        return [p.address for p in self.proxies]

    # -- state file ----------------------------------------------------------------
    def to_dict(self) -> dict[str, Any]:
        zk = self.zookeeper
        return {
            "version": STATE_VERSION,
            "directory": str(self.directory),
            "host": self.host,
            "detached": self.detached,
            "namespace_uri": self.namespace_uri,
            "metadata_service_uri": self.metadata_service_uri,
            "namespace_path": self.namespace_path,
            "ledgers_root": self.ledgers_root,
            "zookeeper": {
                "address": zk.address,
                "port": zk.port,
                "pid": zk.pid,
                "dir": str(zk.directory),
                "conf": zk.marker,
                "log": str(zk.directory / "zookeeper.log"),
            },
            "bookie_settings": self.bookie_settings,
            "bookies": [
                {
                    "index": i,
                    "id": b.address,
                    "port": b.port,
                    "pid": b.pid,
                    "dir": str(b.directory),
                    "journal_dir": str(b.directory / "journal"),
                    "ledgers_dir": str(b.directory / "ledgers"),
                    "conf": b.marker,
                    "log": str(b.directory / "bookie.log"),
                    "metrics_port": b.metrics_port,
                    "metrics": b.metrics_url,
                }
                for i, b in enumerate(self.bookies)
            ],
            "proxies": [
                {
                    "index": i,
                    "endpoint": p.address,
                    "port": p.port,
                    "pid": p.pid,
                    "dir": str(p.directory),
                    "conf": p.marker,
                    "log": str(p.directory / "proxy.log"),
                    "metrics_port": p.metrics_port,
                    "metrics": p.metrics_url,
                }
                for i, p in enumerate(self.proxies)
            ],
        }

    def save(self) -> None:
        """Write ``sandbox.json`` atomically."""
        self.directory.mkdir(parents=True, exist_ok=True)
        tmp = self.state_path.with_name(f".{STATE_FILE}.{os.getpid()}.tmp")
        tmp.write_text(json.dumps(self.to_dict(), indent=2) + "\n")
        os.replace(tmp, self.state_path)

    @classmethod
    def load(cls, directory: str | os.PathLike[str]) -> Sandbox:
        """The sandbox described by ``directory/sandbox.json`` (processes
        known by pid). SandboxNotFoundError when there is none."""
        path = Path(directory).absolute() / STATE_FILE
        try:
            state = json.loads(path.read_text())
        except FileNotFoundError:
            raise SandboxNotFoundError(f"no sandbox in {path.parent} (no {STATE_FILE})") from None
        except (OSError, ValueError) as e:
            raise SandboxError(f"{path}: cannot read sandbox state: {e}") from None
        try:
            if state.get("version") != STATE_VERSION:
                raise SandboxError(
                    f"{path}: unsupported sandbox state version {state.get('version')!r}"
                )
            bookies = state["bookies"]
            proxies = state.get("proxies") or []
            sb = cls(
                path.parent,
                bookies=max(1, len(bookies)),
                zk_port=int(state["zookeeper"]["port"]),
                host=state["host"],
                namespace=state["namespace_path"],
                ledgers_root=state["ledgers_root"],
                bookie_settings=state.get("bookie_settings") or {},
                proxies=len(proxies),
            )
            sb.detached = bool(state.get("detached", True))
            sb.zookeeper.port = int(state["zookeeper"]["port"])
            sb.zookeeper.pid = _opt_int(state["zookeeper"].get("pid"))
            for b, info in zip(sb.bookies, bookies, strict=True):
                b.port = int(info["port"])
                b.pid = _opt_int(info.get("pid"))
                b.metrics_port = int(info.get("metrics_port") or 0)
            for p, info in zip(sb.proxies, proxies, strict=True):
                p.port = int(info["port"])
                p.pid = _opt_int(info.get("pid"))
                p.metrics_port = int(info.get("metrics_port") or 0)
        except (KeyError, TypeError, ValueError) as e:
            raise SandboxError(f"{path}: malformed sandbox state ({e!r})") from None
        return sb

    # -- status ----------------------------------------------------------------------
    def _procs(self) -> list[_Proc]:
        return [self.zookeeper, *self.bookies, *self.proxies]

    def is_running(self) -> bool:
        """Whether any of the sandbox's processes runs."""
        return any(p.alive() for p in self._procs())

    def status(self) -> list[ProcessStatus]:
        """ZooKeeper, then the bookies, then the proxies (each group indexed from 0)."""
        indexed: list[tuple[int | None, _Proc]] = [(None, self.zookeeper)]
        indexed += list(enumerate(self.bookies))
        indexed += list(enumerate(self.proxies))
        rows = []
        for index, p in indexed:
            alive = p.alive()
            rows.append(
                ProcessStatus(
                    name=p.name,
                    index=index,
                    address=p.address,
                    pid=p.pid if alive else None,
                    alive=alive,
                    listening=alive and p.port > 0 and _port_open(p.host, p.port),
                    directory=str(p.directory),
                    metrics=p.metrics_url,
                )
            )
        return rows

    # -- start ------------------------------------------------------------------------
    def _resume_ports(self) -> None:
        """Take the ports of a stopped sandbox left in the directory; refuse
        if one of its processes still runs."""
        try:
            previous = Sandbox.load(self.directory)
        except SandboxNotFoundError:
            return
        except SandboxError as e:
            raise SandboxError(f"{e}; remove {self.state_path} to start afresh") from None
        running = [p.name for p in previous._procs() if p.alive()]
        if running:
            raise SandboxRunningError(
                f"a sandbox is already running in {self.directory} ({', '.join(running)}); "
                f"stop it first with: dlog sandbox stop --dir {self.directory}"
            )
        old_zk = previous.zookeeper.port
        if self._requested_zk_port and self._requested_zk_port != old_zk:
            raise SandboxError(
                f"the sandbox in {self.directory} was created with ZooKeeper on port {old_zk} "
                f"(its namespace binding names that port); start it without --zk-port, or "
                f"use another directory"
            )
        self.zookeeper.port = old_zk
        for b, old in zip(self.bookies, previous.bookies, strict=False):
            b.port = old.port  # a bookie's id (and its cookie) is host:port
            b.metrics_port = old.metrics_port
        if self._requested_proxies is None:  # as many as it had
            self.proxies = [self._proxy_proc(i, 0) for i in range(len(previous.proxies))]
        for p, old in zip(self.proxies, previous.proxies, strict=False):
            p.port = old.port  # what clients were given
            p.metrics_port = old.metrics_port

    def start(self, *, detach: bool = False, timeout: float = 60.0) -> Self:
        """Start ZooKeeper, create the cluster layout, bind the namespace,
        start the bookies and wait until every bookie is registered.

        ``detach`` starts the processes in their own sessions so that they
        outlive this process and its terminal's signals (stop them with
        :meth:`stop`, possibly from another process after :meth:`load`).
        On failure everything started so far is stopped again."""
        if self.is_running():
            raise SandboxRunningError(f"the sandbox in {self.directory} is already started")
        self.directory.mkdir(parents=True, exist_ok=True)
        self._resume_ports()
        self.detached = detach
        for p in self._procs():
            if p.port and not port_free(self.host, p.port):
                raise SandboxError(
                    f"{p.name}: port {p.port} on {self.host} is in use"
                    + (
                        " (this sandbox used it before; free it or use another directory)"
                        if self.state_path.exists()
                        else ""
                    )
                )
        try:
            zk = ZooKeeperServer(self.zookeeper.directory, port=self.zookeeper.port, host=self.host)
            zk.start(timeout, detach=detach)
            self.zookeeper.port = zk.port
            self.zookeeper.pid = zk.pid
            self.zookeeper.process = zk.process
            self.save()
            asyncio.run(self._init_metadata())
            launched = [self._launch_bookie(b, detach=detach) for b in self.bookies]
            self.save()
            for b, bp in zip(self.bookies, launched, strict=True):
                wait_serving(b.host, b.port, timeout, b.process, bp.log_path)
            self._wait_registered(launched, timeout)
            for p in self.proxies:
                self._launch_proxy(p, detach=detach)
            self.save()
            for p in self.proxies:
                _wait_listening(p, timeout, p.directory / "proxy.log")
        except BaseException:
            _terminate(self.proxies, 10.0)
            _terminate(self.bookies, 10.0)
            _terminate([self.zookeeper], 10.0)
            with contextlib.suppress(OSError):
                self.save()
            raise
        self.save()
        return self

    def _launch_bookie(self, b: _Proc, *, detach: bool) -> BookieProcess:
        metrics: dict[str, Any] = {"enableStatistics": False}
        if self.metrics_enabled:
            metrics = {
                "enableStatistics": True,
                "prometheusStatsHttpAddress": self.host,
                "prometheusStatsHttpPort": self._metrics_port(b),
            }
        else:
            b.metrics_port = 0
        bp = BookieProcess(
            b.directory,
            self.metadata_service_uri,
            port=b.port,
            address=self.host,
            **{**self.bookie_settings, **metrics},
        )
        bp.start(detach=detach, wait=False)
        b.port = bp.port
        b.pid = bp.pid
        b.process = bp.process
        return bp

    def _launch_proxy(self, p: _Proc, *, detach: bool) -> None:
        """``dlog proxy`` on a fixed port (kept across restarts: clients were
        given it), logging to ``proxy.log`` in its directory."""
        p.directory.mkdir(parents=True, exist_ok=True)
        if not p.port:
            p.port = free_port(self.host)
        conf = Path(p.marker)
        if not conf.exists():
            conf.write_text(
                "# Write proxy settings (dlog.conf keys); `dlog sandbox` passes the\n"
                "# namespace URI and the port on the command line.\n"
            )
        stats: list[str] = []
        if self.metrics_enabled:
            stats = ["--stats-port", str(self._metrics_port(p))]
        else:
            p.metrics_port = 0
        with open(p.directory / "proxy.log", "ab") as out:
            process = subprocess.Popen(
                [
                    sys.executable,
                    "-m",
                    "dlog",
                    "proxy",
                    "--uri",
                    self.namespace_uri,
                    "--conf",
                    str(conf),
                    "--host",
                    p.host,
                    "--port",
                    str(p.port),
                    *stats,
                ],
                stdin=subprocess.DEVNULL,
                stdout=out,
                stderr=subprocess.STDOUT,
                start_new_session=detach,
            )
        p.pid = process.pid
        p.process = process

    async def _init_metadata(self) -> None:
        from dlog.bookie.registration import init_cluster
        from dlog.log_metadata import bind_namespace
        from dlog.zk import ZooKeeper

        zk = ZooKeeper(self.zk_connect_string)
        await zk.start()
        try:
            await init_cluster(zk, self.ledgers_root)
            binding = await bind_namespace(zk, self.namespace_path, self.metadata_service_uri)
        finally:
            await zk.stop()
        if binding.metadata_service_uri != self.metadata_service_uri:
            raise SandboxError(
                f"namespace {self.namespace_path} is bound to {binding.metadata_service_uri}, "
                f"not to this sandbox's {self.metadata_service_uri}"
            )

    def _wait_registered(self, launched: list[BookieProcess], timeout: float) -> None:
        asyncio.run(
            wait_registered(
                self.zk_connect_string,
                self.ledgers_root,
                launched,
                timeout,
            )
        )

    # -- stop and restart ---------------------------------------------------------
    def stop(self, timeout: float = 30.0) -> bool:
        """Stop the bookies (SIGTERM: they flush, checkpoint and unregister),
        then ZooKeeper. Data and ``sandbox.json`` stay; the pids in it are
        cleared. Returns whether anything was running."""
        was_running = self.is_running()
        # Proxies first: they flush what they accepted and release their streams.
        killed = _terminate(self.proxies, timeout)
        killed += _terminate(self.bookies, timeout)
        killed += _terminate([self.zookeeper], timeout)
        if self.state_path.exists() or was_running:
            self.save()
        if killed:
            raise SandboxError(
                f"{', '.join(killed)} did not stop within {timeout}s and were killed"
            )
        return was_running

    def restart_bookie(
        self, index: int, timeout: float = 60.0, *, detach: bool | None = None
    ) -> ProcessStatus:
        """Stop bookie ``index`` gracefully and start it again with the same
        port, directories and configuration (so the same bookie id); waits
        until it serves and is registered again. ``detach`` defaults to how
        the sandbox was started."""
        if not 0 <= index < len(self.bookies):
            raise SandboxError(
                f"no bookie {index}: this sandbox has bookies 0..{len(self.bookies) - 1}"
            )
        if not self.zookeeper.alive():
            raise SandboxError(
                f"ZooKeeper of the sandbox in {self.directory} is not running; "
                f"start the sandbox first"
            )
        b = self.bookies[index]
        killed = _terminate([b], timeout)
        if killed:
            raise SandboxError(f"bookie {index} did not stop within {timeout}s and was killed")
        return self.start_bookie(index, timeout, detach=detach)

    def start_bookie(
        self, index: int, timeout: float = 60.0, *, detach: bool | None = None
    ) -> ProcessStatus:
        """Start bookie ``index`` again (it was stopped or killed) with the
        same port and directories; waits until it serves and is registered."""
        b = self._stopped(self.bookies, "bookie", index)
        _wait_port_free(b)
        try:
            bp = self._launch_bookie(b, detach=self.detached if detach is None else detach)
            self.save()
            wait_serving(b.host, b.port, timeout, b.process, bp.log_path)
            self._wait_registered([bp], timeout)
        except BaseException:
            self.save()
            raise
        return self.status()[index + 1]

    def start_proxy(
        self, index: int, timeout: float = 60.0, *, detach: bool | None = None
    ) -> ProcessStatus:
        """Start write proxy ``index`` again on its port (clients were given
        it); waits until it listens."""
        p = self._stopped(self.proxies, "proxy", index)
        _wait_port_free(p)
        try:
            self._launch_proxy(p, detach=self.detached if detach is None else detach)
            self.save()
            _wait_listening(p, timeout, p.directory / "proxy.log")
        except BaseException:
            self.save()
            raise
        return self.status()[1 + len(self.bookies) + index]

    def kill(self, name: str) -> None:
        """SIGKILL the process called ``name`` (``zookeeper``, ``bookie-<i>``,
        ``proxy-<i>``): no flush, no unregistration, as a crash."""
        for p in self._procs():
            if p.name == name:
                p.signal(signal.SIGKILL)
                if not p.wait_gone(10.0):
                    raise SandboxError(f"{name} survived SIGKILL for 10 s")
                p.forget()
                self.save()
                return
        raise SandboxError(f"this sandbox has no process called {name!r}")

    def start_zookeeper(self, timeout: float = 60.0) -> None:
        """Start ZooKeeper again (it was stopped or killed) on its port and
        data directory: sessions that outlive the outage resume."""
        z = self.zookeeper
        if z.alive():
            raise SandboxRunningError(f"ZooKeeper of the sandbox in {self.directory} is running")
        _wait_port_free(z)
        zk = ZooKeeperServer(z.directory, port=z.port, host=self.host)
        zk.start(timeout, detach=self.detached)
        z.pid = zk.pid
        z.process = zk.process
        self.save()

    def _stopped(self, procs: list[_Proc], kind: str, index: int) -> _Proc:
        if not 0 <= index < len(procs):
            raise SandboxError(
                f"no {kind} {index}: this sandbox has "
                + (f"{kind}s 0..{len(procs) - 1}" if procs else f"no {kind}s")
            )
        if not self.zookeeper.alive():
            raise SandboxError(
                f"ZooKeeper of the sandbox in {self.directory} is not running; "
                f"start the sandbox first"
            )
        p = procs[index]
        if p.alive():
            raise SandboxRunningError(f"{p.name} of the sandbox in {self.directory} is running")
        return p

    # -- context manager -----------------------------------------------------------
    def __enter__(self) -> Self:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()


def _wait_port_free(p: _Proc, timeout: float = 5.0) -> None:
    """The old process closed its socket; give the kernel a moment."""
    deadline = time.monotonic() + timeout
    while not port_free(p.host, p.port) and time.monotonic() < deadline:
        time.sleep(0.1)


def _wait_listening(p: _Proc, timeout: float, log_path: Path) -> None:
    """Wait until ``p`` accepts connections on its port; its log's tail if it exits."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if not p.alive():
            tail = log_path.read_text(errors="replace")[-3000:] if log_path.exists() else ""
            raise SandboxError(f"{p.name} on port {p.port} exited:\n{tail}")
        if _port_open(p.host, p.port):
            return
        time.sleep(0.1)
    raise SandboxError(f"{p.name} did not listen on {p.address} within {timeout}s")


def _opt_int(value: Any) -> int | None:
    return None if value is None else int(value)
