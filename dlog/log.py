"""One stream of a namespace: its writer, readers, positions and upkeep."""

from __future__ import annotations

import logging
import time
from typing import TYPE_CHECKING

from dlog.dlsn import DLSN
from dlog.errors import LogEmptyError, NoSuchLedgerError
from dlog.reader import LogReader
from dlog.record import MAX_TXID, decode_entry
from dlog.segment import LogSegmentMetadata
from dlog.writer import LogWriter

if TYPE_CHECKING:
    from dlog.conf.dlog import DLogConfig
    from dlog.namespace import Namespace

log = logging.getLogger(__name__)


class LogManager:
    """A stream (DistributedLog's DistributedLogManager). Get one with
    ``await namespace.open_log(name)``."""

    def __init__(self, namespace: Namespace, name: str) -> None:
        self.namespace = namespace
        self.name = name
        self.conf: DLogConfig = namespace.conf
        self.store = namespace.store
        self.password = self.conf.bk_digest_pw.encode()
        #: The BP-44 data set of this stream's ledgers.
        self.data_set = f"{namespace.path}/{name}"
        self._subscriptions = None
        self._readers: set[LogReader] = set()
        self._writers: set[LogWriter] = set()

    def __repr__(self) -> str:
        return f"LogManager({self.data_set!r})"

    # -- writers and readers -------------------------------------------------
    async def open_writer(self) -> LogWriter:
        """Become the stream's single writer (fencing any previous one)."""
        writer = await LogWriter(self)._open()
        self._writers.add(writer)
        return writer

    async def open_reader(
        self, from_dlsn: DLSN | None = None, from_txid: int | None = None
    ) -> LogReader:
        """A reader starting at ``from_dlsn`` (default: the first record) or at
        the first record whose txid is at least ``from_txid``."""
        if from_dlsn is not None and from_txid is not None:
            raise ValueError("give from_dlsn or from_txid, not both")
        await self.store.get_segments(self.name)  # LogNotFoundError for a missing stream
        reader = LogReader(self, from_dlsn=from_dlsn, from_txid=from_txid)._start()
        self._readers.add(reader)
        return reader

    # -- subscriptions ------------------------------------------------------------
    @property
    def subscriptions(self):  # type: ignore[no-untyped-def]
        """This stream's SubscriptionsStore: the log-segment store when
        ``logSegmentBasedSubscriptionsStoreEnabled``, else ZooKeeper's."""
        if self._subscriptions is None:
            if self.conf.log_segment_based_subscriptions_store_enabled:
                from subscriptions.log_segment import LogSegmentSubscriptionsStore

                self._subscriptions = LogSegmentSubscriptionsStore(self)
            else:
                from subscriptions.zk import ZKSubscriptionsStore

                self._subscriptions = ZKSubscriptionsStore(self)
        return self._subscriptions

    async def subscribe(self, subscriber_id: str):  # type: ignore[no-untyped-def]
        """A consumer reading from just after ``subscriber_id``'s last commit;
        this process becomes the subscription's owner."""
        from subscriptions.consumer import Consumer

        return await Consumer(self, subscriber_id)._open()

    # -- positions -----------------------------------------------------------------
    async def _segments(self) -> list[tuple[LogSegmentMetadata, int]]:
        return await self.store.get_segments(self.name)

    async def get_first_dlsn(self) -> DLSN:
        """DLSN of the first record that is not truncated."""
        for seg, _ in await self._segments():
            if seg.is_truncated or (not seg.in_progress and seg.record_count == 0):
                continue
            if seg.is_partially_truncated:
                return seg.min_active_dlsn
            return seg.first_dlsn
        raise LogEmptyError(f"stream {self.name!r} has no records")

    async def _last_record_of(self, seg: LogSegmentMetadata) -> tuple[DLSN, int] | None:
        """(DLSN, txid) of the last user record of a segment, or None."""
        if not seg.in_progress:
            if seg.record_count == 0 or seg.last_entry_id < 0:
                return None
            last_entry = seg.last_entry_id
        else:
            try:
                rh = await self.namespace.bk.open_ledger(
                    seg.ledger_id, self.password, recovery=False
                )
            except NoSuchLedgerError:
                return None
            try:
                last_entry = await rh.read_last_add_confirmed()
                if last_entry < 0:
                    return None
            finally:
                await rh.close()
        rh = await self.namespace.bk.open_ledger(seg.ledger_id, self.password, recovery=False)
        try:
            for entry_id in range(last_entry, -1, -1):
                entry = (await rh.read_unconfirmed(entry_id, entry_id))[0]
                records = [
                    r
                    for r in decode_entry(
                        entry.data, seg.log_segment_sequence_no, entry_id, seg.start_sequence_id
                    )
                    if not r.control and not r.end_of_stream
                ]
                if records:
                    return records[-1].dlsn, records[-1].txid
        finally:
            await rh.close()
        return None

    async def get_last_dlsn(self) -> DLSN:
        """DLSN of the last durable record (LogEmptyError when there is none)."""
        for seg, _ in reversed(await self._segments()):
            if seg.is_truncated:
                break
            found = await self._last_record_of(seg)
            if found is not None:
                return found[0]
        raise LogEmptyError(f"stream {self.name!r} has no records")

    async def get_last_txid(self) -> int:
        for seg, _ in reversed(await self._segments()):
            if not seg.in_progress and seg.record_count and seg.last_txid not in (None, MAX_TXID):
                return seg.last_txid
            found = await self._last_record_of(seg)
            if found is not None:
                return found[1]
        raise LogEmptyError(f"stream {self.name!r} has no records")

    async def get_record_count(self) -> int:
        """Records not truncated (an in-progress segment counts up to its LAC)."""
        total = 0
        for seg, _ in await self._segments():
            if seg.is_truncated:
                continue
            if seg.in_progress:
                found = await self._last_record_of(seg)
                if found is not None:
                    total += await self._position_of(seg, found[0])
                continue
            count = seg.record_count
            if seg.is_partially_truncated:
                count = max(0, count - await self._position_of(seg, seg.min_active_dlsn) + 1)
            total += count
        return total

    async def _position_of(self, seg: LogSegmentMetadata, dlsn: DLSN) -> int:
        """Position (1-based) within ``seg`` of the record at ``dlsn``."""
        rh = await self.namespace.bk.open_ledger(seg.ledger_id, self.password, recovery=False)
        try:
            entry = (await rh.read_unconfirmed(dlsn.entry_id, dlsn.entry_id))[0]
        finally:
            await rh.close()
        for r in decode_entry(
            entry.data, seg.log_segment_sequence_no, dlsn.entry_id, seg.start_sequence_id
        ):
            if r.dlsn >= dlsn:
                return r.position
        return 0

    # -- upkeep --------------------------------------------------------------------
    async def truncate(self, dlsn: DLSN) -> bool:
        """Mark every record before ``dlsn`` truncated: whole completed
        segments become TRUNCATED, the completed segment holding ``dlsn``
        PARTIALLY_TRUNCATED from ``dlsn`` on. Readers skip truncated data;
        retention deletes truncated segments and their ledgers."""
        segments = await self._segments()
        try:
            last = await self.get_last_dlsn()
        except LogEmptyError:
            last = None
        if last is None or dlsn > last.next():
            from dlog.errors import IncorrectParameterError

            raise IncorrectParameterError(
                f"cannot truncate stream {self.name!r} at {dlsn}: it is past the last record ({last})"
            )
        changed = False
        for seg, version in segments:
            if seg.in_progress:
                break
            if seg.last_dlsn < dlsn:
                if not seg.is_truncated:
                    await self.store.update_segment(self.name, seg.mark_truncated(), version)
                    changed = True
                continue
            if (
                seg.log_segment_sequence_no == dlsn.log_segment_sequence_no
                and dlsn > seg.min_active_dlsn
            ):
                await self.store.update_segment(self.name, seg.truncate_to(dlsn), version)
                changed = True
            break
        return changed

    async def purge_expired(self) -> list[int]:
        """Delete completed segments past ``logSegmentRetentionHours`` and
        truncated ones, always keeping the newest completed segment.
        Returns the deleted sequence numbers."""
        segments = await self._segments()
        completed = [(s, v) for s, v in segments if not s.in_progress]
        if len(completed) <= 1:
            return []
        cutoff = int(time.time() * 1000) - int(self.conf.log_segment_retention_hours * 3600 * 1000)
        deleted = []
        by_age = not self.conf.explicit_truncation_by_app
        for seg, version in completed[:-1]:
            if not (seg.is_truncated or (by_age and seg.completion_time < cutoff)):
                continue
            # Metadata first: a ledger without metadata is an orphan the
            # auditor can flag; metadata without its ledger would break readers.
            await self.store.delete_segment(self.name, seg, version)
            try:
                await self.namespace.bk.delete_ledger(seg.ledger_id)
            except NoSuchLedgerError:
                pass
            deleted.append(seg.log_segment_sequence_no)
            log.info(
                "stream %s: purged segment %d (ledger %d)",
                self.name,
                seg.log_segment_sequence_no,
                seg.ledger_id,
            )
        return deleted

    async def close(self) -> None:
        """Close this stream's readers, writers and subscriptions."""
        for reader in list(self._readers):
            await reader.close()
        self._readers.clear()
        for writer in list(self._writers):
            await writer.close()
        self._writers.clear()
        if self._subscriptions is not None:
            await self._subscriptions.close()
