"""Columnar decoding of BookKeeper entries, straight into Arrow arrays.

:func:`decode_entry_columns` reads the same bytes as
:func:`dlog.record.decode_entry` (formats in :mod:`dlog.record`'s docstring)
and gives the same rows, record sets expanded, as columns (slot, position,
txid, flags, payload) instead of one Python object per record. It is the
Spark executor's decoder; the library's readers keep ``decode_entry``.

How it stays fast without a compiled extension:

* A *uniform run* (consecutive records with equal payload lengths, the usual
  shape of an entry) is located from its first record and checked as a whole:
  the length field of every candidate at stride ``20 + L`` must be ``L`` and
  every metadata word valid and not a record set, which proves those are the
  record boundaries a sequential walk would find. The run's fields are then
  cut out of the entry by Arrow kernels (``binary_slice`` over a zero-copy
  fixed-size-binary view), never record by record in Python. Record-set
  members of equal length are handled the same way.
  An entry is tried for such a run from its first record.
* The rest (varied lengths) is found by walking the records' length fields
  alone, in a Python loop that keeps one int32 offset per record; those
  offsets make a binary array of whole records over the entry's bytes, and
  the same Arrow kernels cut metadata, txids and payloads out of it.
* Only an entry holding record sets is walked record by record, keeping
  ints and payload offsets (its members are cut out by one Arrow ``take``,
  or as a uniform run).
* Where the optional C codec was built (dlog/_record_codec.c), an entry of
  plain records only is cut into columns by it, in one pass; anything else
  it hands back, and the paths above take it.
* :class:`BatchColumns` gathers the kept rows of many entries into one
  batch's columns, growing buffers in place: with the C codec, an entry of
  plain records goes straight from its bytes into them (no arrays per entry,
  no concatenation per batch); other entries are added from their columns.
* Any input this decoder does not accept as well formed (a truncated header,
  bad metadata, an unknown codec, a corrupt LZ4 block, wrong lengths, bad
  arguments...) is handed to ``decode_entry`` itself, so malformed input
  raises exactly ``decode_entry``'s error, and anything ``decode_entry``
  accepts that this decoder would not is still decoded, from its records.
"""

from __future__ import annotations

import functools
import struct
from array import array
from dataclasses import dataclass
from typing import Any

import lz4.block
import pyarrow as pa
import pyarrow.compute as pc

from dlog.extensions import extension
from dlog.record import (
    ENTRY_CODEC_MASK,
    ENTRY_HEADER_SIZE,
    ENTRY_VERSION,
    FLAG_RECORD_SET,
    MAX_DECOMPRESSED_SIZE,
    METADATA_INVALID_MASK,
    RECORD_HEADER_SIZE,
    RECORD_SET_CODEC_MASK,
    RECORD_SET_HEADER_SIZE,
    RECORD_SET_VERSION,
    RECORD_SET_VERSION_MASK,
    CompressionCodec,
    decode_entry,
)

__all__ = ["BatchColumns", "EntryColumns", "decode_entry_columns", "int64_buffer"]

_INT64_MIN = -(1 << 63)
_INT64_MAX = (1 << 63) - 1
_INT32_MAX = (1 << 31) - 1

_ENTRY_HEADER = struct.Struct(">BIii")
_SET_HEADER = struct.Struct(">Iiii")
_RECORD_HEADER = struct.Struct(">Qqi")
_INT32 = struct.Struct(">i")
_unpack_record_header = _RECORD_HEADER.unpack_from
_unpack_int32 = _INT32.unpack_from

#: A uniform run shorter than this is not worth its Arrow calls (a few
#: microseconds each): its records are walked with the rest.
MIN_RUN = 16

_INT64 = pa.int64()
# Arrow compute arguments are given as Arrow scalars and options objects: a
# plain Python int makes pyarrow try to import numpy on every call (tens of
# microseconds when numpy is not installed).
_ZERO = pa.scalar(0, _INT64)
_FLAG_BITS = pa.scalar(0xFFFF, _INT64)
_POSITION_SHIFT = pa.scalar(16, _INT64)
# Metadata bits that end a uniform run: invalid ones, and a record set.
# (as a signed int64: metadata words are read as int64, bits unchanged)
_RUN_BREAKING_BITS = pa.scalar((METADATA_INVALID_MASK | FLAG_RECORD_SET) - (1 << 64), _INT64)
_BINARY = pa.binary()


