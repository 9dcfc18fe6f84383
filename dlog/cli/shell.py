"""``dlog shell``: operator commands, mirroring ``bookkeeper shell``.

Cluster and ledger commands take ``--service-uri`` (or ``--conf FILE`` with
BookKeeper ClientConfiguration keys, or ``$DLOG_SERVICE_URI``) and run their
asyncio work inside ``asyncio.run``. Bookie commands do not need ZooKeeper:
``triggergc`` speaks to a bookie's HTTP admin API, ``listfilesondisc`` and
``readlog`` read its files offline (``--conf`` is then the bookie's
bookie.conf). Every error is one red line on stderr and a non-zero exit code.
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
    from dlog.conf.bookie import BookieConfig
    from dlog.conf.bookkeeper import ClientConfig
    from dlog.ledger.client import BookKeeper
    from dlog.ledger.metadata import LedgerMetadata

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
#: Entries recover and decommissionbookie copy at once (rereplicationEntryBatchSize's default).
_COPY_BATCH = 10


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

    async def body(bk: BookKeeper) -> tuple[list[int], list[LedgerMetadata]]:
        ids = await bk.list_ledgers()
        if not meta:
            return ids, []
        return ids, await bk.metadata_store.read_existing(ids)

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
    """Delete a ledger's metadata (bookies drop its entries at their next garbage collection)."""

    async def body(bk: BookKeeper) -> None:
        await bk.ledger_metadata(ledger_id)  # a missing ledger fails before the question
        if not force:
            typer.confirm(f"Delete ledger {ledger_id}?", abort=True, err=True)
        await bk.delete_ledger(ledger_id)

    run_client(service_uri, conf, body, set_)
    console.print(f"deleted ledger {ledger_id}")


def _split_bookies(value: str | None) -> list[str]:
    return [b.strip() for b in (value or "").split(",") if b.strip()]


async def _ledgers_on(
    bk: BookKeeper, bookies: set[str], only: int | None
) -> list[tuple[int, LedgerMetadata]]:
    """The ledgers (``only`` that one) whose ensembles name one of ``bookies``."""
    if only is not None:
        mds = [await bk.ledger_metadata(only)]  # NoSuchLedgerError names it
    else:
        mds = await bk.metadata_store.read_existing(await bk.list_ledgers())
    return [(md.ledger_id, md) for md in mds if md.bookies() & bookies]


async def _replicate_off(
    bk: BookKeeper,
    ledgers: list[tuple[int, LedgerMetadata]],
    bookies: set[str],
    *,
    fence_open: bool,
    batch_size: int,
    what: str,
) -> tuple[int, list[str]]:
    """Replicate ``ledgers`` off ``bookies`` under each ledger's
    under-replication lock, with a progress bar; (entries copied, problems)."""
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn

    from dlog.ledger.replicator import replicate_ledger
    from dlog.ledger.underreplication import UnderreplicationManager

    urm = UnderreplicationManager(bk.zk, bk.uri.ledgers_root, owner=f"shell-{os.getpid()}")
    await urm.initialize()
    copied = 0
    problems: list[str] = []
    try:
        with Progress(
            TextColumn("{task.description}"),
            BarColumn(),
            MofNCompleteColumn(),
            TextColumn("{task.fields[entries]} entries copied"),
            console=err_console,
            transient=True,
        ) as progress:
            task = progress.add_task(what, total=len(ledgers), entries=0)
            for lid, _ in ledgers:
                if not await urm.acquire_ledger(lid):
                    holder = await urm.lock_holder(lid)
                    problems.append(
                        f"ledger {lid}: being replicated by {holder or 'another worker'}"
                    )
                    progress.advance(task)
                    continue
                try:
                    out = await replicate_ledger(
                        bk, lid, bookies=bookies, batch_size=batch_size, fence_open=fence_open
                    )
                except BaseException:
                    await urm.release(lid)
                    raise
                copied += out.entries_copied
                if out.fully_replicated:
                    await urm.mark_replicated(lid)
                else:
                    await urm.release(lid)
                    problems += [f"{f}: {why}" for f, why in out.failed]
                    problems += [f"{f}: ledger is open (not fenced)" for f in out.open_fragments]
                progress.update(task, advance=1, entries=copied)
    finally:
        await urm.aclose()
    return copied, problems


