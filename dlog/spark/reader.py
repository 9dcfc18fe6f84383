"""Executor side of the dlog Spark source: read one partition from the bookies.

A partition (:class:`dlog.spark.planning.DlogPartition`) names a ledger, a
run of its entries and the DLSN bounds of the records to keep. The entries
are read without recovery (as the library's reader reads them, so an
in-progress segment's writer is never fenced), decoded column by column
(:mod:`dlog.spark.columns`: the same rows as the library's ``decode_entry``,
without a Python object per record), filtered (``lower < dlsn <= upper``;
control and end-of-stream records are skipped) and handed to Spark as Arrow
record batches with the source's schema, every column built from buffers
(the DLSN text too, by one base64 pass over the batch). An entry strictly
inside the bounds keeps all its user rows, so, when it is plain records, the
C codec writes them straight into the batch's buffers
(:class:`dlog.spark.columns.BatchColumns`).

The ledger client is cached per Python worker process, keyed by metadata
service URI and client settings (the ledger password, from ``digestPw``, is
given to each ``open_ledger``), so a reused worker does not reconnect for
each task; a forked child never uses its parent's client (the cache is keyed
by pid, and the client's loop thread is the child's own).
Reads are pipelined: the next run of entries is in flight while the current
one is decoded.
"""

from __future__ import annotations

import asyncio
import base64
import concurrent.futures
import os
import struct
import threading
from array import array
from collections.abc import Iterable, Iterator
from typing import TYPE_CHECKING, Any

import pyarrow as pa
import pyarrow.compute as pc

from dlog.errors import NoSuchLedgerError
from dlog.extensions import extension
from dlog.record import FLAG_CONTROL, FLAG_END_OF_STREAM
from dlog.spark.columns import BatchColumns, EntryColumns, decode_entry_columns, int64_buffer

if TYPE_CHECKING:
    from dlog.ledger.client import BookKeeper
    from dlog.ledger.read_handle import LedgerEntry, ReadHandle
    from dlog.loop_thread import LoopThread
    from dlog.spark.options import SourceOptions
    from dlog.spark.planning import DlogPartition

__all__ = [
    "ARROW_SCHEMA",
    "SCHEMA",
    "batches",
    "dlsn_column",
    "dlsn_text",
    "ledger_client",
    "read_partition",
]

#: The source's schema (Spark DDL).
SCHEMA = (
    "stream string, dlsn string, segment long, entry long, slot long, txid long, payload binary"
)
#: The same schema in Arrow, as Spark expects the batches.
ARROW_SCHEMA = pa.schema(
    [
        ("stream", pa.string()),
        ("dlsn", pa.string()),
        ("segment", pa.int64()),
        ("entry", pa.int64()),
        ("slot", pa.int64()),
        ("txid", pa.int64()),
        ("payload", pa.binary()),
    ]
)

#: Entries per bookie read round trip (one run in flight while one decodes).
READ_RUN_ENTRIES = 32
#: Rows per Arrow batch handed to Spark (a batch is cut at the end of the
#: entry that reaches this many rows or BATCH_BYTES of payloads: its payload
#: offsets are int32s).
BATCH_ROWS = 32_768
BATCH_BYTES = 64 << 20

# (Arrow scalars: see dlog.spark.columns on plain ints as compute arguments)
_SKIP = pa.scalar(FLAG_CONTROL | FLAG_END_OF_STREAM, pa.int64())
_ZERO = pa.scalar(0, pa.int64())
_PREFIX = struct.Struct(">bqq")  # version, segment, entry
_INT32_MAX = (1 << 31) - 1


# ---------------------------------------------------------------------------
# columns built from buffers
# ---------------------------------------------------------------------------
#
# A DLSN's text is base64 of 25 bytes: version 1, segment, entry, slot (three
# big-endian int64). With two zero bytes appended, 27 bytes are 9 whole base64
# groups, so the base64 of n such records laid end to end is the n texts laid
# end to end (36 characters each), except that each text's last two
# characters come out "AA" where its own padding is "==": they are set after.

_DLSN_WIDTH = 36
_RAW_WIDTH = 27
_fixed_offsets: dict[int, array[int]] = {}
#: The C codec's loops, when it was built (see dlog.extensions): it writes
#: the DLSN texts in one pass.
_codec: Any = extension("dlog._record_codec")


def _offsets(width: int, n: int) -> pa.Buffer:
    """int32 offsets 0, width, ..., n * width (from a cached table)."""
    table = _fixed_offsets.get(width)
    if table is None or len(table) <= n:
        size = max(n + 1, 2 * len(table) if table is not None else 1024)
        table = _fixed_offsets[width] = array("i", range(0, width * size, width))
    return pa.py_buffer(table).slice(0, 4 * (n + 1))


