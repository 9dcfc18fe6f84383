"""``dlog stream``, ``dlog write``, ``dlog tail`` and ``dlog dlsn``: streams
from the command line.

    export DLOG_URI=distributedlog://127.0.0.1:2181/messaging
    dlog stream create events
    seq 3 | dlog write events            # last line of stdout: the last DLSN
    dlog tail events -n 10               # DLSN<TAB>payload
    dlog tail events --from latest --follow
    dlog stream show events
    dlog stream truncate events --to AQAAAAAAAAACAAAAAAAAAAAAAAAAAAAAAA==

Every stream command takes ``--uri`` (default ``$DLOG_URI``), ``--conf FILE``
(DistributedLog configuration keys) and repeated ``--set key=value``. Each
runs its asyncio work in ``asyncio.run``; dlog errors become one red line on
stderr and exit code 1 (2 for bad arguments).
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import datetime
import os
import signal
import sys
import threading
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

import typer
from rich.console import Console
from rich.markup import escape
from rich.table import Table

from dlog.cli.common import (
    ConfOption,
    ForceOption,
    SetOption,
    console,
    err_console,
    fail,
    load_config,
    setup_logging,
)
from dlog.errors import DLogError

if TYPE_CHECKING:
    from dlog.conf.dlog import DLogConfig
    from dlog.dlsn import DLSN
    from dlog.namespace import Namespace
    from dlog.record import LogRecordWithDLSN

T = TypeVar("T")

app = typer.Typer(
    help="Streams of a namespace: create, list, show, delete, truncate.", no_args_is_help=True
)
dlsn_app = typer.Typer(
    help="Convert DLSNs between base64 and their three numbers.", no_args_is_help=True
)

UriOption = typer.Option(
    None,
    "--uri",
    "-u",
    help="Namespace URI, e.g. distributedlog://127.0.0.1:2181/messaging (default: $DLOG_URI).",
    show_default=False,
)
StreamArgument = typer.Argument(..., help="Stream name.")

#: Without --follow, tail stops after this long without a record once it has
#: reached the last record that existed when it started.
CAUGHT_UP_IDLE_S = 1.0
#: ... and waits up to this long for records known to exist (slow bookies).
CATCH_UP_TIMEOUT_S = 30.0
#: Records per read (and per stdout write) in tail.
TAIL_BATCH = 1000
#: write: records in flight before waiting for the oldest to be durable.
WRITE_WINDOW = 20_000
#: write: stdin chunks read ahead of the writer.
STDIN_CHUNKS_AHEAD = 64


# ---------------------------------------------------------------------------
# plumbing
# ---------------------------------------------------------------------------


def resolve(
    uri: str | None, conf: Path | None, sets: list[str] | None, **overrides: object
) -> tuple[str, DLogConfig]:
    """The namespace URI (``--uri`` or ``$DLOG_URI``) and the configuration;
    bad values exit with code 2."""
    from dlog.conf.dlog import DLogConfig
    from dlog.uri import parse_namespace_uri

    uri = uri or os.environ.get("DLOG_URI") or None
    if not uri:
        raise fail("no namespace URI: pass --uri or set DLOG_URI", 2)
    try:
        parse_namespace_uri(uri)
    except ValueError as e:
        raise fail(f"invalid namespace URI: {e}", 2) from None
    try:
        cfg = load_config(DLogConfig, conf, sets)
        if overrides:
            cfg = cfg.with_overrides(overrides)
    except DLogError as e:
        raise fail(str(e), 2) from None
    return uri, cfg


def run_namespace(
    uri: str | None,
    conf: Path | None,
    sets: list[str] | None,
    body: Callable[[Namespace], Awaitable[T]],
    *,
    create_streams: bool = False,
) -> T:
    """Open the namespace, run ``body(ns)`` in a fresh event loop, close it.

    Unless ``create_streams``, opening a missing stream fails (commands that
    only look at a stream must not create it)."""
    overrides: dict[str, object] = {} if create_streams else {"createStreamIfNotExists": False}
    ns_uri, cfg = resolve(uri, conf, sets, **overrides)
    setup_logging(default="WARNING")

    async def go() -> T:
        from dlog.namespace import Namespace

        ns = await Namespace.open(ns_uri, cfg, bind=create_streams)
        try:
            return await body(ns)
        finally:
            await ns.close()

    try:
        return asyncio.run(go())
    except BrokenPipeError:  # `| head`: stop quietly, without a second error at exit
        with contextlib.suppress(OSError):
            os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        raise typer.Exit(0) from None
    except KeyboardInterrupt:
        raise fail("interrupted", 130) from None
    except DLogError as e:
        raise fail(str(e)) from None
    except (OSError, TimeoutError, ValueError) as e:
        raise fail(f"{type(e).__name__}: {e}") from None


def _parse_dlsn(text: str, option: str) -> DLSN:
    from dlog.dlsn import parse_dlsn

    try:
        return parse_dlsn(text)
    except DLogError as e:
        raise fail(f"{option}: {e}", 2) from None


def short(dlsn: DLSN) -> str:
    """``seq/entry/slot``, which ``parse_dlsn`` (and so --from/--to) accepts."""
    return f"{dlsn.log_segment_sequence_no}/{dlsn.entry_id}/{dlsn.slot_id}"


_ESCAPES = str.maketrans({"\\": "\\\\", "\n": "\\n", "\r": "\\r"})


def format_record(record: LogRecordWithDLSN) -> str:
    """``<base64 DLSN>\\t<payload>``: the payload decoded as UTF-8 (bad
    bytes become U+FFFD) with backslash, newline and carriage return
    escaped as ``\\\\``, ``\\n`` and ``\\r``, so every record is one line."""
    text = record.payload.decode("utf-8", "replace").translate(_ESCAPES)
    return f"{record.dlsn.serialize()}\t{text}\n"


def _not_found(ns: Namespace, name: str) -> DLogError:
    from dlog.errors import LogNotFoundError

    return LogNotFoundError(f"stream {name!r} does not exist in {ns.uri}")


def _ms_time(ms: int) -> str:
    return datetime.datetime.fromtimestamp(ms / 1000).strftime("%Y-%m-%d %H:%M:%S")


# ---------------------------------------------------------------------------
# dlog stream ...
# ---------------------------------------------------------------------------


@app.command("create")
def create(
    name: str = StreamArgument,
    uri: str | None = UriOption,
    conf: Path | None = ConfOption,
    set_: list[str] | None = SetOption,
) -> None:
    """Create a stream (error if it exists)."""

    async def body(ns: Namespace) -> None:
        await ns.create_log(name)

    run_namespace(uri, conf, set_, body)
    console.print(f"created stream {escape(name)}")


@app.command("list")
def list_streams(
    prefix: str | None = typer.Option(None, "--prefix", "-p", help="Only names starting with P."),
    uri: str | None = UriOption,
    conf: Path | None = ConfOption,
    set_: list[str] | None = SetOption,
) -> None:
    """List the namespace's streams, one per line."""

    async def body(ns: Namespace) -> list[str]:
        return await ns.get_logs(prefix)

    names = run_namespace(uri, conf, set_, body)
    for n in names:
        print(n)
    if not names:
        what = f"starting with {prefix!r}" if prefix else "in this namespace"
        err_console.print(f"[yellow]no streams {escape(what)}[/]")


