"""A bookie with data restarted with ``entryLogPerLedgerEnabled`` flipped,
both ways: every entry stays readable, whichever manager wrote its log."""

from __future__ import annotations

import asyncio

from dlog.errors import EOK
from dlog.sandbox.ports import free_port
from tests.integration.test_bookie_server import KEY, connect, entry
from tests.integration.test_entry_log_per_ledger_config import ledger_dirs, logs_on_disk


async def test_flipping_the_flag_both_ways_keeps_every_entry(make_bookie) -> None:
    port = free_port()
    written: dict[int, int] = {}  # ledger -> entries

    async def write(bookie, lids: list[int], n: int) -> None:  # type: ignore[no-untyped-def]
        c = await connect(bookie)
        for lid in lids:
            start = written.get(lid, 0)
            replies = await asyncio.gather(
                *(c.add_entry(lid, e, KEY, entry(lid, e)) for e in range(start, start + n))
            )
            assert {r.status for r in replies} == {EOK}
            written[lid] = start + n
        await c.close()

    async def check_all(bookie) -> None:  # type: ignore[no-untyped-def]
        c = await connect(bookie)
        for lid, n in written.items():
            replies = await asyncio.gather(*(c.read_entry(lid, e) for e in range(n)))
            assert [r.status for r in replies] == [EOK] * n, lid
            assert [r.readResponse.body for r in replies] == [entry(lid, e) for e in range(n)]
        await c.close()

    async def start(per_ledger: bool):  # type: ignore[no-untyped-def]
        return await make_bookie("b0", port, entryLogPerLedgerEnabled=per_ledger)

    bookie = await start(False)
    await write(bookie, [1, 2, 3], 50)  # shared logs; some flushed, the rest at stop
    await bookie.core.checkpointer.checkpoint()
    await write(bookie, [1, 2], 10)
    await bookie.stop()

    bookie = await start(True)
    await check_all(bookie)
    await write(bookie, [1, 4], 30)  # an old ledger and a new one, each its own log
    await bookie.core.checkpointer.checkpoint()
    assert any(x.ledgers == {4} for x in logs_on_disk(ledger_dirs(bookie)))
    await write(bookie, [2, 4], 10)  # left open at the stop
    await bookie.stop()

    bookie = await start(False)
    await check_all(bookie)
    await write(bookie, [1, 5], 20)
    await bookie.stop()

    bookie = await start(True)
    await check_all(bookie)
