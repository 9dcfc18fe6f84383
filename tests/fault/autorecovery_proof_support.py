"""What the AutoRecovery proofs share: a ``dlog autorecovery`` process that
can be kill -9'd, and a check that every entry of a ledger is on every
bookie its metadata names, read from that very bookie."""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys
from pathlib import Path
from typing import Any

from google.protobuf import text_format

from dlog.errors import EOK, NoNodeError
from dlog.ledger.bookie_client import BookieClientPool
from dlog.ledger.client import BookKeeper
from dlog.ledger.digest import DigestManager
from dlog.ledger.quorum import write_set
from dlog.protocol.data_formats_pb2 import LockDataFormat
from dlog.sandbox.bookies import bookie_config
from dlog.sandbox.ports import free_port
from dlog.zk import ZooKeeper


class AutoRecoveryProcess:
    """``python -m dlog autorecovery --conf FILE``, as an operator runs it."""

    def __init__(self, base_dir: Path, ledgers_uri: str, name: str, **settings: Any) -> None:
        base_dir.mkdir(parents=True, exist_ok=True)
        # The candidate id names the process in the election and in its locks.
        port = free_port()
        conf = bookie_config(
            base_dir,
            port=port,
            metadata_service_uri=ledgers_uri,
            bookieId=f"127.0.0.1:{port}",
            **settings,
        )
        self.candidate_id = f"127.0.0.1:{port}"
        self.name = name
        self.conf_path = base_dir / "autorecovery.conf"
        self.conf_path.write_text(conf.dumps())
        self.log_path = base_dir / "autorecovery.log"
        self.process: subprocess.Popen[bytes] | None = None

    def start(self) -> AutoRecoveryProcess:
        log = open(self.log_path, "ab")  # noqa: SIM115 - handed to the child
        env = {**os.environ, "PYTHONUNBUFFERED": "1"}
        self.process = subprocess.Popen(
            [sys.executable, "-m", "dlog", "autorecovery", "--conf", str(self.conf_path)],
            stdout=log,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            env=env,
        )
        log.close()
        return self

    def kill(self) -> None:
        if self.process is not None and self.process.poll() is None:
            self.process.send_signal(signal.SIGKILL)
            self.process.wait()
        self.process = None

    def stop(self) -> None:
        if self.process is not None and self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
            try:
                self.process.wait(30)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()
        self.process = None

    def running(self) -> bool:
        return self.process is not None and self.process.poll() is None

    def log_tail(self, lines: int = 40) -> str:
        try:
            return "\n".join(self.log_path.read_text(errors="replace").splitlines()[-lines:])
        except FileNotFoundError:
            return "(no log)"


async def lock_owner(zk: ZooKeeper, ledgers_root: str, ledger_id: int) -> str | None:
    """Who holds the ledger's under-replication lock (upstream's ephemeral
    ``underreplication/locks/urL<id>``, a text LockDataFormat), or None."""
    path = f"{ledgers_root}/underreplication/locks/urL{ledger_id:010d}"
    try:
        data, _ = await zk.get(path)
    except NoNodeError:
        return None
    fmt = LockDataFormat()
    text_format.Parse(data.decode(), fmt)
    return fmt.bookieId or None


def payload(ledger_id: int, entry_id: int, size: int = 200) -> bytes:
    return (f"{ledger_id}:{entry_id}:".encode() * (size // 8 + 1))[:size]


async def check_every_replica(
    bk: BookKeeper, ledger_id: int, password: bytes, expected: list[bytes]
) -> int:
    """Read each entry from every bookie of its write set, as the metadata
    says now, and check its digest and payload; returns the reads done."""
    md = await bk.ledger_metadata(ledger_id)
    assert md.is_closed, f"ledger {ledger_id} is not closed"
    assert md.last_entry_id == len(expected) - 1, (md.last_entry_id, len(expected))
    digest = DigestManager(ledger_id, int(md.digest_type), password)
    pool = BookieClientPool()
    reads = 0
    try:
        starts = [start for start, _ in md.ensembles] + [md.last_entry_id + 1]
        for (start, ensemble), end in zip(md.ensembles, starts[1:], strict=True):
            for first in range(start, end, 200):
                batch = range(first, min(first + 200, end))
                wanted = [
                    (eid, ensemble[i])
                    for eid in batch
                    for i in write_set(eid, md.ensemble_size, md.write_quorum_size)
                ]
                conns = {b: await pool.get(b) for b in {b for _, b in wanted}}
                responses = await asyncio.gather(
                    *(conns[b].read_entry(ledger_id, eid, timeout=10) for eid, b in wanted)
                )
                for (eid, bookie), r in zip(wanted, responses, strict=True):
                    assert r.status == EOK, (
                        f"ledger {ledger_id} entry {eid} missing on {bookie} (status {r.status})"
                    )
                    data = bytes(digest.verify(r.readResponse.body, eid).payload)
                    assert data == expected[eid], f"ledger {ledger_id} entry {eid} on {bookie}"
                    reads += 1
    finally:
        await pool.close()
    return reads
