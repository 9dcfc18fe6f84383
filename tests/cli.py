"""Running the ``dlog`` command as a user does (``python -m dlog ...``
subprocesses), for the CLI tests: one copy of the runner, the exit-code
checks and the ``--follow`` helpers."""

from __future__ import annotations

import os
import queue
import signal
import subprocess
import sys
import threading
from collections.abc import Callable


def cli_env(extra: dict[str, str] | None = None) -> dict[str, str]:
    """The test's environment without $DLOG_URI (each test passes --uri),
    wide enough that rich tables do not wrap."""
    env = {k: v for k, v in os.environ.items() if k != "DLOG_URI"}
    env["COLUMNS"] = "200"
    env.update(extra or {})
    return env


def dlog(
    *args: str,
    uri: str | None = None,
    input: str | None = None,
    env: dict[str, str] | None = None,
    timeout: float = 60,
) -> subprocess.CompletedProcess[str]:
    cmd = [sys.executable, "-m", "dlog", *args]
    if uri is not None:
        cmd += ["--uri", uri]
    return subprocess.run(
        cmd,
        input=input,
        stdin=None if input is not None else subprocess.DEVNULL,
        capture_output=True,
        text=True,
        encoding="utf-8",
        timeout=timeout,
        env=cli_env(env),
    )


def ok(r: subprocess.CompletedProcess[str]) -> str:
    assert r.returncode == 0, f"exit {r.returncode}\nstdout:\n{r.stdout}\nstderr:\n{r.stderr}"
    return r.stdout


def error_line(r: subprocess.CompletedProcess[str], code: int = 1) -> str:
    """A failure: the exit code, and one `error:` line on stderr, no traceback."""
    assert r.returncode == code, f"exit {r.returncode}\nstdout:\n{r.stdout}\nstderr:\n{r.stderr}"
    assert "Traceback" not in r.stderr, r.stderr
    lines = [line for line in r.stderr.splitlines() if line.strip()]
    assert len(lines) == 1 and lines[0].startswith("error: "), r.stderr
    return lines[0]


class Lines:
    """The stdout lines of a running process, read by a thread."""

    def __init__(self, proc: subprocess.Popen[str]) -> None:
        self.q: queue.Queue[str] = queue.Queue()
        assert proc.stdout is not None
        stdout = proc.stdout
        threading.Thread(target=lambda: [self.q.put(line) for line in stdout], daemon=True).start()

    def next(self, timeout: float = 30) -> str:
        return self.q.get(timeout=timeout)

    def first_new(self, write: Callable[[str], object], tries: int = 40) -> str | None:
        """Write ``tick-<i>`` with ``write`` until a line comes: the first
        record a tail that started after "now" prints (the tail may not be
        past its start when the first ticks land)."""
        for i in range(tries):
            write(f"tick-{i}")
            try:
                return self.next(timeout=0.5)
            except queue.Empty:
                continue
        return None


def tail_follow(uri: str, *args: str) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, "-m", "dlog", "tail", *args, "--follow", "--uri", uri],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        stdin=subprocess.DEVNULL,
        text=True,
        encoding="utf-8",
        env=cli_env(),
    )


def stop(proc: subprocess.Popen[str]) -> tuple[int, str]:
    """SIGTERM (as Ctrl-C would end it), then its exit code and stderr."""
    if proc.poll() is None:
        proc.send_signal(signal.SIGTERM)
    try:
        code = proc.wait(20)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()
        raise
    assert proc.stderr is not None
    return code, proc.stderr.read()


def running(pid: int) -> bool:
    """Alive and not a zombie (nothing may reap the orphaned processes of
    a detached sandbox)."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            stat = f.read()
    except FileNotFoundError:
        return False
    return stat.rsplit(")", 1)[1].split()[0] not in ("Z", "X")