@app.command("show")
def show(
    name: str = StreamArgument,
    uri: str | None = UriOption,
    conf: Path | None = ConfOption,
    set_: list[str] | None = SetOption,
) -> None:
    """A table of the stream's segments, then its first/last DLSN and record count."""
    from dlog.errors import LogEmptyError

    async def body(ns: Namespace) -> tuple[list[Any], DLSN | None, DLSN | None, int]:
        lm = await ns.open_log(name)
        segments = [seg for seg, _ in await lm.store.get_segments(name)]
        first = last = None
        with contextlib.suppress(LogEmptyError):
            first = await lm.get_first_dlsn()
        with contextlib.suppress(LogEmptyError):
            last = await lm.get_last_dlsn()
        count = await lm.get_record_count()
        return segments, first, last, count

    segments, first, last, count = run_namespace(uri, conf, set_, body)
    if segments:
        table = Table(title=f"stream {escape(name)}: {len(segments)} segment(s)")
        for col, justify in (
            ("seqno", "right"),
            ("state", "left"),
            ("truncation", "left"),
            ("ledger", "right"),
            ("first txid", "right"),
            ("last txid", "right"),
            ("records", "right"),
            ("last entry", "right"),
            ("first DLSN", "left"),
            ("completed at", "left"),
        ):
            table.add_column(col, justify=justify, overflow="fold")  # type: ignore[arg-type]
        for seg in segments:
            done = not seg.in_progress
            if seg.is_truncated:
                trunc = "[red]truncated[/]"
            elif seg.is_partially_truncated:
                trunc = f"[yellow]partially truncated (from {short(seg.min_active_dlsn)})[/]"
            else:
                trunc = "active"
            table.add_row(
                str(seg.log_segment_sequence_no),
                "completed" if done else "[green]in-progress[/]",
                trunc,
                str(seg.ledger_id),
                str(seg.first_txid),
                str(seg.last_txid) if done else "-",
                str(seg.record_count) if done else "-",
                str(seg.last_entry_id) if done else "-",
                short(seg.first_dlsn),
                _ms_time(seg.completion_time) if done else "-",
            )
        if console.is_terminal:
            console.print(table)
        else:  # piped: keep the table's natural width instead of 80 columns
            Console(width=250).print(table)
    else:
        print(f"stream {name} has no segments")
    print(f"first DLSN:   {f'{short(first)}  {first.serialize()}' if first else '-'}")
    print(f"last DLSN:    {f'{short(last)}  {last.serialize()}' if last else '-'}")
    print(f"record count: {count}")


