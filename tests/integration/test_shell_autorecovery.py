"""`dlog shell` AutoRecovery commands run as an operator runs them
(``python -m dlog shell ...``) against a real ZooKeeper: they read and
write BookKeeper's own under-replication znodes."""

from __future__ import annotations

import asyncio
import re
import subprocess

import pytest

from dlog.autorecovery.election import AuditorElection
from dlog.ledger.underreplication import UnderreplicationManager
from dlog.zk import ZooKeeper
from tests.cli import dlog, error_line, ok

pytestmark = pytest.mark.integration


async def shell(*args: str) -> subprocess.CompletedProcess[str]:
    return await asyncio.to_thread(dlog, "shell", *args)


@pytest.fixture
def root(zk_root: str) -> str:
    return f"{zk_root}/ledgers"


async def test_autorecovery_toggle(zk: ZooKeeper, root: str, ledgers_uri: str) -> None:
    u = ("-u", ledgers_uri)
    assert "autorecovery is enabled" in ok(await shell("autorecovery", *u))
    assert "autorecovery disabled" in ok(await shell("autorecovery", "--disable", *u))
    data, _ = await zk.get(f"{root}/underreplication/disable")
    assert data == b""
    layout, _ = await zk.get(f"{root}/underreplication/LAYOUT")
    assert layout == b'type: "BASIC"\nversion: 1\n'
    assert "autorecovery is disabled" in ok(await shell("autorecovery", *u))
    assert "already disabled" in ok(await shell("autorecovery", "-d", *u))
    assert "autorecovery enabled" in ok(await shell("autorecovery", "-enable", *u))
    assert await zk.exists(f"{root}/underreplication/disable") is None
    assert "already enabled" in ok(await shell("autorecovery", "-e", *u))
    assert "not both" in error_line(await shell("autorecovery", "-e", "-d", *u), 2)


async def test_lost_bookie_recovery_delay(zk: ZooKeeper, root: str, ledgers_uri: str) -> None:
    u = ("-u", ledgers_uri)
    assert "not set in ZooKeeper" in error_line(await shell("lostbookierecoverydelay", "-g", *u))
    assert "set to 42 s" in ok(await shell("lostbookierecoverydelay", "--set", "42", *u))
    data, _ = await zk.get(f"{root}/underreplication/lostBookieRecoveryDelay")
    assert data == b"42"
    assert ok(await shell("lostbookierecoverydelay", "--get", *u)).strip() == "42"
    ok(await shell("lostbookierecoverydelay", "-s", "0", *u))
    assert ok(await shell("lostbookierecoverydelay", "-g", *u)).strip() == "0"
    # Java BookKeeper's shell wrote it as Integer.toString: read as it is.
    await zk.set(f"{root}/underreplication/lostBookieRecoveryDelay", b"3600")
    assert ok(await shell("lostbookierecoverydelay", "-get", *u)).strip() == "3600"
    for bad in ((), ("-g", "-s", "5")):
        assert "one and only one" in error_line(await shell("lostbookierecoverydelay", *bad, *u), 2)


async def test_listunderreplicated(zk: ZooKeeper, root: str, ledgers_uri: str) -> None:
    u = ("-u", ledgers_uri)
    r = await shell("listunderreplicated", *u)
    assert ok(r).strip() == "" and "no under-replicated ledgers" in r.stderr
    urm = UnderreplicationManager(zk, root, owner="worker-7:3181")
    await urm.initialize()
    await urm.mark(3, ["b1:3181"])
    await urm.mark(10, ["b1:3181", "b2:3181"])
    await urm.mark(0x1_0000_0000, ["b2:3181"])
    assert await urm.acquire_ledger(10)

    out = ok(await shell("listunderreplicated", *u))
    assert "3 under-replicated ledger(s)" in out
    rows = re.findall(r"^\W*(\d+)\s+│", out, re.M)
    assert rows == ["3", "10", str(0x1_0000_0000)]
    assert re.search(r"\d{4}-\d\d-\d\dT[\d:.]+Z \(\d+\)", out)  # when it was marked
    assert "b1:3181" not in out and "worker-7" not in out

    out = ok(await shell("listunderreplicated", "-pmr", *u))
    assert re.search(r"10\s+│.*│\s*b1:3181, b2:3181", out), out
    out = ok(await shell("listunderreplicated", "--printreplicationworkerid", *u))
    assert re.search(r"10\s+│.*│\s*worker-7:3181", out), out
    assert re.search(r"\b3\s+│.*│\s*-\s", out), out

    def ids(out: str) -> list[str]:
        return re.findall(r"^\W*(\d+)\s+│", out, re.M)

    assert ids(ok(await shell("listunderreplicated", "-mr", "b2:3181", *u))) == [
        "10",
        str(0x1_0000_0000),
    ]
    assert ids(ok(await shell("listunderreplicated", "-emr", "b2:3181", *u))) == ["3"]
    assert ids(
        ok(await shell("listunderreplicated", "--missingreplica", "b1:3181", "-emr", "b2:3181", *u))
    ) == ["3"]
    count = await shell("listunderreplicated", "--onlydisplayledgercount", "-mr", "b1:3181", *u)
    assert ok(count).strip() == "2"
    await urm.aclose()


async def test_whoisauditor(zk: ZooKeeper, root: str, ledgers_uri: str) -> None:
    u = ("-u", ledgers_uri)
    assert "no auditor elected" in error_line(await shell("whoisauditor", *u))
    election = AuditorElection(zk, root, "127.0.0.1:3181")
    await election.run_for_auditor()
    assert ok(await shell("whoisauditor", *u)).strip() == "127.0.0.1:3181"
    await election.resign()
    assert "no auditor elected" in error_line(await shell("whoisauditor", *u))


async def test_unreachable_zookeeper_is_one_line() -> None:
    r = await shell(
        "autorecovery", "-u", "zk+hierarchical://127.0.0.1:1/ledgers", "--set", "zkTimeout=1000"
    )
    assert "ZooKeeper" in error_line(r)
