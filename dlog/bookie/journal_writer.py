"""The journal's writer process: writes and syncs what the bookie journals.

Why a process and not a thread: a thread that returns from ``write`` or
``fdatasync`` has to win the bookie's interpreter lock back before it can
report the add durable, and under load the event loop and the storage flush
hold that lock in turn. Measured per add at half load, every journal stage
stretched while a flush ran (p99: write 8.0 ms against 6.2, fsync 3.6
against 1.9). This process has an interpreter of its own, so its stages are
the disk's.

It reads requests (:mod:`dlog.bookie.journal_pipe`) from one pipe: every
group available is written as one batch with one fdatasync
(:class:`dlog.bookie.journal_file.JournalFile`), and one ack then answers
them all on the other pipe. While it writes, the next groups wait in the
pipe, so batches grow with the disk's latency: group commit.

After a failure (ENOSPC, EIO) it writes nothing more and answers every group
``STILL_FAILED`` until a ``RESUME`` request, which starts a new file. A
``FAILPOINTS`` request re-arms its failpoints (:mod:`dlog.failpoints`), as
a test armed them in the bookie's process. It exits when the bookie closes
the request pipe (or dies), after syncing.

Run by :class:`dlog.bookie.journal.Journal`, never by hand::

    python -m dlog.bookie.journal_writer REQ_FD ACK_FD DIRECTORY MAX_SIZE PREALLOC ALIGN BUFFER SYNC
"""

from __future__ import annotations

import errno
import logging
import os
import signal
import sys
import time
from pathlib import Path

from dlog import failpoints
from dlog.bookie import journal_pipe as jp
from dlog.bookie.journal_file import FileSettings, JournalFile

log = logging.getLogger("dlog.bookie.journal_writer")

#: Most bytes taken from the pipe at once (the pipe itself holds 1 MiB).
READ_SIZE = 4 * 1024 * 1024


def _send(fd: int, ack: jp.Ack) -> None:
    data = memoryview(ack.encode())
    while len(data):
        n = os.write(fd, data)
        data = data[n:]


def _ack(
    jfile: JournalFile,
    status: int,
    groups: int,
    times: tuple[float, float, float],
    message: str = "",
) -> jp.Ack:
    s = jfile.stats
    return jp.Ack(
        status,
        groups,
        jfile.file_id,
        jfile.offset,
        *times,
        s.writes,
        s.fsyncs,
        s.bytes_written,
        s.rolls,
        s.records_synced,
        message,
    )


class _Writer:
    """The writer's state: the file, how many groups it answered, and
    whether it failed."""

    def __init__(self, ack_fd: int, jfile: JournalFile) -> None:
        self.ack_fd = ack_fd
        self.jfile = jfile
        self.answered = 0
        self.failed: OSError | None = None
        self.reopen = False

    def write(self, batch: list[tuple[int, list[bytes | memoryview]]], taken: float) -> None:
        """Write and sync ``batch``, then answer it."""
        self.answered += len(batch)
        if self.failed is not None:
            now = time.monotonic()
            _send(self.ack_fd, _ack(self.jfile, jp.STILL_FAILED, self.answered, (taken, now, now)))
            return
        try:
            if self.reopen:
                self.jfile.reopen()
                self.reopen = False
            written = self.jfile.write_batch(batch)
        except OSError as e:
            self.failed = e
            log.error("journal write failed in %s: %s", self.jfile.directory, e)
            now = time.monotonic()
            status = e.errno if e.errno and e.errno > 0 else errno.EIO
            message = e.strerror or str(e)
            _send(self.ack_fd, _ack(self.jfile, status, self.answered, (taken, now, now), message))
            return
        ack = _ack(self.jfile, jp.OK, self.answered, (taken, written, time.monotonic()))
        _send(self.ack_fd, ack)

    def control(self, req: jp.Request) -> None:
        if req.kind == jp.RESUME:
            self.failed, self.reopen = None, True
        elif req.kind == jp.FAILPOINTS:
            failpoints.configure(bytes(req.payload).decode())


def serve(req_fd: int, ack_fd: int, jfile: JournalFile) -> None:
    """Answer requests until the request pipe closes. Every group read at
    once is one batch (one sync), except that a control request between
    groups ends a batch: it applies to the groups after it."""
    reader = jp.RequestReader()
    writer = _Writer(ack_fd, jfile)
    # One buffer for every read: os.read would allocate READ_SIZE afresh
    # each time, and the kernel would map and zero new pages for every group
    # (about 0.1 ms of system time per 120 KB here). The groups read are
    # written before the next read reuses it.
    buffer = bytearray(READ_SIZE)
    view = memoryview(buffer)
    while True:
        n = os.readv(req_fd, [buffer])
        if not n:
            if reader.pending:
                log.error("journal writer: the bookie went away in the middle of a request")
            return
        taken = time.monotonic()
        batch: list[tuple[int, list[bytes | memoryview]]] = []
        for req in reader.feed(view[:n]):
            if req.kind == jp.GROUP:
                batch.append((req.records, [req.payload]))
                continue
            if batch:
                writer.write(batch, taken)
                batch = []
            writer.control(req)
        if batch:
            writer.write(batch, taken)


def main(argv: list[str]) -> int:
    # Ctrl-C at a terminal, or a service manager stopping the bookie, signals
    # the whole process group: the bookie then closes its journal, which
    # needs this process until the last group is synced. It ends with the
    # request pipe (the bookie's close, or its death).
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    req_fd, ack_fd = int(argv[0]), int(argv[1])
    directory = Path(argv[2])
    settings = FileSettings.from_args(argv[3:8])
    logging.basicConfig(
        level=os.environ.get("DLOG_JOURNAL_WRITER_LOG", "INFO"),
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
        stream=sys.stderr,
    )
    jfile = JournalFile(directory, settings)
    try:
        jfile.open_next()
    except OSError as e:
        now = time.monotonic()
        _send(ack_fd, _ack(jfile, e.errno or errno.EIO, 0, (now, now, now), e.strerror or str(e)))
        return 1
    now = time.monotonic()
    _send(ack_fd, _ack(jfile, jp.OK, 0, (now, now, now)))
    try:
        serve(req_fd, ack_fd, jfile)
    finally:
        jfile.close()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
