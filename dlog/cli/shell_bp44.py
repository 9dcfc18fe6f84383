"""``dlog shell`` commands for BP-44's ownership and lifecycle hints: listorphaned, showowner, predictlifespan, orphanauditinterval.

They register on :data:`dlog.cli.shell.app`, imported by :mod:`dlog.cli` right after it.

Times in ``listorphaned`` and ``predictlifespan`` are epoch seconds, as in
BP-44's examples (metadata stores milliseconds; they are floored).
"""

from __future__ import annotations

import datetime as _dt
import json
from pathlib import Path
from typing import TYPE_CHECKING, Any

import typer

from dlog.cli.common import ConfOption, SetOption, fail
from dlog.cli.shell import ServiceUriOption, _note, app, run_client

if TYPE_CHECKING:
    from dlog.ledger.client import BookKeeper
    from dlog.ledger.metadata import LedgerMetadata, LedgerOwner
    from dlog.ledger.orphans import Orphan

LedgerArgument = typer.Argument(None, help="Ledger id.", min=0, show_default=False)
LedgerIdOpt = typer.Option(
    None, "--ledgerid", "--ledger-id", "-l", help="Ledger id (instead of the argument).", min=0
)


def _ledger_id(positional: int | None, option: int | None) -> int:
    if positional is None and option is None:
        raise fail("missing ledger id: give it as the argument or with -l/--ledgerid", 2)
    if positional is not None and option is not None and positional != option:
        raise fail(f"two different ledger ids given ({positional} and {option})", 2)
    return positional if positional is not None else option  # type: ignore[return-value]


def _seconds(ms: int | None) -> int | None:
    return None if ms is None else ms // 1000


def _when(seconds: int) -> str:
    try:
        t = _dt.datetime.fromtimestamp(seconds, tz=_dt.UTC)
    except (OverflowError, OSError, ValueError):
        return f"epoch second {seconds}"
    hour = t.hour % 12 or 12
    return f"{t:%A, %B} {t.day}, {t.year} {hour}:{t:%M:%S %p} UTC"  # BP-44's example style


def orphan_line(orphan: Orphan, *, reason: bool) -> str:
    """One line of ``listorphaned``: the id, or (``--printorphanreason``)
    BP-44's ``<id> <REASON> <argument>  // explanation``."""
    from dlog.ledger.orphans import OrphanReason

    if not reason:
        return str(orphan.ledger_id)
    if orphan.reason is OrphanReason.DELETE_OVERDUE:
        arg = orphan.argument // 1000
        why = f"ledger {orphan.ledger_id} should have been deleted on or before {_when(arg)}"
    else:
        arg = orphan.argument
        why = (
            f"ledger {orphan.ledger_id} lists ledger {arg} as a parent "
            f"but ledger {arg} does not exist"
        )
    return f"{f'{orphan.ledger_id} {orphan.reason.value} {arg}':<48} // {why}"


@app.command("listorphaned")
def list_orphaned(
    print_reason: bool = typer.Option(
        False,
        "--printorphanreason",
        "-r",
        help="Also print why: DELETE_OVERDUE <expectDeleteAfter, epoch s> or "
        "BROKEN_PARENT_REF <missing parent ledger id>.",
    ),
    service_uri: str | None = ServiceUriOption,
    conf: Path | None = ConfOption,
    set_: list[str] | None = SetOption,
) -> None:
    """List the ledgers the auditor's last orphan audit flagged (reads the ORPHANED znode, no scan)."""

    async def body(bk: BookKeeper) -> list[Orphan]:
        from dlog.ledger.orphans import list_orphaned as list_index

        return await list_index(bk.zk, bk.metadata_store.ledgers_root)

    orphans = run_client(service_uri, conf, body, set_)
    for orphan in orphans:
        print(orphan_line(orphan, reason=print_reason))
    if not orphans:
        _note(
            "no orphaned ledgers recorded (none found by the last orphan audit, or the "
            "auditor has not run one yet)"
        )


def _read_metadata(
    service_uri: str | None, conf: Path | None, set_: list[str] | None, ledger_id: int
) -> LedgerMetadata:
    async def body(bk: BookKeeper) -> LedgerMetadata:
        return await bk.ledger_metadata(ledger_id)

    return run_client(service_uri, conf, body, set_)


