"""Reading a ledger: entries from their write set, and the LAC.

An entry is read from the first bookie of its write set that returns it
with a valid digest; errors, missing entries and digest mismatches move on
to the next replica. Corrupt bytes are never returned: when every replica
fails the read raises, with DigestMismatchError if any replica was corrupt.
"""

from __future__ import annotations

import asyncio
import logging
from typing import TYPE_CHECKING, NamedTuple

from dlog.errors import (
    ENOENTRY,
    ENOLEDGER,
    EOK,
    STATUS_NAMES,
    BKError,
    DigestMismatchError,
    IncorrectParameterError,
    LedgerClosedError,
    LedgerRecoveryError,
    NoSuchEntryError,
    ReadError,
)
from dlog.ledger.digest import DigestManager
from dlog.ledger.metadata import LedgerMetadata
from dlog.ledger.quorum import CoverageSet, write_set
from dlog.protocol.messages import LAST_ADD_CONFIRMED

if TYPE_CHECKING:
    from dlog.ledger.context import LedgerContext
    from dlog.ledger.metadata_store import MetadataWatch

log = logging.getLogger(__name__)


#: A long poll asks a bookie that does not know the ledger yet again after
#: this many seconds, doubling up to the max.
LONG_POLL_RETRY_FIRST = 0.001
LONG_POLL_RETRY_MAX = 0.05


class LedgerEntry(NamedTuple):
    ledger_id: int
    entry_id: int
    data: bytes
    length: int  # ledger length up to and including this entry


