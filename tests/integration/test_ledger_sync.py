"""The blocking facade of the ledger client, from plain (non-async) code."""

from __future__ import annotations

import pytest

from dlog.errors import LedgerFencedError, NoSuchLedgerError
from dlog.ledger.blocking import SyncBookKeeper


def test_sync_write_read_recover(bookie_cluster, ledgers_uri: str) -> None:
    bookie_cluster(3)
    with SyncBookKeeper(ledgers_uri) as bk, SyncBookKeeper(ledgers_uri) as other:
        wh = bk.create_ledger(password=b"pw")
        assert wh.append(b"first") == 0
        assert wh.append_many([b"x%d" % i for i in range(100)]) == list(range(1, 101))
        assert wh.last_add_confirmed == 100
        rh = other.open_ledger(wh.ledger_id, b"pw")  # recovery fences the writer
        assert rh.is_closed and rh.last_add_confirmed == 100
        assert [e.data for e in rh.read(0, 2)] == [b"first", b"x0", b"x1"]
        with pytest.raises(LedgerFencedError):
            wh.append(b"late")
        assert wh.ledger_id in bk.list_ledgers()
        bk.delete_ledger(wh.ledger_id)
        with pytest.raises(NoSuchLedgerError):
            bk.ledger_metadata(wh.ledger_id)
