"""``dlog sandbox start --set entryLogPerLedgerEnabled=true``: the sandbox's
bookies run with entry log per ledger (each entry log on disk holds one
ledger), and without it they share logs."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import pytest

from tests.integration.test_entry_log_per_ledger_config import logs_on_disk
from tests.integration.test_sandbox_cli import dlog, ok, write_and_read

pytestmark = pytest.mark.integration


async def write_streams(uri: str) -> None:
    for stream in ("a", "b", "c"):
        await write_and_read(uri, stream, stream.encode() * 100)


@pytest.mark.parametrize("per_ledger", [True, False], ids=["on", "off"])
def test_sandbox_bookies_follow_the_setting(tmp_path: Path, per_ledger: bool) -> None:
    d = tmp_path / "sb"
    args = ["--set", f"entryLogPerLedgerEnabled={str(per_ledger).lower()}"]
    try:
        uri = ok(dlog("sandbox", "start", "--dir", str(d), "--bookies", "3", *args)).splitlines()[
            -1
        ]
        asyncio.run(write_streams(uri))
        state = json.loads((d / "sandbox.json").read_text())
    finally:
        dlog("sandbox", "stop", "--dir", str(d), timeout=60)  # graceful: logs sealed
    for b in state["bookies"]:
        logs = logs_on_disk([p for p in Path(b["ledgers_dir"]).rglob("current")])
        assert logs, b
        if per_ledger:
            assert all(len(log.ledgers) == 1 for log in logs), logs
            assert len(logs) >= 3
        else:
            assert any(len(log.ledgers) > 1 for log in logs), logs
