"""``dlog tail``: print a stream's records as ``DLSN<TAB>payload`` lines.

dlog tail events -n 10              # the last 10 records
dlog tail events -n 10 --follow     # ... then new ones until Ctrl-C
dlog tail events --limit 10         # the first 10
dlog tail events --from 3/0/0 --limit 10
dlog tail events --from latest --follow
"""

from __future__ import annotations

import asyncio
import contextlib
import signal
import sys
from pathlib import Path
from typing import TYPE_CHECKING

import typer

from dlog.cli.common import (
    ConfOption,
    SetOption,
    StreamArgument,
    UriOption,
    dlsn_option,
    err_console,
    fail,
    run_namespace,
    short,
)

if TYPE_CHECKING:
    from dlog.dlsn import DLSN
    from dlog.namespace import Namespace
    from dlog.record import LogRecordWithDLSN

#: Without --follow, tail stops after this long without a record once it has
#: reached the last record that existed when it started.
CAUGHT_UP_IDLE_S = 1.0
#: ... and waits up to this long for records known to exist (slow bookies).
CATCH_UP_TIMEOUT_S = 30.0
#: Records per read (and per stdout write).
TAIL_BATCH = 1000


_ESCAPES = str.maketrans({"\\": "\\\\", "\n": "\\n", "\r": "\\r"})


def format_record(record: LogRecordWithDLSN) -> str:
    """``<base64 DLSN>\\t<payload>``: the payload decoded as UTF-8 (bad
    bytes become U+FFFD) with backslash, newline and carriage return
    escaped as ``\\\\``, ``\\n`` and ``\\r``, so every record is one line."""
    text = record.payload.decode("utf-8", "replace").translate(_ESCAPES)
    return f"{record.dlsn.serialize()}\t{text}\n"


def tail(
    stream: str = StreamArgument,
    from_: str = typer.Option(
        "earliest",
        "--from",
        help="Where to start: earliest (the first record not truncated), latest (only "
        "records written from now on), or a DLSN (base64 as printed by tail/write, "
        "S/E/N, S:E:N or DLSN{...}).",
    ),
    lines: int | None = typer.Option(
        None,
        "-n",
        "--lines",
        help="Print the last N records, as tail -n does: the last N that exist when tail "
        "starts (with --from, the last N at or after it; fewer if there are fewer), then "
        "stop, or with --follow go on with new ones (-n 0 --follow: only new ones).",
        show_default=False,
    ),
    limit: int | None = typer.Option(
        None,
        "--limit",
        help="Print the first N records from --from (default: earliest), then stop "
        "(with --follow, once N have come).",
        show_default=False,
    ),
    follow: bool = typer.Option(
        False, "--follow", "-f", help="Keep waiting for new records until Ctrl-C."
    ),
    uri: str | None = UriOption,
    conf: Path | None = ConfOption,
    set_: list[str] | None = SetOption,
) -> None:
    """Print records as DLSN<TAB>payload lines.

    The DLSN is in base64, which --from accepts; the payload is UTF-8 with
    backslash, newline and carriage return escaped. Without -n, --limit or
    --follow it prints from --from to the end and stops once caught up (no
    record for about a second after reaching the last record that existed
    when it started). -n N prints the last N records instead (dlog tail -n 10
    -f: the last ten, then new ones); --limit N the first N from --from.
    """
    from dlog import positions
    from dlog.errors import EndOfStreamError, LogEmptyError

    if lines is not None and lines < 0:
        raise fail(f"-n {lines}: N must be 0 or more", 2)
    if limit is not None and limit < 1:
        raise fail(f"--limit {limit}: N must be at least 1", 2)
    if lines is not None and limit is not None:
        raise fail("-n (the last N records) and --limit (the first N) do not combine", 2)
    choice = from_.strip().lower()
    if lines is not None and choice == "latest":
        raise fail(
            "-n takes the last N records that exist; --from latest starts after all of them", 2
        )
    start = None if choice in ("earliest", "latest") else dlsn_option(from_, "--from")

    async def body(ns: Namespace) -> int:
        lm = await ns.open_log(stream)
        position = start
        #: The last record that existed when we started, which tail waits for
        #: (up to CATCH_UP_TIMEOUT_S); with -n, also where it stops.
        target: DLSN | None = None
        if lines == 0:  # as tail -n 0 [-f]: nothing that exists, only what comes
            if not follow:
                return 0
            with contextlib.suppress(LogEmptyError):
                position = (await lm.get_last_dlsn()).next()
        elif lines is not None:
            span = await positions.last_records(lm.context, lines, not_before=start)
            if span is not None:
                position, target = span.first, span.last
            elif not follow:
                return 0
        elif choice == "latest":
            with contextlib.suppress(LogEmptyError):
                position = (await lm.get_last_dlsn()).next()
        elif not follow:
            with contextlib.suppress(LogEmptyError):
                target = await lm.get_last_dlsn()
            if target is not None and position is not None and position > target:
                target = None
        stop_at_target = lines is not None and not follow
        if follow:
            target = None
        reader = await lm.open_reader(from_dlsn=position)
        main = asyncio.current_task()
        loop = asyncio.get_running_loop()
        stopping = False

        def on_signal() -> None:
            nonlocal stopping
            stopping = True
            if main is not None:
                main.cancel()

        for sig in (signal.SIGINT, signal.SIGTERM):
            loop.add_signal_handler(sig, on_signal)
        out = sys.stdout.buffer
        printed = 0
        try:
            while limit is None or printed < limit:
                want = TAIL_BATCH if limit is None else min(TAIL_BATCH, limit - printed)
                if follow:
                    timeout: float | None = None
                else:
                    timeout = CATCH_UP_TIMEOUT_S if target is not None else CAUGHT_UP_IDLE_S
                records = await reader.read_bulk(want, timeout)
                if not records:
                    if target is not None:
                        err_console.print(
                            f"[yellow]no record for {CATCH_UP_TIMEOUT_S:.0f} s before reaching "
                            f"{short(target)}; stopping[/]"
                        )
                    break
                done = False
                if target is not None and records[-1].dlsn >= target:
                    if stop_at_target:  # -n: nothing written after we started
                        end = target
                        records = [r for r in records if r.dlsn <= end]
                        done = True
                    target = None
                out.write("".join(format_record(r) for r in records).encode("utf-8"))
                out.flush()
                printed += len(records)
                if done:
                    break
        except EndOfStreamError:
            pass
        except asyncio.CancelledError:
            if not stopping or main is None:
                raise
            main.uncancel()
        finally:
            for sig in (signal.SIGINT, signal.SIGTERM):
                loop.remove_signal_handler(sig)
            await reader.close()
        return printed

    run_namespace(uri, conf, set_, body)