#: The C codec's loops, when it was built (see dlog.extensions).
_codec: Any = extension("dlog._record_codec")


class _Fallback(Exception):
    """Input this decoder leaves to decode_entry (malformed, or unusual)."""


@dataclass(frozen=True, slots=True)
class EntryColumns:
    """The rows of one entry, record sets expanded, in entry order.

    ``slot``, ``position``, ``txid`` and ``flags`` are int64 arrays and
    ``payload`` a binary array, all of one length. A row's DLSN is
    ``(segment, entry, slot)`` and its sequence id ``start_sequence_id +
    position - 1`` (see :meth:`sequence_ids`). ``any_flags`` is true when
    some row has a nonzero flag (a control or end-of-stream record).
    """

    slot: pa.Array
    position: pa.Array
    txid: pa.Array
    flags: pa.Array
    payload: pa.Array
    any_flags: bool

    def __len__(self) -> int:
        return len(self.slot)

    def sequence_ids(self, start_sequence_id: int) -> list[int]:
        """Each row's sequence id, as ``decode_entry`` computes it."""
        base = start_sequence_id - 1
        return [base + p for p in self.position.to_pylist()]


# ---------------------------------------------------------------------------
# cached helper arrays
# ---------------------------------------------------------------------------

_ranges: list[pa.Array] = [pa.array(range(1024), _INT64)]
_evens: list[pa.Array] = [pa.array(range(0, 2048, 2), _INT64)]


def _arange(n: int) -> pa.Array:
    """int64 0..n-1 (a slice of a cached array)."""
    table = _ranges[0]
    if n > len(table):
        table = _ranges[0] = pa.array(range(max(n, 2 * len(table))), _INT64)
    return table.slice(0, n)


def _even_indices(n: int) -> pa.Array:
    """int64 0, 2, ..., 2(n-1)."""
    table = _evens[0]
    if n > len(table):
        size = max(n, 2 * len(table))
        table = _evens[0] = pa.array(range(0, 2 * size, 2), _INT64)
    return table.slice(0, n)


@functools.cache
def _slice_options(start: int, stop: int) -> pc.SliceOptions:
    return pc.SliceOptions(start, stop)


def _slice(view: pa.Array, start: int, stop: int) -> pa.Array:
    """Bytes ``start:stop`` of each value of a (fixed-size) binary array."""
    return pc.binary_slice(view, options=_slice_options(start, stop))


def _be_int64(fixed: pa.Array) -> pa.Array:
    """An array of 8-byte big-endian int64s (fixed_size_binary(8), or binary
    whose values are all 8 bytes, as binary_slice gives) as an int64 array."""
    values = array("q")
    values.frombytes(fixed.buffers()[-1].slice(0, 8 * len(fixed)))
    values.byteswap()
    return pa.Array.from_buffers(_INT64, len(values), [None, pa.py_buffer(values)])


# ---------------------------------------------------------------------------
# decoding
# ---------------------------------------------------------------------------


