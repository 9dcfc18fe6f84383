"""Shared CLI plumbing: --uri/--conf/--set handling, opening the namespace,
logging, DLSN options and error reporting."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import sys
from collections.abc import Awaitable, Callable, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, TypeVar

import typer
from rich.console import Console
from rich.table import Table

from dlog.conf.base import Config, parse_set_options
from dlog.errors import DLogError

if TYPE_CHECKING:
    from dlog.conf.dlog import DLogConfig
    from dlog.dlsn import DLSN
    from dlog.namespace import Namespace

console = Console()
err_console = Console(stderr=True)

C = TypeVar("C", bound=Config)
T = TypeVar("T")

ConfOption = typer.Option(None, "--conf", "-c", help="Configuration file (Java properties).")
SetOption = typer.Option(None, "--set", "-s", help="Override a setting: key=value (repeatable).")
ForceOption = typer.Option(False, "--force", "-f", help="Do not ask for confirmation.")
LogLevelOption = typer.Option(None, "--log-level", help="DEBUG, INFO, WARNING or ERROR.")
GrpcPortOption = typer.Option(
    None,
    "--grpc-port",
    help="Serve gRPC health and admin on this port (0 = any free port); "
    "sets grpcServerEnabled=true and grpcServerPort.",
)
UriOption = typer.Option(
    None,
    "--uri",
    "-u",
    help="Namespace URI, e.g. distributedlog://127.0.0.1:2181/messaging (default: $DLOG_URI).",
    show_default=False,
)
StreamArgument = typer.Argument(..., help="Stream name.")

#: The CLI's own defaults for keys neither --conf nor --set gives: a person
#: waiting at a prompt wants an unreachable ZooKeeper reported in seconds,
#: not after the 30 s session timeout a long-running process waits.
CLI_DEFAULTS: dict[str, object] = {"zkConnectionTimeoutSeconds": 5}


def setup_logging(level: str | None = None, *, default: str = "INFO") -> None:
    """Log to stderr at ``level`` (else $DLOG_LOG_LEVEL, else ``default``).
    kazoo's reconnect chatter is shown only at DEBUG."""
    name = (level or os.environ.get("DLOG_LOG_LEVEL") or default).upper()
    logging.basicConfig(
        level=getattr(logging, name, logging.INFO),
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
        stream=sys.stderr,
    )
    logging.getLogger("kazoo").setLevel(logging.DEBUG if name == "DEBUG" else logging.CRITICAL)


def load_config(
    cls: type[C],
    conf: Path | None,
    sets: list[str] | None,
    *,
    defaults: Mapping[str, object] | None = None,
    **extra: object,
) -> C:
    """``--conf`` with ``--set`` on top (errors say "(in --set)"), then
    ``extra`` (non-None option values); ``defaults`` are the command's own
    defaults for keys none of them gives."""
    sets_values = parse_set_options(sets or [])
    given = {k: v for k, v in extra.items() if v is not None}
    return cls.load(conf, sets_values, overrides_source="--set", defaults=defaults, **given)


def with_grpc_port(config: C, grpc_port: int | None) -> C:
    """``config`` with what ``--grpc-port`` sets, if given."""
    if grpc_port is None:
        return config
    return config.with_overrides(
        {"grpcServerEnabled": True, "grpcServerPort": grpc_port}, "--grpc-port"
    )


def fail(message: str, code: int = 1) -> typer.Exit:
    """Print ``message`` as an error (one ``error:`` line per line: a
    ConfigError lists one bad key a line) and return the exit to raise."""
    from rich.markup import escape

    for line in message.splitlines() or [message]:
        # A child process's own error line (a bookie the sandbox started)
        # is quoted without its prefix: one "error:" a line.
        line = line.removeprefix("error: ")
        err_console.print(f"[bold red]error:[/] {escape(line)}", soft_wrap=True)
    return typer.Exit(code)


def run_cli(fn, *args, **kwargs):  # type: ignore[no-untyped-def]
    """Run a command body, turning dlog errors into a clean message and exit code."""
    try:
        return fn(*args, **kwargs)
    except DLogError as e:
        raise fail(str(e)) from None


def print_table(table: Table) -> None:
    if console.is_terminal:
        console.print(table)
    else:  # piped: keep the table's natural width instead of 80 columns
        Console(width=250).print(table)


def resolve(
    uri: str | None, conf: Path | None, sets: list[str] | None, **overrides: object
) -> tuple[str, DLogConfig]:
    """The namespace URI (``--uri`` or ``$DLOG_URI``) and the configuration
    (with :data:`CLI_DEFAULTS`); bad values exit with code 2."""
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
        cfg = load_config(DLogConfig, conf, sets, defaults=CLI_DEFAULTS)
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

    It never creates the namespace (that is ``dlog namespace create``).
    Unless ``create_streams``, opening a missing stream fails (commands that
    only look at a stream must not create it); with it, a missing stream is
    created only if ``createStreamIfNotExists`` says so."""
    overrides: dict[str, object] = {} if create_streams else {"createStreamIfNotExists": False}
    ns_uri, cfg = resolve(uri, conf, sets, **overrides)
    setup_logging(default="WARNING")

    async def go() -> T:
        from dlog.namespace import Namespace

        ns = await Namespace.open(ns_uri, cfg, bind=False)
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


def dlsn_option(text: str, option: str) -> DLSN:
    """``text`` as a DLSN (every form :func:`dlog.dlsn.parse_dlsn` reads), or exit 2 naming ``option``."""
    from dlog.dlsn import parse_dlsn

    try:
        return parse_dlsn(text)
    except DLogError as e:
        raise fail(f"{option}: {e}", 2) from None


def short(dlsn: DLSN) -> str:
    """``seq/entry/slot``, which ``parse_dlsn`` (and so --from/--to) accepts."""
    return f"{dlsn.log_segment_sequence_no}/{dlsn.entry_id}/{dlsn.slot_id}"