@app.command("delete")
def delete(
    name: str = StreamArgument,
    force: bool = ForceOption,
    uri: str | None = UriOption,
    conf: Path | None = ConfOption,
    set_: list[str] | None = SetOption,
) -> None:
    """Delete a stream with its segments' ledgers (asks first unless --force)."""

    async def body(ns: Namespace) -> None:
        if not await ns.log_exists(name):
            raise _not_found(ns, name)
        if not force:
            typer.confirm(f"Delete stream {name!r} and all its records?", abort=True, err=True)
        await ns.delete_log(name)

    run_namespace(uri, conf, set_, body)
    console.print(f"deleted stream {escape(name)}")


@app.command("truncate")
def truncate(
    name: str = StreamArgument,
    to: str = typer.Option(
        ...,
        "--to",
        help="Keep records from this DLSN on (base64, S/E/N or DLSN{...}); earlier ones are truncated.",
    ),
    force: bool = ForceOption,
    uri: str | None = UriOption,
    conf: Path | None = ConfOption,
    set_: list[str] | None = SetOption,
) -> None:
    """Mark every record before --to truncated.

    Only completed segments are truncated, as in DistributedLog: records in the
    in-progress segment stay readable.
    """
    from dlog.errors import LogEmptyError

    dlsn = _parse_dlsn(to, "--to")

    async def body(ns: Namespace) -> tuple[bool, list[Any]]:
        lm = await ns.open_log(name)
        try:
            last = await lm.get_last_dlsn()
        except LogEmptyError:
            last = None
        if last is None or dlsn > last.next():
            end = f"its last record is at {short(last)}" if last else "it has no records"
            raise fail(f"{short(dlsn)} is beyond the end of stream {name!r} ({end})")
        if not force:
            typer.confirm(
                f"Truncate stream {name!r} before {short(dlsn)}? Earlier records can no "
                f"longer be read.",
                abort=True,
                err=True,
            )
        changed = await lm.truncate(dlsn)
        return changed, [seg for seg, _ in await lm.store.get_segments(name)]

    changed, segments = run_namespace(uri, conf, set_, body)
    full = sum(s.is_truncated for s in segments)
    partial = sum(s.is_partially_truncated for s in segments)
    state = f"{full} segment(s) truncated, {partial} partially"
    if changed:
        console.print(f"stream {escape(name)}: truncated before {short(dlsn)} ({state})")
    else:
        console.print(f"stream {escape(name)}: nothing to truncate before {short(dlsn)} ({state})")
    if any(
        s.in_progress and s.log_segment_sequence_no <= dlsn.log_segment_sequence_no
        for s in segments
    ):
        err_console.print("[yellow]note: records in the in-progress segment are not truncated[/]")


