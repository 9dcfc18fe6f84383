"""Shared CLI plumbing: --conf/--set handling, logging, error reporting."""

from __future__ import annotations

import logging
import os
import sys
from pathlib import Path
from typing import TypeVar

import typer
from rich.console import Console

from dlog.conf.base import Config, parse_set_options
from dlog.errors import DLogError

console = Console()
err_console = Console(stderr=True)

C = TypeVar("C", bound=Config)

ConfOption = typer.Option(None, "--conf", "-c", help="Configuration file (Java properties).")
SetOption = typer.Option(None, "--set", "-s", help="Override a setting: key=value (repeatable).")
ForceOption = typer.Option(False, "--force", "-f", help="Do not ask for confirmation.")


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


def load_config(cls: type[C], conf: Path | None, sets: list[str] | None, **extra: object) -> C:
    overrides: dict[str, object] = dict(parse_set_options(sets or []))
    overrides.update({k: v for k, v in extra.items() if v is not None})
    return cls.load(conf, overrides)


def fail(message: str, code: int = 1) -> typer.Exit:
    from rich.markup import escape

    err_console.print(f"[bold red]error:[/] {escape(message)}", soft_wrap=True)
    return typer.Exit(code)


def run_cli(fn, *args, **kwargs):  # type: ignore[no-untyped-def]
    """Run a command body, turning dlog errors into a clean message and exit code."""
    try:
        return fn(*args, **kwargs)
    except DLogError as e:
        raise fail(str(e)) from None
