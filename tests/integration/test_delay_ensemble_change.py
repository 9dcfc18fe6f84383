"""A bookie of a writing ledger's ensemble dies and no other bookie can take
its place (BookKeeper's ``delayEnsembleChange``), against real bookies.

With the default (false) the ledger's writes fail with NotEnoughBookiesError
naming the ledger and the bookie, and ``dlog write`` says so; with true they
go on at the ack quorum. Either way a warning names both and the client
counts it in ``ledger_client_ensemble_change_unavailable``; with a spare
bookie the ensemble simply changes, uncounted.

The kill -9 cases are the ones the issue reported: with E3/W3/A2 every entry
completed on the two live bookies before the dead one's failure arrived,
and the handle ignored a failure of an entry already complete, so it wrote
on at the ack quorum silently.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import signal
import subprocess
import sys
import time

import pytest

from dlog.conf.bookkeeper import ClientConfig
from dlog.conf.dlog import DLogConfig
from dlog.errors import NotEnoughBookiesError
from dlog.ledger.client import BookKeeper
from dlog.ledger.write_handle import WriteHandle
from dlog.namespace import Namespace
from dlog.sandbox.cluster import Sandbox
from tests.cli import cli_env
from tests.waiting import eventually

pytestmark = pytest.mark.integration

LOGGER = "dlog.ledger.write_handle"
UNAVAILABLE = "ledger_client_ensemble_change_unavailable"


def client(ledgers_uri: str, *, delay: bool) -> BookKeeper:
    conf = ClientConfig.load(
        metadataServiceUri=ledgers_uri, delayEnsembleChange=delay, addEntryTimeoutSec=5
    )
    return BookKeeper(conf=conf)


def unavailable(bk: BookKeeper) -> float:
    return bk.ensemble_change_unavailable.get()


def warnings_about(caplog: pytest.LogCaptureFixture, wh: WriteHandle, bookie: str) -> list[str]:
    """Warnings that the ledger's bookie failed with none to replace it."""
    return [
        r.getMessage()
        for r in caplog.records
        if r.name == LOGGER
        and r.levelno == logging.WARNING
        and f"ledger {wh.ledger_id}:" in r.getMessage()
        and bookie in r.getMessage()
        and "no writable bookie can replace it" in r.getMessage()
    ]


async def append_until_failure(wh: WriteHandle, deadline: float = 15.0) -> NotEnoughBookiesError:
    """Append one entry at a time until an append fails. The pause between
    two lets the dead bookie's failure arrive only after the entry completed
    at its ack quorum, with nothing else pending: that failure must count."""
    stop = time.monotonic() + deadline
    i = 0
    while time.monotonic() < stop:
        try:
            await wh.append(b"after-%d" % i)
        except NotEnoughBookiesError as e:
            return e
        i += 1
        await asyncio.sleep(0.3)
    raise AssertionError(f"appends still succeed {deadline}s after the bookie died: {wh!r}")


async def append_until(wh: WriteHandle, predicate, first: int, timeout: float = 20.0) -> int:  # type: ignore[no-untyped-def]
    """Append ``e<first>``, ``e<first+1>``... until ``predicate()`` (a
    gracefully stopped bookie's failure shows only as its adds time out);
    returns the next index."""
    stop = time.monotonic() + timeout
    i = first
    while not predicate():
        assert time.monotonic() < stop, f"timed out: {wh!r}"
        assert await wh.append(b"e%d" % i) == i
        i += 1
        await asyncio.sleep(0.01)
    return i


async def lost_connection(bk: BookKeeper, bookie: str) -> None:
    """Wait until the client saw its connection to ``bookie`` drop, as a
    writer between two batches does: the next entry's send to it must first
    reconnect, and fails only after the live bookies acknowledged the entry
    (the issue's case: that late failure used to be ignored)."""
    await eventually(lambda: bk.pool.connected(bookie) is None)


# -- three bookie processes, one killed -9 ------------------------------------------


@pytest.mark.parametrize("quorum", [(3, 3, 2), (3, 2, 2)], ids=["E3W3A2", "E3W2A2"])
def test_by_default_a_lost_bookie_fails_the_ledgers_writes(
    bookie_cluster, ledgers_uri: str, caplog: pytest.LogCaptureFixture, quorum: tuple[int, ...]
) -> None:
    caplog.set_level(logging.WARNING, logger=LOGGER)
    cluster = bookie_cluster(3)

    async def run() -> None:
        async with client(ledgers_uri, delay=False) as bk:
            wh = await bk.create_ledger(*quorum, password=b"pw")
            for i in range(20):
                await wh.append(b"before-%d" % i)
            victim = next(b for b in cluster.bookies if b.bookie_id == wh.ensemble[1])
            victim.kill()
            await lost_connection(bk, victim.bookie_id)
            error = await append_until_failure(wh)
            assert f"ledger {wh.ledger_id}" in str(error) and victim.bookie_id in str(error)
            # Every later append fails the same way, at once.
            with pytest.raises(NotEnoughBookiesError, match=victim.bookie_id):
                await wh.append(b"later")
            assert len(warnings_about(caplog, wh, victim.bookie_id)) == 1, caplog.text
            assert unavailable(bk) == 1
            # What was confirmed is on the live bookies. (Recovering the
            # ledger would fail the same way: its re-adds need a full
            # ensemble too, as in BookKeeper.)
            assert wh.last_add_confirmed >= 19
            rh = await bk.open_ledger(wh.ledger_id, b"pw", recovery=False)
            data = [e.data for e in await rh.read(0, 18)]
            assert data == [b"before-%d" % i for i in range(19)]

    asyncio.run(run())


