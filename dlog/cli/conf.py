"""``dlog conf``: show documented defaults and check configuration files."""

from __future__ import annotations

from pathlib import Path

import typer

from dlog.cli.common import ConfOption, SetOption, console, fail, load_config
from dlog.conf.base import Config
from dlog.errors import DLogError

app = typer.Typer(help="Configuration: documented defaults and validation.", no_args_is_help=True)


def _kind(kind: str) -> type[Config]:
    from dlog.conf import BookieConfig

    kinds: dict[str, type[Config]] = {"bookie": BookieConfig}
    try:
        from dlog.conf import DLogConfig

        kinds["dlog"] = DLogConfig
    except ImportError:
        pass
    if kind not in kinds:
        raise fail(f"unknown configuration kind {kind!r} (choose {', '.join(kinds)})", 2)
    return kinds[kind]


@app.command("defaults")
def defaults(kind: str = typer.Argument(..., help="bookie or dlog")) -> None:
    """Print the documented configuration file with every key and its default."""
    print(_kind(kind).render_documented())


@app.command("check")
def check(
    kind: str = typer.Argument(..., help="bookie or dlog"),
    conf: Path | None = ConfOption,
    set_: list[str] | None = SetOption,
) -> None:
    """Validate a configuration and print the effective settings. Every bad
    key is reported, one "error:" line each (exit 2), so one run finds them all."""
    try:
        cfg = load_config(_kind(kind), conf, set_)
    except DLogError as e:
        raise fail(str(e), 2) from None
    console.print(cfg.dumps(), end="", markup=False, highlight=False)
