"""``dlog write``: each line of stdin becomes a record.

seq 3 | dlog write events            # last line of stdout: the last DLSN

It never creates the namespace (``dlog namespace create`` does). It creates
a missing stream only if ``createStreamIfNotExists`` (DistributedLog's
setting, true by default), and a stream it created that ends up holding no
record (the first write failed, e.g. "not enough bookies", or stdin was
empty) is deleted again: a failed first write leaves nothing behind.
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import os
import sys
import threading
import time
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

import typer
from rich.markup import escape

from dlog.cli.common import (
    ConfOption,
    SetOption,
    StreamArgument,
    UriOption,
    err_console,
    fail,
    run_namespace,
    short,
)
from dlog.errors import (
    DLogError,
    LockingError,
    LogExistsError,
    LogNotFoundError,
    WriteFencedError,
)

if TYPE_CHECKING:
    from dlog.dlsn import DLSN
    from dlog.log import LogManager
    from dlog.namespace import Namespace
    from dlog.writer import LogWriter

#: Records in flight before waiting for the oldest to be durable.
WRITE_WINDOW = 20_000
#: stdin chunks read ahead of the writer.
STDIN_CHUNKS_AHEAD = 64


def _unbuffered_reader(stream: Any) -> Callable[[int], bytes]:
    """``os.read`` on the stream's file descriptor where it has one: a
    daemon thread blocked in a BufferedReader holds its lock, and Python
    aborts at exit ("could not acquire lock for <stdin> at interpreter
    shutdown") when the write failed while stdin was still open. Nothing
    was read through the buffer before, so bypassing it loses no input."""
    try:
        fd = stream.fileno()
    except (AttributeError, OSError, ValueError):
        return getattr(stream, "read1", None) or stream.read
    return lambda n: os.read(fd, n)


class _StdinChunks:
    """stdin read by a daemon thread (so Ctrl-C never waits on a blocked
    read), a bounded number of chunks ahead of the consumer."""

    def __init__(self, stream: Any, loop: asyncio.AbstractEventLoop) -> None:
        self._queue: asyncio.Queue[bytes | BaseException] = asyncio.Queue()
        self._room = threading.Semaphore(STDIN_CHUNKS_AHEAD)
        self._loop = loop
        read = _unbuffered_reader(stream)
        threading.Thread(target=self._run, args=(read,), daemon=True, name="stdin").start()

    def _run(self, read: Callable[[int], bytes]) -> None:
        while True:
            self._room.acquire()
            item: bytes | BaseException
            try:
                item = read(1 << 16)
            except BaseException as e:  # handed to the event loop
                item = e
            try:
                self._loop.call_soon_threadsafe(self._queue.put_nowait, item)
            except RuntimeError:
                return  # the loop is closed
            if not isinstance(item, bytes) or not item:
                return

    async def next(self) -> bytes:
        """The next chunk; b"" at end of input."""
        item = await self._queue.get()
        self._room.release()
        if isinstance(item, BaseException):
            raise item
        return item


def write(
    stream: str = StreamArgument,
    txid_start: int | None = typer.Option(
        None,
        "--txid-start",
        help="Transaction id of the first record; each next line gets the next id. "
        "Default: the stream's last txid + 1, or the current time in milliseconds "
        "for a stream never written to.",
        show_default=False,
    ),
    progress: bool = typer.Option(
        False, "--progress", help="Count records on stderr (only when stdin is not a terminal)."
    ),
    proxy: str | None = typer.Option(
        None,
        "--proxy",
        help="Write through write proxies (HOST:PORT[,HOST:PORT...], `dlog proxy`) "
        "instead of as the stream's writer; the proxy assigns transaction ids.",
        show_default=False,
    ),
    uri: str | None = UriOption,
    conf: Path | None = ConfOption,
    set_: list[str] | None = SetOption,
) -> None:
    """Write each line of stdin as a record; print the last DLSN.

    Each line becomes one record without its line ending (empty lines are
    empty records). At the end of stdin it prints the record count, then the
    last DLSN in base64 alone on the last line of stdout. The namespace must
    exist (dlog namespace create). A missing stream is created if
    createStreamIfNotExists (the default); a write that leaves no record in
    a stream it created (it failed, or stdin was empty) removes it again.
    """
    if sys.stdin is None:
        raise fail("no stdin to read records from", 2)
    show_progress = progress and not sys.stdin.isatty()
    if proxy is not None:
        if txid_start is not None:
            raise fail("--txid-start cannot be used with --proxy: the proxy assigns txids", 2)
        _write_through_proxy(proxy, stream, show_progress)
        return

    async def body(ns: Namespace) -> tuple[int, int, DLSN | None]:
        lm, created = await _open_stream(ns, stream)
        return await _write_stdin(ns, lm, stream, created, txid_start, show_progress)

    count, first_txid, last = run_namespace(uri, conf, set_, body, create_streams=True)
    if count == 0:
        err_console.print("[yellow]stdin was empty: nothing written[/]")
        return
    assert last is not None
    print(
        f"wrote {count} record(s) to {stream} (txids {first_txid}..{first_txid + count - 1}), "
        f"last DLSN {short(last)}"
    )
    print(last.serialize())


#: Lines per write proxy request (writeBulkWithContext), and bytes.
PROXY_BULK_RECORDS = 1000
PROXY_BULK_BYTES = 1 << 20


def _write_through_proxy(hosts: str, stream: str, show_progress: bool) -> None:
    from dlog.proxy import Client

    try:
        client = Client(hosts)
    except ValueError as e:
        raise fail(f"--proxy: {e}", 2) from None

    async def run() -> tuple[int, DLSN | None]:
        async with client:
            return await _copy_stdin_to_proxy(client, stream, show_progress)

    try:
        count, last = asyncio.run(run())
    except DLogError as e:
        raise fail(str(e)) from None
    if count == 0:
        err_console.print("[yellow]stdin was empty: nothing written[/]")
        return
    assert last is not None
    print(f"wrote {count} record(s) to {stream} through {hosts}, last DLSN {short(last)}")
    print(last.serialize())


async def _copy_stdin_to_proxy(
    client: Any, stream: str, show_progress: bool
) -> tuple[int, DLSN | None]:
    """Lines of stdin in bulks (in order, one bulk in flight): (count, last DLSN)."""
    count = 0
    last: DLSN | None = None
    bar = _progress() if show_progress else None
    task = bar.add_task("write", total=None) if bar else None
    batch: list[bytes] = []
    size = 0

    async def send() -> None:
        nonlocal count, last, size
        if batch:
            dlsns = await client.write_bulk(stream, batch)
            count += len(batch)
            last = dlsns[-1]
            batch.clear()
            size = 0
            if bar is not None and task is not None:
                bar.update(task, completed=count)

    with bar or contextlib.nullcontext():
        async for lines in _stdin_lines():
            for line in lines:
                if batch and (
                    len(batch) >= PROXY_BULK_RECORDS or size + len(line) > PROXY_BULK_BYTES
                ):
                    await send()
                batch.append(line)
                size += len(line) + 16
        await send()
    return count, last


async def _stdin_lines() -> AsyncIterator[list[bytes]]:
    """stdin's lines, a chunk's worth at a time, without their line endings
    (``\\n`` or ``\\r\\n``); a last line without one counts."""
    chunks = _StdinChunks(sys.stdin.buffer, asyncio.get_running_loop())
    rest = b""
    while True:
        chunk = await chunks.next()
        if chunk:
            lines = (rest + chunk).split(b"\n")
            rest = lines.pop()
        else:
            lines, rest = ([rest] if rest else []), b""
        yield [line[:-1] if line.endswith(b"\r") else line for line in lines]
        if not chunk:
            return


async def _open_stream(ns: Namespace, stream: str) -> tuple[LogManager, bool]:
    """The stream, and whether this call created it (only if
    ``createStreamIfNotExists``, DistributedLog's default)."""
    created = False
    if not await ns.log_exists(stream):
        if not ns.conf.create_stream_if_not_exists:
            raise LogNotFoundError(
                f"stream {stream!r} does not exist in {ns.uri} and createStreamIfNotExists "
                f"is false: create it with `dlog stream create {stream}`"
            )
        with contextlib.suppress(LogExistsError):  # created meanwhile: not ours
            await ns.create_log(stream)
            created = True
    return await ns.open_log(stream), created


async def _write_stdin(
    ns: Namespace,
    lm: LogManager,
    stream: str,
    created: bool,
    txid_start: int | None,
    show_progress: bool,
) -> tuple[int, int, DLSN | None]:
    """Write each line of stdin as a record: (count, first txid, last DLSN).

    If this call created the stream and no record of it is acknowledged
    (the write failed, or stdin was empty), the stream is deleted again."""
    writer: LogWriter | None = None
    had_segments: bool | None = None
    try:
        writer = await lm.open_writer()
        had_segments = bool(await lm.store.get_segments(stream))
        # Ours to discard: created by this call, and no one wrote to it
        # before this writer took the lock (no one else can while it holds it).
        discard = created and not had_segments
        if txid_start is not None:
            txid = txid_start
        elif had_segments:
            txid = writer.last_txid + 1
        else:
            txid = int(time.time() * 1000)
        count, last = await _copy_stdin(writer, txid, show_progress)
        if discard and count == 0:
            await _discard_unwritten(ns, lm, writer, stream)
    except BaseException:
        # Failed or interrupted (Ctrl-C) anywhere, even while the writer was
        # still opening: a stream this call created goes again unless a
        # record of it is acknowledged or someone else wrote to it.
        if created and not had_segments:
            await _discard_created(ns, lm, writer, stream, checked=had_segments is not None)
        raise
    finally:
        if writer is not None:
            await writer.close()
    return count, txid, last


async def _discard_created(
    ns: Namespace, lm: LogManager, writer: LogWriter | None, stream: str, *, checked: bool
) -> None:
    """:func:`_discard_unwritten` for a stream this call created, taking its
    lock first if the writer never finished opening, and looking at its
    segments under the lock unless that was done (``checked``)."""
    own = writer
    try:
        if own is None:
            own = await lm.open_writer()
        if not checked and await lm.store.get_segments(stream):
            return  # someone else wrote to it before we held the lock
        await _discard_unwritten(ns, lm, own, stream)
    except DLogError as e:
        _warn_kept(stream, e)
    finally:
        if writer is None and own is not None:
            await own.close()


async def _copy_stdin(writer: LogWriter, txid: int, show_progress: bool) -> tuple[int, DLSN | None]:
    """Lines of stdin as records from ``txid`` on: (count, last DLSN)."""
    from dlog.record import LogRecord

    window: collections.deque[asyncio.Future[DLSN]] = collections.deque()
    count = 0
    last: DLSN | None = None
    bar = _progress() if show_progress else None
    task = bar.add_task("write", total=None) if bar else None
    with bar or contextlib.nullcontext():
        async for lines in _stdin_lines():
            for line in lines:
                window.append(writer.write_nowait(LogRecord(txid, line)))
                txid += 1
                count += 1
            while len(window) > WRITE_WINDOW:
                last = await window.popleft()
            if bar is not None and task is not None:
                bar.update(task, completed=count)
        await writer.flush()
        for fut in window:
            last = await fut
    return count, last


async def _discard_unwritten(ns: Namespace, lm: LogManager, writer: LogWriter, stream: str) -> None:
    """Delete the stream this call created unless a record of it is
    acknowledged, while ``writer`` still holds its lock: a failed (or
    empty) first write leaves nothing behind, not even the segment and
    ledger it started. What is still in flight is settled first (an
    interrupted write may yet be acknowledged); a stream someone has
    subscribed to meanwhile, or that this writer no longer owns, is kept."""
    from dlog.dlsn import DLSN

    try:
        try:
            await writer.flush()
        except (LockingError, WriteFencedError):
            return  # lost the lock or fenced: the stream may be another writer's now
        except DLogError:
            pass  # the writer failed: nothing more of it will be acknowledged
        if writer.last_dlsn != DLSN.INVALID:
            return
        if await lm.subscriptions.list_subscribers():
            return
        await ns.delete_log(stream)
    except DLogError as e:
        _warn_kept(stream, e)


def _warn_kept(stream: str, error: DLogError) -> None:
    err_console.print(
        f"[yellow]warning: could not remove stream {escape(stream)}, created by this "
        f"write: {escape(str(error))}[/]",
        soft_wrap=True,
    )


def _progress():  # type: ignore[no-untyped-def]
    from rich.progress import Progress, SpinnerColumn, TextColumn, TimeElapsedColumn

    return Progress(
        SpinnerColumn(),
        TextColumn("{task.completed:,} records"),
        TimeElapsedColumn(),
        console=err_console,
        transient=True,
    )
