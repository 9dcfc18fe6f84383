"""The auditor against a real ZooKeeper and real bookies: lost bookies
after lostBookieRecoveryDelay, the delay changed at run time, the bookie
and entries checks, replication disabled, the orphan audit interval."""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator
from typing import Any

import pytest

from dlog.autorecovery.auditor import Auditor
from dlog.conf.bookie import BookieConfig
from dlog.ledger.client import BookKeeper
from dlog.ledger.metadata import LedgerCreateContext
from dlog.ledger.underreplication import UnderreplicationManager
from tests.waiting import eventually

pytestmark = pytest.mark.asyncio

QUIET = {
    "auditorPeriodicBookieCheckInterval": 0,  # once, at start
    "auditorPeriodicCheckInterval": 0,
    "auditorPeriodicOrphanedLedgerCheckInterval": 0,
}


@pytest.fixture
async def env(make_bookie, ledgers_uri) -> AsyncIterator[dict[str, Any]]:  # type: ignore[no-untyped-def]
    bookies = {}
    for i in range(4):
        b = await make_bookie(f"b{i}")
        bookies[b.bookie_id] = (f"b{i}", b)
    bk = BookKeeper(ledgers_uri)
    await bk.start()
    await bk.watcher.wait_for(4, 10)
    urm = UnderreplicationManager(bk.zk, bk.uri.ledgers_root, owner="test")
    await urm.initialize()
    auditors: list[Auditor] = []

    async def auditor(**settings: object) -> Auditor:
        conf = BookieConfig.load(None, {"metadataServiceUri": ledgers_uri, **QUIET, **settings})
        a = Auditor(bk, urm, conf)
        await a.start()
        auditors.append(a)
        # the start-up bookie check is done (it would see a bookie stopped meanwhile at once)
        await eventually(lambda: a.metrics.check_duration["bookie"].count >= 1)
        return a

    yield {"bk": bk, "urm": urm, "bookies": bookies, "auditor": auditor, "make": make_bookie}
    for a in auditors:
        await a.stop()
    urm.close()
    await bk.close()


async def write_ledger(bk: BookKeeper, n: int = 10, **kw: Any) -> int:
    wh = await bk.create_ledger(**{"ensemble_size": 3, "write_quorum": 2, "ack_quorum": 2, **kw})
    for i in range(n):
        await wh.append(b"entry-%d" % i)
    await wh.close()
    return wh.ledger_id


async def marked(urm: UnderreplicationManager) -> dict[int, tuple[str, ...]]:
    return {lid: tuple(sorted(u.replicas)) for lid, u in await urm.list()}


async def stop_bookie(env: dict[str, Any], bookie_id: str) -> None:
    await env["bookies"][bookie_id][1].stop()
    await eventually(lambda: bookie_id not in env["bk"].watcher.writable, timeout=10)


async def restart_bookie(env: dict[str, Any], bookie_id: str) -> None:
    name, old = env["bookies"][bookie_id]
    port = int(bookie_id.rsplit(":", 1)[1])
    new = await env["make"](name, port)
    assert new.bookie_id == bookie_id
    env["bookies"][bookie_id] = (name, new)


async def test_a_lost_bookie_is_audited_after_the_delay(env: dict[str, Any]) -> None:
    bk, urm = env["bk"], env["urm"]
    ledger = await write_ledger(bk)
    md = await bk.ledger_metadata(ledger)
    victim = md.ensembles[0][1][0]
    others = await write_ledger(bk, ensemble_size=3)
    md_others = await bk.ledger_metadata(others)
    auditor = await env["auditor"](lostBookieRecoveryDelay=3)
    assert auditor.lost_bookie_recovery_delay == 3
    assert await urm.get_lost_bookie_recovery_delay() == 3
    t0 = time.monotonic()
    await stop_bookie(env, victim)
    await asyncio.sleep(1.5)
    assert await marked(urm) == {}, "marked before lostBookieRecoveryDelay"
    await eventually(lambda: _is_marked(urm, ledger), timeout=10)
    assert time.monotonic() - t0 >= 2.5
    got = await marked(urm)
    assert got[ledger] == (victim,)
    # every ledger with a fragment on the victim, and no other
    expected = {ledger} | ({others} if victim in md_others.bookies() else set())
    assert set(got) == expected
    assert auditor.metrics.ledgers_marked.get(("bookie",)) == len(expected)
    assert auditor.metrics.lost_bookies.get() == 1


