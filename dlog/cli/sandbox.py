"""``dlog sandbox``: a ZooKeeper and N bookies on loopback, in one directory.

    dlog sandbox run                                  # foreground, Ctrl-C stops it
    URI=$(dlog sandbox start --dir /tmp/sb | tail -1) # detached
    dlog sandbox status --dir /tmp/sb
    dlog sandbox restart-bookie --dir /tmp/sb 1
    dlog sandbox stop --dir /tmp/sb

Bookies are numbered from 0. The directory keeps ``sandbox.json`` (ports,
pids, directories); starting it again after ``stop`` resumes the same
sandbox, data included, on the same ports.
"""

from __future__ import annotations

import shutil
import signal
import tempfile
import threading
from pathlib import Path

import typer
from rich.markup import escape
from rich.table import Table

from dlog.cli.common import ConfOption, SetOption, console, err_console, fail

app = typer.Typer(
    help="A local cluster for development: ZooKeeper and N bookies on loopback.",
    no_args_is_help=True,
)

DirOption = typer.Option(..., "--dir", "-d", help="Sandbox directory (holds sandbox.json).")
BookiesOption = typer.Option(3, "--bookies", "-b", min=1, max=64, help="Number of bookies.")
ProxiesOption = typer.Option(
    None,
    "--proxies",
    min=0,
    max=16,
    help="Number of write proxies (dlog proxy) to start beside the bookies "
    "(default: as many as the sandbox in --dir had, else none).",
    show_default=False,
)
ZkPortOption = typer.Option(
    0, "--zk-port", min=0, max=65535, help="ZooKeeper client port (default: a free port)."
)


def _errors():  # type: ignore[no-untyped-def]
    from dlog.errors import DLogError
    from dlog.sandbox.bookies import BookieLaunchError
    from dlog.sandbox.cluster import SandboxError
    from dlog.sandbox.zookeeper import ZooKeeperLaunchError

    return (SandboxError, BookieLaunchError, ZooKeeperLaunchError, DLogError, OSError)


def _print_summary(sb) -> None:  # type: ignore[no-untyped-def]
    """URIs and the bookie table (stdout, plain lines for the URIs so they never wrap)."""
    table = Table(title=f"sandbox in {escape(str(sb.directory))}")
    for col, justify in (("#", "right"), ("bookie id", "left"), ("pid", "right"), ("dir", "left")):
        table.add_column(col, justify=justify)  # type: ignore[arg-type]
    for i, b in enumerate(sb.bookies):
        table.add_row(str(i), b.address, str(b.pid or "-"), escape(str(b.directory)))
    console.print(table)
    print(f"zookeeper:            {sb.zk_connect_string} (pid {sb.zookeeper.pid})")
    print(f"metadata service URI: {sb.metadata_service_uri}")
    if sb.proxies:
        print(f"write proxies:        {','.join(sb.proxy_endpoints)} (dlog write --proxy ...)")
    print(f"namespace URI:        {sb.namespace_uri}")
    if len(sb.bookies) < 3:
        n = len(sb.bookies)
        print(
            f"note: streams default to 3 bookies per segment; with {n} use "
            f"--set bkcEnsembleSize={n} --set bkcWriteQuorumSize={n} --set bkcAckQuorumSize={min(n, 2)}"
        )


#: Settings the sandbox chooses for each bookie itself.
SANDBOX_KEYS = frozenset(
    {
        "bookiePort",
        "advertisedAddress",
        "bookieId",
        "metadataServiceUri",
        "journalDirectories",
        "ledgerDirectories",
        "prometheusStatsHttpAddress",
        "prometheusStatsHttpPort",
    }
)


def _bookie_settings(conf: Path | None, sets: list[str] | None) -> dict[str, str]:
    """Bookie settings for every sandbox bookie, from ``--conf`` (bookie.conf
    keys) and ``--set``; validated now, so a typo fails before anything starts."""
    from dlog.conf.base import parse_properties, parse_set_options
    from dlog.conf.bookie import BookieConfig
    from dlog.errors import DLogError

    values: dict[str, str] = {}
    try:
        if conf is not None:
            try:
                values.update(parse_properties(conf.read_text(), str(conf)))
            except OSError as e:
                raise fail(f"{conf}: cannot read configuration file: {e.strerror}", 2) from None
        values.update(parse_set_options(sets or []))
        ignored = sorted(set(values) & SANDBOX_KEYS)
        if ignored:
            err_console.print(
                f"[yellow]note:[/] the sandbox sets {', '.join(ignored)} itself; ignoring them"
            )
        values = {k: v for k, v in values.items() if k not in SANDBOX_KEYS}
        BookieConfig.from_mapping(values, str(conf) if conf is not None else "--set")
    except DLogError as e:
        raise fail(str(e), 2) from None
    return values


def _start(  # type: ignore[no-untyped-def]
    directory: Path,
    bookies: int,
    zk_port: int,
    detach: bool,
    settings: dict[str, str],
    proxies: int | None = None,
):
    from dlog.sandbox.cluster import Sandbox, SandboxError

    try:
        sb = Sandbox(
            directory,
            bookies=bookies,
            zk_port=zk_port,
            bookie_settings=settings,
            proxies=proxies,
        )
        what = f"{bookies} bookie(s)" + (f" and {proxies} write proxies" if proxies else "")
        with err_console.status(f"starting ZooKeeper, {what} in {directory} ..."):
            sb.start(detach=detach)
    except KeyboardInterrupt:
        raise fail("interrupted; everything started was stopped", 130) from None
    except SandboxError as e:
        raise fail(str(e)) from None
    except _errors() as e:
        raise fail(f"sandbox did not start: {e}") from None
    return sb


