"""``dlog subscriptions``: subscribers' committed positions.

    export DLOG_URI=distributedlog://127.0.0.1:2181/messaging
    dlog subscriptions list events
    dlog subscriptions show events billing
    dlog subscriptions reset events billing --to earliest|latest|1/42/0 [--format zk|log-segment] [--force]
    dlog subscriptions delete events billing [--force]
    dlog subscriptions migrate --to log-segment|zk [--stream events] [--dry-run]

``list`` and ``show`` are admin reads: they never fence a running consumer
and read both znode formats (DistributedLog's base64 DLSN, and the
log-segment store's ``Subscription``). While a log-segment consumer is
alive they may lag its newest commits (in flight, or acknowledged a moment
ago); once its ZooKeeper session is gone they include every acknowledged
commit. ``show`` says which case applies. ``reset`` takes ownership with a
store of the subscriber's current format (so a log-segment consumer is not
silently converted; ``--format`` converts, a new subscriber gets the format
``logSegmentBasedSubscriptionsStoreEnabled`` selects), which fences a
running consumer, sets the position (backwards too) and releases it
gracefully. ``migrate`` converts subscriptions between the two formats (see
``subscriptions.migrate``). Both print a format in the word given
(``--to zk`` prints ``zk``).

Every command takes ``--uri`` (default ``$DLOG_URI``), ``--conf`` and
``--set key=value``; none of them creates a namespace or a stream.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

import typer
from rich.markup import escape
from rich.table import Table

from dlog.cli.common import (
    ConfOption,
    ForceOption,
    SetOption,
    UriOption,
    console,
    dlsn_option,
    err_console,
    fail,
    print_table,
    run_namespace,
    short,
)

if TYPE_CHECKING:
    from dlog.dlsn import DLSN
    from dlog.log import LogManager
    from dlog.namespace import Namespace
    from subscriptions.migrate import MigrationResult
    from subscriptions.store import SubscriberInfo, SubscriptionsStore

app = typer.Typer(
    help="Subscribers' committed positions: list, show, reset, delete, migrate.",
    no_args_is_help=True,
)

StreamArgument = typer.Argument(..., help="Stream name.")
SubscriberArgument = typer.Argument(..., help="Subscriber id.")


def _admin_store(lm: LogManager) -> SubscriptionsStore:
    """A store used only to read (both formats); it never writes or fences."""
    from subscriptions.factory import store_for
    from subscriptions.format import ZK_FORMAT

    return store_for(lm.context, ZK_FORMAT)


def _check_id(subscriber_id: str) -> None:
    from dlog.errors import DLogError
    from subscriptions.format import validate_subscriber_id

    try:
        validate_subscriber_id(subscriber_id)
    except DLogError as e:
        raise fail(str(e), 2) from None


def _format_name(fmt: str) -> str:
    return {"none": "none (never committed)"}.get(fmt, fmt)


# ---------------------------------------------------------------------------
# list / show
# ---------------------------------------------------------------------------


@app.command("list")
def list_subscribers(
    stream: str = StreamArgument,
    uri: str | None = UriOption,
    conf: Path | None = ConfOption,
    set_: list[str] | None = SetOption,
) -> None:
    """A table of the stream's subscribers: position (DLSN and base64) and format."""
    from dlog.errors import DLogError

    async def body(ns: Namespace) -> list[tuple[str, SubscriberInfo | None, str | None]]:
        lm = await ns.open_log(stream)
        store = _admin_store(lm)
        rows: list[tuple[str, SubscriberInfo | None, str | None]] = []
        for sid in await store.list_subscribers():
            try:
                info = await store.describe(sid)
            except DLogError as e:  # one unreadable znode must not hide the others
                rows.append((sid, None, str(e)))
                continue
            if info.format != "none":  # deleted since it was listed
                rows.append((sid, info, None))
        return rows

    rows = run_namespace(uri, conf, set_, body)
    if not rows:
        err_console.print(f"[yellow]stream {escape(stream)} has no subscribers[/]")
        return
    table = Table(title=f"stream {escape(stream)}: {len(rows)} subscriber(s)")
    for col in ("subscriber", "position", "base64", "format"):
        table.add_column(col, overflow="fold")
    for sid, info, error in rows:
        if info is None:
            table.add_row(escape(sid), f"[red]unreadable: {escape(error or '')}[/]", "-", "-")
        else:
            table.add_row(escape(sid), str(info.position), info.position.serialize(), info.format)
    print_table(table)


