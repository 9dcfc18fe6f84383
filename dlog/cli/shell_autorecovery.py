"""``dlog shell`` commands for AutoRecovery: listunderreplicated, autorecovery, lostbookierecoverydelay, whoisauditor, verifyledgers.

They register on :data:`dlog.cli.shell.app`, imported by :mod:`dlog.cli` right after it.
They speak to ZooKeeper only (no bookie is needed), reading and writing
BookKeeper's own under-replication znodes, so they work on a cluster whose
auditor is Java BookKeeper's too; verifyledgers (a dlog extension) reads
entries from the bookies.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from datetime import UTC, datetime
from pathlib import Path
from typing import TypeVar

import typer
from rich.markup import escape as _esc
from rich.table import Table

from dlog.cli.common import ConfOption, SetOption, console, err_console, fail, setup_logging
from dlog.cli.shell import ServiceUriOption, app, client_config, run_client
from dlog.errors import DLogError
from dlog.zk import ZooKeeper

T = TypeVar("T")


def run_zk(
    service_uri: str | None,
    conf: Path | None,
    sets: list[str] | None,
    body: Callable[[ZooKeeper, str], Awaitable[T]],
) -> T:
    """Connect to the metadata service's ZooKeeper, run ``body(zk,
    ledgers_root)``, disconnect. Errors become one red line and exit 1."""
    from dlog.uri import parse_metadata_service_uri

    cfg = client_config(service_uri, conf, sets)
    setup_logging(default="WARNING")

    async def go() -> T:
        parsed = parse_metadata_service_uri(cfg.metadata_service_uri)
        timeout = cfg.zk_timeout / 1000.0
        zk = ZooKeeper(parsed.hosts, timeout=timeout)
        await zk.start(timeout=timeout, setting="zkTimeout")
        try:
            return await body(zk, parsed.ledgers_root)
        finally:
            await zk.stop()

    try:
        return asyncio.run(go())
    except DLogError as e:
        raise fail(str(e)) from None
    except (OSError, TimeoutError, ValueError) as e:
        raise fail(f"{type(e).__name__}: {e}") from None


def _ctime(ms: int) -> str:
    if ms < 0:
        return "-"
    when = datetime.fromtimestamp(ms / 1000, tz=UTC)
    return f"{when.isoformat(timespec='milliseconds').replace('+00:00', 'Z')} ({ms})"


@app.command("listunderreplicated")
def list_underreplicated(
    missing_replica: str = typer.Option(
        "",
        "--missingreplica",
        "-mr",
        help="Only ledgers that miss a replica on this bookie id.",
    ),
    excluding_missing_replica: str = typer.Option(
        "",
        "--excludingmissingreplica",
        "-emr",
        help="Leave out ledgers that miss a replica on this bookie id.",
    ),
    print_missing_replica: bool = typer.Option(
        False, "--printmissingreplica", "-pmr", help="Show the missing replicas."
    ),
    print_worker: bool = typer.Option(
        False,
        "--printreplicationworkerid",
        "-prw",
        help="Show the replication worker holding each ledger's lock.",
    ),
    only_count: bool = typer.Option(
        False,
        "--onlydisplayledgercount",
        help="Only print how many ledgers are marked (upstream's -c; here -c is --conf).",
    ),
    service_uri: str | None = ServiceUriOption,
    conf: Path | None = ConfOption,
    set_: list[str] | None = SetOption,
) -> None:
    """List the ledgers marked under-replicated (when marked; with -pmr the missing replicas, with -prw who re-replicates them)."""
    from dlog.ledger.underreplication import UnderreplicationManager

    include, exclude = missing_replica.strip(), excluding_missing_replica.strip()

    async def body(zk: ZooKeeper, root: str) -> list[tuple[int, int, tuple[str, ...], str | None]]:
        urm = UnderreplicationManager(zk, root)
        rows = []
        for lid, info in await urm.list():
            if include and include not in info.replicas:
                continue
            if exclude and exclude in info.replicas:
                continue
            worker = await urm.lock_holder(lid) if print_worker and not only_count else None
            rows.append((lid, info.ctime, info.replicas, worker))
        return rows

    rows = run_zk(service_uri, conf, set_, body)
    if only_count:
        print(len(rows))
        return
    if not rows:
        err_console.print("[yellow]no under-replicated ledgers[/]")
        return
    table = Table(title=f"{len(rows)} under-replicated ledger(s)")
    table.add_column("ledger", justify="right")
    table.add_column("marked at (ms)")
    if print_missing_replica:
        table.add_column("missing replicas")
    if print_worker:
        table.add_column("replication worker")
    for lid, ctime, replicas, worker in rows:
        cells = [str(lid), _ctime(ctime)]
        if print_missing_replica:
            cells.append(_esc(", ".join(replicas)))
        if print_worker:
            cells.append("-" if worker is None else _esc(worker or "(unnamed)"))
        table.add_row(*cells)
    console.print(table)


@app.command("autorecovery")
def autorecovery(
    enable: bool = typer.Option(
        False,
        "--enable",
        "-e",
        "-enable",
        help="Enable re-replication of under-replicated ledgers.",
    ),
    disable: bool = typer.Option(
        False,
        "--disable",
        "-d",
        "-disable",
        help="Disable it (workers finish their ledger, then wait).",
    ),
    service_uri: str | None = ServiceUriOption,
    conf: Path | None = ConfOption,
    set_: list[str] | None = SetOption,
) -> None:
    """Show whether AutoRecovery re-replicates ledgers, or switch it on or off (the `underreplication/disable` znode)."""
    from dlog.ledger.underreplication import UnderreplicationManager

    if enable and disable:
        raise fail("pass one of --enable and --disable, not both", 2)

    async def body(zk: ZooKeeper, root: str) -> tuple[bool, bool]:
        urm = UnderreplicationManager(zk, root)
        if enable or disable:
            await urm.initialize()
            changed = await (urm.enable_replication() if enable else urm.disable_replication())
            return enable, changed
        return await urm.is_replication_enabled(), False

    enabled, changed = run_zk(service_uri, conf, set_, body)
    state = "enabled" if enabled else "disabled"
    color = "green" if enabled else "yellow"
    if not (enable or disable):
        console.print(f"autorecovery is [{color}]{state}[/]")
    elif changed:
        console.print(f"autorecovery [{color}]{state}[/]")
    else:
        console.print(f"autorecovery was already [{color}]{state}[/]: nothing changed")


@app.command("lostbookierecoverydelay")
def lost_bookie_recovery_delay(
    get: bool = typer.Option(False, "--get", "-g", "-get", help="Print the value (seconds)."),
    set_value: int | None = typer.Option(
        None,
        "--set",
        "-s",
        "-set",
        min=0,
        metavar="SECONDS",
        help="Set the value (seconds); the auditor follows it at once.",
    ),
    service_uri: str | None = ServiceUriOption,
    conf: Path | None = ConfOption,
) -> None:
    """Get or set lostBookieRecoveryDelay in ZooKeeper: how long a bookie may be gone before the auditor marks its ledgers."""
    from dlog.errors import NoNodeError
    from dlog.ledger.underreplication import UnderreplicationManager

    if get == (set_value is not None):
        raise fail("pass one and only one of --get and --set", 2)

    async def body(zk: ZooKeeper, root: str) -> int:
        urm = UnderreplicationManager(zk, root)
        if set_value is not None:
            await urm.initialize()
            await urm.set_lost_bookie_recovery_delay(set_value)
            return set_value
        try:
            return await urm.get_lost_bookie_recovery_delay()
        except NoNodeError:
            raise fail(
                "lostBookieRecoveryDelay is not set in ZooKeeper yet (the auditor writes "
                "its configured value when it first starts); set it with --set"
            ) from None

    # --set is the value here, as upstream's: no KEY=VALUE overrides.
    value = run_zk(service_uri, conf, None, body)
    if set_value is not None:
        console.print(f"lostBookieRecoveryDelay set to {value} s")
    else:
        print(value)


@app.command("whoisauditor")
def who_is_auditor(
    service_uri: str | None = ServiceUriOption,
    conf: Path | None = ConfOption,
    set_: list[str] | None = SetOption,
) -> None:
    """Print the id of the elected auditor (exit 1 when none is running)."""
    from dlog.autorecovery.election import current_auditor

    async def body(zk: ZooKeeper, root: str) -> str | None:
        return await current_auditor(zk, root)

    auditor = run_zk(service_uri, conf, set_, body)
    if auditor is None:
        raise fail("no auditor elected: no bookie or `dlog autorecovery` runs AutoRecovery")
    print(auditor)


@app.command("verifyledgers")
def verify_ledgers(
    ledger_ids: list[int] | None = typer.Option(
        None, "--ledger-id", "--ledgerid", "-l", help="Only this ledger (repeatable).", min=0
    ),
    percentage: int = typer.Option(
        100,
        "--percentage",
        help="Of each fragment's entries between its first and last (always read), "
        "as auditorLedgerVerificationPercentage.",
        min=0,
        max=100,
    ),
    service_uri: str | None = ServiceUriOption,
    conf: Path | None = ConfOption,
    set_: list[str] | None = SetOption,
) -> None:
    """Read what each bookie should hold of each ledger and verify every
    entry by the ledger's digest; list the missing, unreadable or corrupt
    replicas (exit 1 when there is any). A dlog extension: the auditor's
    verification (auditorLedgerVerificationPercentage), run on demand."""
    from dlog.ledger import checker
    from dlog.ledger.client import BookKeeper

    async def body(bk: BookKeeper) -> list[checker.BadReplica]:
        return await checker.verify_ledgers(bk, ledger_ids or None, percentage=percentage)

    bad = run_client(service_uri, conf, body, set_)
    if not bad:
        console.print("every replica verifies")
        return
    table = Table(title=f"{len(bad)} bad replica(s)")
    for name in ("ledger", "entry", "bookie", "problem", "detail"):
        table.add_column(name)
    for b in bad:
        table.add_row(str(b.ledger_id), str(b.entry_id), b.bookie, b.reason, _esc(b.detail))
    console.print(table)
    raise typer.Exit(1)