@app.command("run")
def run(
    directory: Path | None = typer.Option(
        None,
        "--dir",
        "-d",
        help="Sandbox directory (default: a temporary one, removed on exit).",
    ),
    bookies: int = BookiesOption,
    zk_port: int = ZkPortOption,
    conf: Path | None = ConfOption,
    set_: list[str] | None = SetOption,
    proxies: int | None = ProxiesOption,
) -> None:
    """Run a sandbox in the foreground until Ctrl-C (or SIGTERM), then stop it cleanly.
    --conf/--set take bookie settings (bookie.conf keys) for every bookie."""
    settings = _bookie_settings(conf, set_)
    temporary = directory is None
    directory = Path(tempfile.mkdtemp(prefix="dlog-sandbox-")) if directory is None else directory
    # The processes get their own sessions so that Ctrl-C reaches only this
    # command, which then stops bookies before ZooKeeper (so they unregister).
    sb = _start(directory, bookies, zk_port, detach=True, settings=settings, proxies=proxies)
    stop = threading.Event()
    previous = {
        sig: signal.signal(sig, lambda *_: stop.set())
        for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)
    }
    try:
        _print_summary(sb)
        err_console.print("[green]sandbox running[/]; press Ctrl-C to stop it")
        reported: set[str] = set()
        while not stop.wait(1.0):
            for row in sb.status():
                if not row.alive and row.name not in reported:
                    reported.add(row.name)
                    err_console.print(f"[bold red]{row.name} ({row.address}) exited[/]")
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)
        # A second Ctrl-C during shutdown must not leave processes behind.
        signal.signal(signal.SIGINT, signal.SIG_IGN)
        with err_console.status("stopping bookies and ZooKeeper ..."):
            try:
                sb.stop()
            except _errors() as e:
                err_console.print(f"[bold red]error:[/] {escape(str(e))}")
        signal.signal(signal.SIGINT, previous[signal.SIGINT])
        if temporary:
            shutil.rmtree(directory, ignore_errors=True)
        err_console.print("sandbox stopped")


@app.command("start")
def start(
    directory: Path = DirOption,
    bookies: int = BookiesOption,
    zk_port: int = ZkPortOption,
    conf: Path | None = ConfOption,
    set_: list[str] | None = SetOption,
    proxies: int | None = ProxiesOption,
) -> None:
    """Start a sandbox in the background (it outlives this command).
    --conf/--set take bookie settings (bookie.conf keys) for every bookie.

    The namespace URI is the last line of stdout:  URI=$(dlog sandbox start --dir D | tail -1)
    """
    sb = _start(
        directory,
        bookies,
        zk_port,
        detach=True,
        settings=_bookie_settings(conf, set_),
        proxies=proxies,
    )
    _print_summary(sb)
    print(f"state: {sb.state_path}; stop with: dlog sandbox stop --dir {sb.directory}")
    print(sb.namespace_uri)


def _load(directory: Path):  # type: ignore[no-untyped-def]
    from dlog.sandbox.cluster import Sandbox, SandboxError

    try:
        return Sandbox.load(directory)
    except SandboxError as e:
        raise fail(str(e)) from None


@app.command("stop")
def stop(directory: Path = DirOption) -> None:
    """Stop the sandbox's bookies (gracefully), then ZooKeeper. Data stays."""
    sb = _load(directory)
    try:
        was_running = sb.stop()
    except _errors() as e:
        raise fail(str(e)) from None
    if was_running:
        console.print(f"stopped the sandbox in {escape(str(sb.directory))}")
    else:
        console.print(f"no sandbox running in {escape(str(sb.directory))} (nothing to stop)")


@app.command("restart-bookie")
def restart_bookie(
    index: int = typer.Argument(..., min=0, help="Bookie number (from 0, as in `status`)."),
    directory: Path = DirOption,
) -> None:
    """Restart one bookie gracefully, on the same port and directories (same bookie id)."""
    sb = _load(directory)
    try:
        with err_console.status(f"restarting bookie {index} ..."):
            row = sb.restart_bookie(index, detach=True)  # it must outlive this command
    except _errors() as e:
        raise fail(str(e)) from None
    console.print(f"bookie {index} ({row.address}) restarted, pid {row.pid}")


@app.command("status")
def status(directory: Path = DirOption) -> None:
    """Show the sandbox's processes and whether they are alive (exit 0 only if all are)."""
    sb = _load(directory)
    rows = sb.status()
    table = Table(title=f"sandbox in {escape(str(sb.directory))}")
    for col, justify in (
        ("process", "left"),
        ("address", "left"),
        ("pid", "right"),
        ("state", "left"),
        ("port", "left"),
        ("metrics", "left"),
    ):
        table.add_column(col, justify=justify)  # type: ignore[arg-type]
    for r in rows:
        table.add_row(
            r.name,
            r.address,
            str(r.pid) if r.pid else "-",
            "[green]alive[/]" if r.alive else "[red]stopped[/]",
            ("listening" if r.listening else "[yellow]not listening[/]") if r.alive else "-",
            r.metrics or "-",
        )
    console.print(table)
    alive = sum(r.alive for r in rows)
    print(f"namespace URI: {sb.namespace_uri}")
    if alive == len(rows):
        print("all processes alive")
        return
    if alive == 0:
        print("sandbox stopped")
    else:
        print(f"{len(rows) - alive} of {len(rows)} processes not running")
    raise typer.Exit(1)