def _owner(owner: LedgerOwner | None) -> dict[str, Any] | None:
    if owner is None:
        return None
    return {
        "enterprise": owner.enterprise,
        "system": owner.system,
        "service": owner.service,
        "instance": owner.instance,
    }


def _no_create_context_note(md: LedgerMetadata) -> None:
    _note(
        f"ledger {md.ledger_id} has no create context (metadata format "
        f"{md.format_version}): it was created without one, or by a client writing "
        "ledgerMetadataVersion=3, which does not store BP-44 contexts"
    )


def owner_json(md: LedgerMetadata) -> dict[str, Any]:
    ctx = md.create_context
    return {
        "createdBy": _owner(ctx.created_by) if ctx else None,
        "onBehalfOf": _owner(ctx.created_on_behalf_of) if ctx else None,
        "dataSet": ctx.part_of_data_set if ctx else None,
    }


@app.command("showowner")
def show_owner(
    ledger: int | None = LedgerArgument,
    ledger_id: int | None = LedgerIdOpt,
    service_uri: str | None = ServiceUriOption,
    conf: Path | None = ConfOption,
    set_: list[str] | None = SetOption,
) -> None:
    """Who created a ledger, on whose behalf, and its data set (BP-44 create context), as JSON."""
    md = _read_metadata(service_uri, conf, set_, _ledger_id(ledger, ledger_id))
    print(json.dumps(owner_json(md), indent=4))
    if md.create_context is None:
        _no_create_context_note(md)


def lifespan_json(md: LedgerMetadata) -> dict[str, Any]:
    create, close = md.create_context, md.close_context
    expected_seal = None
    if md.ctime is not None and create and create.expected_max_open_duration_ms is not None:
        expected_seal = md.ctime + create.expected_max_open_duration_ms
    return {
        "createTime": _seconds(md.ctime),
        "expectedSealTime": _seconds(expected_seal),
        "actualSealTime": _seconds(md.seal_time),
        "expectedReadUntilTime": _seconds(close.expect_reads_until_ms if close else None),
        "expectedDeleteTime": _seconds(close.expect_delete_after_ms if close else None),
    }


@app.command("predictlifespan")
def predict_lifespan(
    ledger: int | None = LedgerArgument,
    ledger_id: int | None = LedgerIdOpt,
    service_uri: str | None = ServiceUriOption,
    conf: Path | None = ConfOption,
    set_: list[str] | None = SetOption,
) -> None:
    """A ledger's lifespan from its BP-44 contexts, as JSON (epoch seconds; null where unknown)."""
    md = _read_metadata(service_uri, conf, set_, _ledger_id(ledger, ledger_id))
    print(json.dumps(lifespan_json(md), indent=4))
    if md.create_context is None:
        _no_create_context_note(md)
    if md.ctime is None:
        _note(f"ledger {md.ledger_id} has no creation time (ctime) in its metadata")
    if not md.is_closed:
        _note(f"ledger {md.ledger_id} is {md.state.name}: not sealed yet")
    elif md.close_context is None:
        _note(
            f"ledger {md.ledger_id} was closed without a close context (or by a client "
            "writing ledgerMetadataVersion=3): no read-until or delete time"
        )


@app.command("orphanauditinterval")
def orphan_audit_interval(
    get: bool = typer.Option(False, "--get", help="Print the interval (the default)."),
    set_seconds: int | None = typer.Option(
        None, "--set", min=0, help="Set the interval in seconds (0 disables the audit)."
    ),
    service_uri: str | None = ServiceUriOption,
    conf: Path | None = ConfOption,
) -> None:
    """Show or change the auditor's orphaned-ledger check interval at run time
    (the underreplication/orphanedLedgerCheckInterval znode). Here --set
    takes the seconds, not key=value client settings."""
    if get and set_seconds is not None:
        raise fail("give --get or --set, not both", 2)

    async def body(bk: BookKeeper) -> int | None:
        from dlog.ledger.underreplication import UnderreplicationManager

        urm = UnderreplicationManager(bk.zk, bk.metadata_store.ledgers_root)
        try:
            if set_seconds is not None:
                await urm.set_orphan_check_interval(set_seconds)
            return await urm.get_orphan_check_interval()
        finally:
            urm.close()

    value = run_client(service_uri, conf, body)
    if value is None:
        _note(
            "not set: each auditor uses auditorPeriodicOrphanedLedgerCheckInterval "
            "from its bookie configuration"
        )
        return
    print(value)
