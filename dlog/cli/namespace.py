"""``dlog namespace``: create a namespace (bind it to bookies) and show one.

    dlog namespace create distributedlog://127.0.0.1:2181/messaging
    dlog namespace show distributedlog://127.0.0.1:2181/messaging
    dlog namespace upgrade distributedlog://127.0.0.1:2181/messaging [--dry-run]

As in DistributedLog (``dlog admin bind``), a namespace exists once its
znode names the bookies' metadata service; every other command refuses a
namespace that does not, so a mistyped URI creates nothing. ``create``
binds to ``--ledgers-uri``, else ``bkc.metadataServiceUri`` from
``--conf``/``--set``, else ``zk+hierarchical://<the namespace's
ZooKeeper>/ledgers``; creating one already bound to those bookies is not an
error, to others is. The URI is the argument, else ``--uri``, else
``$DLOG_URI``. ``upgrade`` moves streams written by older dlog releases
into DistributedLog's ``<stream>/<default>`` layout (see
:mod:`dlog.layout_upgrade`) and their log-segment subscription records
into a child of a znode holding a DistributedLog position (see
:mod:`subscriptions.upgrade`).
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import TYPE_CHECKING, TypeVar

import typer
from rich.markup import escape

from dlog.cli.common import (
    ConfOption,
    SetOption,
    UriOption,
    console,
    err_console,
    fail,
    resolve,
    setup_logging,
)
from dlog.errors import DLogError

if TYPE_CHECKING:
    from dlog.conf.dlog import DLogConfig
    from dlog.zk import ZooKeeper

T = TypeVar("T")

app = typer.Typer(
    help="Namespaces: create one (bind it to bookies), show its binding, upgrade its layout.",
    no_args_is_help=True,
)

UriArgument = typer.Argument(
    None,
    metavar="URI",
    help="Namespace URI, e.g. distributedlog://127.0.0.1:2181/messaging "
    "(default: --uri, then $DLOG_URI).",
    show_default=False,
)


def _namespace_uri(argument: str | None, option: str | None) -> str | None:
    if argument and option and argument != option:
        raise fail(f"two namespace URIs: {argument} and --uri {option}", 2)
    return argument or option


def _run_zk(ns_uri: str, cfg: DLogConfig, body: Callable[[ZooKeeper], Awaitable[T]]) -> T:
    """Run ``body`` with a ZooKeeper session on the namespace's ensemble
    (no ledger client: the bookies need not be up, nor the binding valid)."""
    from dlog.uri import parse_namespace_uri
    from dlog.zk import ZooKeeper

    async def go() -> T:
        zk = ZooKeeper(parse_namespace_uri(ns_uri).hosts, timeout=cfg.zk_session_timeout_seconds)
        await zk.start(timeout=cfg.zk_connect_timeout, setting="zkConnectionTimeoutSeconds")
        try:
            return await body(zk)
        finally:
            await zk.stop()

    try:
        return asyncio.run(go())
    except KeyboardInterrupt:
        raise fail("interrupted", 130) from None
    except DLogError as e:
        raise fail(str(e)) from None
    except (OSError, TimeoutError) as e:
        raise fail(f"{type(e).__name__}: {e}") from None


@app.command("create")
def create(
    ns_uri: str | None = UriArgument,
    ledgers_uri: str | None = typer.Option(
        None,
        "--ledgers-uri",
        "-l",
        help="The bookies' metadata service, e.g. zk+hierarchical://127.0.0.1:2181/ledgers "
        "(default: bkc.metadataServiceUri if set, else /ledgers on the namespace's ZooKeeper).",
        show_default=False,
    ),
    uri: str | None = UriOption,
    conf: Path | None = ConfOption,
    set_: list[str] | None = SetOption,
) -> None:
    """Create a namespace: bind it to the bookies under --ledgers-uri."""
    from dlog.namespace import create_binding, default_ledgers_uri
    from dlog.uri import parse_metadata_service_uri

    ns_uri, cfg = resolve(_namespace_uri(ns_uri, uri), conf, set_)
    try:
        wanted = str(parse_metadata_service_uri(ledgers_uri or default_ledgers_uri(ns_uri, cfg)))
    except ValueError as e:
        raise fail(f"invalid --ledgers-uri: {e}", 2) from None
    setup_logging(default="WARNING")

    async def body(zk: ZooKeeper) -> tuple[bool, bool]:
        _binding, created = await create_binding(zk, ns_uri, wanted)
        return created, await _bookies_registered(zk, wanted)

    created, registered = _run_zk(ns_uri, cfg, body)
    if created:
        console.print(f"created namespace {escape(ns_uri)}, bound to {escape(wanted)}")
    else:
        console.print(f"namespace {escape(ns_uri)} already exists, bound to {escape(wanted)}")
    if not registered:
        err_console.print(
            f"[yellow]warning: no bookie has registered under {escape(wanted)} yet; "
            "check that it is the bookies' metadataServiceUri[/]",
            soft_wrap=True,
        )


async def _bookies_registered(zk: ZooKeeper, ledgers_uri: str) -> bool:
    """Whether bookies ever registered under ``ledgers_uri`` (its
    ``available`` znode exists). Only checked on the namespace's own
    ZooKeeper; another ensemble is taken on trust."""
    from dlog.uri import parse_metadata_service_uri

    parsed = parse_metadata_service_uri(ledgers_uri)
    if parsed.hosts != zk.hosts:
        return True
    return await zk.exists(f"{parsed.ledgers_root}/available") is not None


@app.command("show")
def show(
    ns_uri: str | None = UriArgument,
    uri: str | None = UriOption,
    conf: Path | None = ConfOption,
    set_: list[str] | None = SetOption,
) -> None:
    """The namespace's binding (the bookies it uses) and its stream count."""
    from dlog.log_metadata import LogMetadataStore, NamespaceBinding, read_namespace_binding
    from dlog.namespace import namespace_not_found
    from dlog.uri import parse_namespace_uri

    ns_uri, cfg = resolve(_namespace_uri(ns_uri, uri), conf, set_)
    setup_logging(default="WARNING")
    path = parse_namespace_uri(ns_uri).path

    async def body(zk: ZooKeeper) -> tuple[NamespaceBinding, int]:
        binding = await read_namespace_binding(zk, path)
        if binding is None:
            raise namespace_not_found(ns_uri)
        return binding, len(await LogMetadataStore(zk, path).get_logs())

    binding, streams = _run_zk(ns_uri, cfg, body)
    rows = [
        ("namespace", ns_uri),
        ("ledgers uri", binding.metadata_service_uri),
        ("bk zk servers", binding.bk_zk_servers),
        ("bk ledgers path", binding.bk_ledgers_path),
        ("dl zk servers", binding.dl_zk_servers),
        ("streams", str(streams)),
    ]
    width = max(len(k) for k, _ in rows) + 2
    for key, value in rows:
        print(f"{key + ':':<{width}}{value}")