@app.command("show")
def show(
    stream: str = StreamArgument,
    subscriber_id: str = SubscriberArgument,
    uri: str | None = UriOption,
    conf: Path | None = ConfOption,
    set_: list[str] | None = SetOption,
) -> None:
    """A subscriber's format, znode version, position and, for the
    log-segment format, its segment's ledger (ensemble, state, last entry)
    and whether its owner is alive: while it is, the position may lag the
    owner's newest commits; once it is gone, it includes every one."""
    from dlog.errors import NoSuchLedgerError, SubscriptionNotFoundError
    from subscriptions.format import SegmentSubscription

    _check_id(subscriber_id)

    async def body(ns: Namespace) -> dict[str, Any]:
        lm = await ns.open_log(stream)
        store = _admin_store(lm)
        while True:
            znode, version = await store.read_znode(subscriber_id)
            if znode is None:
                raise SubscriptionNotFoundError(
                    f"stream {stream!r} has no subscriber {subscriber_id!r}"
                )
            info = await store.describe(subscriber_id)
            out: dict[str, Any] = {"info": info, "path": store.znode(subscriber_id)}
            out["znode"] = znode
            if isinstance(znode, SegmentSubscription) and znode.segment_id is not None:
                try:
                    out["ledger"] = await _ledger_summary(ns, lm, znode.segment_id)
                except NoSuchLedgerError:
                    # The owner switched segments since the read (describe
                    # already refused a segment missing for good): again.
                    if (await store.read_znode(subscriber_id))[1] != version:
                        continue
                    raise
            return out

    found = run_namespace(uri, conf, set_, body)
    info: SubscriberInfo = found["info"]
    znode = found["znode"]
    print(f"stream:          {stream}")
    print(f"subscriber:      {subscriber_id}")
    print(f"format:          {_format_name(info.format)}")
    print(f"znode:           {found['path']} (version {info.znode_version})")
    print(f"position:        {info.position}")
    print(f"position base64: {info.position.serialize()}")
    print(f"position S/E/N:  {short(info.position)}")
    if not isinstance(znode, SegmentSubscription):
        return
    print(f"last_commit:     {znode.last_commit} (as of the last segment switch)")
    owner = info.owner
    if znode.segment_id is None:
        print("segment ledger:  - (released gracefully: the position is last_commit)")
    else:
        print(f"segment ledger:  {znode.segment_id}")
        for key, value in found["ledger"].items():
            print(f"  {key + ':':<14} {value}")
        if owner is not None:
            who = ", ".join(f"{k} {v}" for k, v in owner.items())
            print(f"owner:           alive ({who})")
            print(
                "                 the position may lag its newest commits (those in flight or"
                " acknowledged a moment ago); it never includes a commit that is not durable"
            )
        else:
            print(
                "owner:           none alive (its ZooKeeper session is gone): the position"
                " includes every acknowledged commit"
            )
    if znode.next_segment_id is not None and znode.next_segment_id != znode.segment_id:
        print(f"next segment:    {znode.next_segment_id} (a segment switch in progress or crashed)")
    if znode.previous_segment_id is not None:
        print(f"previous:        {znode.previous_segment_id} (deleted after the switch)")


async def _ledger_summary(ns: Namespace, lm: LogManager, ledger_id: int) -> dict[str, str]:
    """Ensemble, state and last entry of a segment ledger, without fencing it."""
    md = await ns.bk.ledger_metadata(ledger_id)
    ensembles = "; ".join(f"{first}: [{', '.join(bookies)}]" for first, bookies in md.ensembles)
    out = {
        "ensemble": ensembles,
        "quorums": f"E={md.ensemble_size} W={md.write_quorum_size} A={md.ack_quorum_size}",
        "state": md.state.name,
    }
    if md.is_closed:
        out["last entry"] = f"{md.last_entry_id} (closed)"
        out["length"] = f"{md.length} bytes"
    else:
        from dlog.segment_reader import open_segment

        async with open_segment(ns.bk, ledger_id, lm.password) as rh:
            lac = await rh.read_last_add_confirmed()
        out["last entry"] = f"{lac} (last add confirmed; the ledger is open)"
    ctx = md.create_context
    if ctx is not None and ctx.part_of_data_set:
        out["data set"] = ctx.part_of_data_set
    return out


# ---------------------------------------------------------------------------
# delete / reset
# ---------------------------------------------------------------------------


@app.command("delete")
def delete(
    stream: str = StreamArgument,
    subscriber_id: str = SubscriberArgument,
    force: bool = ForceOption,
    uri: str | None = UriOption,
    conf: Path | None = ConfOption,
    set_: list[str] | None = SetOption,
) -> None:
    """Forget a subscriber: its znode and its segment ledgers (asks first unless --force).
    A consumer still running with it fails on its next commit."""
    from dlog.errors import SubscriptionNotFoundError

    _check_id(subscriber_id)

    async def body(ns: Namespace) -> DLSN:
        lm = await ns.open_log(stream)
        store = lm.subscriptions
        info = await store.describe(subscriber_id)
        if info.format == "none":
            raise SubscriptionNotFoundError(
                f"stream {stream!r} has no subscriber {subscriber_id!r}"
            )
        if not force:
            typer.confirm(
                f"Delete subscriber {subscriber_id!r} of stream {stream!r} (at "
                f"{short(info.position)})?",
                abort=True,
                err=True,
            )
        if not await store.delete_subscriber(subscriber_id):
            raise SubscriptionNotFoundError(
                f"stream {stream!r} has no subscriber {subscriber_id!r}"
            )
        return info.position

    position = run_namespace(uri, conf, set_, body)
    console.print(
        f"deleted subscriber {escape(subscriber_id)} of stream {escape(stream)} "
        f"(it was at {short(position)})"
    )


