"""Free TCP ports for the servers the sandbox and the tests start.

A port chosen now is bound later, by a child process, sometimes much later:
a bookie killed with SIGKILL is restarted on its old port (its id is
``address:port``) after its ZooKeeper session expires. Two things can take
the port in between, and each made a server fail with "address already in
use":

* the source port of an outgoing connection. Ports are chosen outside the
  kernel's ephemeral range, which is where those come from;
* another process choosing the same port: parallel test workers, or a
  sandbox beside a benchmark. Each chosen port is leased: a POSIX record
  lock on byte ``port`` of one per-user file, held until the choosing
  process exits (the kernel drops the locks then, however it exits), and a
  port leased by a live process is never chosen. Within a process a port
  is handed out once.

So a port stays reserved for as long as the process that chose it (a test
worker, ``dlog sandbox start``) lives, whether or not its server is up.
"""

from __future__ import annotations

import fcntl
import os
import random
import socket
import tempfile
import threading
from pathlib import Path

#: Where free ports are looked for: at and above this, outside the kernel's
#: ephemeral range.
PORT_FLOOR = 10_000
#: Linux's default ephemeral range, where /proc does not say.
_EPHEMERAL_DEFAULT = (32768, 60999)

_lock = threading.Lock()
#: Ports this process chose (and leased, where the lease file could be opened).
_chosen: set[int] = set()
#: The lease file's descriptor, opened once and never closed: closing any
#: descriptor of a file drops every POSIX lock the process holds on it.
_lease_fd: int | None = None
_lease_unavailable = False


def ephemeral_ports() -> tuple[int, int]:
    """The range the kernel takes outgoing connections' source ports from."""
    try:
        low, high = Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split()
        return int(low), int(high)
    except (OSError, ValueError):
        return _EPHEMERAL_DEFAULT


def lease_path() -> Path:
    """The per-user file whose byte ``port`` is locked by the port's owner."""
    return Path(tempfile.gettempdir()) / f"dlog-port-leases-{os.getuid()}"


def _lease_file() -> int | None:
    global _lease_fd, _lease_unavailable
    if _lease_fd is None and not _lease_unavailable:
        try:
            _lease_fd = os.open(lease_path(), os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)
        except OSError:
            # A read-only or foreign /tmp: choose without leases, as before.
            _lease_unavailable = True
    return _lease_fd


def _lease(port: int) -> bool:
    """Take the lease on ``port``; False if a live process holds it."""
    fd = _lease_file()
    if fd is None:
        return True
    try:
        fcntl.lockf(fd, fcntl.LOCK_EX | fcntl.LOCK_NB, 1, port)
    except OSError:
        return False
    return True


def port_free(host: str, port: int) -> bool:
    """Whether a server could bind ``host:port`` now (with SO_REUSEADDR, as
    asyncio's and Java's servers bind: a closed connection's TIME_WAIT does
    not hold the port)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            s.bind((host, port))
        except OSError:
            return False
    return True


def _nth(ranges: list[range], n: int) -> int:
    for r in ranges:
        if n < len(r):
            return r[n]
        n -= len(r)
    raise IndexError(n)


def free_port(host: str = "127.0.0.1") -> int:
    """A TCP port that is free now and reserved for this process: outside
    the ephemeral range, not chosen before by this process, not leased by
    another live one. Random, so that processes choosing at once rarely
    try the same port."""
    low, high = ephemeral_ports()
    ranges = [range(a, b + 1) for a, b in ((PORT_FLOOR, low - 1), (high + 1, 65535)) if a <= b]
    total = sum(len(r) for r in ranges)
    rng = random.SystemRandom()
    with _lock:
        for _ in range(500 if total else 0):
            # Uniform over all candidate ports, not over the two ranges: the
            # one above the ephemeral range is much the smaller.
            port = _nth(ranges, rng.randrange(total))
            if port in _chosen or not port_free(host, port) or not _lease(port):
                continue
            _chosen.add(port)
            return port
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind((host, 0))
        return int(s.getsockname()[1])
