"""The ``dlog`` command line."""

from __future__ import annotations

import typer

from dlog.cli import bookie as _bookie
from dlog.cli import conf as _conf
from dlog.cli import sandbox as _sandbox
from dlog.cli import shell as _shell
from dlog.cli import stream as _stream
from dlog.cli import subscriptions as _subscriptions

app = typer.Typer(
    name="dlog",
    help="dlog: a replicated log on BookKeeper-compatible bookies, with metadata in ZooKeeper.",
    no_args_is_help=True,
    pretty_exceptions_enable=False,
)
app.command("bookie")(_bookie.bookie)
app.add_typer(_shell.app, name="shell")
app.add_typer(_conf.app, name="conf")
app.add_typer(_sandbox.app, name="sandbox")
app.add_typer(_stream.app, name="stream")
app.command("write")(_stream.write)
app.command("tail")(_stream.tail)
app.add_typer(_stream.dlsn_app, name="dlsn")
app.add_typer(_subscriptions.app, name="subscriptions")


def main() -> None:
    app()