def _big_endian(values: pa.Array) -> bytes:
    """An int64 array's values as big-endian 8-byte words."""
    out = array("q")
    out.frombytes(int64_buffer(values))
    out.byteswap()
    return out.tobytes()


def dlsn_column(segment: int, entries: pa.Array, slots: pa.Array) -> pa.Array:
    """The text of ``DLSN(segment, entry, slot).serialize()`` for each row
    (``entries`` and ``slots``: int64 arrays), built from buffers."""
    n = len(slots)
    if n * _DLSN_WIDTH > _INT32_MAX:
        raise ValueError(f"{n} rows are too many for one DLSN column")
    if len(entries) != n:
        raise ValueError(f"{len(entries)} entries for {n} slots")
    if _codec is not None:
        data = _codec.dlsn_texts(segment, int64_buffer(entries), int64_buffer(slots))
        return pa.Array.from_buffers(
            pa.string(), n, [None, _offsets(_DLSN_WIDTH, n), pa.py_buffer(data)]
        )
    raw = bytearray(_PREFIX.pack(1, segment, 0) + bytes(_RAW_WIDTH - _PREFIX.size)) * n
    for column, at in ((entries, 9), (slots, 17)):
        words = _big_endian(column)
        for i in range(8):
            raw[at + i :: _RAW_WIDTH] = words[i::8]
    text = bytearray(base64.b64encode(raw))
    text[_DLSN_WIDTH - 2 :: _DLSN_WIDTH] = b"=" * n
    text[_DLSN_WIDTH - 1 :: _DLSN_WIDTH] = b"=" * n
    return pa.Array.from_buffers(
        pa.string(), n, [None, _offsets(_DLSN_WIDTH, n), pa.py_buffer(text)]
    )


def dlsn_text(segment: int, entry: int, slot: int) -> str:
    """``DLSN(segment, entry, slot).serialize()``, as :func:`dlsn_column` builds it."""
    one = pa.array([entry], pa.int64()), pa.array([slot], pa.int64())
    return str(dlsn_column(segment, *one)[0].as_py())


def _constant_string(value: str, n: int) -> pa.Array:
    data = value.encode()
    if not data or len(data) * n > _INT32_MAX:
        return pa.array([value] * n, pa.string())
    return pa.Array.from_buffers(
        pa.string(), n, [None, _offsets(len(data), n), pa.py_buffer(data * n)]
    )


# ---------------------------------------------------------------------------
# the ledger client of this worker process
# ---------------------------------------------------------------------------

_clients: dict[tuple[Any, ...], tuple[BookKeeper, LoopThread]] = {}
_clients_lock = threading.Lock()


def ledger_client(
    metadata_service_uri: str, bkc_settings: tuple[tuple[str, Any], ...]
) -> tuple[BookKeeper, LoopThread]:
    """This process's BookKeeper client for ``metadata_service_uri`` (and
    client settings), started on this process's loop thread."""
    from dlog.conf.bookkeeper import ClientConfig
    from dlog.ledger.client import BookKeeper
    from dlog.loop_thread import default_loop_thread

    key = (os.getpid(), metadata_service_uri, bkc_settings)
    with _clients_lock:
        found = _clients.get(key)
        if found is not None and not found[0].closed:
            return found
        for stale in [k for k in _clients if k[0] != key[0]]:
            del _clients[stale]  # a parent's, inherited through fork: never touch it
        runner = default_loop_thread()
        conf = ClientConfig.load(overrides=dict(bkc_settings))
        client = runner.run(BookKeeper(metadata_service_uri, conf).start())
        _clients[key] = (client, runner)
        return client, runner


def _client_settings(options: SourceOptions) -> tuple[bytes, tuple[tuple[str, Any], ...]]:
    conf = options.config()
    props = conf.bkc.to_properties()
    props.pop("metadataServiceUri", None)
    return conf.bk_digest_pw.encode(), tuple(sorted((k, str(v)) for k, v in props.items()))


# ---------------------------------------------------------------------------
# reading a partition
# ---------------------------------------------------------------------------


async def _open(client: BookKeeper, ledger_id: int, password: bytes) -> ReadHandle | None:
    try:
        return await client.open_ledger(ledger_id, password, recovery=False)
    except NoSuchLedgerError:
        return None  # deleted by retention meanwhile: as the library's reader, skip it


def _batch(
    stream: str,
    segment: int,
    entry_column: pa.Array,
    slot_column: pa.Array,
    txid_column: pa.Array,
    payload_column: pa.Array,
) -> pa.RecordBatch:
    """One batch of the source's schema from the kept rows' columns."""
    n = len(entry_column)
    return pa.RecordBatch.from_arrays(
        [
            _constant_string(stream, n),
            dlsn_column(segment, entry_column, slot_column),
            pa.repeat(pa.scalar(segment, pa.int64()), n),
            entry_column,
            slot_column,
            txid_column,
            payload_column,
        ],
        schema=ARROW_SCHEMA,
    )