class ReadHandle:
    """An opened ledger, for reading. ``is_closed`` tells whether its end is
    known; a metadata watch keeps ensembles and the close current."""

    def __init__(
        self, client: LedgerContext, metadata: LedgerMetadata, version: int, password: bytes
    ) -> None:
        self.client = client
        self.ledger_id = metadata.ledger_id
        self._md = metadata
        self._md_version = version
        self.digest = DigestManager(metadata.ledger_id, int(metadata.digest_type), password)
        self.master_key = self.digest.master_key
        self._lac = metadata.last_entry_id if metadata.is_closed else -1
        self._timeout = client.conf.read_entry_timeout_sec
        self._watch: MetadataWatch | None = None
        self._cached: dict[int, LedgerEntry] = {}
        self._closed_handle = False
        #: True when this handle's recovery closed the ledger (not a concurrent one).
        self.recovered_by_me = False

    def start_watch(self) -> None:
        if self._watch is None and not self._md.is_closed:
            self._watch = self.client.metadata_store.watch(self.ledger_id, self._on_metadata)

    def _on_metadata(self, value: tuple[LedgerMetadata, int] | None) -> None:
        if value is None:
            return
        md, version = value
        if version > self._md_version:
            self._md, self._md_version = md, version
            if md.is_closed:
                self._lac = max(self._lac, md.last_entry_id)
                if self._watch is not None:
                    self._watch.cancel()

    # -- properties -----------------------------------------------------------
    @property
    def metadata(self) -> LedgerMetadata:
        return self._md

    @property
    def is_closed(self) -> bool:
        return self._md.is_closed

    @property
    def metadata_version(self) -> int:
        return self._md_version

    def adopt(self, metadata: LedgerMetadata, version: int) -> None:
        """Take ``metadata`` (at ``version``) as this handle's, as recovery
        moves the ledger on; a closed ledger's LAC is its last entry."""
        self._md, self._md_version = metadata, version
        if metadata.is_closed:
            self._lac = metadata.last_entry_id

    @property
    def last_add_confirmed(self) -> int:
        return self._lac

    @property
    def length(self) -> int:
        return self._md.length

    def __repr__(self) -> str:
        return f"ReadHandle(ledger={self.ledger_id}, lac={self._lac}, closed={self.is_closed})"

    # -- entries -----------------------------------------------------------------
    async def read(self, first: int, last: int) -> list[LedgerEntry]:
        """Entries ``first..last`` (inclusive), all at or below the LAC."""
        if last > self._lac:
            lac = await self.read_last_add_confirmed() if not self.is_closed else self._lac
            if last > lac:
                raise IncorrectParameterError(
                    f"ledger {self.ledger_id}: entry {last} is beyond the last add confirmed ({lac})"
                )
        return await self.read_unconfirmed(first, last)

    async def read_unconfirmed(self, first: int, last: int) -> list[LedgerEntry]:
        """Entries ``first..last`` whether or not the LAC covers them."""
        if first < 0 or last < first:
            raise IncorrectParameterError(f"bad entry range {first}..{last}")
        if self._closed_handle:
            raise LedgerClosedError("read handle is closed")
        limit = self.client.conf.max_outstanding_reads
        out: list[LedgerEntry] = []
        for start in range(first, last + 1, limit):
            end = min(last, start + limit - 1)
            out.extend(await asyncio.gather(*(self.read_entry(e) for e in range(start, end + 1))))
        return out

    async def read_entry(self, entry_id: int, *, fence: bool = False) -> LedgerEntry:
        cached = self._cached.pop(entry_id, None)
        if cached is not None:
            return cached
        ensemble = self._md.ensemble_for(entry_id)
        errors: list[str] = []
        digest_failures = 0
        missing = 0
        for idx in write_set(entry_id, len(ensemble), self._md.write_quorum_size):
            bookie = ensemble[idx]
            try:
                conn = await self.client.pool.get(bookie)
                resp = await conn.read_entry(
                    self.ledger_id,
                    entry_id,
                    fence=fence,
                    master_key=self.master_key if fence else None,
                    timeout=self._timeout,
                )
            except BKError as e:
                errors.append(f"{bookie}: {e}")
                continue
            if resp.status != EOK:
                if resp.status in (ENOENTRY, ENOLEDGER):
                    missing += 1
                errors.append(f"{bookie}: {STATUS_NAMES.get(resp.status, resp.status)}")
                continue
            try:
                entry = self.digest.verify(resp.readResponse.body, entry_id)
            except DigestMismatchError as e:
                digest_failures += 1
                log.warning(
                    "ledger %d entry %d: corrupt replica on %s: %s",
                    self.ledger_id,
                    entry_id,
                    bookie,
                    e,
                )
                errors.append(f"{bookie}: {e}")
                continue
            return LedgerEntry(self.ledger_id, entry_id, bytes(entry.payload), entry.length)
        detail = "; ".join(errors)
        if digest_failures:
            raise DigestMismatchError(
                f"ledger {self.ledger_id} entry {entry_id}: no replica with a valid digest ({detail})"
            )
        if missing == len(errors):
            raise NoSuchEntryError(
                f"ledger {self.ledger_id} entry {entry_id} is on no bookie ({detail})"
            )
        raise ReadError(
            f"ledger {self.ledger_id} entry {entry_id}: every replica failed ({detail})"
        )

    # -- LAC ---------------------------------------------------------------------
    async def read_last_add_confirmed(self) -> int:
        """Ask the last ensemble for the LAC (no fencing); updates and returns it."""
        if self.is_closed:
            return self._lac
        lac = await ensemble_lac(self, fence=False)
        self._lac = max(self._lac, lac)
        return self._lac

    async def read_lac_long_poll(self, previous_lac: int, timeout: float) -> int:
        """Wait up to ``timeout`` seconds for the LAC to pass ``previous_lac``.

        The bookies of the next entry's write set are asked at once; the
        first that knows a newer LAC answers with it (and the entry, which is
        kept for the next read). Returns the LAC, possibly unchanged.

        The request is upstream's (ReadLastConfirmedAndEntryOp): entryId -1
        with ``previousLAC`` and the piggyback flag, since BookKeeper bookies
        refuse any other entryId there with EBADREQ. The response's entryId
        names the entry that came back; -1 or no body means none (EOK without
        an entry is an answer: the LAC only, or a bookie of another stripe).

        A bookie that has no entry of the ledger yet (a segment just begun)
        answers at once, without waiting: it is asked again, after 1 ms and
        then twice as long each time (at most 50 ms), until the timeout. Left
        out until the timeout, it would leave the poll to the other bookie,
        which may learn the LAC tens of milliseconds later."""
        if self.is_closed or self._lac > previous_lac:
            return self._lac
        next_entry = previous_lac + 1
        ensemble = self._md.ensemble_for(max(next_entry, 0))
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout

        async def ask(bookie: str) -> int:
            delay = LONG_POLL_RETRY_FIRST
            left = timeout
            while True:
                try:
                    conn = await self.client.pool.get(bookie)
                    resp = await conn.read_entry(
                        self.ledger_id,
                        LAST_ADD_CONFIRMED,
                        previous_lac=previous_lac,
                        long_poll_timeout_ms=max(int(left * 1000), 0),
                        piggyback=True,
                        timeout=left + self._timeout,
                    )
                except BKError:
                    return -1
                if resp.status not in (ENOLEDGER, ENOENTRY) or deadline - loop.time() <= delay:
                    break
                await asyncio.sleep(delay)
                delay = min(delay * 2, LONG_POLL_RETRY_MAX)
                left = deadline - loop.time()
            if resp.status != EOK:
                return -1
            rr = resp.readResponse
            lac = rr.maxLAC if rr.HasField("maxLAC") else -1
            got = rr.entryId
            if rr.HasField("body") and got != LAST_ADD_CONFIRMED and previous_lac < got <= lac:
                try:
                    entry = self.digest.verify(rr.body, got)
                    self._cached[got] = LedgerEntry(
                        self.ledger_id, got, bytes(entry.payload), entry.length
                    )
                except DigestMismatchError:
                    pass
            return lac

        tasks = [
            asyncio.ensure_future(ask(ensemble[i]))
            for i in write_set(next_entry, len(ensemble), self._md.write_quorum_size)
        ]
        try:
            for fut in asyncio.as_completed(tasks):
                lac = await fut
                if lac > previous_lac:
                    self._lac = max(self._lac, lac)
                    break
        finally:
            for t in tasks:
                t.cancel()
        return self._lac

    async def read_last_entry(self, *, beyond_lac: bool = False) -> LedgerEntry | None:
        """The ledger's last entry (None when it has none), without fencing.

        By default the last entry the LAC covers. With ``beyond_lac`` the
        last entry a recovery would keep, found by recovery's rules (read
        forward from the LAC; an entry on any bookie counts, one that
        ``W - A + 1`` bookies of its write set lack ends the ledger) but
        without fencing or re-adding: for a ledger whose writer is gone,
        that covers every entry ever acknowledged. While a writer is live it
        may include entries still in flight, which may yet fail."""
        if self.is_closed:
            lac = self._lac
        else:
            lac = await self.read_last_add_confirmed()
            if beyond_lac:
                last: LedgerEntry | None = None
                while (entry := await recovery_read(self, lac + 1, fence=False)) is not None:
                    last, lac = entry, lac + 1
                if last is not None:
                    return last
        if lac < 0:
            return None
        return await self.read_entry(lac)

    async def close(self) -> None:
        self._closed_handle = True
        if self._watch is not None:
            self._watch.cancel()
            self._watch = None


