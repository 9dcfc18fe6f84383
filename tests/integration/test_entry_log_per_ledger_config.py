"""Entry log per ledger, configured from a bookie.conf file: each of
``entryLogPerLedgerEnabled``, ``maximumNumberOfActiveEntryLogs`` and
``entrylogMapAccessExpiryTimeInSeconds`` changes what lands on disk, so a
key that stops reaching the entry log manager fails here.

The files are read as they are on disk (header and records), not through
the bookie's own objects: what is checked is the layout a garbage collector
or an operator would see."""

from __future__ import annotations

import asyncio
import dataclasses
import struct
from pathlib import Path

from dlog.bookie.entry_log import HEADER_SIZE, parse_header
from dlog.bookie.service import BookieService
from dlog.errors import EOK
from tests.integration.test_bookie_server import KEY, connect, entry


@dataclasses.dataclass(frozen=True)
class LogOnDisk:
    """One entry log file as found on disk."""

    name: str
    ledgers: frozenset[int]
    sealed: bool


def logs_on_disk(directories: list[Path]) -> list[LogOnDisk]:
    """Every entry log under ``directories``: the ledgers it holds (by
    scanning its records) and whether it is sealed (ledgers map written)."""
    out = []
    for d in directories:
        for path in sorted(d.glob("*.log")):  # not RocksDB's, in subdirectories
            data = path.read_bytes()
            map_offset, _ = parse_header(data[:HEADER_SIZE], path)
            end = map_offset if map_offset else len(data)
            pos, ledgers = HEADER_SIZE, set()
            while pos + 20 <= end:
                (size,) = struct.unpack_from(">i", data, pos)
                if size < 16:
                    break
                ledgers.add(struct.unpack_from(">q", data, pos + 4)[0])
                pos += 4 + size
            if ledgers:
                out.append(LogOnDisk(path.name, frozenset(ledgers), map_offset != 0))
    return out


def ledger_dirs(bookie: BookieService) -> list[Path]:
    assert bookie.core.storage is not None
    return [d.directory for d in bookie.core.storage.dirs]


async def test_the_three_keys_reach_the_manager_from_a_conf_file(
    make_bookie, tmp_path: Path
) -> None:
    conf = tmp_path / "bookie.conf"
    conf.write_text(
        "# entry log per ledger, as an operator writes it\n"
        "entryLogPerLedgerEnabled=true\n"
        "maximumNumberOfActiveEntryLogs=2\n"
        "entrylogMapAccessExpiryTimeInSeconds=2\n"
        "flushInterval=600000\n"  # only this test's checkpoints
    )
    bookie = await make_bookie("b0", conf_file=conf)
    c = await connect(bookie)
    ledgers = [11, 12, 13]
    for lid in ledgers:
        replies = await asyncio.gather(
            *(c.add_entry(lid, e, KEY, entry(lid, e)) for e in range(20))
        )
        assert {r.status for r in replies} == {EOK}
    assert bookie.core.checkpointer is not None
    await bookie.core.checkpointer.checkpoint()

    logs = logs_on_disk(ledger_dirs(bookie))
    # entryLogPerLedgerEnabled: every log holds one ledger (off: one shared log).
    assert sorted(sorted(x.ledgers) for x in logs) == [[11], [12], [13]], logs
    # maximumNumberOfActiveEntryLogs=2: the third ledger's log pushed the
    # least recently written one out, sealed (500: all three still open).
    assert sum(not x.sealed for x in logs) == 2, logs

    # entrylogMapAccessExpiryTimeInSeconds=2: logs idle that long are
    # rotated and sealed at the next checkpoint (300: still open).
    await asyncio.sleep(2.3)
    await bookie.core.checkpointer.checkpoint()
    logs = logs_on_disk(ledger_dirs(bookie))
    assert len(logs) == 3 and all(x.sealed for x in logs), logs
    for lid in ledgers:
        r = await c.read_entry(lid, 7)
        assert r.status == EOK and r.readResponse.body == entry(lid, 7)
    await c.close()