def test_delay_ensemble_change_writes_on_at_the_ack_quorum(
    bookie_cluster, ledgers_uri: str, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.WARNING, logger=LOGGER)
    cluster = bookie_cluster(3)

    async def run() -> None:
        async with client(ledgers_uri, delay=True) as bk:
            wh = await bk.create_ledger(3, 3, 2, password=b"pw")
            for i in range(20):
                await wh.append(b"e%d" % i)
            victim = next(b for b in cluster.bookies if b.bookie_id == wh.ensemble[2])
            victim.kill()
            await lost_connection(bk, victim.bookie_id)
            for i in range(20, 220):
                assert await wh.append(b"e%d" % i) == i
            # The failed send to the victim surfaces after its reconnect
            # attempts; the appends above may all have completed at the ack
            # quorum before it does.
            await eventually(lambda: wh.skipped_bookies == {2: victim.bookie_id})
            ids = await asyncio.gather(*(wh.append_nowait(b"e%d" % i) for i in range(220, 520)))
            assert ids == list(range(220, 520))
            assert wh.skipped_bookies == {2: victim.bookie_id}
            # Warned and counted once, however many entries went on without it.
            assert len(warnings_about(caplog, wh, victim.bookie_id)) == 1, caplog.text
            assert "delayEnsembleChange=true" in warnings_about(caplog, wh, victim.bookie_id)[0]
            assert unavailable(bk) == 1
            # No ensemble change: the dead bookie stays for the auditor to replace.
            md = await bk.ledger_metadata(wh.ledger_id)
            assert len(md.ensembles) == 1 and victim.bookie_id in md.ensembles[0][1]
            await wh.close()
            rh = await bk.open_ledger(wh.ledger_id, b"pw")
            assert rh.last_add_confirmed == 519
            assert [e.data for e in await rh.read(0, 519)] == [b"e%d" % i for i in range(520)]

    asyncio.run(run())


def test_delay_ensemble_change_fails_an_entry_short_of_its_ack_quorum(
    bookie_cluster, ledgers_uri: str, caplog: pytest.LogCaptureFixture
) -> None:
    """E3/W2/A2: the entries whose write set holds the dead bookie have one
    live bookie for an ack quorum of two."""
    caplog.set_level(logging.WARNING, logger=LOGGER)
    cluster = bookie_cluster(3)

    async def run() -> None:
        async with client(ledgers_uri, delay=True) as bk:
            wh = await bk.create_ledger(3, 2, 2, password=b"pw")
            for i in range(20):
                await wh.append(b"e%d" % i)
            victim = next(b for b in cluster.bookies if b.bookie_id == wh.ensemble[0])
            victim.kill()
            error = await append_until_failure(wh)
            assert f"ledger {wh.ledger_id}" in str(error) and victim.bookie_id in str(error)
            assert "ack quorum" in str(error)
            with pytest.raises(NotEnoughBookiesError):
                await wh.append(b"later")
            assert len(warnings_about(caplog, wh, victim.bookie_id)) == 1, caplog.text
            assert unavailable(bk) == 1

    asyncio.run(run())


# -- in-process bookies: spares ------------------------------------------------------


@pytest.mark.parametrize("delay", [False, True], ids=["default", "delayEnsembleChange"])
async def test_a_spare_bookie_takes_the_place_of_a_lost_one(
    make_bookie, ledgers_uri: str, caplog: pytest.LogCaptureFixture, delay: bool
) -> None:
    caplog.set_level(logging.WARNING, logger=LOGGER)
    bookies = [await make_bookie(f"b{i}") for i in range(4)]
    async with client(ledgers_uri, delay=delay) as bk:
        wh = await bk.create_ledger(3, 3, 2, password=b"pw")
        for i in range(20):
            await wh.append(b"e%d" % i)
        victim = next(b for b in bookies if b.bookie_id == wh.ensemble[1])
        await victim.stop()
        n = await append_until(wh, lambda: victim.bookie_id not in wh.ensemble, 20)
        for i in range(n, n + 20):
            assert await wh.append(b"e%d" % i) == i
        n += 20
        assert not wh.skipped_bookies
        assert wh.ensemble_changes == 1
        assert unavailable(bk) == 0
        assert not [
            r for r in caplog.records if "no writable bookie can replace" in r.getMessage()
        ], caplog.text
        await wh.close()
        rh = await bk.open_ledger(wh.ledger_id, b"pw")
        assert [e.data for e in await rh.read(0, n - 1)] == [b"e%d" % i for i in range(n)]


