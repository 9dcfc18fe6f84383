"""Types of the optional C extension (dlog/protocol/_add_codec.c)."""

from dlog.protocol.messages import AddFrame

def configure(frame: type[AddFrame], /) -> None: ...
def decode_add_request(data: bytes | memoryview, /) -> AddFrame | None: ...
def encode_add_request(
    txn_id: int,
    ledger_id: int,
    entry_id: int,
    master_key: bytes,
    body: bytes,
    recovery: bool = False,
    /,
) -> bytes: ...
def encode_add_response(txn_id: int, status: int, ledger_id: int, entry_id: int, /) -> bytes: ...
def decode_add_response(data: bytes | memoryview, /) -> tuple[int, int, int, int, int] | None: ...
