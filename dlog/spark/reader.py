"""Executor side of the dlog Spark source: read one partition from the bookies.

A partition (:class:`dlog.spark.planning.DlogPartition`) names a ledger, a
run of its entries and the DLSN bounds of the records to keep. The entries
are read without recovery (as the library's reader reads them, so an
in-progress segment's writer is never fenced), decoded, filtered
(``lower < dlsn <= upper``; control and end-of-stream records are skipped)
and handed to Spark as Arrow record batches with the source's schema.

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
import itertools
import os
import struct
import threading
from array import array
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

import pyarrow as pa

from dlog.errors import NoSuchLedgerError
from dlog.record import FLAG_CONTROL, FLAG_END_OF_STREAM, decode_entry

if TYPE_CHECKING:
    from dlog.ledger.client import BookKeeper
    from dlog.ledger.read_handle import LedgerEntry, ReadHandle
    from dlog.loop_thread import LoopThread
    from dlog.spark.options import SourceOptions
    from dlog.spark.planning import DlogPartition

__all__ = ["ARROW_SCHEMA", "SCHEMA", "dlsn_text", "ledger_client", "read_partition"]

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
#: Rows per Arrow batch handed to Spark.
BATCH_ROWS = 32_768

_SKIP = FLAG_CONTROL | FLAG_END_OF_STREAM
_INT64_MAX = (1 << 63) - 1
_PREFIX = struct.Struct(">bqqb")  # version, segment, entry, slot byte 0
_SLOT_LOW = struct.Struct(">q")


# ---------------------------------------------------------------------------
# DLSN text, fast
# ---------------------------------------------------------------------------
#
# A DLSN's text is base64 of 25 bytes: version, segment, entry, slot (three
# big-endian int64). Base64 works on 3-byte groups, and 18 = 6 groups, so the
# first 24 characters encode version, segment, entry and the top byte of the
# slot, and the last 12 the slot's 7 low bytes. The first part is the same for
# every record of an entry, the second depends on the slot alone.

_slot_suffixes: list[str] = []


def _suffixes_through(slot: int) -> list[str]:
    """The suffix of every slot up to ``slot`` (at least): a table grown on
    demand (an entry holds at most about 2**18 records, so it stays small)."""
    table = _slot_suffixes
    if slot >= len(table):
        for s in range(len(table), max(slot + 1, 2 * len(table), 1024)):
            table.append(base64.b64encode(_SLOT_LOW.pack(s)[1:]).decode("ascii"))
    return table


def _entry_prefix(segment: int, entry: int) -> str:
    return base64.b64encode(_PREFIX.pack(1, segment, entry, 0)).decode("ascii")


def dlsn_text(segment: int, entry: int, slot: int) -> str:
    """``DLSN(segment, entry, slot).serialize()`` (for slots below 2**56)."""
    if slot < len(_slot_suffixes):
        suffix = _slot_suffixes[slot]
    else:
        suffix = base64.b64encode(_SLOT_LOW.pack(slot)[1:]).decode("ascii")
    return _entry_prefix(segment, entry) + suffix


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
    dlsns: list[str],
    segment: int,
    entries: list[int],
    slots: list[int],
    txids: list[int],
    payloads: list[bytes],
) -> pa.RecordBatch:
    n = len(dlsns)
    offsets = array("i", itertools.accumulate(map(len, payloads), initial=0))
    payload_array = pa.Array.from_buffers(
        pa.binary(), n, [None, pa.py_buffer(offsets), pa.py_buffer(b"".join(payloads))]
    )
    return pa.RecordBatch.from_arrays(
        [
            pa.array([stream] * n, pa.string()),
            pa.array(dlsns, pa.string()),
            pa.array([segment] * n, pa.int64()),
            pa.array(entries, pa.int64()),
            pa.array(slots, pa.int64()),
            pa.array(txids, pa.int64()),
            payload_array,
        ],
        schema=ARROW_SCHEMA,
    )


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
    lower, upper = p.lower, p.upper
    segment = p.segment
    runs = [
        (first, min(first + READ_RUN_ENTRIES - 1, p.last_entry))
        for first in range(p.first_entry, p.last_entry + 1, READ_RUN_ENTRIES)
    ]

    def submit(run: tuple[int, int]) -> concurrent.futures.Future[list[LedgerEntry]]:
        return asyncio.run_coroutine_threadsafe(handle.read_unconfirmed(*run), loop)

    pending: concurrent.futures.Future[list[LedgerEntry]] | None = None
    try:
        dlsns: list[str] = []
        entry_ids: list[int] = []
        slots: list[int] = []
        txids: list[int] = []
        payloads: list[bytes] = []
        pending = submit(runs[0]) if runs else None
        for i in range(len(runs)):
            assert pending is not None
            entries = pending.result()
            pending = submit(runs[i + 1]) if i + 1 < len(runs) else None
            for entry in entries:
                entry_id = entry.entry_id
                records = decode_entry(entry.data, segment, entry_id, p.start_sequence_id)
                if not records:
                    continue
                if (segment, entry_id, -1) < lower or (segment, entry_id, _INT64_MAX) > upper:
                    # The entry straddles a bound: keep the records inside.
                    records = [r for r in records if lower < r.dlsn <= upper]
                user = [r for r in records if not r.flags & _SKIP]
                if not user:
                    continue
                entry_slots = [r.dlsn[2] for r in user]
                table = _suffixes_through(entry_slots[-1])
                prefix = _entry_prefix(segment, entry_id)
                dlsns += [prefix + table[slot] for slot in entry_slots]
                slots += entry_slots
                entry_ids += [entry_id] * len(user)
                txids += [r.txid for r in user]
                payloads += [r.payload for r in user]
                if len(dlsns) >= batch_rows:
                    yield _batch(p.stream, dlsns, segment, entry_ids, slots, txids, payloads)
                    dlsns, entry_ids, slots, txids, payloads = [], [], [], [], []
        if dlsns:
            yield _batch(p.stream, dlsns, segment, entry_ids, slots, txids, payloads)
    finally:
        if pending is not None:
            pending.cancel()
        runner.run(handle.close())