# ---------------------------------------------------------------------------
# dlog write
# ---------------------------------------------------------------------------


class _StdinChunks:
    """stdin read by a daemon thread (so Ctrl-C never waits on a blocked
    read), a bounded number of chunks ahead of the consumer."""

    def __init__(self, stream: Any, loop: asyncio.AbstractEventLoop) -> None:
        self._queue: asyncio.Queue[bytes | BaseException] = asyncio.Queue()
        self._room = threading.Semaphore(STDIN_CHUNKS_AHEAD)
        self._loop = loop
        read = getattr(stream, "read1", None) or stream.read
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
    uri: str | None = UriOption,
    conf: Path | None = ConfOption,
    set_: list[str] | None = SetOption,
) -> None:
    """Write each line of stdin as a record; print the last DLSN.

    Each line becomes one record without its line ending (empty lines are
    empty records). At the end of stdin it prints the record count, then the
    last DLSN in base64 alone on the last line of stdout. Creates the stream
    if it does not exist (createStreamIfNotExists).
    """
    from dlog.record import LogRecord

    if sys.stdin is None:
        raise fail("no stdin to read records from", 2)
    show_progress = progress and not sys.stdin.isatty()

    async def body(ns: Namespace) -> tuple[int, int, DLSN | None]:
        lm = await ns.open_log(stream)
        writer = await lm.open_writer()
        try:
            if txid_start is not None:
                txid = txid_start
            elif await lm.store.get_segments(stream):
                txid = writer.last_txid + 1
            else:
                txid = int(time.time() * 1000)
            first_txid = txid
            window: collections.deque[asyncio.Future[DLSN]] = collections.deque()
            count = 0
            last: DLSN | None = None
            chunks = _StdinChunks(sys.stdin.buffer, asyncio.get_running_loop())
            bar = _progress() if show_progress else None
            task = bar.add_task("write", total=None) if bar else None
            with bar or contextlib.nullcontext():
                rest = b""
                while True:
                    chunk = await chunks.next()
                    if chunk:
                        lines = (rest + chunk).split(b"\n")
                        rest = lines.pop()
                    else:
                        lines, rest = ([rest] if rest else []), b""
                    for line in lines:
                        if line.endswith(b"\r"):
                            line = line[:-1]
                        window.append(writer.write_nowait(LogRecord(txid, line)))
                        txid += 1
                        count += 1
                    while len(window) > WRITE_WINDOW:
                        last = await window.popleft()
                    if bar is not None and task is not None:
                        bar.update(task, completed=count)
                    if not chunk:
                        break
                await writer.flush()
                for fut in window:
                    last = await fut
        finally:
            await writer.close()
        return count, first_txid, last

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


def _progress():  # type: ignore[no-untyped-def]
    from rich.progress import Progress, SpinnerColumn, TextColumn, TimeElapsedColumn

    return Progress(
        SpinnerColumn(),
        TextColumn("{task.completed:,} records"),
        TimeElapsedColumn(),
        console=err_console,
        transient=True,
    )


# ---------------------------------------------------------------------------
# dlog tail
# ---------------------------------------------------------------------------