@app.command("recover")
def recover(
    bookies_arg: str | None = typer.Argument(
        None,
        metavar="[BOOKIE[,BOOKIE...]]",
        help="Bookies to replicate all data off (e.g. a dead bookie). Without: fence and close --ledger.",
    ),
    ledger_id: int | None = typer.Option(
        None, "--ledger-id", "--ledgerid", "--ledger", "-l", help="Only this ledger.", min=0
    ),
    query: bool = typer.Option(
        False, "--query", "-q", help="Only list the ledgers with data on those bookies."
    ),
    dry_run: bool = typer.Option(
        False, "--dryrun", "-dr", help="Show what would be replicated, change nothing."
    ),
    skip_open: bool = typer.Option(
        False, "--skipOpenLedgers", "-sk", help="Leave open ledgers alone (they are not fenced)."
    ),
    password: str = PasswordOption,
    force: bool = ForceOption,
    service_uri: str | None = ServiceUriOption,
    conf: Path | None = ConfOption,
    set_: list[str] | None = SetOption,
) -> None:
    """Replicate every ledger fragment off BOOKIE(s) to other bookies (like
    `bookkeeper shell recover`); or, with only --ledger, recover that
    ledger: fence it, re-replicate its tail, close it, print where it ends."""
    bookies = set(_split_bookies(bookies_arg))
    if not bookies:
        if ledger_id is None:
            raise fail("give the bookie(s) to recover, or --ledger to recover one ledger", 2)
        _recover_ledger(ledger_id, password, service_uri, conf, set_)
        return

    async def body(bk: BookKeeper) -> None:
        ledgers = await _ledgers_on(bk, bookies, ledger_id)
        names = ", ".join(sorted(bookies))
        if skip_open:
            skipped = [lid for lid, md in ledgers if not md.is_closed]
            ledgers = [(lid, md) for lid, md in ledgers if md.is_closed]
            if skipped:
                _note(f"skipping {len(skipped)} open ledger(s): {', '.join(map(str, skipped))}")
        if query or dry_run:
            table = Table(title=f"{len(ledgers)} ledger(s) with data on {_esc(names)}")
            table.add_column("ledger", justify="right")
            table.add_column("state")
            table.add_column("fragments to replicate")
            for lid, md in ledgers:
                frags = [
                    f"{first}..{'open' if last is None else last} on {b}"
                    for first, last, b in _fragment_rows(md, bookies)
                ]
                table.add_row(str(lid), md.state.name, _esc("; ".join(frags)))
            console.print(table)
            if dry_run:
                _note("dry run: nothing replicated")
            return
        if not ledgers:
            console.print(f"no ledger has data on {_esc(names)}")
            return
        if not force:
            typer.confirm(f"Replicate {len(ledgers)} ledger(s) off {names}?", abort=True, err=True)
        copied, problems = await _replicate_off(
            bk,
            ledgers,
            bookies,
            fence_open=not skip_open,
            batch_size=_COPY_BATCH,
            what=f"recovering {names}",
        )
        for p in problems:
            _note(p)
        if problems:
            raise fail(f"{len(problems)} fragment(s) not replicated off {names}")
        console.print(
            f"replicated {len(ledgers)} ledger(s) off {_esc(names)}: {copied} entries copied"
        )

    run_client(service_uri, conf, body, set_)


def _fragment_rows(md: LedgerMetadata, bookies: set[str]) -> list[tuple[int, int | None, str]]:
    from dlog.ledger.fragments import fragments_on

    return [(f.first_entry, f.last_entry, f.bookie) for f in fragments_on(md, bookies)]


def _recover_ledger(
    ledger_id: int,
    password: str,
    service_uri: str | None,
    conf: Path | None,
    set_: list[str] | None,
) -> None:
    async def body(bk: BookKeeper) -> tuple[int, int, bool]:
        rh = await bk.open_ledger(ledger_id, password.encode(), recovery=True)
        await rh.close()
        return rh.metadata.last_entry_id, rh.metadata.length, rh.recovered_by_me

    last_entry, length, by_me = run_client(service_uri, conf, body, set_)
    how = "recovered and closed" if by_me else "already closed"
    console.print(
        f"ledger {ledger_id} {how}: last entry id [bold]{last_entry}[/], length {length} bytes"
    )


