"""``dlog dlsn``: convert DLSNs between base64 and their three numbers.

Both commands read a DLSN in every form ``--from`` and ``--to`` accept
(:func:`dlog.dlsn.parse_dlsn`, through ``dlsn_option``), so a DLSN copied
from any dlog or DistributedLog output can be converted. Their words are
joined with spaces, so DistributedLog's toString needs no quotes, and
options they do not know are taken as words: ``-1/0/0`` and ``-1 0 0`` are
DLSNs, not options.
"""

from __future__ import annotations

import re
from typing import TYPE_CHECKING

import typer

from dlog.cli.common import dlsn_option

if TYPE_CHECKING:
    from dlog.dlsn import DLSN

app = typer.Typer(
    help="Convert DLSNs between base64 and their three numbers.", no_args_is_help=True
)

#: Negative numbers (``-1/0/0``, ``0 -1 -1``) must reach the command as words.
_WORDS = {"ignore_unknown_options": True}

_INTEGER = re.compile(r"-?[0-9]+")
_FORMS = "base64, S/E/N, S:E:N or DLSN{logSegmentSequenceNo=S, entryId=E, slotId=N}"


DlsnWords = typer.Argument(
    ...,
    metavar="DLSN",
    help=f"A DLSN: {_FORMS}, or its three numbers SEQ ENTRY SLOT.",
    show_default=False,
)


def _dlsn(words: list[str], command: str) -> DLSN:
    """The DLSN the command's words spell: three integers, or one DLSN in
    any form (DistributedLog's toString may come as several words)."""
    numbers = len(words) == 3 and all(_INTEGER.fullmatch(w) for w in words)
    return dlsn_option(("/" if numbers else " ").join(words), f"dlsn {command}")


@app.command("serialize", context_settings=_WORDS)
def dlsn_serialize(
    words: list[str] = DlsnWords,
) -> None:
    """Print the base64 form of a DLSN, as DistributedLog serializes it."""
    print(_dlsn(words, "serialize").serialize())


@app.command("deserialize", context_settings=_WORDS)
def dlsn_deserialize(
    words: list[str] = DlsnWords,
) -> None:
    """Print DistributedLog's toString of a DLSN, then its three numbers."""
    dlsn = _dlsn(words, "deserialize")
    print(str(dlsn))
    print(f"{dlsn.log_segment_sequence_no} {dlsn.entry_id} {dlsn.slot_id}")