class _Columns:
    """Chunks of columns being gathered for one entry."""

    __slots__ = ("any_flags", "chunks", "flags", "offsets", "positions", "slots", "txids")

    def __init__(self) -> None:
        self.chunks: list[tuple[pa.Array, ...]] = []
        self.any_flags = False
        self._reset()

    def _reset(self) -> None:
        self.slots: list[int] = []
        self.positions: list[int] = []
        self.txids: list[int] = []
        self.flags: list[int] = []
        # payload i is buf[offsets[2i]:offsets[2i + 1]]
        self.offsets = array("i")

    def flush(self, buf: pa.Buffer) -> None:
        """Turn the records walked in Python (all from ``buf``) into a chunk."""
        n = len(self.slots)
        if not n:
            return
        offsets = self.offsets
        offsets.append(offsets[-1])
        spans = pa.Array.from_buffers(_BINARY, 2 * n, [None, pa.py_buffer(offsets), buf])
        self.chunks.append(
            (
                pa.array(self.slots, _INT64),
                pa.array(self.positions, _INT64),
                pa.array(self.txids, _INT64),
                pa.array(self.flags, _INT64),
                spans.take(_even_indices(n)),
            )
        )
        self._reset()

    def result(self) -> EntryColumns:
        chunks = self.chunks
        if len(chunks) == 1:
            cols = chunks[0]
        elif not chunks:
            empty = pa.array([], _INT64)
            cols = (empty, empty, empty, empty, pa.array([], _BINARY))
        else:
            cols = tuple(pa.concat_arrays(list(c)) for c in zip(*chunks, strict=True))
        return EntryColumns(cols[0], cols[1], cols[2], cols[3], cols[4], self.any_flags)


def _decompress(stored: bytes, codec: int, size: int) -> bytes:
    if codec == CompressionCodec.NONE:
        if size != len(stored):
            raise _Fallback
        return stored
    if (
        codec != CompressionCodec.LZ4
        or size > MAX_DECOMPRESSED_SIZE
        or size > 255 * len(stored) + 16
    ):
        raise _Fallback
    try:
        out = lz4.block.decompress(stored, uncompressed_size=size)
    except Exception:  # corrupt: decode_entry says how
        raise _Fallback from None
    if len(out) != size:
        raise _Fallback
    return out


