"""``dlog dlsn``: convert DLSNs between base64 and their three numbers."""

from __future__ import annotations

import typer

from dlog.cli.common import fail
from dlog.errors import DLogError

app = typer.Typer(
    help="Convert DLSNs between base64 and their three numbers.", no_args_is_help=True
)


@app.command("serialize", context_settings={"ignore_unknown_options": True})
def dlsn_serialize(
    seq: int = typer.Argument(..., help="Log segment sequence number."),
    entry: int = typer.Argument(..., help="Entry id."),
    slot: int = typer.Argument(..., help="Slot id."),
) -> None:
    """Print the base64 form of DLSN (SEQ, ENTRY, SLOT), as DistributedLog serializes it."""
    from dlog.dlsn import DLSN

    try:
        print(DLSN(seq, entry, slot).serialize())
    except DLogError as e:
        raise fail(str(e), 2) from None


@app.command("deserialize")
def dlsn_deserialize(
    text: str = typer.Argument(..., metavar="BASE64", help="A serialized (base64) DLSN."),
) -> None:
    """Print DistributedLog's toString of a base64 DLSN, then its three numbers."""
    from dlog.dlsn import DLSN

    try:
        dlsn = DLSN.deserialize(text.strip())
    except DLogError as e:
        raise fail(str(e), 2) from None
    print(str(dlsn))
    print(f"{dlsn.log_segment_sequence_no} {dlsn.entry_id} {dlsn.slot_id}")