@app.command("decommissionbookie")
def decommission_bookie(
    bookie: str = typer.Option(
        ...,
        "--bookieid",
        "-bookieid",
        help="The bookie to decommission (host:port); it must be stopped.",
    ),
    timeout: float = typer.Option(
        600.0, "--timeout", help="Seconds to wait until no ledger references the bookie."
    ),
    service_uri: str | None = ServiceUriOption,
    conf: Path | None = ConfOption,
    set_: list[str] | None = SetOption,
) -> None:
    """Replicate every ledger off a stopped bookie, wait until no ledger
    references it, then delete its cookie (like `bookkeeper shell decommissionbookie`)."""

    async def body(bk: BookKeeper) -> tuple[int, int]:
        from dlog.errors import NoNodeError

        if bookie in bk.writable_bookies() | bk.readonly_bookies():
            raise fail(f"bookie {bookie} is still running (registered): stop it first")
        deadline = time.monotonic() + timeout
        total = copied = 0
        while True:
            ledgers = await _ledgers_on(bk, {bookie}, None)
            if not ledgers:
                break
            total = max(total, len(ledgers))
            n, problems = await _replicate_off(
                bk,
                ledgers,
                {bookie},
                fence_open=True,
                batch_size=_COPY_BATCH,
                what=f"decommissioning {bookie}",
            )
            copied += n
            if not problems:
                continue
            if time.monotonic() > deadline:
                for p in problems:
                    _note(p)
                raise fail(
                    f"{len(ledgers)} ledger(s) still reference {bookie} after {timeout:.0f}s"
                )
            await asyncio.sleep(1.0)
        cookie = f"{bk.uri.ledgers_root.rstrip('/')}/cookies/{bookie}"
        try:
            await bk.zk.delete(cookie)
        except NoNodeError:
            _note(f"bookie {bookie} had no cookie at {cookie}")
        return total, copied

    total, copied = run_client(service_uri, conf, body, set_)
    console.print(
        f"decommissioned {_esc(bookie)}: {total} ledger(s) replicated, {copied} entries copied, "
        "cookie deleted"
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


# ---------------------------------------------------------------------------
# bookie: garbage collection (HTTP admin API) and files on disk (offline)
# ---------------------------------------------------------------------------

#: How long triggergc waits for the forced collection by default.
_GC_WAIT_SECONDS = 300.0
_GC_POLL_SECONDS = 0.1


def _admin_base_url(bookie: str) -> str:
    """``http://host:port`` of a bookie's HTTP admin API from ``host[:port]``
    (or a URL); the port defaults to BookKeeper's httpServerPort, 8080."""
    from urllib.parse import urlsplit

    text = bookie if "://" in bookie else f"http://{bookie}"
    try:
        parts = urlsplit(text)
        port = parts.port or 8080
    except ValueError as e:
        raise fail(f"--bookie {bookie!r}: {e}", 2) from None
    if parts.scheme != "http" or not parts.hostname or parts.path not in ("", "/"):
        raise fail(f"--bookie {bookie!r}: expected HOST[:PORT] of the bookie's HTTP admin API", 2)
    host = f"[{parts.hostname}]" if ":" in parts.hostname else parts.hostname
    return f"http://{host}:{port}"


def _admin_call(base: str, method: str, path: str, body: object | None = None) -> object:
    """One request to the admin API: the decoded JSON answer, or exit 1
    with one line saying what went wrong."""
    import urllib.error
    import urllib.request

    data = json.dumps(body).encode() if body is not None else None
    req = urllib.request.Request(base + path, data=data, method=method)
    if data is not None:
        req.add_header("Content-Type", "application/json")
    try:
        with urllib.request.urlopen(req, timeout=10) as resp:
            text = resp.read().decode()
    except urllib.error.HTTPError as e:
        detail = e.read().decode(errors="replace").strip().strip('"')
        raise fail(f"{method} {base}{path}: HTTP {e.code}: {detail}") from None
    except (urllib.error.URLError, OSError) as e:
        reason = getattr(e, "reason", e)
        raise fail(
            f"cannot reach the bookie's HTTP admin API at {base} ({reason}); "
            "is httpServerEnabled=true on that bookie?"
        ) from None
    try:
        return json.loads(text)
    except ValueError:
        raise fail(f"{method} {base}{path}: not a JSON answer: {text[:200]!r}") from None


@app.command("triggergc")
def trigger_gc(
    bookie: str = typer.Option(
        "127.0.0.1:8080",
        "--bookie",
        "-b",
        help="The bookie's HTTP admin address HOST[:PORT] (httpServerEnabled=true; "
        "the port is its httpServerPort, default 8080).",
    ),
    force_major: bool = typer.Option(
        False, "--force-major", "--forceMajor", help="Run major compaction."
    ),
    force_minor: bool = typer.Option(
        False, "--force-minor", "--forceMinor", help="Run minor compaction."
    ),
    wait: bool = typer.Option(
        True, "--wait/--no-wait", help="Wait for the collection to finish and print its result."
    ),
    timeout: float = typer.Option(
        _GC_WAIT_SECONDS, "--timeout", min=0.1, help="Longest wait for the collection, seconds."
    ),
) -> None:
    """Force a garbage collection on a bookie, as BookKeeper's PUT /api/v1/bookie/gc.

    With neither --force-major nor --force-minor both are allowed (BookKeeper's
    empty body: major compaction runs); with one, only that one."""
    base = _admin_base_url(bookie)
    body = (
        None
        if not (force_major or force_minor)
        else {"forceMajor": force_major, "forceMinor": force_minor}
    )
    answer = _admin_call(base, "PUT", "/api/v1/bookie/gc", body)
    console.print(_esc(str(answer)))
    if not wait:
        return
    deadline = time.monotonic() + timeout
    while True:
        state = _admin_call(base, "GET", "/api/v1/bookie/gc")
        if not isinstance(state, dict) or state.get("is_in_force_gc") != "true":
            break
        if time.monotonic() > deadline:
            raise fail(f"the forced garbage collection on {base} has not finished in {timeout} s")
        time.sleep(_GC_POLL_SECONDS)
    details = _admin_call(base, "GET", "/api/v1/bookie/gc_details")
    print(json.dumps(details, indent=2))


def _bookie_conf(conf: Path) -> BookieConfig:
    from dlog.conf.bookie import BookieConfig

    if not conf.is_file():
        raise fail(f"{conf}: no such bookie configuration file", 2)
    try:
        return BookieConfig.load(conf)
    except DLogError as e:
        raise fail(str(e), 2) from None


BookieConfOption = typer.Option(
    ..., "--conf", "-c", help="The bookie's configuration file (bookie.conf)."
)


def _files(dirs: list[str], suffix: str) -> list[Path]:
    """Files ending in ``suffix`` under each ``<dir>/current``, by id."""
    out: list[Path] = []
    for d in dirs:
        cur = Path(d) / "current"
        found = sorted(cur.glob(f"*{suffix}")) if cur.is_dir() else []
        out += sorted(found, key=lambda p: (len(p.name), p.name))  # hex ids: shorter is older
    return out


@app.command("listfilesondisc")
def list_files_on_disc(
    conf: Path = BookieConfOption,
    journal: bool = typer.Option(False, "--journal", "-txn", help="Journal files."),
    entrylog: bool = typer.Option(False, "--entrylog", "-log", help="Entry log files."),
    index: bool = typer.Option(
        False, "--index", "-idx", help="Index files (the RocksDB ledgers and locations indexes)."
    ),
) -> None:
    """List a bookie's journal, entry log and index files, read offline from its conf.

    With none of -txn/-log/-idx, all three."""
    cfg = _bookie_conf(conf)
    if not (journal or entrylog or index):
        journal = entrylog = index = True
    paths: list[Path] = []
    if journal:
        paths += _files(cfg.journal_directories, ".txn")
    if entrylog:
        paths += _files(cfg.ledger_directories, ".log")
    if index:
        for d in cfg.ledger_directories:
            for name in ("ledgers", "locations"):
                idx = Path(d) / "current" / name
                if idx.is_dir():
                    paths += sorted(p for p in idx.iterdir() if p.is_file())
    for p in paths:
        print(p.resolve())
    if not paths:
        _note(f"no such files in the directories of {conf}")


@app.command("readlog")
def read_log(
    log: str = typer.Argument(
        ...,
        help="Entry log id, decimal as in BookKeeper's readlog (log 10 is a.log), or a .log file.",
    ),
    conf: Path | None = typer.Option(
        None, "--conf", "-c", help="The bookie's configuration file, to find a log by id."
    ),
    msg: bool = typer.Option(False, "--msg", "-m", help="Print each entry's payload."),
    ledger_id: int | None = typer.Option(
        None, "--ledgerid", "-l", min=0, help="Only this ledger's entries."
    ),
    entry_id: int | None = typer.Option(
        None, "--entryid", "-e", min=0, help="Only this entry (with --ledgerid)."
    ),
    start_pos: int | None = typer.Option(
        None, "--startpos", "-sp", min=0, help="Only entries that end at this offset or after."
    ),
    end_pos: int | None = typer.Option(
        None, "--endpos", "-ep", min=0, help="Only entries that start at this offset or before."
    ),
    ledgers_map: bool = typer.Option(
        False, "--ledgers-map", help="Print the ledgers map (ledger, bytes) instead of entries."
    ),
    digest_type: str = typer.Option(
        "CRC32C",
        "--digest-type",
        help="Digest type of the ledgers (CRC32C, CRC32, HMAC, DUMMY): the payload follows it.",
    ),
    force_hex: bool = typer.Option(False, "--hex", help="Print every payload as hex."),
) -> None:
    """Print an entry log's entries, offline: `ledger<TAB>entry<TAB>offset<TAB>size`,
    and with --msg the payload. The offset is where the entry's size field starts."""
    from dlog.bookie.entry_log import EntryLogger, split_location
    from dlog.errors import CorruptedFileError
    from dlog.ledger.digest import HEADER_LENGTH, digest_length

    if entry_id is not None and ledger_id is None:
        raise fail("--entryid needs --ledgerid", 2)
    if start_pos is not None and end_pos is not None and end_pos < start_pos:
        raise fail(f"--endpos ({end_pos}) is below --startpos ({start_pos})", 2)
    try:
        skip = HEADER_LENGTH + digest_length(digest_type.upper())
    except (DLogError, KeyError, ValueError):
        raise fail(
            f"--digest-type {digest_type!r}: expected CRC32C, CRC32, HMAC or DUMMY", 2
        ) from None
    path = _find_entry_log(log, conf)
    try:
        log_id = int(path.name.split(".")[0], 16)
    except ValueError:
        raise fail(f"{path}: not an entry log name (<hex id>.log)", 2) from None
    logger = EntryLogger([path.parent])
    try:
        if ledgers_map:
            ledgers = logger.read_ledgers_map(log_id)
            if ledgers is None:
                _note(f"{path}: not sealed (no ledgers map); built from its entries")
                ledgers = {}
                for lid, _, _, size in logger.scan(log_id):
                    ledgers[lid] = ledgers.get(lid, 0) + size + 4
            for lid, size in sorted(ledgers.items()):
                print(f"{lid}\t{size}")
            return
        out = sys.stdout
        for lid, eid, loc, size in logger.scan(log_id):
            begin = split_location(loc)[1] - 4  # the size field
            if ledger_id is not None and lid != ledger_id:
                continue
            if entry_id is not None and eid != entry_id:
                continue
            if end_pos is not None and begin > end_pos:
                break
            if start_pos is not None and begin + 4 + size - 1 < start_pos:
                continue
            line = f"{lid}\t{eid}\t{begin}\t{size}"
            if msg:
                line += "\t" + _payload_text(logger.read_entry(loc, lid, eid)[skip:], force_hex)
            out.write(line + "\n")
        out.flush()
    except BrokenPipeError:  # `| head`: stop quietly
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        raise typer.Exit(0) from None
    except (CorruptedFileError, OSError) as e:
        raise fail(str(e)) from None
    finally:
        logger.close()


def _find_entry_log(log: str, conf: Path | None) -> Path:
    """The file of ``log``: an id looked up in the ledger directories of
    ``--conf``, or else a file (BookKeeper's readlog does the same)."""
    from dlog.bookie.entry_log import log_file_name as file_name

    try:
        log_id = int(log)
    except ValueError:
        if not Path(log).is_file():
            raise fail(f"{log}: neither an entry log id nor an entry log file", 2) from None
        return Path(log)
    if log_id < 0:
        raise fail(f"entry log id {log_id} is negative", 2)
    if conf is None:
        raise fail("an entry log id needs --conf (the bookie's configuration file)", 2)
    cfg = _bookie_conf(conf)
    for d in cfg.ledger_directories:
        candidate = Path(d) / "current" / file_name(log_id)
        if candidate.is_file():
            return candidate
    raise fail(f"entry log {log_id:x} ({file_name(log_id)}) is in no ledger directory of {conf}")