def _uniform_run(
    data: pa.Buffer, off: int, n: int, header: int, length: int, limit: int
) -> tuple[int, pa.Array | None]:
    """How many records from ``off`` have payload length ``length`` (up to
    ``limit``, within ``n``): records of ``header`` bytes (20 for LogRecords,
    whose metadata must also be valid and not a record set; 4 for record-set
    members), and a fixed-size-binary view of them."""
    stride = header + length
    m = min((n - off) // stride, limit)
    if m < MIN_RUN:
        return 0, None
    view = pa.Array.from_buffers(pa.binary(stride), m, [None, data.slice(off, m * stride)])
    lengths = _slice(view, header - 4, header).buffers()[1].slice(0, 4 * m).to_pybytes()
    expected = _INT32.pack(length) * m
    if lengths != expected:
        # The first record that differs ends the run (binary search on prefixes).
        lo, hi = 0, m  # lengths[: 4 * lo] matches; lengths[: 4 * hi] does not
        while hi - lo > 1:
            mid = (lo + hi) // 2
            if lengths[: 4 * mid] == expected[: 4 * mid]:
                lo = mid
            else:
                hi = mid
        m = lo
    if header == RECORD_HEADER_SIZE and m:
        meta = _be_int64(_slice(view.slice(0, m), 0, 8))
        bad = pc.not_equal(pc.bit_wise_and(meta, _RUN_BREAKING_BITS), _ZERO)
        if pc.any(bad).as_py():
            m = bad.to_pylist().index(True)
    if m < MIN_RUN:
        return 0, None
    return m, view.slice(0, m)


def _looks_uniform(buf: bytes, off: int, n: int, length: int) -> bool:
    """Whether the next MIN_RUN records from ``off`` seem to share the first's
    payload length (a cheap check before trying a uniform run)."""
    stride = RECORD_HEADER_SIZE + length
    if off + MIN_RUN * stride > n:
        return False
    at = off + RECORD_HEADER_SIZE - 4
    for _ in range(MIN_RUN - 1):
        at += stride
        if _unpack_int32(buf, at)[0] != length:
            return False
    return True


def _expand_set(payload: bytes, txid: int, position: int, slot: int, cols: _Columns) -> int:
    """Add the members of a record set as one chunk; returns how many."""
    n = len(payload)
    if n < RECORD_SET_HEADER_SIZE:
        raise _Fallback
    metadata, count, size, stored_len = _SET_HEADER.unpack_from(payload)
    if (
        metadata & ~(RECORD_SET_VERSION_MASK | RECORD_SET_CODEC_MASK)
        or (metadata & RECORD_SET_VERSION_MASK) != RECORD_SET_VERSION
    ):
        raise _Fallback
    if count < 0 or size < 0 or stored_len < 0 or stored_len != n - RECORD_SET_HEADER_SIZE:
        raise _Fallback
    if count * 4 > size or position + count - 1 > _INT32_MAX:
        raise _Fallback
    body = _decompress(payload[RECORD_SET_HEADER_SIZE:], metadata & RECORD_SET_CODEC_MASK, size)
    if not count:
        if size:
            raise _Fallback
        return 0
    data = pa.py_buffer(body)
    (first,) = _unpack_int32(body, 0)
    if first > 0 and count * (4 + first) == size:
        m, view = _uniform_run(data, 0, size, 4, first, count)
        if m == count and view is not None:
            cols.chunks.append(
                (
                    pc.add(_arange(count), pa.scalar(slot, _INT64)),
                    pc.add(_arange(count), pa.scalar(position, _INT64)),
                    pa.repeat(pa.scalar(txid, _INT64), count),
                    pa.repeat(_ZERO, count),
                    _slice(view, 4, 4 + first).cast(_BINARY),
                )
            )
            return count
    # Members of varied lengths: walk them.
    slots: list[int] = []
    offsets = array("i")
    off = 0
    for i in range(count):
        if size - off < 4:
            raise _Fallback
        (length,) = _unpack_int32(body, off)
        off += 4
        end = off + length
        if length < 0 or end > size:
            raise _Fallback
        offsets.append(off)
        offsets.append(end)
        slots.append(slot + i)
        off = end
    if off != size:
        raise _Fallback
    offsets.append(off)
    spans = pa.Array.from_buffers(_BINARY, 2 * count, [None, pa.py_buffer(offsets), data])
    cols.chunks.append(
        (
            pa.array(slots, _INT64),
            pa.array(range(position, position + count), _INT64),
            pa.array([txid] * count, _INT64),
            pa.array([0] * count, _INT64),
            spans.take(_even_indices(count)),
        )
    )
    return count


def _records_chunk(records: pa.Array, slot: int, *, checked: bool) -> tuple[pa.Array, ...] | None:
    """The columns of LogRecords given one whole record per value of
    ``records``, slots from ``slot``; None if one of them is a record set or
    has invalid metadata (unless ``checked`` says that is known not to be)."""
    meta = _be_int64(_slice(records, 0, 8))
    if (
        not checked
        and pc.any(pc.not_equal(pc.bit_wise_and(meta, _RUN_BREAKING_BITS), _ZERO)).as_py()
    ):
        return None
    payload = _slice(records, RECORD_HEADER_SIZE, _INT32_MAX)
    if payload.type != _BINARY:  # fixed-size records give fixed-size payloads
        payload = payload.cast(_BINARY)
    return (
        pc.add(_arange(len(records)), pa.scalar(slot, _INT64)),
        pc.shift_right(meta, _POSITION_SHIFT),
        _be_int64(_slice(records, 8, 16)),
        pc.bit_wise_and(meta, _FLAG_BITS),
        payload,
    )


def _walk_plain(buf: bytes, data: pa.Buffer, off: int, slot: int, cols: _Columns) -> bool:
    """The records of ``buf`` from ``off`` as one chunk, found by walking their
    lengths alone; False (nothing added) if one of them is a record set or
    has invalid metadata."""
    n = len(buf)
    bounds = array("i", (off,))
    append = bounds.append
    unpack = _unpack_int32
    try:
        while off < n:
            length = unpack(buf, off + RECORD_HEADER_SIZE - 4)[0]
            off += RECORD_HEADER_SIZE + length
            if length < 0 or off > n:  # the record runs past the end
                raise _Fallback
            append(off)
    except struct.error:  # a truncated header
        raise _Fallback from None
    records = pa.Array.from_buffers(_BINARY, len(bounds) - 1, [None, pa.py_buffer(bounds), data])
    chunk = _records_chunk(records, slot, checked=False)
    if chunk is None:
        return False
    cols.chunks.append(chunk)
    return True


def _plain(
    positions: bytes, txids: bytes, flags: bytes, offsets: bytes, data: bytes, any_flags: bool
) -> EntryColumns:
    """EntryColumns over the buffers of the C codec's ``plain_columns``."""
    n = len(positions) // 8

    def int64s(values: bytes) -> pa.Array:
        return pa.Array.from_buffers(_INT64, n, [None, pa.py_buffer(values)])

    return EntryColumns(
        _arange(n),
        int64s(positions),
        int64s(txids),
        int64s(flags),
        pa.Array.from_buffers(_BINARY, n, [None, pa.py_buffer(offsets), pa.py_buffer(data)]),
        any_flags,
    )


def _decode(buf: bytes) -> EntryColumns:
    """The rows of the record stream ``buf`` (an entry's decompressed bytes).

    Plain records by the C codec, if built; else a uniform run from the first
    record, then the rest by walking lengths; records one by one only when
    the entry holds record sets."""
    if _codec is not None:
        found = _codec.plain_columns(buf)
        if found is not None:
            return _plain(*found)
    n = len(buf)
    data = pa.py_buffer(buf)
    cols = _Columns()
    off = slot = 0
    if n >= RECORD_HEADER_SIZE:
        (length,) = _unpack_int32(buf, RECORD_HEADER_SIZE - 4)
        if length > 0 and _looks_uniform(buf, 0, n, length):
            m, view = _uniform_run(data, 0, n, RECORD_HEADER_SIZE, length, n)
            if m and view is not None:
                chunk = _records_chunk(view, 0, checked=True)
                assert chunk is not None
                cols.chunks.append(chunk)
                slot = m
                off = m * (RECORD_HEADER_SIZE + length)
    if off < n and not _walk_plain(buf, data, off, slot, cols):
        _walk_records(buf, data, off, slot, cols)
    cols.any_flags = any(pc.max(chunk[3]).as_py() for chunk in cols.chunks)
    return cols.result()


def _walk_records(buf: bytes, data: pa.Buffer, off: int, slot: int, cols: _Columns) -> None:
    """The records of ``buf`` from ``off``, one by one, record sets expanded."""
    n = len(buf)
    unpack = _unpack_record_header
    invalid = METADATA_INVALID_MASK
    while off < n:
        if n - off < RECORD_HEADER_SIZE:
            raise _Fallback
        metadata, txid, length = unpack(buf, off)
        start = off + RECORD_HEADER_SIZE
        end = start + length
        if metadata & invalid or length < 0 or end > n:
            raise _Fallback
        position = metadata >> 16
        if metadata & FLAG_RECORD_SET:
            cols.flush(data)
            slot += _expand_set(buf[start:end], txid, position, slot, cols)
        else:
            cols.slots.append(slot)
            cols.positions.append(position)
            cols.txids.append(txid)
            cols.flags.append(metadata & 0xFFFF)
            cols.offsets.append(start)
            cols.offsets.append(end)
            slot += 1
        off = end
    cols.flush(data)


def _from_records(
    entry: Any, segment_seq_no: int, entry_id: int, start_sequence_id: int, enveloped: bool | None
) -> EntryColumns:
    """decode_entry's rows as columns (raises what decode_entry raises)."""
    records = decode_entry(entry, segment_seq_no, entry_id, start_sequence_id, enveloped=enveloped)
    flags = [r.flags for r in records]
    return EntryColumns(
        pa.array([r.dlsn[2] for r in records], _INT64),
        pa.array([r.position for r in records], _INT64),
        pa.array([r.txid for r in records], _INT64),
        pa.array(flags, _INT64),
        pa.array([r.payload for r in records], _BINARY),
        any(flags),
    )


def _record_stream(buf: bytes) -> tuple[bytes, int]:
    """The record stream of an enveloped entry, as ``(bytes, offset)``: the
    entry itself past its header, or its decompressed stream from 0."""
    n = len(buf)
    if n < ENTRY_HEADER_SIZE:
        raise _Fallback
    version, flags, size, stored_len = _ENTRY_HEADER.unpack_from(buf)
    if version != ENTRY_VERSION or flags & ~ENTRY_CODEC_MASK:
        raise _Fallback
    if size < 0 or stored_len != n - ENTRY_HEADER_SIZE:
        raise _Fallback
    codec = flags & ENTRY_CODEC_MASK
    if codec == CompressionCodec.NONE:
        if size != stored_len:
            raise _Fallback
        return buf, ENTRY_HEADER_SIZE
    return _decompress(buf[ENTRY_HEADER_SIZE:], codec, size), 0


def decode_entry_columns(
    entry: bytes | bytearray | memoryview,
    segment_seq_no: int,
    entry_id: int,
    start_sequence_id: int = 0,
    *,
    enveloped: bool | None = True,
) -> EntryColumns:
    """The rows of one entry as columns: exactly ``decode_entry(entry,
    segment_seq_no, entry_id, start_sequence_id, enveloped=enveloped)``
    (record sets expanded), and the same error for malformed input."""
    try:
        for value in (segment_seq_no, entry_id, start_sequence_id):
            if type(value) is not int or not _INT64_MIN <= value <= _INT64_MAX:
                raise _Fallback
        if type(entry) is bytes:
            buf = entry
        elif isinstance(entry, (bytearray, memoryview)):
            buf = bytes(entry)
        else:
            raise _Fallback
        if enveloped is None:
            enveloped = len(buf) > 0 and buf[0] == ENTRY_VERSION
        if enveloped:
            buf, start = _record_stream(buf)
            if start:
                buf = buf[start:]
        return _decode(buf)
    except _Fallback:
        return _from_records(entry, segment_seq_no, entry_id, start_sequence_id, enveloped)


# ---------------------------------------------------------------------------
# a batch's columns, gathered from many entries
# ---------------------------------------------------------------------------


def int64_buffer(values: pa.Array) -> pa.Buffer:
    """An int64 array's values (native 8-byte words), from its offset."""
    return values.buffers()[1].slice(8 * values.offset, 8 * len(values))


class BatchColumns:
    """The kept rows of many entries, as one batch's columns: entry, slot,
    txid and payload, written in place into Arrow buffers and taken as
    arrays over those same buffers (:meth:`take`), so a batch is built
    without a concatenation and, for entries of plain records, without any
    array per entry (:meth:`add_plain`, by the C codec).

    Invariant: the columns hold ``len(self)`` rows and ``nbytes`` payload
    bytes; ``offsets`` holds one more int32 than there are rows, from 0
    (payload ``i`` is ``data[offsets[i]:offsets[i + 1]]``). The buffers grow
    by doubling (into new ones), and a new batch starts a quarter larger than the last one
    was, so a steady read allocates each batch's buffers once."""

    __slots__ = ("data", "entries", "nbytes", "offsets", "rows", "slots", "txids")

    #: The smallest capacities a batch starts with (rows, payload bytes).
    MIN_ROWS = 4096
    MIN_BYTES = 1 << 20

    def __init__(self) -> None:
        self._reset(self.MIN_ROWS, self.MIN_BYTES)

    def _reset(self, rows: int, nbytes: int) -> None:
        self.entries, self.slots, self.txids = (_allocate(8 * rows) for _ in range(3))
        self.offsets = _allocate(4 * (rows + 1))
        self.data = _allocate(nbytes)
        _put(self.offsets, 0, bytes(4))
        self.rows = 0
        self.nbytes = 0

    def __len__(self) -> int:
        return self.rows

    def _reserve(self, rows: int, nbytes: int) -> None:
        """Room for ``rows`` more rows and ``nbytes`` more payload bytes."""
        need = self.rows + rows
        if 8 * need > self.entries.size:
            size = max(need, 2 * (self.entries.size // 8))
            used = 8 * self.rows
            self.entries, self.slots, self.txids = (
                _grown(column, 8 * size, used) for column in (self.entries, self.slots, self.txids)
            )
            self.offsets = _grown(self.offsets, 4 * (size + 1), used // 2 + 4)
        need = self.nbytes + nbytes
        if need > self.data.size:
            self.data = _grown(self.data, max(need, 2 * self.data.size), self.nbytes)

    def add_plain(self, entry: bytes, entry_id: int) -> bool:
        """Add the user rows of an entry (enveloped) of plain records, control
        and end-of-stream records skipped, if the C codec is built and the
        entry is one; False, and nothing added, otherwise (decode it with
        :func:`decode_entry_columns` and :meth:`add` what is kept)."""
        if _codec is None or type(entry) is not bytes:
            return False
        try:
            buf, start = _record_stream(entry)
        except _Fallback:
            return False
        for _ in range(2):
            added = _codec.append_rows(
                buf,
                start,
                entry_id,
                self.entries,
                self.slots,
                self.txids,
                self.offsets,
                self.data,
                self.rows,
                self.nbytes,
            )
            if added is None:
                return False
            rows, nbytes, written = added
            if written:
                self.rows += rows
                self.nbytes += nbytes
                return True
            self._reserve(rows, nbytes)  # and again, into room enough
        raise AssertionError("append_rows found no room after _reserve")

    def add(self, entry_id: int, cols: EntryColumns) -> None:
        """Add every row of ``cols`` (rows of entry ``entry_id``)."""
        n = len(cols)
        if not n:
            return
        payload = cols.payload
        _, offsets_buffer, data_buffer = payload.buffers()
        offsets = pa.Array.from_buffers(
            pa.int32(), n + 1, [None, offsets_buffer], offset=payload.offset
        )
        first, last = offsets[0].as_py(), offsets[n].as_py()
        base, size, row = self.nbytes, last - first, self.rows
        if base + size > _INT32_MAX:
            raise OverflowError("the batch's payloads pass 2 GiB (int32 offsets)")
        self._reserve(n, size)
        _put(self.entries, 8 * row, array("q", (entry_id,)) * n)
        _put(self.slots, 8 * row, int64_buffer(cols.slot))
        _put(self.txids, 8 * row, int64_buffer(cols.txid))
        if size:
            _put(self.data, base, data_buffer.slice(first, size))
        moved = pc.add(offsets.slice(1), pa.scalar(base - first, pa.int32()))
        _put(self.offsets, 4 * (row + 1), moved.buffers()[1].slice(4 * moved.offset, 4 * n))
        self.rows += n
        self.nbytes += size

    def take(self) -> tuple[pa.Array, pa.Array, pa.Array, pa.Array]:
        """The columns (entry, slot, txid: int64; payload: binary) of the rows
        gathered, which are then forgotten (the arrays keep the buffers)."""
        n = self.rows
        entries, slots, txids = (
            pa.Array.from_buffers(_INT64, n, [None, column.slice(0, 8 * n)])
            for column in (self.entries, self.slots, self.txids)
        )
        payload = pa.Array.from_buffers(
            _BINARY, n, [None, self.offsets.slice(0, 4 * (n + 1)), self.data.slice(0, self.nbytes)]
        )
        # the next batch starts with room for this one's rows and a quarter more
        self._reset(
            max(n + n // 4, self.MIN_ROWS), max(self.nbytes + self.nbytes // 4, self.MIN_BYTES)
        )
        return entries, slots, txids, payload


def _allocate(size: int) -> pa.Buffer:
    """A new Arrow buffer of ``size`` bytes (contents undefined). (Not a
    resizable one: its buffer protocol keeps reporting the size it had.)"""
    return pa.allocate_buffer(size)


def _grown(buffer: pa.Buffer, size: int, used: int) -> pa.Buffer:
    """A new buffer of ``size`` bytes that starts with ``buffer[:used]``."""
    grown = _allocate(size)
    _put(grown, 0, buffer.slice(0, used))
    return grown


def _put(buffer: pa.Buffer, at: int, values: Any) -> None:
    """Copy ``values`` (any buffer) into ``buffer`` at byte ``at``."""
    source = memoryview(values).cast("b")
    memoryview(buffer)[at : at + len(source)] = source
