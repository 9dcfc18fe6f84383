"""``dlog admin``: the gRPC control plane of a bookie, AutoRecovery or a proxy.

Talks to the port ``grpcServerPort`` sets (``--target HOST:PORT``); each
process answers what it serves, the rest says which process to ask.
"""

from __future__ import annotations

import datetime
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING, TypeVar

import typer
from rich.markup import escape
from rich.table import Table

from dlog.cli.common import console, fail, print_table

if TYPE_CHECKING:
    from dlog.control.client import AdminClient
    from dlog.protocol import admin_pb2 as pb

T = TypeVar("T")

app = typer.Typer(
    help="Health and admin over gRPC (grpcServerEnabled): dlog admin --target HOST:PORT COMMAND.",
    no_args_is_help=True,
)

_state: dict[str, object] = {}


@app.callback()
def _options(
    target: str | None = typer.Option(
        None,
        "--target",
        "-t",
        envvar="DLOG_ADMIN_TARGET",
        help="HOST:PORT of the process's gRPC control plane (its grpcServerPort).",
    ),
    timeout: float = typer.Option(10.0, "--timeout", help="Seconds to wait for an answer."),
) -> None:
    _state["target"] = target
    _state["timeout"] = timeout


@contextmanager
def _client() -> Iterator[AdminClient]:
    import grpc

    from dlog.control.client import AdminClient

    if not _state.get("target"):
        # Checked here, not by typer: `dlog admin COMMAND --help` needs no target.
        raise fail("give the process's gRPC address: --target HOST:PORT (or $DLOG_ADMIN_TARGET)", 2)
    target = str(_state["target"])
    timeout = _state["timeout"]
    assert isinstance(timeout, float)
    try:
        with AdminClient(target, timeout=timeout) as client:
            yield client
    except grpc.RpcError as e:
        code = e.code()
        if code == grpc.StatusCode.UNAVAILABLE:
            raise fail(f"{target}: unavailable: {e.details()}") from None
        raise fail(f"{target}: {code.name}: {e.details()}") from None


def _call(fn: Callable[[AdminClient], T]) -> T:
    with _client() as client:
        return fn(client)


def _size(n: int) -> str:
    value = float(n)
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if value < 1024 or unit == "TiB":
            return f"{value:.0f} {unit}" if unit == "B" else f"{value:.1f} {unit}"
        value /= 1024
    raise AssertionError("unreachable")


def _ms(ms: int) -> str:
    if ms <= 0:
        return "-"
    return datetime.datetime.fromtimestamp(ms / 1000, datetime.UTC).strftime("%Y-%m-%d %H:%M:%SZ")


@app.command("health")
def health(
    service: str = typer.Argument(
        "",
        help='Service name: "" (the process), dlog.bookie, dlog.autorecovery, dlog.proxy.',
    ),
) -> None:
    """Print the standard gRPC health status; exit 1 unless SERVING."""
    status = _call(lambda c: c.health(service))
    console.print(status)
    if status != "SERVING":
        raise typer.Exit(1)


@app.command("bookie-info")
def bookie_info() -> None:
    """A bookie's disks, read-only state, journal and write cache."""
    info = _call(lambda c: c.bookie_info())
    state = "read-only" if info.read_only else "writable"
    if info.read_only_reasons:
        state += f" ({', '.join(info.read_only_reasons)})"
    summary = Table(title=f"bookie {escape(info.bookie_id)}", show_header=False)
    summary.add_column("field")
    summary.add_column("value")
    summary.add_row("state", escape(state))
    summary.add_row("port", str(info.port))
    summary.add_row(
        "journal", f"{info.journal_pending_records} pending of queue {info.journal_queue_size}"
    )
    summary.add_row(
        "write cache",
        f"{_size(info.write_cache_bytes)} in {info.write_cache_entries} entries "
        f"(max {_size(info.write_cache_max_bytes)})",
    )
    summary.add_row("read cache", _size(info.read_cache_bytes))
    print_table(summary)
    disks = Table(title="directories")
    for col in ("kind", "path", "used", "free", "total", "full"):
        disks.add_column(col)
    rows: list[tuple[str, pb.DirectoryUsage]] = [
        *(("ledger", d) for d in info.ledger_directories),
        *(("journal", d) for d in info.journal_directories),
    ]
    for kind, d in rows:
        disks.add_row(
            kind,
            escape(d.path),
            f"{d.used_fraction * 100:.1f}%",
            _size(d.free_bytes),
            _size(d.total_bytes),
            "yes" if d.full else "no",
        )
    print_table(disks)