def tail(
    stream: str = StreamArgument,
    from_: str = typer.Option(
        "earliest",
        "--from",
        help="Where to start: earliest (the first record not truncated), latest (only "
        "records written from now on), or a DLSN (base64 as printed by tail/write, "
        "S/E/N, or DLSN{...}).",
    ),
    lines: int | None = typer.Option(
        None, "-n", "--lines", min=1, help="Stop after N records.", show_default=False
    ),
    follow: bool = typer.Option(
        False, "--follow", "-f", help="Keep waiting for new records until Ctrl-C."
    ),
    uri: str | None = UriOption,
    conf: Path | None = ConfOption,
    set_: list[str] | None = SetOption,
) -> None:
    """Print records as DLSN<TAB>payload lines.

    The DLSN is in base64, which --from accepts; the payload is UTF-8 with
    backslash, newline and carriage return escaped. Without --follow it stops
    once caught up (no record for about a second after reaching the last
    record that existed when it started) or after -n records.
    """
    from dlog.errors import EndOfStreamError, LogEmptyError

    choice = from_.strip().lower()
    start = None if choice in ("earliest", "latest") else _parse_dlsn(from_, "--from")

    async def body(ns: Namespace) -> int:
        lm = await ns.open_log(stream)
        position = start
        if choice == "latest":
            with contextlib.suppress(LogEmptyError):
                position = (await lm.get_last_dlsn()).next()
        target = None  # without --follow: the last record when we started
        if not follow:
            with contextlib.suppress(LogEmptyError):
                target = await lm.get_last_dlsn()
            if target is not None and position is not None and position > target:
                target = None
        reader = await lm.open_reader(from_dlsn=position)
        main = asyncio.current_task()
        loop = asyncio.get_running_loop()
        stopping = False

        def on_signal() -> None:
            nonlocal stopping
            stopping = True
            if main is not None:
                main.cancel()

        for sig in (signal.SIGINT, signal.SIGTERM):
            loop.add_signal_handler(sig, on_signal)
        out = sys.stdout.buffer
        printed = 0
        try:
            while lines is None or printed < lines:
                want = TAIL_BATCH if lines is None else min(TAIL_BATCH, lines - printed)
                if follow:
                    timeout: float | None = None
                else:
                    timeout = CATCH_UP_TIMEOUT_S if target is not None else CAUGHT_UP_IDLE_S
                records = await reader.read_bulk(want, timeout)
                if not records:
                    if target is not None:
                        err_console.print(
                            f"[yellow]no record for {CATCH_UP_TIMEOUT_S:.0f} s before reaching "
                            f"{short(target)}; stopping[/]"
                        )
                    break
                out.write("".join(format_record(r) for r in records).encode("utf-8"))
                out.flush()
                printed += len(records)
                if target is not None and records[-1].dlsn >= target:
                    target = None
        except EndOfStreamError:
            pass
        except asyncio.CancelledError:
            if not stopping or main is None:
                raise
            main.uncancel()
        finally:
            for sig in (signal.SIGINT, signal.SIGTERM):
                loop.remove_signal_handler(sig)
            await reader.close()
        return printed

    run_namespace(uri, conf, set_, body)


# ---------------------------------------------------------------------------
# dlog dlsn ...
# ---------------------------------------------------------------------------


@dlsn_app.command("serialize", context_settings={"ignore_unknown_options": True})
def dlsn_serialize(
    seq: int = typer.Argument(..., help="Log segment sequence number."),
    entry: int = typer.Argument(..., help="Entry id."),
    slot: int = typer.Argument(..., help="Slot id."),
) -> None:
    """Print the base64 form of DLSN (SEQ, ENTRY, SLOT), as DistributedLog serializes it."""
    from dlog.dlsn import DLSN

    try:
        print(DLSN(seq, entry, slot).serialize())
    except DLogError as e:
        raise fail(str(e), 2) from None


@dlsn_app.command("deserialize")
def dlsn_deserialize(
    text: str = typer.Argument(..., metavar="BASE64", help="A serialized (base64) DLSN."),
) -> None:
    """Print DistributedLog's toString of a base64 DLSN, then its three numbers."""
    from dlog.dlsn import DLSN

    try:
        dlsn = DLSN.deserialize(text.strip())
    except DLogError as e:
        raise fail(str(e), 2) from None
    print(str(dlsn))
    print(f"{dlsn.log_segment_sequence_no} {dlsn.entry_id} {dlsn.slot_id}")