async def _is_marked(urm: UnderreplicationManager, ledger: int) -> bool:
    return await urm.get(ledger) is not None


async def test_a_bookie_back_in_time_is_not_audited(env: dict[str, Any]) -> None:
    bk, urm = env["bk"], env["urm"]
    ledger = await write_ledger(bk)
    victim = (await bk.ledger_metadata(ledger)).ensembles[0][1][0]
    auditor = await env["auditor"](lostBookieRecoveryDelay=4)
    await stop_bookie(env, victim)
    await eventually(lambda: auditor.audit_pending, timeout=5)
    await restart_bookie(env, victim)
    await eventually(lambda: not auditor.audit_pending, timeout=5)
    await asyncio.sleep(5)
    assert await marked(urm) == {}
    assert auditor.metrics.audits_cancelled.get() == 1


async def test_the_delay_changed_at_run_time(env: dict[str, Any]) -> None:
    bk, urm = env["bk"], env["urm"]
    ledger = await write_ledger(bk)
    victim = (await bk.ledger_metadata(ledger)).ensembles[0][1][1]
    auditor = await env["auditor"](lostBookieRecoveryDelay=600)
    await stop_bookie(env, victim)
    await eventually(lambda: auditor.audit_pending, timeout=5)
    # shortened: the pending audit is scheduled again with the new delay
    await urm.set_lost_bookie_recovery_delay(2)
    await asyncio.sleep(0.8)
    assert await marked(urm) == {}
    await eventually(lambda: _is_marked(urm, ledger), timeout=6)
    assert auditor.lost_bookie_recovery_delay == 2


async def test_a_znode_value_wins_over_the_configuration(env: dict[str, Any]) -> None:
    urm = env["urm"]
    await urm.initialize_lost_bookie_recovery_delay(7)
    auditor = await env["auditor"](lostBookieRecoveryDelay=1)
    assert auditor.lost_bookie_recovery_delay == 7


async def test_the_bookie_check_at_start_marks_ledgers_on_missing_bookies(
    env: dict[str, Any],
) -> None:
    bk, urm = env["bk"], env["urm"]
    ledger = await write_ledger(bk)
    victim = (await bk.ledger_metadata(ledger)).ensembles[0][1][2]
    await stop_bookie(env, victim)
    # the start-up bookie check does not wait for lostBookieRecoveryDelay (upstream)
    await env["auditor"](lostBookieRecoveryDelay=600)
    await eventually(lambda: _is_marked(urm, ledger), timeout=10)
    assert (await marked(urm))[ledger] == (victim,)


async def test_the_lost_bookie_audit_waits_while_replication_is_disabled(
    env: dict[str, Any],
) -> None:
    bk, urm = env["bk"], env["urm"]
    ledger = await write_ledger(bk)
    victim = (await bk.ledger_metadata(ledger)).ensembles[0][1][0]
    await env["auditor"](lostBookieRecoveryDelay=0)
    await asyncio.sleep(0.5)  # start-up check done
    await urm.disable_replication()
    await stop_bookie(env, victim)
    await asyncio.sleep(2)
    assert await marked(urm) == {}
    await urm.enable_replication()
    await eventually(lambda: _is_marked(urm, ledger), timeout=10)