async def ensemble_lac(handle: ReadHandle, *, fence: bool) -> int:
    """The LAC according to the last ensemble: every bookie is asked for its
    last entry (fencing the ledger if ``fence``); the answer is final once
    the answering bookies cover every write quorum (see CoverageSet).
    Returns the highest LAC piggybacked on those entries or known by them."""
    md = handle.metadata
    ensemble = md.last_ensemble
    coverage = CoverageSet(len(ensemble), md.write_quorum_size, md.ack_quorum_size)
    lac = -1
    errors: list[str] = []
    client = handle.client

    async def ask(idx: int) -> tuple[int, int | None, str | None]:
        bookie = ensemble[idx]
        try:
            conn = await client.pool.get(bookie)
            resp = await conn.read_entry(
                handle.ledger_id,
                -1,
                fence=fence,
                master_key=handle.master_key if fence else None,
                timeout=handle._timeout,
            )
        except BKError as e:
            return idx, None, f"{bookie}: {e}"
        if resp.status in (ENOENTRY, ENOLEDGER):
            return idx, -1, None
        if resp.status != EOK:
            return idx, None, f"{bookie}: {STATUS_NAMES.get(resp.status, resp.status)}"
        rr = resp.readResponse
        try:
            entry = handle.digest.verify(rr.body)
        except DigestMismatchError as e:
            return idx, None, f"{bookie}: {e}"
        known = entry.last_add_confirmed
        if rr.HasField("maxLAC"):
            known = max(known, rr.maxLAC)
        return idx, known, None

    pending = {asyncio.ensure_future(ask(i)) for i in range(len(ensemble))}
    try:
        while pending:
            done, pending = await asyncio.wait(pending, return_when=asyncio.FIRST_COMPLETED)
            for fut in done:
                idx, known, error = fut.result()
                if error is not None:
                    errors.append(error)
                    continue
                coverage.add(idx)
                lac = max(lac, known if known is not None else -1)
            if coverage.covered():
                break
    finally:
        for fut in pending:
            fut.cancel()
    if not coverage.covered():
        what = "fence" if fence else "read the LAC of"
        raise LedgerRecoveryError(
            f"could not {what} ledger {handle.ledger_id}: too few bookies answered ({'; '.join(errors)})"
        )
    return lac


async def recovery_read(handle: ReadHandle, entry_id: int, *, fence: bool) -> LedgerEntry | None:
    """Recovery's read of one entry: the entry, or None when enough of its
    write set lacks it (it cannot have been acknowledged). Raises when that
    is undecidable. ``fence`` makes the reads fence the ledger."""
    md: LedgerMetadata = handle.metadata
    ensemble = md.ensemble_for(entry_id)
    w, a = md.write_quorum_size, md.ack_quorum_size
    missing = 0
    errors: list[str] = []
    for idx in write_set(entry_id, len(ensemble), w):
        bookie = ensemble[idx]
        try:
            conn = await handle.client.pool.get(bookie)
            resp = await conn.read_entry(
                handle.ledger_id,
                entry_id,
                fence=fence,
                master_key=handle.master_key if fence else None,
                timeout=handle._timeout,
            )
        except BKError as e:
            errors.append(f"{bookie}: {e}")
            continue
        if resp.status in (ENOENTRY, ENOLEDGER):
            missing += 1
            if missing >= w - a + 1:
                return None
            continue
        if resp.status != EOK:
            errors.append(f"{bookie}: status {resp.status}")
            continue
        try:
            entry = handle.digest.verify(resp.readResponse.body, entry_id)
        except DigestMismatchError as e:
            errors.append(f"{bookie}: {e}")
            continue
        return LedgerEntry(handle.ledger_id, entry_id, bytes(entry.payload), entry.length)
    raise LedgerRecoveryError(
        f"ledger {handle.ledger_id}: cannot tell whether entry {entry_id} exists "
        f"({missing} bookies lack it, errors: {'; '.join(errors)})"
    )