@app.command("reset")
def reset(
    stream: str = StreamArgument,
    subscriber_id: str = SubscriberArgument,
    to: str = typer.Option(
        ...,
        "--to",
        help="earliest (re-read everything), latest (skip every record written so far), "
        "or a DLSN (base64, S/E/N or DLSN{...}): the consumer resumes after it.",
    ),
    format_name: str | None = typer.Option(
        None,
        "--format",
        help="Write this format, converting the subscriber: zk (or zookeeper) or log-segment. "
        "Default: keep its current format; a new subscriber gets the configured one "
        "(logSegmentBasedSubscriptionsStoreEnabled).",
        show_default=False,
    ),
    force: bool = ForceOption,
    uri: str | None = UriOption,
    conf: Path | None = ConfOption,
    set_: list[str] | None = SetOption,
) -> None:
    """Set a subscriber's committed position, backwards too (asks first unless --force).

    Takes ownership with a store of the subscriber's current format (or
    --format's, converting it), so a running consumer is fenced: it fails on
    its next commit and, reopened, resumes after --to. A subscriber that
    does not exist yet is created at --to, in the format the configuration
    selects (logSegmentBasedSubscriptionsStoreEnabled); one whose segment is
    lost keeps the format its znode is in. Says which format it wrote.
    """
    from dlog.dlsn import NonInclusiveLowerBound
    from dlog.errors import LogEmptyError, SubscriptionCorruptedError
    from subscriptions.factory import configured_format, store_for
    from subscriptions.format import SEGMENT_FORMAT, ZK_FORMAT, SegmentSubscription
    from subscriptions.migrate import format_word, target_format

    _check_id(subscriber_id)
    choice = to.strip().lower()
    target = None if choice in ("earliest", "latest") else dlsn_option(to, "--to")
    wanted = None
    if format_name is not None:
        try:
            wanted = target_format(format_name)
        except ValueError as e:
            raise fail(f"--format: {e}", 2) from None

    def word(fmt: str) -> str:
        """A format as --format spelt it (``zk``), else its own name."""
        return format_word(format_name) if format_name is not None and fmt == wanted else fmt

    async def body(
        ns: Namespace,
    ) -> tuple[SubscriberInfo | None, SubscriberInfo, str | None, str | None, str]:
        lm = await ns.open_log(stream)
        note = None
        dlsn = target
        if choice == "earliest":
            dlsn = NonInclusiveLowerBound
        elif choice == "latest":
            try:
                dlsn = await lm.get_last_dlsn()
            except LogEmptyError:
                dlsn = NonInclusiveLowerBound
                note = f"stream {stream!r} has no records: latest is the same as earliest"
        assert dlsn is not None
        admin = _admin_store(lm)
        before: SubscriberInfo | None
        current: str | None  # the subscriber's format; None for a new one
        try:
            before = await admin.describe(subscriber_id)
            current = None if before.format == "none" else before.format
        except SubscriptionCorruptedError as e:
            # Reset is the way out of a lost segment: say what is lost, and
            # keep the format its znode is in (a segment is only ever lost
            # in the log-segment format).
            before = None
            err_console.print(f"[yellow]note: {escape(str(e))}[/]")
            znode = (await admin.read_znode(subscriber_id))[0]
            current = SEGMENT_FORMAT if isinstance(znode, SegmentSubscription) else ZK_FORMAT
            if znode is None:  # deleted since: a new subscriber
                current = None
        fmt = wanted or current or configured_format(lm.context.conf)
        if not force:
            if before is None:
                was = "its position is unreadable"
            elif current is None:
                was = "new subscriber"
            else:
                was = f"now {short(before.position)}"
            converting = f", converting it from {current}" if current not in (None, fmt) else ""
            typer.confirm(
                f"Reset subscriber {subscriber_id!r} of stream {stream!r} to {short(dlsn)} "
                f"({was}) in the {word(fmt)} format{converting}? A running consumer is fenced.",
                abort=True,
                err=True,
            )
        store = store_for(lm.context, fmt)
        try:
            await store.reset_position(subscriber_id, dlsn)
            await store.release(subscriber_id)
        finally:
            await store.close()
        after = await admin.describe(subscriber_id)
        return before, after, note, current, fmt

    before, after, note, current, fmt = run_namespace(uri, conf, set_, body)
    if note:
        err_console.print(f"[yellow]note: {escape(note)}[/]")
    if before is None:
        was = "unreadable"
    elif current is None:
        was = "new"
    else:
        was = short(before.position)
    converted = f", converted from {current}" if current not in (None, fmt) else ""
    console.print(
        f"subscriber {escape(subscriber_id)} of stream {escape(stream)}: {was} -> "
        f"{short(after.position)} (wrote the {word(fmt)} format{converted})"
    )
    if after.format != fmt:
        err_console.print(
            f"[yellow]note: it is in the {after.format} format again: a consumer in that "
            "format took it over since[/]"
        )
    print(f"{after.position}")
    print(after.position.serialize())