@app.command("upgrade")
def upgrade(
    ns_uri: str | None = UriArgument,
    uri: str | None = UriOption,
    conf: Path | None = ConfOption,
    set_: list[str] | None = SetOption,
    dry_run: bool = typer.Option(
        False, "--dry-run", help="List the streams that would be moved; change nothing."
    ),
) -> None:
    """Move streams of older dlog releases (no <default> level) into
    DistributedLog's layout, and their log-segment subscription records
    beside a DistributedLog position, so dlog and Java clients can open them."""
    from dlog.layout_upgrade import upgrade_namespace
    from dlog.log_metadata import SUBSCRIBERS, LogMetadataStore, read_namespace_binding
    from dlog.namespace import namespace_not_found
    from dlog.uri import parse_namespace_uri
    from subscriptions.upgrade import move_inline_records

    ns_uri, cfg = resolve(_namespace_uri(ns_uri, uri), conf, set_)
    setup_logging(default="WARNING")
    path = parse_namespace_uri(ns_uri).path

    async def body(zk: ZooKeeper) -> tuple[list[tuple[str, int, bool]], dict[str, list[str]]]:
        if await read_namespace_binding(zk, path) is None:
            raise namespace_not_found(ns_uri)
        done = await upgrade_namespace(zk, path, dry_run=dry_run)
        store = LogMetadataStore(zk, path)
        records = {}
        for s in done:
            # In a dry run an old-layout stream's subscribers are still where
            # old releases kept them.
            p = store.paths(s.name)
            where = f"{p.stream}/{SUBSCRIBERS}" if dry_run and s.znodes else p.subscribers
            records[s.name] = await move_inline_records(zk, where, dry_run=dry_run)
        return [(s.name, s.znodes, s.transaction) for s in done], records

    streams, records = _run_zk(ns_uri, cfg, body)
    moved = [s for s in streams if s[1]]
    verb = "would move" if dry_run else "moved"
    for name, znodes, in_one in moved:
        how = "in one transaction" if in_one else "copy then delete"
        print(f"{verb} {name}: {znodes} znodes to {name}/<default> ({how})")
    for name, subscribers in records.items():
        if subscribers:
            print(
                f"{verb} {name}: {len(subscribers)} subscription records beside a "
                f"DistributedLog position ({', '.join(subscribers)})"
            )
    if not moved and not any(records.values()):
        print(f"namespace {ns_uri}: every stream is already in DistributedLog's layout")
