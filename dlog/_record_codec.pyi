"""Types of the optional C extension (dlog/_record_codec.c)."""

from typing import Any

def configure(record: type, read_record: type, dlsn: type, /) -> None: ...
def decode_records(
    buf: bytes | bytearray | memoryview, segment_seq_no: int, entry_id: int, seq_base: int, /
) -> list[Any] | None: ...
def append_plain(
    buf: bytearray,
    records: list[Any],
    start: int,
    limit: int,
    threshold: int,
    count: int,
    position: int,
    max_txid: int | None,
    /,
) -> tuple[int, int, int, int | None, bool]: ...
def plain_columns(
    buf: bytes | bytearray | memoryview, /
) -> tuple[bytes, bytes, bytes, bytes, bytes, bool] | None: ...
def append_rows(
    buf: bytes | bytearray | memoryview,
    start: int,
    entry_id: int,
    entries: Any,
    slots: Any,
    txids: Any,
    offsets: Any,
    data: Any,
    rows: int,
    nbytes: int,
    /,
) -> tuple[int, int, bool] | None: ...
def dlsn_texts(segment: int, entries: Any, slots: Any, /) -> bytes: ...