# ---------------------------------------------------------------------------
# migrate
# ---------------------------------------------------------------------------


@app.command("migrate")
def migrate(
    to: str = typer.Option(
        ...,
        "--to",
        help="Target format: log-segment, or zk (zookeeper); the output uses the word given.",
        show_default=False,
    ),
    stream: list[str] | None = typer.Option(
        None, "--stream", help="Only this stream (repeatable; default: every stream)."
    ),
    dry_run: bool = typer.Option(
        False, "--dry-run", help="Write nothing: show what would be converted."
    ),
    uri: str | None = UriOption,
    conf: Path | None = ConfOption,
    set_: list[str] | None = SetOption,
) -> None:
    """Convert every subscription (of every stream, or of --stream) to one format.

    Each conversion takes ownership with the target store and releases it
    gracefully, fencing a consumer still running in the other format (it
    fails on its next commit and, reopened, reads the converted position).
    Then it reads the position back: equal, or later if a consumer committed
    meanwhile, never earlier. Subscriptions already in the target format are
    only verified ("already"). Exits 1 if any subscriber FAILED.
    """
    from subscriptions.migrate import format_word, target_format

    try:
        fmt = target_format(to)
    except ValueError as e:
        raise fail(f"--to: {e}", 2) from None

    def word(name: str | None) -> str | None:
        """The target format as --to spelt it (``zk``); any other as named."""
        return format_word(to) if name == fmt else name

    async def body(ns: Namespace) -> list[MigrationResult]:
        from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn

        from subscriptions.migrate import migrate_subscriptions

        progress = Progress(
            TextColumn("{task.description}"),
            BarColumn(),
            MofNCompleteColumn(),
            TextColumn("{task.fields[current]}"),
            console=err_console,
            transient=True,
        )
        task = progress.add_task(
            "checking" if dry_run else f"converting to {word(fmt)}", total=None, current=""
        )

        def on_plan(todo: list[tuple[str, str]]) -> None:
            progress.update(task, total=len(todo))

        def on_result(r: MigrationResult) -> None:
            progress.update(task, advance=1, current=f"{r.stream}/{r.subscriber_id}")

        with progress:
            return await migrate_subscriptions(
                ns,
                fmt,
                streams=stream or None,
                dry_run=dry_run,
                on_plan=on_plan,
                on_result=on_result,
            )

    results = run_namespace(uri, conf, set_, body)
    if not results:
        err_console.print("[yellow]no subscribers to migrate[/]")
        return
    print_table(_migration_table(results, format_word(to), word, dry_run))
    failed = [r for r in results if not r.ok]
    counts: dict[str, int] = {}
    for r in results:
        counts[r.result] = counts.get(r.result, 0) + 1
    summary = ", ".join(f"{n} {what}" for what, n in counts.items())
    print(f"{len(results)} subscriber(s): {summary}")
    if failed:
        raise typer.Exit(1)


def _migration_table(
    results: list[MigrationResult],
    target: str,
    word: Callable[[str | None], str | None],
    dry_run: bool,
) -> Table:
    """One row per subscriber; ``word`` prints a format (the target as --to spelt it)."""
    title = f"subscriptions -> {target}" + (" (dry run: nothing written)" if dry_run else "")
    table = Table(title=title)
    for col in (
        "stream",
        "subscriber",
        "format before",
        "format after",
        "position before",
        "position after",
        "result",
    ):
        table.add_column(col, overflow="fold")
    for r in results:
        style = {"converted": "green", "already": "cyan", "dry-run": "yellow"}.get(r.result, "red")
        table.add_row(
            escape(r.stream),
            escape(r.subscriber_id),
            word(r.format_before) or "-",
            word(r.format_after) or "-",
            short(r.position_before) if r.position_before is not None else "-",
            short(r.position_after) if r.position_after is not None else "-",
            f"[{style}]{escape(r.result_text)}[/]",
        )
    return table
