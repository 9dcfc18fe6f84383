"""The ``dlog`` command line.

Its dependencies are extras (``cli``: typer and rich; ``bookie`` to run a
bookie; ``spark``), not the client library's: they are imported when the
command runs, and a missing one is named with the install command that
brings it instead of a traceback.
"""

from __future__ import annotations

import functools
import sys
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import typer

#: Top-level module -> the extra that installs it.
EXTRAS = {
    "typer": "cli",
    "rich": "cli",
    "click": "cli",
    "rocksdict": "bookie",
    "pyspark": "spark",
    "pyarrow": "spark",
    "grpc": "server",
    "grpc_health": "server",
}


@functools.cache
def build_app() -> typer.Typer:
    import typer

    from dlog.cli import admin as _admin
    from dlog.cli import autorecovery as _autorecovery
    from dlog.cli import bookie as _bookie
    from dlog.cli import conf as _conf
    from dlog.cli import dlsn as _dlsn
    from dlog.cli import namespace as _namespace
    from dlog.cli import proxy as _proxy
    from dlog.cli import sandbox as _sandbox
    from dlog.cli import shell as _shell
    from dlog.cli import shell_autorecovery as _shell_autorecovery  # noqa: F401 (registers on _shell.app)
    from dlog.cli import shell_bp44 as _shell_bp44  # noqa: F401 (registers on _shell.app)
    from dlog.cli import stream as _stream
    from dlog.cli import subscriptions as _subscriptions
    from dlog.cli import tail as _tail
    from dlog.cli import write as _write

    app = typer.Typer(
        name="dlog",
        help="dlog: a replicated log on BookKeeper-compatible bookies, with metadata in ZooKeeper.",
        no_args_is_help=True,
        pretty_exceptions_enable=False,
    )
    app.command("bookie")(_bookie.bookie)
    app.command("autorecovery")(_autorecovery.autorecovery)
    app.add_typer(_admin.app, name="admin")
    app.add_typer(_shell.app, name="shell")
    app.add_typer(_conf.app, name="conf")
    app.add_typer(_sandbox.app, name="sandbox")
    app.add_typer(_namespace.app, name="namespace")
    app.add_typer(_stream.app, name="stream")
    app.command("write")(_write.write)
    app.command("proxy")(_proxy.proxy)
    app.command("tail")(_tail.tail)
    app.add_typer(_dlsn.app, name="dlsn")
    app.add_typer(_subscriptions.app, name="subscriptions")
    return app


@functools.cache
def build_command() -> Any:
    """The click command the ``dlog`` script runs: the typer app, with
    plain ``--help`` (see :mod:`dlog.cli.help`)."""
    import typer

    from dlog.cli.help import plain_help

    return plain_help(typer.main.get_command(build_app()))


def __getattr__(name: str) -> object:
    if name == "app":  # ``dlog.cli.app``, built on first use
        return build_app()
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def missing_extra(error: ModuleNotFoundError) -> str | None:
    """What to tell the user when ``error`` is a dependency an extra brings."""
    module = (error.name or "").split(".")[0]
    extra = EXTRAS.get(module)
    if extra is None:
        return None
    return f"dlog: {module} is not installed; it comes with: pip install 'dlog[{extra}]'"


def main() -> None:
    try:
        build_command()()
    except ModuleNotFoundError as e:
        message = missing_extra(e)
        if message is None:
            raise
        sys.exit(message)
