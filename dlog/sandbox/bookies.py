"""Start real bookie processes on loopback, for tests and ``dlog sandbox``.

Each bookie gets its own journal and ledger directories under a base
directory and a configuration file written there, and runs as
``python -m dlog bookie --conf <file>``: a real server with real files that
tests can SIGKILL and restart.
"""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterable
from pathlib import Path
from typing import Any, Self

from dlog.conf.bookie import BookieConfig
from dlog.sandbox.ports import free_port
from dlog.sandbox.zookeeper import pid_alive, stop_pid
from dlog.uri import parse_metadata_service_uri


class BookieLaunchError(RuntimeError):
    """A bookie process did not come up."""


def bookie_config(
    base_dir: str | os.PathLike[str],
    *,
    port: int,
    metadata_service_uri: str,
    address: str = "127.0.0.1",
    **overrides: Any,
) -> BookieConfig:
    """A BookieConfig with its own directories under ``base_dir``, tuned for
    a shared test machine (small caches, no metrics endpoint by default) and
    for latency when the journal queue is quiet (journalFlushWhenQueueEmpty,
    which BookKeeper leaves off)."""
    base = Path(base_dir)
    values: dict[str, Any] = {
        "bookiePort": port,
        "advertisedAddress": address,
        "metadataServiceUri": metadata_service_uri,
        "journalDirectories": str(base / "journal"),
        "ledgerDirectories": str(base / "ledgers"),
        "enableStatistics": False,
        "zkTimeout": 4000,
        "dbStorage_writeCacheMaxSizeMb": 64,
        "dbStorage_readAheadCacheMaxSizeMb": 32,
        "journalPreAllocSizeMB": 4,
        "numReadWorkerThreads": 2,
        # Sync the journal as soon as no request is waiting instead of after
        # journalMaxGroupWaitMSec (2 ms): a consumer committing after every
        # record waits for one lone add. Group commit is kept under load (the
        # journal's writer batches every group queued during an fsync).
        # Measured on a shared 2-core VM, false -> true: bench/bookie_add.py
        # 1000 in flight 27-61k adds/s either way, 340-346 -> 271-322 adds
        # per fsync; 64 in flight 13.5-14.2k -> 22.6-29.6k adds/s, 64 adds per
        # fsync both; a lone add (1000/s open loop) p50 1.7 -> 0.41 ms.
        # bench/subscriptions_store.py sequential commit p50 3.0-3.5 -> 0.77-0.92 ms
        # (ZooKeeper store 0.78-0.90), 1 subscription 16-19k -> 53-55k
        # commits/s. The price: between quiet and saturated the disk does
        # many more, smaller fsyncs (10k adds/s: ~480 -> ~7,000-8,000 a second).
        "journalFlushWhenQueueEmpty": True,
    }
    values.update(overrides)
    return BookieConfig.from_mapping(values)


def wait_serving(
    host: str,
    port: int,
    timeout: float,
    proc: subprocess.Popen[bytes] | None = None,
    log_path: Path | None = None,
) -> None:
    """Wait until a bookie answers GET_BOOKIE_INFO on host:port."""
    from dlog.ledger.bookie_client import BookieClient

    async def probe() -> bool:
        client = BookieClient(f"{host}:{port}", connect_timeout=1.0)
        try:
            await client.connect()
            resp = await client.bookie_info(timeout=2.0)
            return resp.status == 0
        except Exception:
            return False
        finally:
            await client.close()

    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc is not None and proc.poll() is not None:
            tail = _tail(log_path)
            raise BookieLaunchError(
                f"bookie on port {port} exited with code {proc.returncode}:\n{tail}"
            )
        if asyncio.run(probe()):
            return
        time.sleep(0.1)
    raise BookieLaunchError(
        f"bookie on port {port} did not serve within {timeout}s:\n{_tail(log_path)}"
    )


async def wait_registered(
    hosts: str, ledgers_root: str, bookies: Iterable[BookieProcess], timeout: float
) -> None:
    """Wait until each of ``bookies`` is registered in ZooKeeper, writable
    or read-only, by a node created since its process started; fail at once,
    with its log, if one of the processes exits first.

    A bookie killed with SIGKILL leaves its registration behind until its
    ZooKeeper session expires, and the restarted process registers only
    after that. A node that merely exists may be the dead one's; its
    creation time tells them apart (ZooKeeper and the sandbox share a clock).
    A process that dies after its port answered (another server holding the
    same port answers for it) would otherwise be waited for in vain.
    """
    from dlog.zk import ZooKeeper

    zk = ZooKeeper(hosts)
    await zk.start()
    try:
        deadline = time.monotonic() + timeout
        waiting = {b.bookie_id: b for b in bookies}
        while True:
            for bookie_id, b in list(waiting.items()):
                for path in (
                    f"{ledgers_root}/available/{bookie_id}",
                    f"{ledgers_root}/available/readonly/{bookie_id}",
                ):
                    stat = await zk.exists(path)
                    if stat is not None and stat.created >= b.started_at:
                        del waiting[bookie_id]
                        break
                else:
                    if not b.is_running():
                        code = b.process.returncode if b.process is not None else None
                        raise BookieLaunchError(
                            f"bookie {bookie_id} exited"
                            + (f" with code {code}" if code is not None else "")
                            + f" before it registered in ZooKeeper:\n{b.log_tail()}"
                        )
            if not waiting:
                return
            if time.monotonic() > deadline:
                logs = "".join(
                    f"\n--- {bookie_id}, still running, log tail:\n{waiting[bookie_id].log_tail(15)}"
                    for bookie_id in sorted(waiting)
                )
                raise BookieLaunchError(
                    f"bookies {', '.join(sorted(waiting))} did not register in ZooKeeper "
                    f"within {timeout}s{logs}"
                )
            await asyncio.sleep(0.1)
    finally:
        await zk.stop()


