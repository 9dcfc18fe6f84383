"""Ledger recovery: fence a ledger whose writer may be gone, and close it
at the last entry that may have been acknowledged.

1. Mark the metadata IN_RECOVERY, so the old writer's next metadata update
   fails and it learns it was fenced.
2. Fence-read the LAC from the last ensemble until every write quorum is
   covered: from then on the old writer can no longer reach an ack quorum.
3. Read forward from LAC + 1 (fencing reads). An entry found on any bookie
   may have been acknowledged, so it is re-added with RECOVERY_ADD to its
   write set; an entry that ``W - A + 1`` bookies of its write set do not
   have cannot have been acknowledged, and ends the ledger.
4. Close the metadata at the last recovered entry (compare-and-set; a
   concurrent recoverer that closed it first at the same entry is fine).
"""

from __future__ import annotations

import asyncio
import logging
from typing import TYPE_CHECKING

from dlog.errors import (
    LedgerRecoveryError,
    MetadataVersionError,
)
from dlog.ledger.metadata import LedgerState
from dlog.ledger.read_handle import ReadHandle, ensemble_lac, recovery_read
from dlog.ledger.write_handle import WriteHandle

if TYPE_CHECKING:
    from dlog.ledger.context import LedgerContext

log = logging.getLogger(__name__)

READ_BATCH = 16


async def recover(client: LedgerContext, handle: ReadHandle, password: bytes) -> None:
    """Recover ``handle``'s ledger in place (its metadata ends up CLOSED)."""
    store = client.metadata_store
    lid = handle.ledger_id
    md, version = handle.metadata, handle.metadata_version
    # 1. IN_RECOVERY
    while not md.is_closed and md.state != LedgerState.IN_RECOVERY:
        try:
            version = await store.write(md.replace(state=LedgerState.IN_RECOVERY), version)
            md = md.replace(state=LedgerState.IN_RECOVERY)
        except MetadataVersionError:
            md, version = await store.read(lid)
    handle.adopt(md, version)
    if md.is_closed:
        return
    # 2. fence and learn the LAC
    lac = await ensemble_lac(handle, fence=True)
    length = 0
    if lac >= 0:
        length = (await handle.read_entry(lac)).length
    log.info("ledger %d: fenced; recovering from LAC %d", lid, lac)
    # 3. read forward, re-adding what may have been acknowledged
    writer = WriteHandle(
        client, md, version, password, recovery=True, last_add_confirmed=lac, length=length
    )
    next_id = lac + 1
    recovered = 0
    done = False
    while not done:
        batch = await asyncio.gather(
            *(recovery_read(handle, e, fence=True) for e in range(next_id, next_id + READ_BATCH))
        )
        for entry in batch:
            if entry is None:
                done = True
                break
            writer.append_nowait(entry.data)
            recovered += 1
        next_id += READ_BATCH
    await writer.wait_pending(timeout=max(30.0, 4 * client.conf.add_entry_timeout_sec))
    if writer.error is not None:
        raise LedgerRecoveryError(
            f"ledger {lid}: re-adding recovered entries failed: {writer.error}"
        )
    # 4. close
    await writer.seal_recovered()
    handle.adopt(writer.metadata, writer.metadata_version)
    handle.recovered_by_me = writer.sealed_by_me
    log.info(
        "ledger %d: recovered and closed at entry %d (%d entries re-added)",
        lid,
        handle.last_add_confirmed,
        recovered,
    )
    client.send_write_close(lid, handle.master_key, list(writer.metadata.last_ensemble))
