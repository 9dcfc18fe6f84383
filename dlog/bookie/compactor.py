"""Compaction: rewrite an entry log's live entries into a new log, then
remove the old one.

An entry is live when its ledger is live and the location index still
points at it (an entry rewritten since lives elsewhere). The steps, each
safe to be killed at:

1. copy the live entries into a new log ``<C>.log.compacting`` (a name no
   reader or scan looks at), throttled to ``compactionRateByEntries`` or
   ``compactionRateByBytes``, and seal it (ledgers map, fsync);
2. record the move: a marker file ``compaction.<X>.<C>``, synced, then
   rename ``<C>.log.compacting`` to ``<C>.log``;
3. on the storage thread (so no flush interleaves), point the index at the
   new locations of the entries it still has at the old ones, and sync it;
4. remove ``<X>.log``, then the marker.

A crash before 2 leaves a ``.compacting`` file nobody indexes: recovery
deletes it. A crash after 2 leaves the marker: recovery finishes the rename
and steps 3 and 4 from the new log's own contents (every entry of C whose
index location is still in X moves to C). The index never points at a
removed file: X goes only after the index is durable without it.
"""

from __future__ import annotations

import dataclasses
import logging
import os
import re
import time
from collections.abc import Callable
from pathlib import Path

from dlog.bookie import fileio
from dlog.bookie.entry_location_index import EntryLocationIndex
from dlog.bookie.entry_log import (
    COMPACTING_SUFFIX,
    EntryLogFile,
    EntryLogger,
    log_file_name,
    split_location,
)
from dlog.bookie.entry_log_metadata import EntryLogMetadata
from dlog.failpoints import failpoint

log = logging.getLogger(__name__)

_MARKER = re.compile(r"^compaction\.([0-9a-f]+)\.([0-9a-f]+)$")

#: The failpoints between compaction's steps, in order (tests crash at each).
FAILPOINTS = (
    "compaction.copying",
    "compaction.after_copy",
    "compaction.after_marker",
    "compaction.after_install",
    "compaction.after_index",
    "compaction.after_remove",
)

#: Entries copied between checks of the throttle.
_BATCH = 256


def marker_name(old_log: int, new_log: int) -> str:
    return f"compaction.{old_log:x}.{new_log:x}"


@dataclasses.dataclass(frozen=True)
class CompactionResult:
    log_id: int
    entries: int  # live entries rewritten
    rewritten_bytes: int  # bytes of those entries
    freed_bytes: int  # size of the removed log


class Throttle:
    """At most ``rate`` entries (or bytes) a second, by sleeping."""

    def __init__(
        self,
        rate: int,
        *,
        by_bytes: bool,
        clock: Callable[[], float] = time.monotonic,
        sleep: Callable[[float], None] = time.sleep,
    ) -> None:
        self.rate = rate
        self.by_bytes = by_bytes
        self._clock = clock
        self._sleep = sleep
        self._start = clock()
        self._done = 0

    def reset(self) -> None:
        self._start = self._clock()
        self._done = 0

    def acquire(self, entries: int, nbytes: int) -> None:
        self._done += nbytes if self.by_bytes else entries
        ahead = self._done / self.rate - (self._clock() - self._start)
        if ahead > 0:
            self._sleep(ahead)


class Compactor:
    """Compacts the entry logs of one ledger directory's storage.

    ``on_storage_thread`` runs a function on the storage's flush thread and
    returns its result (index updates must not interleave with a flush's)."""

    def __init__(
        self,
        logger: EntryLogger,
        locations: EntryLocationIndex,
        on_storage_thread: Callable[[Callable[[], None]], None],
        throttle: Throttle,
    ) -> None:
        self.logger = logger
        self.locations = locations
        self.on_storage_thread = on_storage_thread
        self.throttle = throttle

    def compact(self, meta: EntryLogMetadata, live: Callable[[int], bool]) -> CompactionResult:
        old = meta.log_id
        moves: list[tuple[int, int, int]] = []  # ledger, entry, new location
        out: EntryLogFile | None = None
        nbytes = 0
        self.throttle.reset()
        try:
            batch = 0
            for lid, eid, loc, size in self.logger.scan(old):
                if not live(lid) or self.locations.get(lid, eid) != loc:
                    continue
                data = self.logger.read_entry(loc, lid, eid)
                if out is None:
                    out = self.logger.create_log(compacting=True)
                moves.append((lid, eid, out.add(lid, data)))
                nbytes += size
                batch += 1
                if batch == _BATCH:
                    self.throttle.acquire(batch, nbytes)
                    batch = 0
                if len(moves) == 1:
                    failpoint("compaction.copying")
            if out is not None:
                out.seal()
        except BaseException:
            if out is not None:
                out.abandon()
                out.path.unlink(missing_ok=True)
            raise
        failpoint("compaction.after_copy")
        if out is not None:
            marker = out.directory / marker_name(old, out.log_id)
            _write_marker(marker)
            failpoint("compaction.after_marker")
            out.path = self.logger.install(out.directory, out.log_id, out.path)
            failpoint("compaction.after_install")
            self._repoint(old, moves)
            failpoint("compaction.after_index")
        else:
            marker = None
        freed = self.logger.remove_log(old)
        failpoint("compaction.after_remove")
        if marker is not None:
            marker.unlink(missing_ok=True)
        log.info(
            "compacted entry log %x: %d live entries (%d bytes) moved%s, %d bytes freed",
            old,
            len(moves),
            nbytes,
            f" to {out.log_id:x}" if out is not None else "",
            freed,
        )
        return CompactionResult(old, len(moves), nbytes, freed)

    def _repoint(self, old: int, moves: list[tuple[int, int, int]]) -> None:
        """Point the index at the new copies ``(ledger, entry, location)`` of
        the entries it still has in log ``old``, durably, on the storage
        thread. (An entry stored again since, elsewhere, keeps its place.)"""

        def update() -> None:
            get = self.locations.get
            self.locations.add_batch(
                [(lid, eid, loc) for lid, eid, loc in moves if _in_log(get(lid, eid), old)]
            )

        self.on_storage_thread(update)

    def recover(self) -> None:
        """Finish or undo compactions a crash interrupted (see the module
        docstring). Run before the first compaction."""
        for d in self.logger.ledger_dirs:
            for name in sorted(os.listdir(d)):
                m = _MARKER.match(name)
                if m is not None:
                    self._finish(d, int(m.group(1), 16), int(m.group(2), 16), d / name)
            for name in sorted(os.listdir(d)):
                if name.endswith(COMPACTING_SUFFIX):
                    log.info("removing %s, an unfinished compaction's output", name)
                    (d / name).unlink(missing_ok=True)

    def _finish(self, d: Path, old: int, new: int, marker: Path) -> None:
        compacting = d / (log_file_name(new) + COMPACTING_SUFFIX)
        path = compacting if compacting.exists() else d / log_file_name(new)
        self.logger.install(d, new, path)
        if self.logger.directory_of(old) is not None:
            self._repoint(old, [(lid, eid, loc) for lid, eid, loc, _ in self.logger.scan(new)])
            self.logger.remove_log(old)
        marker.unlink(missing_ok=True)
        log.info("finished an interrupted compaction of entry log %x into %x", old, new)


def _in_log(loc: int | None, log_id: int) -> bool:
    return loc is not None and split_location(loc)[0] == log_id


def _write_marker(path: Path) -> None:
    """An empty file, durably: its name is the record."""
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    os.close(fd)
    fileio.sync_dir(path.parent, "compaction.fsync")
