"""Start a real ZooKeeper server on loopback, for tests and ``dlog sandbox``.

It runs Debian's ``zookeeper`` package with the machine's Java, in
standalone mode, with its own data directory. Nothing is mocked: if Java or
ZooKeeper is missing, :meth:`ZooKeeperServer.start` fails with a message
saying how to install them.
"""

from __future__ import annotations

import os
import re
import shutil
import signal
import socket
import subprocess
import tempfile
import time
from pathlib import Path
from typing import Self

from dlog.sandbox.ports import free_port

DEFAULT_CLASSPATH = [
    "/usr/share/java/zookeeper.jar",
    "/usr/share/java/zookeeper-jute.jar",
    "/usr/share/java/slf4j-api.jar",
    "/usr/share/java/slf4j-simple.jar",
]
INSTALL_HINT = (
    "install them with: apt-get update && apt-get install -y zookeeper (Java 17 included)"
)


class ZooKeeperLaunchError(RuntimeError):
    """ZooKeeper could not be started."""


def four_letter_word(host: str, port: int, word: str, timeout: float = 2.0) -> str:
    """Send a ZooKeeper four-letter command (ruok, srvr, mntr...) and return the answer."""
    with socket.create_connection((host, port), timeout=timeout) as s:
        s.sendall(word.encode())
        chunks = []
        while True:
            data = s.recv(65536)
            if not data:
                break
            chunks.append(data)
    return b"".join(chunks).decode(errors="replace")


def find_java() -> str:
    java_home = os.environ.get("JAVA_HOME")
    if java_home and Path(java_home, "bin", "java").exists():
        return str(Path(java_home, "bin", "java"))
    java = shutil.which("java")
    if not java:
        raise ZooKeeperLaunchError(f"Java is not installed; {INSTALL_HINT}")
    return java


def find_classpath() -> str:
    override = os.environ.get("DLOG_ZOOKEEPER_CLASSPATH")
    if override:
        return override
    missing = [p for p in DEFAULT_CLASSPATH[:2] if not Path(p).exists()]
    if missing:
        raise ZooKeeperLaunchError(
            f"ZooKeeper is not installed ({', '.join(missing)} missing); {INSTALL_HINT}"
        )
    return ":".join(p for p in DEFAULT_CLASSPATH if Path(p).exists())


