"""``dlog proxy`` as a user runs it: a ``python -m dlog proxy`` subprocess,
started and killed by the interop and failover tests."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import threading
import time

from tests.cli import cli_env

_READY = re.compile(r"proxy serving (\S+) as (\S+)(?: grpc=(\d+))?")


class ProxyProcess:
    """A ``dlog proxy`` process; ``endpoint`` is host:port, ``address`` its
    DLSocketAddress, ``grpc_port`` its control plane's port (if any)."""

    def __init__(self, uri: str, *settings: str, grpc: bool = False) -> None:
        cmd = [sys.executable, "-m", "dlog", "proxy", "--uri", uri, "--port", "0"]
        for s in settings:
            cmd += ["--set", s]
        if grpc:
            cmd += ["--grpc-port", "0"]
        self.proc = subprocess.Popen(
            cmd,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            env=cli_env(),
        )
        self.stderr: list[str] = []
        threading.Thread(target=self._drain_stderr, daemon=True).start()
        line = self._ready_line(timeout=60)
        match = _READY.search(line)
        assert match, f"unexpected first line {line!r}; stderr:\n{''.join(self.stderr)}"
        self.endpoint, self.address = match.group(1), match.group(2)
        self.grpc_port = int(match.group(3)) if match.group(3) else None

    def _drain_stderr(self) -> None:
        assert self.proc.stderr is not None
        for line in self.proc.stderr:
            self.stderr.append(line)

    def _ready_line(self, timeout: float) -> str:
        out: list[str] = []

        def read() -> None:
            assert self.proc.stdout is not None
            out.append(self.proc.stdout.readline())

        t = threading.Thread(target=read, daemon=True)
        t.start()
        t.join(timeout)
        if not out or not out[0]:
            self.kill()
            raise AssertionError(f"dlog proxy did not start; stderr:\n{''.join(self.stderr)}")
        return out[0]

    @property
    def port(self) -> int:
        return int(self.endpoint.rpartition(":")[2])

    def kill(self) -> None:
        """kill -9."""
        if self.proc.poll() is None:
            os.kill(self.proc.pid, signal.SIGKILL)
        self.proc.wait(10)

    def stop(self, timeout: float = 30) -> int:
        """SIGTERM, as a service manager stops it; its exit code."""
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
        deadline = time.monotonic() + timeout
        while self.proc.poll() is None and time.monotonic() < deadline:
            time.sleep(0.05)
        if self.proc.poll() is None:
            self.kill()
        return self.proc.returncode