async def test_the_entries_check_finds_a_bookie_without_its_entries(
    env: dict[str, Any],
) -> None:
    bk, urm = env["bk"], env["urm"]
    healthy = await write_ledger(bk, 20, ensemble_size=3, write_quorum=2)
    # E2/W2 on two bookies, then a third put into the ensemble by a
    # metadata compare-and-set, nothing copied: it lacks every entry
    broken = await write_ledger(bk, 10, ensemble_size=2, write_quorum=2, ack_quorum=2)
    md, version = await bk.metadata_store.read(broken)
    spare = sorted(set(env["bookies"]) - md.bookies())[0]
    kept = md.ensembles[0][1][0]
    await bk.metadata_store.write(md.replace(ensembles=((0, (kept, spare)),)), version)
    # an open ledger: its last ensemble is never judged, even with a bookie that has nothing
    wh = await bk.create_ledger(ensemble_size=2, write_quorum=2, ack_quorum=2)
    for i in range(5):
        await wh.append(b"x%d" % i)
    omd, over = await bk.metadata_store.read(wh.ledger_id)
    ospare = sorted(set(env["bookies"]) - omd.bookies())[0]
    await bk.metadata_store.write(
        omd.replace(ensembles=((0, (omd.ensembles[0][1][0], ospare)),)), over
    )

    auditor = await env["auditor"]()
    assert await urm.get_check_all_ledgers_ctime() == -1
    before = int(time.time() * 1000)
    assert await auditor.check_all_ledgers() == 1
    assert await marked(urm) == {broken: (spare,)}
    assert healthy not in await marked(urm)
    assert await urm.get_check_all_ledgers_ctime() >= before
    assert auditor.metrics.ledgers_marked.get(("entries",)) == 1


async def test_the_periodic_entries_check_runs(env: dict[str, Any]) -> None:
    bk, urm = env["bk"], env["urm"]
    broken = await write_ledger(bk, 6, ensemble_size=2, write_quorum=2, ack_quorum=2)
    md, version = await bk.metadata_store.read(broken)
    spare = sorted(set(env["bookies"]) - md.bookies())[0]
    await bk.metadata_store.write(
        md.replace(ensembles=((0, (spare, md.ensembles[0][1][1])),)), version
    )
    await env["auditor"](auditorPeriodicCheckInterval=1)
    await eventually(lambda: _is_marked(urm, broken), timeout=10)


async def test_the_orphan_audit_follows_its_interval_znode(env: dict[str, Any]) -> None:
    from dlog.ledger.orphans import list_orphaned

    bk, urm = env["bk"], env["urm"]
    wh = await bk.create_ledger(create_context=LedgerCreateContext(child_of_ledger=987654321))
    await wh.close()
    auditor = await env["auditor"](auditorPeriodicOrphanedLedgerCheckInterval=600)
    assert await urm.get_orphan_check_interval() == 600
    await asyncio.sleep(1)
    assert await list_orphaned(bk.zk, bk.uri.ledgers_root) == []
    await urm.set_orphan_check_interval(1)  # runs now: more than 1 s since the last
    await eventually(lambda: _has_orphan(bk, wh.ledger_id), timeout=10)
    assert auditor.metrics.check_duration["orphan"].count >= 1


async def _has_orphan(bk: BookKeeper, ledger: int) -> bool:
    from dlog.ledger.orphans import list_orphaned

    return any(o.ledger_id == ledger for o in await list_orphaned(bk.zk, bk.uri.ledgers_root))


async def test_the_orphan_audit_waits_out_orphaned_ledger_grace_period(
    env: dict[str, Any],
) -> None:
    """A ledger closed with expectDeleteAfter two minutes ago is overdue for
    an auditor with ``orphanedLedgerGracePeriod=60`` and not yet for one
    with the default hour."""
    from dlog.ledger.metadata import LedgerCloseContext, LedgerMetadata, LedgerState
    from dlog.ledger.orphans import OrphanReason, list_orphaned

    bk = env["bk"]
    now_ms = int(time.time() * 1000)
    ledger_id = 555_000_001
    await bk.metadata_store.create(
        LedgerMetadata(
            ledger_id=ledger_id,
            ensemble_size=1,
            write_quorum_size=1,
            ack_quorum_size=1,
            ensembles=((0, (next(iter(env["bookies"])),)),),
            ctime=now_ms - 600_000,
            state=LedgerState.CLOSED,
            last_entry_id=-1,
            length=0,
            close_context=LedgerCloseContext.inactive(expect_delete_after=now_ms - 120_000),
        )
    )
    patient = await env["auditor"]()  # orphanedLedgerGracePeriod: 3600 s
    assert await patient.audit_orphans() == 0
    await patient.stop()

    eager = await env["auditor"](orphanedLedgerGracePeriod=60)
    assert await eager.audit_orphans() == 1
    listed = await list_orphaned(bk.zk, bk.uri.ledgers_root)
    assert [(o.ledger_id, o.reason) for o in listed] == [(ledger_id, OrphanReason.DELETE_OVERDUE)]
