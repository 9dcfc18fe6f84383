"""Deliberately broken builds through the history checker.

A checker that never fails proves nothing. Each test runs a small real
workload (ZooKeeper, three bookies, dlog clients) recording a history in
the chaos format, reads the final state back through a fresh client and
checks it. With the product as it is, the checker is clean; with a safety
mechanism switched off by monkeypatching inside this test process only
(never in the product), it must name the broken invariant.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import pytest

from dlog import segment_reader, writer
from dlog.dlsn import DLSN, NonInclusiveLowerBound
from dlog.lock import DistributedLock
from dlog.namespace import Namespace
from dlog.record import LogRecord
from subscriptions.log_segment import LogSegmentSubscriptionsStore
from subscriptions.zk_store import ZKSubscriptionsStore
from tests.chaos.checker import Report, check, load_history
from tests.chaos.history import Recorder
from tests.crash import crash, expire_session

pytestmark = [pytest.mark.fault, pytest.mark.timeout(120)]

STREAM = "events"
SUB = "consumer"

OpenNamespace = Callable[..., Awaitable[Namespace]]


class Actor:
    """One proc of the history, doing real operations and recording them."""

    def __init__(self, directory: Path, proc: str) -> None:
        self.rec = Recorder(directory, proc)
        self.proc = proc
        self.n = 0

    async def write(self, w: Any, stream: str = STREAM) -> DLSN | None:
        self.n += 1
        rid = f"{self.proc}:{self.n}"
        op = self.rec.invoke("write", stream=stream, id=rid)
        try:
            dlsn = await w.write(LogRecord(w.last_txid + 1, rid.encode()))
        except Exception as e:
            self.rec.info(op, "write", e)  # a failed add may still be recovered
            return None
        self.rec.ok(op, "write", dlsn=dlsn_value(dlsn))
        return dlsn

    async def open(self, ns: Namespace, stream: str = STREAM) -> Any:
        op = self.rec.invoke("open", stream=stream)
        w = await (await ns.open_log(stream)).open_writer()
        self.rec.ok(op, "open")
        return w

    async def commit(self, store: Any, store_name: str, dlsn: DLSN) -> None:
        value = {"stream": STREAM, "subscriber": SUB, "store": store_name}
        op = self.rec.invoke("commit", dlsn=dlsn_value(dlsn), **value)
        try:
            await store.advance_commit_position(SUB, dlsn)
        except Exception as e:
            self.rec.info(op, "commit", e)
            return
        self.rec.ok(op, "commit")

    async def position(self, store: Any, store_name: str) -> None:
        value = {"stream": STREAM, "subscriber": SUB, "store": store_name}
        op = self.rec.invoke("position", **value)
        self.rec.ok(op, "position", dlsn=position_value(await store.get_last_commit_position(SUB)))


def dlsn_value(dlsn: DLSN) -> list[int]:
    """A DLSN as the history writes it: ``[segment, entry, slot]``."""
    return [int(x) for x in dlsn]


def position_value(dlsn: DLSN) -> list[int] | None:
    return None if dlsn <= NonInclusiveLowerBound else dlsn_value(dlsn)


async def read_all(ns: Namespace, stream: str = STREAM) -> list[list[Any]]:
    """Every record of the stream from the start, as the final state lists them."""
    reader = await (await ns.open_log(stream)).open_reader()
    out: list[list[Any]] = []
    try:
        while True:
            batch = await reader.read_bulk(1000, timeout=2)
            if not batch:
                return out
            out.extend([r.payload.decode(), dlsn_value(r.dlsn)] for r in batch)
    finally:
        await reader.close()


async def final_state(ns: Namespace, *, subscriptions: bool = False) -> dict[str, Any]:
    final: dict[str, Any] = {"streams": {STREAM: await read_all(ns)}, "subscriptions": {}}
    if subscriptions:
        store = (await ns.open_log(STREAM)).subscriptions
        final["subscriptions"][f"{STREAM}/{SUB}"] = position_value(
            await store.get_last_commit_position(SUB)
        )
    return final


def checked(history: Path, final: dict[str, Any]) -> Report:
    report = check(load_history(history), final)
    print(report.table())
    return report


def bypass_lock_for(monkeypatch: pytest.MonkeyPatch, ns: Namespace) -> None:
    """Writers of ``ns`` take the stream's lock without waiting: as if the
    old owner's session had expired on the server while the old owner, a
    zombie (a GC pause), has not heard yet. Fencing must then stop it."""
    real = DistributedLock.acquire

    async def acquire(self: DistributedLock, timeout: float) -> None:
        if self.zk is ns.zk:
            self.node = f"{self.path}/bypassed"
            return
        await real(self, timeout)

    monkeypatch.setattr(DistributedLock, "acquire", acquire)


async def recover_end_without_fencing(
    bk: Any, seg: Any, password: bytes
) -> segment_reader.RecoveredEnd:
    """The broken build: recovery reads where the old writer's ledger ends
    but does not fence it (open without recovery), so the old writer can
    go on acknowledging adds past the end recorded for its segment."""
    real_open = segment_reader.open_segment

    @contextlib.asynccontextmanager
    async def unfenced(bk: Any, ledger_id: int, password: bytes, *, fence: bool = False) -> Any:
        async with real_open(bk, ledger_id, password, fence=False) as handle:
            yield handle

    segment_reader.open_segment = unfenced
    try:
        return await segment_reader.recover_end(bk, seg, password)
    finally:
        segment_reader.open_segment = real_open


async def takeover(tmp_path: Path, open_namespace: OpenNamespace, *, expire: bool) -> Path:
    """Writer 0 writes, writer 1 takes the stream over, writer 0 keeps
    trying to write, writer 1 writes; returns the history directory."""
    history = tmp_path / "history"
    ns_old, ns_new = await open_namespace(), await open_namespace(lockTimeoutSeconds=30)
    old, new = Actor(history, "writer-0"), Actor(history, "writer-1")
    w_old = await old.open(ns_old)
    for _ in range(20):
        assert await old.write(w_old) is not None
    if expire:
        await expire_session(ns_old.zk)
    w_new = await new.open(ns_new)
    for _ in range(10):
        await old.write(w_old)
    for _ in range(10):
        assert await new.write(w_new) is not None
    await w_new.close()
    with contextlib.suppress(Exception):
        await w_old.close()
    return history


async def test_control_takeover_after_session_expiry(
    tmp_path: Path, open_namespace: OpenNamespace
) -> None:
    """The product as it is: the old writer's session expires, a new writer
    takes over; whatever the old one tries afterwards, the history is clean."""
    history = await takeover(tmp_path, open_namespace, expire=True)
    report = checked(history, await final_state(await open_namespace()))
    assert report.ok, report.table()
    assert report.invariants["fenced-absent"].checked >= 30
    assert report.ops["write"]["ok"] == 30


async def test_control_zombie_writer_is_fenced(
    tmp_path: Path, open_namespace: OpenNamespace, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The lock is bypassed (a zombie that never heard its session expired):
    fencing alone keeps the history clean. This is the mechanism the broken
    build below removes."""
    ns_final = await open_namespace()
    history = tmp_path / "history"
    ns_old, ns_new = await open_namespace(), await open_namespace()
    bypass_lock_for(monkeypatch, ns_new)
    old, new = Actor(history, "writer-0"), Actor(history, "writer-1")
    w_old = await old.open(ns_old)
    for _ in range(20):
        await old.write(w_old)
    w_new = await new.open(ns_new)
    zombie = [await old.write(w_old) for _ in range(5)]
    assert zombie == [None] * 5, "the zombie's writes were acknowledged"
    for _ in range(10):
        assert await new.write(w_new) is not None
    await w_new.close()
    report = checked(history, await final_state(ns_final))
    assert report.ok, report.table()
    assert report.invariants["fenced-absent"].checked == 35  # 25 old, 10 new


