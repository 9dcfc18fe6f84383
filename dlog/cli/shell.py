"""``dlog shell``: operator commands, mirroring ``bookkeeper shell``.

Every command takes ``--service-uri`` (or ``--conf FILE`` with
BookKeeper ClientConfiguration keys, or ``$DLOG_SERVICE_URI``), runs its
asyncio work inside ``asyncio.run`` and turns every dlog error into one red
line on stderr and a non-zero exit code.
"""

from __future__ import annotations

import asyncio
import collections
import json
import os
import sys
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import TYPE_CHECKING, TypeVar

import typer
from rich.markup import escape as _esc
from rich.table import Table

from dlog.cli.common import (
    ConfOption,
    ForceOption,
    SetOption,
    console,
    err_console,
    fail,
    setup_logging,
)
from dlog.conf.base import parse_set_options
from dlog.errors import DLogError

if TYPE_CHECKING:
    from dlog.conf.bookkeeper import ClientConfig
    from dlog.ledger.client import BookKeeper

T = TypeVar("T")

app = typer.Typer(
    help="Cluster and ledger administration (like `bookkeeper shell`).", no_args_is_help=True
)

ServiceUriOption = typer.Option(
    None,
    "--service-uri",
    "-u",
    help="Metadata service URI, e.g. zk+hierarchical://127.0.0.1:2181/ledgers (default: $DLOG_SERVICE_URI).",
)
LedgerIdOption = typer.Option(..., "--ledger-id", "--ledgerid", "-l", help="Ledger id.", min=0)
PasswordOption = typer.Option(
    "", "--password", "-p", help="Ledger password (UTF-8; default: empty)."
)

#: Entries printed per batch by readledger (each batch is one range read).
_READ_BATCH = 1000
#: Ledgers whose metadata listledgers --meta reads at once.
_META_CONCURRENCY = 32


# ---------------------------------------------------------------------------
# plumbing
# ---------------------------------------------------------------------------


def _read_conf(conf: Path) -> dict[str, str]:
    from dlog.conf.base import parse_properties

    try:
        text = conf.read_text()
    except OSError as e:
        raise fail(f"{conf}: cannot read configuration file: {e.strerror}", 2) from None
    try:
        return parse_properties(text, str(conf))
    except DLogError as e:
        raise fail(str(e), 2) from None


def resolve_service_uri(service_uri: str | None, conf: Path | None) -> str:
    if service_uri:
        return service_uri
    if conf is not None:
        props = _read_conf(conf)
        for key in ("metadataServiceUri", "bkc.metadataServiceUri"):
            if props.get(key):
                return props[key]
    env = os.environ.get("DLOG_SERVICE_URI")
    if env:
        return env
    raise fail("no metadata service URI: pass --service-uri, --conf, or set DLOG_SERVICE_URI", 2)


def client_config(
    service_uri: str | None, conf: Path | None, sets: list[str] | None = None
) -> ClientConfig:
    """The client settings: ``--conf`` (ClientConfig keys; in a DistributedLog
    file, its ``bkc.``-prefixed keys), then ``--set`` overrides, with the
    resolved service URI on top."""
    from dlog.conf.bookkeeper import ClientConfig

    uri = resolve_service_uri(service_uri, conf)
    values: dict[str, object] = {}
    sources: dict[str, str] = {}
    if conf is not None:
        props = _read_conf(conf)
        if any(k.startswith("bkc.") for k in props):
            props = {k[4:]: v for k, v in props.items() if k.startswith("bkc.")}
        values.update(props)
        sources.update(dict.fromkeys(props, str(conf)))
    try:
        overrides = parse_set_options(sets or [])
    except DLogError as e:
        raise fail(str(e), 2) from None
    values.update(overrides)
    sources.update(dict.fromkeys(overrides, "--set"))
    values["metadataServiceUri"] = uri
    try:
        return ClientConfig.from_mapping(values, "--service-uri", sources=sources)
    except DLogError as e:
        raise fail(str(e), 2) from None


def run_client(
    service_uri: str | None,
    conf: Path | None,
    body: Callable[[BookKeeper], Awaitable[T]],
    sets: list[str] | None = None,
) -> T:
    """Connect, run ``body(bk)`` in a fresh event loop, disconnect. Errors
    become one red line and exit code 1 (2 for bad arguments)."""
    cfg = client_config(service_uri, conf, sets)
    setup_logging(default="WARNING")

    async def go() -> T:
        from dlog.ledger.client import BookKeeper

        async with BookKeeper(conf=cfg) as bk:
            return await body(bk)

    try:
        return asyncio.run(go())
    except DLogError as e:
        raise fail(str(e)) from None
    except BrokenPipeError:
        raise
    except (OSError, TimeoutError, ValueError) as e:
        raise fail(f"{type(e).__name__}: {e}") from None