@app.command("bookies")
def bookies() -> None:
    """The bookies registered in ZooKeeper, as the target bookie sees them."""
    reply = _call(lambda c: c.list_bookies())
    table = Table(title=f"{len(reply.writable) + len(reply.read_only)} bookie(s)")
    table.add_column("bookie")
    table.add_column("state")
    for b in reply.writable:
        table.add_row(escape(b), "writable")
    for b in reply.read_only:
        table.add_row(escape(b), "read-only")
    print_table(table)


@app.command("ledger")
def ledger(ledger_id: int = typer.Argument(..., help="Ledger id.")) -> None:
    """One ledger's metadata."""
    md = _call(lambda c: c.ledger_metadata(ledger_id))
    table = Table(title=f"ledger {md.ledger_id}", show_header=False)
    table.add_column("field")
    table.add_column("value")
    table.add_row("state", md.state)
    table.add_row(
        "quorum",
        f"E{md.ensemble_size}/W{md.write_quorum_size}/A{md.ack_quorum_size}",
    )
    table.add_row("last entry", str(md.last_entry_id))
    table.add_row("length", _size(md.length))
    table.add_row("digest", md.digest_type)
    table.add_row("created", _ms(md.ctime))
    table.add_row("version", str(md.version))
    for key, value in sorted(md.custom_metadata.items()):
        table.add_row(f"custom {escape(key)}", escape(value.decode(errors="replace")))
    print_table(table)
    ensembles = Table(title="ensembles")
    ensembles.add_column("first entry")
    ensembles.add_column("bookies")
    for e in md.ensembles:
        ensembles.add_row(str(e.first_entry_id), escape(", ".join(e.bookies)))
    print_table(ensembles)


@app.command("gc")
def gc(
    major: bool = typer.Option(True, "--major/--no-major", help="Allow a major compaction."),
    minor: bool = typer.Option(True, "--minor/--no-minor", help="Allow a minor compaction."),
    wait: bool = typer.Option(False, "--wait", help="Wait for the collection to finish."),
) -> None:
    """Trigger a garbage collection on a bookie."""
    reply = _call(lambda c: c.trigger_gc(force_major=major, force_minor=minor, wait=wait))
    console.print(escape(reply.message))
    if reply.completed:
        table = Table(title="collection finished")
        for col in ("cycles", "deleted ledgers", "removed logs", "removed", "compacted logs"):
            table.add_column(col)
        table.add_row(
            str(reply.cycles),
            str(reply.deleted_ledgers),
            str(reply.removed_logs),
            _size(reply.removed_bytes),
            str(reply.compacted_logs),
        )
        print_table(table)


@app.command("auditor")
def auditor() -> None:
    """Who is the auditor, and AutoRecovery's cluster-wide settings."""
    s = _call(lambda c: c.auditor_status())
    table = Table(title="auditor", show_header=False)
    table.add_column("field")
    table.add_column("value")
    table.add_row("auditor", escape(s.auditor) or "(none elected)")
    table.add_row(
        "this candidate", f"{escape(s.candidate_id)}{' (auditor)' if s.is_auditor else ''}"
    )
    table.add_row("replication", "enabled" if s.replication_enabled else "disabled")
    table.add_row("lostBookieRecoveryDelay", f"{s.lost_bookie_recovery_delay_seconds} s")
    print_table(table)


@app.command("underreplicated")
def underreplicated() -> None:
    """Ledgers marked under-replicated, with their missing replicas."""
    reply = _call(lambda c: c.underreplicated())
    table = Table(title=f"{len(reply.ledgers)} under-replicated ledger(s)")
    table.add_column("ledger")
    table.add_column("missing replicas")
    table.add_column("marked")
    for u in reply.ledgers:
        table.add_row(str(u.ledger_id), escape(", ".join(u.missing_replicas)), _ms(u.ctime))
    print_table(table)


@app.command("streams")
def streams() -> None:
    """The streams a write proxy owns."""
    reply = _call(lambda c: c.owned_streams())
    title = f"{len(reply.streams)} stream(s) owned"
    if reply.owner:
        title += f" by {escape(reply.owner)}"
    table = Table(title=title)
    table.add_column("stream")
    table.add_column("outstanding writes")
    for s in reply.streams:
        table.add_row(escape(s.name), str(s.outstanding_writes))
    print_table(table)
