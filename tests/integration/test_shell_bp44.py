"""``dlog shell listorphaned / showowner / predictlifespan / orphanauditinterval``
run as an operator runs them (subprocesses) against a real ZooKeeper."""

from __future__ import annotations

import json

import pytest

from dlog.ledger.client import BookKeeper
from dlog.ledger.metadata import (
    LedgerCloseContext,
    LedgerCreateContext,
    LedgerMetadata,
    LedgerOwner,
    LedgerState,
)
from dlog.ledger.metadata_store import LedgerMetadataStore
from dlog.ledger.orphans import audit_orphans
from dlog.zk import ZooKeeper
from tests.integration.test_cli_shell import ok, one_error_line, shell

pytestmark = pytest.mark.integration

CTIME = 1615815339_000
CREATE = LedgerCreateContext(
    created_by=LedgerOwner("Company X", "System y", "service.z", "host1.z.companyx.com"),
    part_of_data_set="persistent://public/default/test_topic",
    expected_max_open_duration_ms=4 * 3600 * 1000,
)
CLOSE = LedgerCloseContext.inactive(expect_delete_after=1615839671_000)


def md(ledger_id: int, **kw: object) -> LedgerMetadata:
    fields: dict[str, object] = dict(
        ledger_id=ledger_id,
        ensemble_size=1,
        write_quorum_size=1,
        ack_quorum_size=1,
        ensembles=((0, ("b1:3181",)),),
        ctime=CTIME,
    )
    fields.update(kw)
    return LedgerMetadata(**fields)  # type: ignore[arg-type]


def closed(ledger_id: int, **kw: object) -> LedgerMetadata:
    return md(ledger_id, state=LedgerState.CLOSED, last_entry_id=0, length=1, **kw)


@pytest.fixture
async def store(zk: ZooKeeper, ledgers_uri: str) -> LedgerMetadataStore:
    async with BookKeeper(ledgers_uri) as bk:
        root = bk.metadata_store.ledgers_root
    await zk.ensure_path(root)
    return LedgerMetadataStore(zk, root)


async def test_listorphaned_prints_the_seeds_lines(
    store: LedgerMetadataStore, ledgers_uri: str
) -> None:
    u = ledgers_uri
    r = shell("listorphaned", uri=u)
    assert r.returncode == 0 and r.stdout == "" and "no orphaned ledgers" in r.stderr
    await store.create(
        closed(100234, create_context=CREATE, close_context=CLOSE, seal_time=1615827501_000)
    )
    await store.create(md(100456, create_context=LedgerCreateContext(child_of_ledger=100277)))
    await store.create(
        closed(100500, close_context=LedgerCloseContext.inactive(expect_delete_after=2**50))
    )
    async with BookKeeper(u) as bk:
        await audit_orphans(bk, grace_ms=0)
    assert ok(shell("listorphaned", uri=u)).splitlines() == ["100234", "100456"]
    lines = ok(shell("listorphaned", "--printorphanreason", uri=u)).splitlines()
    assert [line.split("//")[0].split() for line in lines] == [
        ["100234", "DELETE_OVERDUE", "1615839671"],
        ["100456", "BROKEN_PARENT_REF", "100277"],
    ]
    assert lines[0].split("//")[1].strip() == (
        "ledger 100234 should have been deleted on or before Monday, March 15, 2021 8:21:11 PM UTC"
    )
    assert lines[1].split("//")[1].strip() == (
        "ledger 100456 lists ledger 100277 as a parent but ledger 100277 does not exist"
    )


async def test_showowner_and_predictlifespan(store: LedgerMetadataStore, ledgers_uri: str) -> None:
    u = ledgers_uri
    await store.create(
        closed(100234, create_context=CREATE, close_context=CLOSE, seal_time=1615827501_000)
    )
    owner = json.loads(ok(shell("showowner", "100234", uri=u)))
    assert owner == {
        "createdBy": {
            "enterprise": "Company X",
            "system": "System y",
            "service": "service.z",
            "instance": "host1.z.companyx.com",
        },
        "onBehalfOf": None,
        "dataSet": "persistent://public/default/test_topic",
    }
    assert json.loads(ok(shell("showowner", "-l", "100234", uri=u))) == owner
    r = shell("predictlifespan", "--ledgerid", "100234", uri=u)
    assert json.loads(ok(r)) == {
        "createTime": 1615815339,
        "expectedSealTime": 1615829739,
        "actualSealTime": 1615827501,
        "expectedReadUntilTime": None,
        "expectedDeleteTime": 1615839671,
    }
    assert r.stderr == ""
    # errors: one line each
    assert "no such ledger" in one_error_line(shell("showowner", "999", uri=u))
    assert "missing ledger id" in one_error_line(shell("predictlifespan", uri=u))
    assert "two different" in one_error_line(shell("showowner", "1", "-l", "2", uri=u))


async def test_format_3_ledgers_say_they_have_no_contexts(
    zk: ZooKeeper, store: LedgerMetadataStore, ledgers_uri: str
) -> None:
    """A ledger written under ledgerMetadataVersion=3 keeps no contexts, no
    seal time: both commands print nulls and say why on stderr."""
    v3 = LedgerMetadataStore(zk, store.ledgers_root, 3)
    await v3.create(closed(7, create_context=CREATE, close_context=CLOSE, seal_time=5))
    r = shell("showowner", "7", uri=ledgers_uri)
    assert json.loads(ok(r)) == {"createdBy": None, "onBehalfOf": None, "dataSet": None}
    assert "no create context" in r.stderr and "ledgerMetadataVersion=3" in r.stderr
    r = shell("predictlifespan", "7", uri=ledgers_uri)
    assert json.loads(ok(r)) == {
        "createTime": 1615815339,  # ctime is format 3
        "expectedSealTime": None,
        "actualSealTime": None,
        "expectedReadUntilTime": None,
        "expectedDeleteTime": None,
    }
    assert "no create context" in r.stderr and "without a close context" in r.stderr
    await store.create(md(8))
    r = shell("predictlifespan", "8", uri=ledgers_uri)
    assert "not sealed yet" in r.stderr


async def test_orphanauditinterval(
    zk: ZooKeeper, store: LedgerMetadataStore, ledgers_uri: str
) -> None:
    u = ledgers_uri
    r = shell("orphanauditinterval", uri=u)
    assert r.returncode == 0 and r.stdout == "" and "not set" in r.stderr
    assert ok(shell("orphanauditinterval", "--set", "120", uri=u)) == "120\n"
    data, _ = await zk.get(f"{store.ledgers_root}/underreplication/orphanedLedgerCheckInterval")
    assert data == b"120"
    assert ok(shell("orphanauditinterval", "--get", uri=u)) == "120\n"
    r = shell("orphanauditinterval", "--set", "-1", uri=u)
    assert r.returncode == 2
    assert "not both" in one_error_line(shell("orphanauditinterval", "--get", "--set", "3", uri=u))