def _note(message: str) -> None:
    err_console.print(f"[yellow]{_esc(message)}[/]")


def _payload_text(data: bytes, force_hex: bool) -> str:
    """Printable UTF-8 as text, anything else (or with --hex) as hex."""
    if not force_hex:
        try:
            text = data.decode("utf-8")
        except UnicodeDecodeError:
            pass
        else:
            if text.isprintable():
                return text
    return data.hex()


# ---------------------------------------------------------------------------
# cluster
# ---------------------------------------------------------------------------


@app.command("initnewcluster")
def init_new_cluster(
    service_uri: str | None = ServiceUriOption,
    conf: Path | None = ConfOption,
    set_: list[str] | None = SetOption,
) -> None:
    """Create the ledgers layout (available, cookies, LAYOUT, INSTANCEID...) if absent."""
    uri = client_config(service_uri, conf, set_).metadata_service_uri

    async def go() -> str:
        from dlog.bookie.registration import init_cluster
        from dlog.uri import parse_metadata_service_uri
        from dlog.zk import ZooKeeper

        parsed = parse_metadata_service_uri(uri)
        zk = ZooKeeper(parsed.hosts)
        await zk.start()
        try:
            return await init_cluster(zk, parsed.ledgers_root)
        finally:
            await zk.stop()

    try:
        instance = asyncio.run(go())
    except (DLogError, ValueError) as e:
        raise fail(str(e)) from None
    console.print(f"cluster ready at [bold]{_esc(uri)}[/] (instance id {instance})")


@app.command("listbookies")
def list_bookies(
    readonly: bool = typer.Option(False, "--readonly", "-r", help="Only read-only bookies."),
    all_: bool = typer.Option(False, "--all", "-a", help="Writable and read-only bookies."),
    service_uri: str | None = ServiceUriOption,
    conf: Path | None = ConfOption,
    set_: list[str] | None = SetOption,
) -> None:
    """List registered bookies and their state (writable by default)."""

    async def body(bk: BookKeeper) -> list[tuple[str, str]]:
        rows: list[tuple[str, str]] = []
        if all_ or not readonly:
            rows += [(b, "writable") for b in sorted(bk.writable_bookies())]
        if all_ or readonly:
            rows += [(b, "read-only") for b in sorted(bk.readonly_bookies())]
        return rows

    rows = run_client(service_uri, conf, body, set_)
    if not rows:
        kind = "bookies" if all_ else "read-only bookies" if readonly else "writable bookies"
        _note(f"no {kind} registered")
        return
    table = Table(title=f"{len(rows)} bookie(s)")
    table.add_column("bookie id")
    table.add_column("state")
    for bookie, state in rows:
        table.add_row(_esc(bookie), state if state == "writable" else f"[yellow]{state}[/]")
    console.print(table)


# ---------------------------------------------------------------------------
# ledgers
# ---------------------------------------------------------------------------


@app.command("listledgers")
def list_ledgers(
    meta: bool = typer.Option(False, "--meta", "-m", help="A table with each ledger's metadata."),
    service_uri: str | None = ServiceUriOption,
    conf: Path | None = ConfOption,
    set_: list[str] | None = SetOption,
) -> None:
    """List ledger ids (with --meta: state, quorums, last entry, length, data set)."""
    from dlog.ledger.metadata import LedgerMetadata

    async def body(bk: BookKeeper) -> tuple[list[int], list[LedgerMetadata]]:
        ids = await bk.list_ledgers()
        if not meta:
            return ids, []
        from dlog.errors import NoSuchLedgerError

        sem = asyncio.Semaphore(_META_CONCURRENCY)

        async def one(lid: int) -> LedgerMetadata | None:
            async with sem:
                try:
                    return await bk.ledger_metadata(lid)
                except NoSuchLedgerError:
                    return None  # deleted since it was listed

        found = await asyncio.gather(*(one(lid) for lid in ids))
        return ids, [md for md in found if md is not None]

    ids, mds = run_client(service_uri, conf, body, set_)
    if not meta:
        for lid in ids:
            print(lid)
        if not ids:
            _note("no ledgers")
        return
    table = Table(title=f"{len(mds)} ledger(s)")
    for name, justify in (
        ("ledger", "right"),
        ("state", "left"),
        ("E/W/A", "center"),
        ("last entry", "right"),
        ("length", "right"),
        ("data set", "left"),
    ):
        table.add_column(name, justify=justify)  # type: ignore[arg-type]
    for md in mds:
        ctx = md.create_context
        table.add_row(
            str(md.ledger_id),
            md.state.name,
            f"{md.ensemble_size}/{md.write_quorum_size}/{md.ack_quorum_size}",
            str(md.last_entry_id) if md.is_closed else "-",
            str(md.length) if md.is_closed else "-",
            _esc(ctx.part_of_data_set or "") if ctx is not None else "",
        )
    console.print(table)