def add_entry(
    rows: BatchColumns,
    data: bytes,
    segment: int,
    entry_id: int,
    start_sequence_id: int,
    lower: tuple[int, ...],
    upper: tuple[int, ...],
) -> None:
    """Add to ``rows`` the rows of one entry that a partition keeps.

    An entry strictly between the bounds keeps every user row, which
    ``rows.add_plain`` takes straight from its bytes when it can; any other
    entry is decoded and filtered (:func:`_kept`)."""
    key = (segment, entry_id)
    if lower[:2] < key < upper[:2] and rows.add_plain(data, entry_id):
        return
    cols = decode_entry_columns(data, segment, entry_id, start_sequence_id)
    kept = _kept(cols, segment, entry_id, lower, upper) if len(cols) else None
    if kept is not None:
        rows.add(entry_id, kept)


def _kept(
    cols: EntryColumns, segment: int, entry_id: int, lower: tuple[int, ...], upper: tuple[int, ...]
) -> EntryColumns | None:
    """The rows with ``lower < dlsn <= upper`` that are not control or
    end-of-stream records (None if there are none)."""
    key = (segment, entry_id)
    mask = None
    if key < lower[:2] or key > upper[:2]:
        return None
    slot = cols.slot
    if key == lower[:2]:
        mask = pc.greater(slot, pa.scalar(lower[2], pa.int64()))
    if key == upper[:2]:
        below = pc.less_equal(slot, pa.scalar(upper[2], pa.int64()))
        mask = below if mask is None else pc.and_(mask, below)
    if cols.any_flags:
        user = pc.equal(pc.bit_wise_and(cols.flags, _SKIP), _ZERO)
        mask = user if mask is None else pc.and_(mask, user)
    if mask is None:
        return cols
    if not pc.any(mask).as_py():
        return None
    if pc.all(mask).as_py():
        return cols
    return EntryColumns(
        slot.filter(mask),
        cols.position.filter(mask),
        cols.txid.filter(mask),
        cols.flags.filter(mask),
        cols.payload.filter(mask),
        False,
    )


def batches(
    runs: Iterable[list[LedgerEntry]],
    partition: DlogPartition,
    *,
    batch_rows: int = BATCH_ROWS,
    batch_bytes: int = BATCH_BYTES,
) -> Iterator[pa.RecordBatch]:
    """The rows ``partition`` keeps of the entries ``runs`` yields (its
    entries, in order), as Arrow batches of the source's schema: each cut at
    the end of the entry that brings it to ``batch_rows`` rows or
    ``batch_bytes`` of payloads."""
    p = partition
    rows = BatchColumns()
    for entries in runs:
        for entry in entries:
            add_entry(
                rows, entry.data, p.segment, entry.entry_id, p.start_sequence_id, p.lower, p.upper
            )
            if len(rows) >= batch_rows or rows.nbytes >= batch_bytes:
                yield _batch(p.stream, p.segment, *rows.take())
    if len(rows):
        yield _batch(p.stream, p.segment, *rows.take())


def read_partition(
    partition: DlogPartition, options: SourceOptions, *, batch_rows: int = BATCH_ROWS
) -> Iterator[pa.RecordBatch]:
    """The records of ``partition`` as Arrow batches of the source's schema."""
    password, bkc = _client_settings(options)
    client, runner = ledger_client(partition.metadata_service_uri, bkc)
    handle = runner.run(_open(client, partition.ledger_id, password))
    if handle is None:
        return
    loop = runner.loop
    p = partition
    runs = [
        (first, min(first + READ_RUN_ENTRIES - 1, p.last_entry))
        for first in range(p.first_entry, p.last_entry + 1, READ_RUN_ENTRIES)
    ]

    def submit(run: tuple[int, int]) -> concurrent.futures.Future[list[LedgerEntry]]:
        return asyncio.run_coroutine_threadsafe(handle.read_unconfirmed(*run), loop)

    pending: concurrent.futures.Future[list[LedgerEntry]] | None = None

    def read() -> Iterator[list[LedgerEntry]]:
        """Each run's entries, the next run's read in flight meanwhile."""
        nonlocal pending
        pending = submit(runs[0]) if runs else None
        for i in range(len(runs)):
            assert pending is not None
            entries = pending.result()
            pending = submit(runs[i + 1]) if i + 1 < len(runs) else None
            yield entries

    try:
        yield from batches(read(), p, batch_rows=batch_rows)
    finally:
        if pending is not None:
            pending.cancel()
        runner.run(handle.close())