class ZooKeeperServer:
    """One standalone ZooKeeper server process."""

    def __init__(
        self,
        data_dir: str | os.PathLike[str] | None = None,
        *,
        port: int = 0,
        host: str = "127.0.0.1",
        tick_time_ms: int = 500,
        max_session_timeout_ms: int = 30000,
        heap_mb: int = 256,
    ) -> None:
        self._own_dir = data_dir is None
        self.data_dir = (
            Path(data_dir) if data_dir is not None else Path(tempfile.mkdtemp(prefix="dlog-zk-"))
        )
        self.host = host
        self.port = port
        self.tick_time_ms = tick_time_ms
        self.max_session_timeout_ms = max_session_timeout_ms
        self.heap_mb = heap_mb
        self.process: subprocess.Popen[bytes] | None = None
        self.pid: int | None = None

    @property
    def connect_string(self) -> str:
        return f"{self.host}:{self.port}"

    @property
    def log_path(self) -> Path:
        return self.data_dir / "zookeeper.log"

    def _write_config(self) -> Path:
        self.data_dir.mkdir(parents=True, exist_ok=True)
        (self.data_dir / "data").mkdir(exist_ok=True)
        cfg = self.data_dir / "zoo.cfg"
        cfg.write_text(
            "\n".join(
                [
                    f"tickTime={self.tick_time_ms}",
                    f"dataDir={self.data_dir / 'data'}",
                    f"clientPort={self.port}",
                    f"clientPortAddress={self.host}",
                    f"maxSessionTimeout={self.max_session_timeout_ms}",
                    "maxClientCnxns=0",
                    "admin.enableServer=false",
                    "4lw.commands.whitelist=*",
                    "autopurge.purgeInterval=1",
                    "autopurge.snapRetainCount=3",
                    "",
                ]
            )
        )
        return cfg

    def start(self, timeout: float = 60.0, *, detach: bool = False) -> Self:
        """Start and wait until ZooKeeper answers ``ruok``."""
        java = find_java()
        classpath = find_classpath()
        attempts = 3 if self.port == 0 else 1
        last_error: Exception | None = None
        for _ in range(attempts):
            chosen = self.port or free_port(self.host)
            self.port = chosen
            cfg = self._write_config()
            log = open(self.log_path, "ab")  # noqa: SIM115 - handed to the child
            cmd = [
                java,
                f"-Xmx{self.heap_mb}m",
                "-XX:+UseSerialGC",
                "-XX:TieredStopAtLevel=1",
                "-Dzookeeper.4lw.commands.whitelist=*",
                "-Dzookeeper.admin.enableServer=false",
                "-cp",
                classpath,
                "org.apache.zookeeper.server.ZooKeeperServerMain",
                str(cfg),
            ]
            self.process = subprocess.Popen(
                cmd,
                stdout=log,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                start_new_session=detach,
            )
            log.close()
            self.pid = self.process.pid
            try:
                self._wait_ready(timeout)
                return self
            except ZooKeeperLaunchError as e:
                last_error = e
                self.stop()
                if self._own_dir is False and attempts == 1:
                    break
                self.port = 0 if attempts > 1 else self.port
        raise ZooKeeperLaunchError(str(last_error))

    def _wait_ready(self, timeout: float) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.process is not None and self.process.poll() is not None:
                raise ZooKeeperLaunchError(
                    f"ZooKeeper exited with code {self.process.returncode}; log tail:\n{self.log_tail()}"
                )
            try:
                # ruok answers before the server accepts sessions; srvr
                # answers only once it serves.
                if four_letter_word(self.host, self.port, "ruok", timeout=1.0).startswith(
                    "imok"
                ) and "Zxid" in four_letter_word(self.host, self.port, "srvr", timeout=1.0):
                    return
            except OSError:
                pass
            time.sleep(0.1)
        raise ZooKeeperLaunchError(
            f"ZooKeeper did not answer on {self.connect_string} within {timeout}s; log tail:\n{self.log_tail()}"
        )

    def log_tail(self, lines: int = 20) -> str:
        try:
            return "\n".join(self.log_path.read_text(errors="replace").splitlines()[-lines:])
        except OSError:
            return "(no log)"

    def command(self, word: str) -> str:
        return four_letter_word(self.host, self.port, word)

    def zxid(self) -> int:
        """The server's last zxid, from the ``srvr`` four-letter command."""
        match = re.search(r"Zxid:\s*(0x[0-9a-fA-F]+)", self.command("srvr"))
        if not match:
            raise ZooKeeperLaunchError("srvr did not report a Zxid")
        return int(match.group(1), 16)

    def is_running(self) -> bool:
        if self.process is not None:
            return self.process.poll() is None
        if self.pid is None:
            return False
        return pid_alive(self.pid)

    def stop(self, timeout: float = 10.0) -> None:
        proc = self.process
        if proc is not None:
            if proc.poll() is None:
                proc.terminate()
                try:
                    proc.wait(timeout)
                except subprocess.TimeoutExpired:
                    proc.kill()
                    proc.wait()
            self.process = None
        elif self.pid is not None:
            stop_pid(self.pid, timeout)
        self.pid = None

    def cleanup(self) -> None:
        """Stop, and remove the data directory if this object created it."""
        self.stop()
        if self._own_dir:
            shutil.rmtree(self.data_dir, ignore_errors=True)

    def __enter__(self) -> Self:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.cleanup()


def pid_alive(pid: int) -> bool:
    """Whether ``pid`` runs; a zombie (exited, not yet reaped by a parent
    that is gone or does not reap) counts as dead."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return True
    return stat.rsplit(")", 1)[-1].split()[0] != "Z"


def stop_pid(pid: int, timeout: float = 10.0) -> None:
    """SIGTERM a process we do not own a handle to, then SIGKILL it."""
    try:
        os.kill(pid, signal.SIGTERM)
    except ProcessLookupError:
        return
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if not pid_alive(pid):
            try:
                os.waitpid(pid, os.WNOHANG)
            except ChildProcessError:
                pass
            return
        try:
            os.waitpid(pid, os.WNOHANG)
        except ChildProcessError:
            pass
        time.sleep(0.05)
    try:
        os.kill(pid, signal.SIGKILL)
    except ProcessLookupError:
        pass
