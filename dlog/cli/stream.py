"""``dlog stream``: create, list, show, delete and truncate a namespace's streams.

    export DLOG_URI=distributedlog://127.0.0.1:2181/messaging
    dlog stream create events
    dlog stream list
    dlog stream show events
    dlog stream truncate events --to 3/0/0

Every command takes ``--uri`` (default ``$DLOG_URI``), ``--conf FILE``
(DistributedLog configuration keys) and repeated ``--set key=value``. Each
runs its asyncio work in ``asyncio.run``; dlog errors become one red line on
stderr and exit code 1 (2 for bad arguments).
"""

from __future__ import annotations

import contextlib
import datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any

import typer
from rich.markup import escape
from rich.table import Table

from dlog.cli.common import (
    ConfOption,
    ForceOption,
    SetOption,
    StreamArgument,
    UriOption,
    console,
    dlsn_option,
    err_console,
    fail,
    print_table,
    run_namespace,
    short,
)
from dlog.errors import DLogError

if TYPE_CHECKING:
    from dlog.dlsn import DLSN
    from dlog.namespace import Namespace

app = typer.Typer(
    help="Streams of a namespace: create, list, show, delete, truncate.", no_args_is_help=True
)


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
        print_table(table)
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

    dlsn = dlsn_option(to, "--to")

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