async def test_broken_build_skips_fencing_on_takeover(
    tmp_path: Path, open_namespace: OpenNamespace, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Recovery does not fence the old writer's ledger: the zombie's writes
    after the takeover are acknowledged, and lost when its segment is
    completed where the new writer saw it end."""
    ns_final = await open_namespace()
    history = tmp_path / "history"
    ns_old, ns_new = await open_namespace(), await open_namespace()
    bypass_lock_for(monkeypatch, ns_new)
    monkeypatch.setattr(writer, "recover_end", recover_end_without_fencing)
    old, new = Actor(history, "writer-0"), Actor(history, "writer-1")
    w_old = await old.open(ns_old)
    for _ in range(20):
        await old.write(w_old)
    w_new = await new.open(ns_new)
    zombie = [await old.write(w_old) for _ in range(5)]
    assert None not in zombie, "the broken build still fenced"
    for _ in range(10):
        assert await new.write(w_new) is not None
    await w_new.close()
    report = checked(history, await final_state(ns_final))
    assert "fenced-absent" in report.violated
    assert report.invariants["fenced-absent"].violation_count == 5
    assert set(report.violated) <= {"fenced-absent", "acked-present"}, report.violated


# ------------------------------------------------------------- subscriptions


async def commits_then_crash(
    tmp_path: Path,
    open_namespace: OpenNamespace,
    store_name: str,
    *,
    die: Callable[[Namespace], Awaitable[None]] = crash,
) -> tuple[Path, dict[str, Any]]:
    """A consumer commits 1..50 (record DLSNs of a real stream), its process
    dies at once; a fresh client reads the position back."""
    history = tmp_path / "history"
    settings = STORES[store_name]
    ns_final = await open_namespace(**settings)
    ns = await open_namespace(**settings)
    w_actor, consumer = Actor(history, "writer-0"), Actor(history, "consumer-0")
    w = await w_actor.open(ns)
    dlsns = [await w_actor.write(w) for _ in range(50)]
    await w.close()
    store = (await ns.open_log(STREAM)).subscriptions
    await store.acquire(SUB)
    for dlsn in dlsns:
        assert dlsn is not None
        await consumer.commit(store, store_name, dlsn)
    await die(ns)  # kill -9, right after the last commit was acknowledged
    final = await final_state(ns_final, subscriptions=True)
    observer = Actor(history, "observer-0")
    await observer.position((await ns_final.open_log(STREAM)).subscriptions, store_name)
    return history, final


STORES: dict[str, dict[str, object]] = {
    "zk": {},
    "log-segment": {"logSegmentBasedSubscriptionsStoreEnabled": True},
}


@pytest.mark.parametrize("store_name", list(STORES))
async def test_control_commits_survive_a_crash(
    tmp_path: Path, open_namespace: OpenNamespace, store_name: str
) -> None:
    history, final = await commits_then_crash(tmp_path, open_namespace, store_name)
    report = checked(history, final)
    assert report.ok, report.table()
    assert report.invariants["commit-durable"].checked == 1
    assert final["subscriptions"][f"{STREAM}/{SUB}"] == [1, 49, 0]


@pytest.mark.parametrize("store_name", list(STORES))
async def test_broken_build_acks_commits_before_they_are_durable(
    tmp_path: Path,
    open_namespace: OpenNamespace,
    monkeypatch: pytest.MonkeyPatch,
    store_name: str,
) -> None:
    """advance_commit_position returns before the znode write / append is
    durable (the write goes to a background task); the crash cancels what
    had not landed."""
    pending: list[asyncio.Future[Any]] = []
    cls: Any = ZKSubscriptionsStore if store_name == "zk" else LogSegmentSubscriptionsStore
    real = cls.advance_commit_position

    async def acked_early(self: Any, subscriber_id: str, dlsn: DLSN) -> None:
        pending.append(asyncio.ensure_future(real(self, subscriber_id, dlsn)))

    monkeypatch.setattr(cls, "advance_commit_position", acked_early)

    async def crash_dropping_pending(ns: Namespace) -> None:
        for fut in pending:
            fut.cancel()  # the process is gone: nothing not yet durable lands
        await crash(ns)
        await asyncio.gather(*pending, return_exceptions=True)

    history, final = await commits_then_crash(
        tmp_path, open_namespace, store_name, die=crash_dropping_pending
    )
    report = checked(history, final)
    assert "commit-durable" in report.violated, report.table()
    assert "position-monotone" in report.violated, report.table()
    assert set(report.violated) == {"commit-durable", "position-monotone"}
