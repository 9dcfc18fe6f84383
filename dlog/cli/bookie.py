"""``dlog bookie``: run a storage server."""

from __future__ import annotations

from pathlib import Path

import typer

from dlog.cli.common import ConfOption, LogLevelOption, SetOption, fail, load_config, setup_logging
from dlog.conf.bookie import BookieConfig
from dlog.errors import DLogError


def bookie(
    conf: Path | None = ConfOption,
    set_: list[str] | None = SetOption,
    log_level: str | None = LogLevelOption,
) -> None:
    """Run a bookie until SIGTERM or Ctrl-C (then it flushes, checkpoints and unregisters)."""
    setup_logging(log_level)
    try:
        config = load_config(BookieConfig, conf, set_)
    except DLogError as e:
        raise fail(str(e), 2) from None
    from dlog.bookie.main import run

    try:
        code = run(config)
    except DLogError as e:
        raise fail(str(e)) from None
    except OSError as e:
        raise fail(f"cannot start the bookie: {e}") from None
    raise typer.Exit(code)