async def test_delay_ensemble_change_replaces_the_lost_bookie_once_one_appears(
    make_bookie, ledgers_uri: str, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.WARNING, logger=LOGGER)
    bookies = [await make_bookie(f"b{i}") for i in range(3)]
    async with client(ledgers_uri, delay=True) as bk:
        wh = await bk.create_ledger(3, 3, 2, password=b"pw")
        for i in range(20):
            await wh.append(b"e%d" % i)
        victim = next(b for b in bookies if b.bookie_id == wh.ensemble[0])
        await victim.stop()
        n = await append_until(wh, lambda: bool(wh.skipped_bookies), 20)
        assert wh.skipped_bookies == {0: victim.bookie_id}
        assert unavailable(bk) == 1
        spare = await make_bookie("b3")
        await eventually(lambda: spare.bookie_id in bk.writable_bookies())
        # The next append finds the spare and changes the ensemble first.
        for i in range(n, n + 40):
            assert await wh.append(b"e%d" % i) == i
        n += 40
        assert not wh.skipped_bookies and wh.ensemble[0] == spare.bookie_id
        md = await bk.ledger_metadata(wh.ledger_id)
        assert len(md.ensembles) == 2 and md.ensembles[-1][1][0] == spare.bookie_id
        assert unavailable(bk) == 1
        await wh.close()
        rh = await bk.open_ledger(wh.ledger_id, b"pw")
        assert [e.data for e in await rh.read(0, n - 1)] == [b"e%d" % i for i in range(n)]


# -- the user's view: `dlog write` on the sandbox ------------------------------------


def wait_for_records(uri: str, stream: str, count: int, timeout: float = 30.0) -> None:
    async def go() -> None:
        conf = DLogConfig.load(overrides={"createStreamIfNotExists": False})
        stop = time.monotonic() + timeout
        while True:
            try:
                async with await Namespace.open(uri, conf) as ns:
                    reader = await (await ns.open_log(stream)).open_reader()
                    got = len(await reader.read_bulk(count, timeout=1))
                    await reader.close()
                    if got >= count:
                        return
            except Exception:
                if time.monotonic() > stop:
                    raise
            assert time.monotonic() < stop, f"{stream}: fewer than {count} records"
            await asyncio.sleep(0.2)

    asyncio.run(go())


def test_dlog_write_reports_a_lost_bookie_with_none_to_replace_it(
    sandbox: Sandbox, uri: str
) -> None:
    """The issue's reproduction: the sandbox's streams (E3/W3/A2 on its three
    bookies), a writer fed by a pipe, a bookie killed -9 while it writes."""
    stream = "lost-bookie"
    proc = subprocess.Popen(
        [sys.executable, "-m", "dlog", "write", stream, "--uri", uri],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=cli_env(),
    )
    try:
        assert proc.stdin is not None
        proc.stdin.write("first\n")
        proc.stdin.flush()
        wait_for_records(uri, stream, 1)
        victim = sandbox.bookies[1]
        assert victim.pid is not None
        os.kill(victim.pid, signal.SIGKILL)
        # The writer may fail and exit before it read all of them.
        with contextlib.suppress(BrokenPipeError):
            for i in range(50):
                proc.stdin.write(f"line {i}\n")
                proc.stdin.flush()
                time.sleep(0.05)
        # stdin stays open: the writer must fail and exit on its own, with
        # its stdin thread still blocked in a read (that once aborted the
        # interpreter at exit, exit -6).
        proc.wait(timeout=60)
        with contextlib.suppress(BrokenPipeError):
            proc.stdin.close()
        assert proc.stdout is not None and proc.stderr is not None
        out, err = proc.stdout.read(), proc.stderr.read()
    finally:
        proc.kill()
    assert proc.returncode == 1, f"exit {proc.returncode}\nstdout:\n{out}\nstderr:\n{err}"
    assert "Fatal Python error" not in err, err
    assert "Traceback" not in err, err
    lines = [line for line in err.splitlines() if line.strip()]
    errors = [line for line in lines if line.startswith("error: ")]
    assert len(errors) == 1 and "not enough bookies" in errors[0], err
    assert victim.address in errors[0] and "ledger " in errors[0], err
    assert any(
        "WARNING" in line and victim.address in line and "no writable bookie can replace it" in line
        for line in lines
    ), err