def _tail(path: Path | None, lines: int = 30) -> str:
    if path is None:
        return ""
    try:
        return "\n".join(path.read_text(errors="replace").splitlines()[-lines:])
    except OSError:
        return "(no log)"


class BookieProcess:
    """One bookie server process."""

    def __init__(
        self,
        base_dir: str | os.PathLike[str],
        metadata_service_uri: str,
        *,
        port: int = 0,
        address: str = "127.0.0.1",
        env: dict[str, str] | None = None,
        **overrides: Any,
    ) -> None:
        self.env = dict(env or {})
        self.base_dir = Path(base_dir)
        self.base_dir.mkdir(parents=True, exist_ok=True)
        self.port = port or free_port(address)
        self.address = address
        self.metadata_service_uri = metadata_service_uri
        self.overrides = overrides
        self.process: subprocess.Popen[bytes] | None = None
        self.pid: int | None = None
        #: Wall-clock time the current process was started.
        self.started_at = 0.0
        self.conf = bookie_config(
            self.base_dir,
            port=self.port,
            metadata_service_uri=metadata_service_uri,
            address=address,
            **overrides,
        )
        self.conf_path = self.base_dir / "bookie.conf"
        self.conf_path.write_text(self.conf.dumps())

    @property
    def bookie_id(self) -> str:
        return f"{self.address}:{self.port}"

    @property
    def log_path(self) -> Path:
        return self.base_dir / "bookie.log"

    def start(self, timeout: float = 60.0, *, detach: bool = False, wait: bool = True) -> Self:
        log = open(self.log_path, "ab")  # noqa: SIM115 - handed to the child
        env = dict(os.environ)
        env.setdefault("PYTHONUNBUFFERED", "1")
        env.update(self.env)
        # A millisecond back: ZooKeeper stamps nodes in whole milliseconds.
        self.started_at = time.time() - 0.001
        self.process = subprocess.Popen(
            [sys.executable, "-m", "dlog", "bookie", "--conf", str(self.conf_path)],
            stdout=log,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            env=env,
            start_new_session=detach,
        )
        log.close()
        self.pid = self.process.pid
        if wait:
            wait_serving(self.address, self.port, timeout, self.process, self.log_path)
        return self

    def kill(self) -> None:
        """SIGKILL: no flush, no checkpoint, no unregistration."""
        if self.process is not None and self.process.poll() is None:
            self.process.send_signal(signal.SIGKILL)
            self.process.wait()
        elif self.process is None and self.pid is not None:
            try:
                os.kill(self.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        self.process = None
        self.pid = None

    def stop(self, timeout: float = 30.0) -> int | None:
        """SIGTERM and wait for the graceful shutdown."""
        if self.process is not None:
            if self.process.poll() is None:
                self.process.send_signal(signal.SIGTERM)
                try:
                    self.process.wait(timeout)
                except subprocess.TimeoutExpired:
                    self.process.kill()
                    self.process.wait()
            code = self.process.returncode
            self.process = None
            self.pid = None
            return code
        if self.pid is not None:
            stop_pid(self.pid, timeout)
            self.pid = None
        return None

    def restart(self, timeout: float = 60.0) -> Self:
        """Stop (if running) and start again; returns once the bookie serves
        and is registered, so clients can choose it again. After a SIGKILL
        that takes until the dead process's ZooKeeper session expires."""
        self.stop()
        self.start(timeout)
        self.wait_registered(timeout)
        return self

    def wait_registered(self, timeout: float = 60.0) -> None:
        """Wait until this process (not a killed predecessor) is registered."""
        uri = parse_metadata_service_uri(self.metadata_service_uri)
        asyncio.run(wait_registered(uri.hosts, uri.ledgers_root, [self], timeout))

    def is_running(self) -> bool:
        if self.process is not None:
            return self.process.poll() is None
        return self.pid is not None and pid_alive(self.pid)

    def log_tail(self, lines: int = 30) -> str:
        return _tail(self.log_path, lines)


class BookieCluster:
    """N bookie processes sharing one metadata service."""

    def __init__(
        self,
        base_dir: str | os.PathLike[str],
        metadata_service_uri: str,
        count: int,
        **overrides: Any,
    ) -> None:
        self.base_dir = Path(base_dir)
        self.metadata_service_uri = metadata_service_uri
        self.bookies = [
            BookieProcess(self.base_dir / f"bookie-{i}", metadata_service_uri, **overrides)
            for i in range(count)
        ]

    def start(self, timeout: float = 60.0) -> Self:
        """Start every bookie; returns once each serves and is registered
        (a bookie serves before it registers: a client started between the
        two found too few writable bookies for its first ledger)."""
        for b in self.bookies:
            b.start(timeout, wait=False)
        for b in self.bookies:
            wait_serving(b.address, b.port, timeout, b.process, b.log_path)
        uri = parse_metadata_service_uri(self.metadata_service_uri)
        asyncio.run(wait_registered(uri.hosts, uri.ledgers_root, self.bookies, timeout))
        return self

    def stop(self) -> None:
        for b in self.bookies:
            if b.process is not None and b.process.poll() is None:
                b.process.send_signal(signal.SIGTERM)
        for b in self.bookies:
            b.stop()

    def __getitem__(self, i: int) -> BookieProcess:
        return self.bookies[i]

    def __len__(self) -> int:
        return len(self.bookies)

    def __enter__(self) -> Self:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()