@app.command("ledgermetadata")
def ledger_metadata(
    ledger_id: int = LedgerIdOption,
    as_json: bool = typer.Option(False, "--json", help="JSON instead of text."),
    service_uri: str | None = ServiceUriOption,
    conf: Path | None = ConfOption,
    set_: list[str] | None = SetOption,
) -> None:
    """Print a ledger's metadata (the password is never shown)."""
    from dlog.ledger.metadata import to_dict, to_text

    async def body(bk: BookKeeper):  # type: ignore[no-untyped-def]
        return await bk.ledger_metadata(ledger_id)

    md = run_client(service_uri, conf, body, set_)
    print(json.dumps(to_dict(md), indent=2) if as_json else to_text(md))


@app.command("readledger")
def read_ledger(
    ledger_id: int = LedgerIdOption,
    first: int = typer.Option(0, "--first", min=0, help="First entry id."),
    last: int | None = typer.Option(
        None, "--last", min=0, help="Last entry id (default: the last add confirmed)."
    ),
    password: str = PasswordOption,
    recovery: bool = typer.Option(
        False,
        "--recovery/--no-recovery",
        help="Recover (fence and close) an open ledger first. Off by default, as in "
        "`bookkeeper shell readledger`: an open ledger is read up to its last add confirmed.",
    ),
    force_hex: bool = typer.Option(False, "--hex", help="Print every payload as hex."),
    service_uri: str | None = ServiceUriOption,
    conf: Path | None = ConfOption,
    set_: list[str] | None = SetOption,
) -> None:
    """Print entries as `entryId<TAB>payload` (text when printable UTF-8, else hex)."""

    if last is not None and last < first:
        raise fail(f"--last ({last}) is below --first ({first})", 2)

    async def body(bk: BookKeeper) -> int:
        rh = await bk.open_ledger(ledger_id, password.encode(), recovery=recovery)
        try:
            end = await rh.read_last_add_confirmed()  # lastEntryId once closed
            what = "last entry" if rh.is_closed else "last add confirmed"
            stop = end if last is None else min(last, end)
            if last is not None and last > end:
                _note(
                    f"ledger {ledger_id}: entry {last} is beyond the {what} ({end}); reading up to {end}"
                )
            if stop < first:
                _note(f"ledger {ledger_id}: no entries from {first} (its {what} is {end})")
                return 0
            printed = 0
            out = sys.stdout
            for start in range(first, stop + 1, _READ_BATCH):
                entries = await rh.read(start, min(stop, start + _READ_BATCH - 1))
                out.write(
                    "".join(f"{e.entry_id}\t{_payload_text(e.data, force_hex)}\n" for e in entries)
                )
                printed += len(entries)
            out.flush()
            return printed
        finally:
            await rh.close()

    try:
        run_client(service_uri, conf, body, set_)
    except BrokenPipeError:  # `| head`: stop quietly, without a second error at exit
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        raise typer.Exit(0) from None


@app.command("deleteledger")
def delete_ledger(
    ledger_id: int = LedgerIdOption,
    force: bool = ForceOption,
    service_uri: str | None = ServiceUriOption,
    conf: Path | None = ConfOption,
    set_: list[str] | None = SetOption,
) -> None:
    """Delete a ledger's metadata (bookies keep the entries until GC, not built yet)."""

    async def body(bk: BookKeeper) -> None:
        await bk.ledger_metadata(ledger_id)  # a missing ledger fails before the question
        if not force:
            typer.confirm(f"Delete ledger {ledger_id}?", abort=True, err=True)
        await bk.delete_ledger(ledger_id)

    run_client(service_uri, conf, body, set_)
    console.print(f"deleted ledger {ledger_id}")


@app.command("recover")
def recover(
    ledger_id: int = LedgerIdOption,
    password: str = PasswordOption,
    service_uri: str | None = ServiceUriOption,
    conf: Path | None = ConfOption,
    set_: list[str] | None = SetOption,
) -> None:
    """Recover a ledger: fence it, re-replicate its tail, close it; print where it ends."""

    async def body(bk: BookKeeper) -> tuple[int, int, bool]:
        rh = await bk.open_ledger(ledger_id, password.encode(), recovery=True)
        await rh.close()
        return rh.metadata.last_entry_id, rh.metadata.length, rh.recovered_by_me

    last_entry, length, by_me = run_client(service_uri, conf, body, set_)
    how = "recovered and closed" if by_me else "already closed"
    console.print(
        f"ledger {ledger_id} {how}: last entry id [bold]{last_entry}[/], length {length} bytes"
    )


# ---------------------------------------------------------------------------
# simpletest
# ---------------------------------------------------------------------------


@app.command("simpletest")
def simple_test(
    ensemble_size: int = typer.Option(3, "--ensemble-size", "-e", min=1, help="Ensemble size."),
    write_quorum: int = typer.Option(2, "--write-quorum", "-w", min=1, help="Write quorum."),
    ack_quorum: int = typer.Option(2, "--ack-quorum", "-a", min=1, help="Ack quorum."),
    num_entries: int = typer.Option(1000, "--num-entries", "-n", min=1, help="Entries to write."),
    size: int = typer.Option(1024, "--size", min=1, help="Entry size in bytes."),
    outstanding: int = typer.Option(
        1000, "--outstanding", min=1, help="Appends in flight at once (pipelining)."
    ),
    service_uri: str | None = ServiceUriOption,
    conf: Path | None = ConfOption,
    set_: list[str] | None = SetOption,
) -> None:
    """Create a ledger, write entries (pipelined), close it, read them back and verify."""
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn

    base = os.urandom(size)

    def payload(i: int) -> bytes:
        # Every entry differs: its id leads, so a misplaced entry is caught.
        return (i.to_bytes(8, "big") + base)[:size] if size >= 8 else base

    async def body(bk: BookKeeper) -> tuple[int, float, float, int]:
        progress = Progress(
            TextColumn("{task.description}"),
            BarColumn(),
            MofNCompleteColumn(),
            console=err_console,
            transient=True,
        )
        with progress:
            wh = await bk.create_ledger(ensemble_size, write_quorum, ack_quorum)
            console.print(f"created ledger {wh.ledger_id}")
            task = progress.add_task("write", total=num_entries)
            window: collections.deque[asyncio.Future[int]] = collections.deque()
            step = max(1, num_entries // 100)
            t0 = time.perf_counter()
            for i in range(num_entries):
                if len(window) >= outstanding:
                    await window.popleft()
                window.append(wh.append_nowait(payload(i)))
                if i % step == 0:
                    progress.update(task, completed=max(0, wh.last_add_confirmed + 1))
            ids = await asyncio.gather(*window)
            write_s = time.perf_counter() - t0
            progress.update(task, completed=num_entries)
            await wh.close()
            if ids and ids[-1] != num_entries - 1:
                raise fail(
                    f"ledger {wh.ledger_id}: last entry id {ids[-1]}, expected {num_entries - 1}"
                )

            task = progress.add_task("read", total=num_entries)
            mismatches = 0
            t0 = time.perf_counter()
            rh = await bk.open_ledger(wh.ledger_id, recovery=False)
            for start in range(0, num_entries, _READ_BATCH):
                end = min(num_entries - 1, start + _READ_BATCH - 1)
                for e in await rh.read(start, end):
                    if e.data != payload(e.entry_id):
                        mismatches += 1
                        if mismatches <= 5:
                            err_console.print(f"[red]entry {e.entry_id}: payload differs[/]")
                progress.update(task, completed=end + 1)
            read_s = time.perf_counter() - t0
            await rh.close()
        return wh.ledger_id, write_s, read_s, mismatches

    ledger_id, write_s, read_s, mismatches = run_client(service_uri, conf, body, set_)
    mb = num_entries * size / 1e6
    table = Table(title=f"simpletest: ledger {ledger_id}")
    table.add_column("")
    table.add_column("entries", justify="right")
    table.add_column("seconds", justify="right")
    table.add_column("rate", justify="right")
    table.add_column("MB/s", justify="right")
    table.add_row(
        "write",
        str(num_entries),
        f"{write_s:.3f}",
        f"{num_entries / write_s:,.0f} writes/s",
        f"{mb / write_s:.2f}",
    )
    table.add_row(
        "read",
        str(num_entries),
        f"{read_s:.3f}",
        f"{num_entries / read_s:,.0f} reads/s",
        f"{mb / read_s:.2f}",
    )
    console.print(table)
    console.print(
        f"ledger {ledger_id}: E={ensemble_size} W={write_quorum} A={ack_quorum}, "
        f"{num_entries} entries of {size} bytes"
    )
    if mismatches:
        raise fail(f"ledger {ledger_id}: {mismatches} of {num_entries} entries read back differ")
    console.print(f"[green]ledger {ledger_id}: all {num_entries} entries verified[/]")
