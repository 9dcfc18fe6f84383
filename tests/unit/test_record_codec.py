"""The C codec (dlog/_record_codec.c) against dlog.record's Python loops,
and what every C extension shares (dlog.extensions): dlog works without
them, and an install without a compiler goes on without them.

The extension does the per-record loops of ``RecordSetWriter.append_many``
and ``decode_entry`` for plain, well-formed records, and hands everything
else back to the Python code. So whatever the input, both must give the
same bytes, the same records, the same writer state and the same errors;
the extension must keep no reference it does not own, and leave a writer
unchanged when it fails; and dlog must work, unchanged, without it.
"""

from __future__ import annotations

import gc
import os
import shutil
import subprocess
import sys
import sysconfig
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import dlog.record
from dlog.errors import InvalidRecordError
from dlog.record import (
    MAX_PAYLOAD_SIZE,
    MAX_TXID,
    LogRecord,
    LogRecordWithDLSN,
    RecordSetWriter,
    build_record_set,
    decode_entry,
)

ROOT = Path(__file__).resolve().parents[2]
CODEC = dlog.record._codec


def test_the_extension_is_built_and_used() -> None:
    """make install builds it; without it these tests would compare the
    Python code with itself."""
    assert CODEC is not None, "dlog._record_codec is not built (make install builds it)"
    assert Path(CODEC.__file__).parent == ROOT / "dlog"


@pytest.fixture
def python_only() -> Iterator[Callable[[Callable[[], Any]], Any]]:
    """Run a callable with the C codec switched off."""

    def run(fn: Callable[[], Any]) -> Any:
        dlog.record._codec = None
        try:
            return fn()
        finally:
            dlog.record._codec = CODEC

    yield run
    dlog.record._codec = CODEC


def outcome(fn: Callable[[], Any]) -> tuple[str, Any]:
    try:
        return "ok", fn()
    except Exception as e:
        return "error", (type(e), str(e))


# -- records for the writer: mostly plain, some that need the general path ---
PLAIN = st.builds(
    LogRecord,
    st.integers(-(2**63), MAX_TXID),
    st.binary(max_size=300) | st.sampled_from([b"", b"x" * 5000]),
)
CONTROL = st.builds(lambda t: LogRecord(t, b"control", control=True), st.integers(0, 100))
RECORD_SET = st.builds(
    lambda t, n: LogRecord(t, build_record_set([b"m"] * n), record_set=True),
    st.integers(0, 100),
    st.integers(0, 4),
)


def odd_record(kind: str) -> LogRecord:
    """A record whose slots were changed after construction."""
    rec = LogRecord(7, b"abc")
    if kind == "bytearray payload":
        rec.payload = bytearray(b"abc")  # type: ignore[assignment]
    elif kind == "txid out of range":
        rec.txid = 2**64
    elif kind == "txid not an int":
        rec.txid = 7.0  # type: ignore[assignment]
    elif kind == "huge payload":
        rec.payload = b"y" * (MAX_PAYLOAD_SIZE + 1)
    return rec


ODD = st.sampled_from(
    ["bytearray payload", "txid out of range", "txid not an int", "huge payload"]
).map(odd_record)
RECORDS = st.lists(
    st.one_of(PLAIN, PLAIN, PLAIN, CONTROL, RECORD_SET, ODD, st.just("not a record")),
    max_size=40,
)


def fill(records: list[Any], start: int, threshold: int, max_bytes: int, position: int) -> Any:
    """append_many until it stops moving; the writer's bytes and state."""
    w = RecordSetWriter(max_bytes=max_bytes, last_position=position)
    steps = []
    i = start
    for _ in range(len(records) + 1):
        r = outcome(lambda: w.append_many(records, i, threshold))  # noqa: B023
        steps.append(r)
        if r[0] != "ok" or r[1] == i:
            break
        i = r[1]
    state = (w.num_records, w.last_position, w.max_txid, w.has_user_records, w.num_bytes)
    return steps, state, w.build()


@given(
    RECORDS,
    st.integers(-2, 5),
    st.integers(1, 3000),
    st.integers(200, 20_000),
    st.sampled_from([0, 5, 2**31 - 3, 2**31 - 1]),
)
@settings(max_examples=300, suppress_health_check=[HealthCheck.function_scoped_fixture])
def test_append_many_is_the_same_with_and_without_the_codec(
    python_only: Callable[[Callable[[], Any]], Any],
    records: list[Any],
    start: int,
    threshold: int,
    max_bytes: int,
    position: int,
) -> None:
    with_c = fill(records, start, threshold, max_bytes, position)
    without = python_only(lambda: fill(records, start, threshold, max_bytes, position))
    assert with_c == without


def test_append_many_on_a_tuple_or_other_sequence_takes_the_python_loop() -> None:
    records = [LogRecord(i, b"p") for i in range(10)]
    a, b = RecordSetWriter(), RecordSetWriter()
    assert a.append_many(tuple(records), 0, 1 << 20) == b.append_many(records, 0, 1 << 20) == 10
    assert a.build() == b.build()


def test_a_failed_append_leaves_the_writer_unchanged() -> None:
    """The bytearray is resized once, before any byte is written: with a
    view of it held (resizing raises BufferError), the writer is as it was,
    as with the Python loop, whose first ``+=`` raises."""
    for codec in (CODEC, None):
        dlog.record._codec = codec
        try:
            w = RecordSetWriter()
            w.append(LogRecord(1, b"first"))
            before = (w.num_records, w.last_position, w.max_txid, w.num_bytes)
            view = memoryview(w._buf)
            with pytest.raises(BufferError):
                w.append_many([LogRecord(2, b"a"), LogRecord(3, b"b")], 0, 1 << 20)
            view.release()
            assert (w.num_records, w.last_position, w.max_txid, w.num_bytes) == before
            w.append(LogRecord(4, b"last"))
            assert [r.txid for r in decode_entry(w.build(), 1, 0)] == [1, 4]
        finally:
            dlog.record._codec = CODEC


# -- entries for the reader ----------------------------------------------------
def entry_of(records: list[LogRecord], codec: str, enveloped: bool) -> bytes:
    w = RecordSetWriter(compression=codec, enveloped=enveloped)
    for r in records:
        w.append(r)
    return w.build()


def test_decoded_records_are_left_out_of_the_cyclic_gc() -> None:
    """The C codec's records and their DLSNs hold only ints and bytes: out
    of the cyclic GC's sight, which a tailing reader otherwise spent a tenth
    of its CPU walking (and paused on for tens of milliseconds)."""
    entry = entry_of([LogRecord(i, b"p%d" % i) for i in range(5)], "none", True)
    records = decode_entry(entry, 1, 2, 0, enveloped=True)
    assert [r.payload for r in records] == [b"p%d" % i for i in range(5)]
    assert [gc.is_tracked(r) or gc.is_tracked(r.dlsn) for r in records] == [False] * 5


ENTRY_RECORDS = st.lists(st.one_of(PLAIN, PLAIN, CONTROL, RECORD_SET), max_size=20)


def decoded(entry: bytes, seq: int, eid: int, start: int, enveloped: bool | None) -> Any:
    def run() -> Any:
        records = decode_entry(entry, seq, eid, start, enveloped=enveloped)
        for r in records:
            assert type(r) is LogRecordWithDLSN and type(r.dlsn) is type(dlog.record.DLSN(0, 0, 0))
        return [(r.dlsn, r.txid, r.flags, r.payload, r.position, r.sequence_id) for r in records]

    return outcome(run)


@given(
    ENTRY_RECORDS,
    st.sampled_from(["none", "lz4"]),
    st.booleans(),
    st.integers(0, 2**63 - 1),
    st.integers(0, 2**63 - 1),
    st.integers(-(2**63), 2**63 - 1) | st.sampled_from([0, 1, -(2**63), 2**63 - 1]),
    st.data(),
)
@settings(max_examples=300, suppress_health_check=[HealthCheck.function_scoped_fixture])
def test_decode_entry_is_the_same_with_and_without_the_codec(
    python_only: Callable[[Callable[[], Any]], Any],
    records: list[LogRecord],
    codec: str,
    enveloped: bool,
    seq: int,
    eid: int,
    start: int,
    data: st.DataObject,
) -> None:
    entry = entry_of(records, codec, enveloped)
    if data.draw(st.booleans(), "damaged") and entry:
        i = data.draw(st.integers(0, len(entry) - 1), "at")
        entry = (
            entry[:i] + bytes([entry[i] ^ data.draw(st.integers(1, 255), "flip")]) + entry[i + 1 :]
        )
    if data.draw(st.booleans(), "cut"):
        entry = entry[: data.draw(st.integers(0, len(entry)), "cut at")]
    mode = enveloped if data.draw(st.booleans(), "explicit mode") else None
    with_c = decoded(entry, seq, eid, start, mode)
    without = python_only(lambda: decoded(entry, seq, eid, start, mode))
    assert with_c == without
    if with_c[0] == "error":
        assert with_c[1][0] is InvalidRecordError


@given(st.binary(max_size=120), st.booleans())
@settings(suppress_health_check=[HealthCheck.function_scoped_fixture])
def test_random_bytes_decode_the_same_with_and_without_the_codec(
    python_only: Callable[[Callable[[], Any]], Any], data: bytes, enveloped: bool
) -> None:
    with_c = decoded(data, 1, 2, 3, enveloped)
    assert with_c == python_only(lambda: decoded(data, 1, 2, 3, enveloped))


def test_the_codec_decodes_plain_records_and_hands_back_the_rest() -> None:
    """Plain records come from C; a record set (or a bad header) is None,
    left to dlog.record, which expands or refuses it."""
    assert CODEC is not None
    plain = entry_of([LogRecord(1, b"a"), LogRecord(2, b"b")], "none", False)
    records = CODEC.decode_records(plain, 1, 2, 0)
    assert records is not None and [r.payload for r in records] == [b"a", b"b"]
    with_set = entry_of([LogRecord(1, build_record_set([b"m"]), record_set=True)], "none", False)
    assert CODEC.decode_records(with_set, 1, 2, 0) is None
    assert CODEC.decode_records(plain[:-1], 1, 2, 0) is None
    assert CODEC.decode_records(plain, 1, 2, 2**63 - 1) is None  # sequence id overflows int64


def test_the_codec_keeps_no_reference_it_does_not_own() -> None:
    """Reference counts of what goes in come back to where they were once
    the results are gone: nothing leaks, nothing is freed twice."""
    assert CODEC is not None
    segment, entry_id, base = 10**12 + 1, 10**12 + 2, 10**12 + 3  # not cached small ints
    entry = entry_of([LogRecord(i, b"p" * i) for i in range(50)], "none", False)
    counts = (sys.getrefcount(segment), sys.getrefcount(entry_id), sys.getrefcount(entry))
    records = CODEC.decode_records(entry, segment, entry_id, base)
    assert records is not None
    assert sys.getrefcount(segment) == counts[0] + 50  # each DLSN holds one
    del records
    assert (sys.getrefcount(segment), sys.getrefcount(entry_id), sys.getrefcount(entry)) == counts

    payloads = [bytes([i]) * 9 for i in range(20)]
    recs = [LogRecord(10**12 + i, p) for i, p in enumerate(payloads)]
    before = [sys.getrefcount(p) for p in payloads] + [sys.getrefcount(r) for r in recs]
    w = RecordSetWriter()
    w.append_many(recs, 0, 1 << 20)
    after = [sys.getrefcount(p) for p in payloads] + [sys.getrefcount(r) for r in recs]
    assert after == before


def test_decoding_does_not_grow_memory() -> None:
    import tracemalloc

    entry = entry_of([LogRecord(i, b"q" * 100) for i in range(1000)], "none", True)
    decode_entry(entry, 1, 1)
    tracemalloc.start()
    try:
        base = tracemalloc.get_traced_memory()[0]
        for _ in range(60):
            decode_entry(entry, 1, 1)
        grown = tracemalloc.get_traced_memory()[0] - base
    finally:
        tracemalloc.stop()
    assert grown < 1 << 20, f"{grown} bytes left behind by 60 decodes of 1,000 records"


# -- without the extension -------------------------------------------------------
WITHOUT = """
import sys
{block}
import dlog.record as r
import dlog.protocol.messages as m
assert r._codec is None and m._add_codec is None, (r._codec, m._add_codec)
w = r.RecordSetWriter()
assert w.append_many([r.LogRecord(i, b"x") for i in range(5)], 0, 1 << 20) == 5
assert [x.txid for x in r.decode_entry(w.build(), 1, 0)] == [0, 1, 2, 3, 4]
assert m.decode_add_request is m.py_decode_add_request
frame = m.decode_add_request(m.encode_add_request(7, 1, 2, b"k", b"body"))
assert (frame.txn_id, frame.ledger_id, frame.body) == (7, 1, b"body")
assert m.decode_add_response(m.encode_add_response(7, 0, 1, 2)) is None  # protobuf's then
import pyarrow as pa
import dlog.spark.columns as c
import dlog.spark.reader as sr
assert c._codec is None and sr._codec is None, (c._codec, sr._codec)
cols = c.decode_entry_columns(w.build(), 1, 0)
assert cols.txid.to_pylist() == [0, 1, 2, 3, 4] and cols.payload.to_pylist() == [b"x"] * 5
assert sr.dlsn_text(1, 0, 4) == "AQAAAAAAAAABAAAAAAAAAAAAAAAAAAAABA=="
rows = c.BatchColumns()
assert not rows.add_plain(w.build(), 0)
sr.add_entry(rows, w.build(), 1, 0, 0, (1, -1, 0), (1, 1, 0))
assert sr._batch("s", 1, *rows.take()).column("txid").to_pylist() == [0, 1, 2, 3, 4]
print("ok")
"""


@pytest.mark.parametrize(
    "block, env",
    [
        (
            "sys.modules['dlog._record_codec'] = None  # not built\n"
            "sys.modules['dlog.protocol._add_codec'] = None",
            {},
        ),
        ("", {"DLOG_PURE_PYTHON": "1"}),
    ],
    ids=["not built", "DLOG_PURE_PYTHON"],
)
def test_dlog_works_without_the_extension(block: str, env: dict[str, str]) -> None:
    done = subprocess.run(
        [sys.executable, "-c", WITHOUT.format(block=block)],
        capture_output=True,
        text=True,
        env={**os.environ, **env},
        timeout=60,
    )
    assert done.returncode == 0 and done.stdout.strip() == "ok", done.stderr


def test_the_install_goes_on_when_the_extension_cannot_be_built(tmp_path: Path) -> None:
    """The extension is optional: with no working compiler, building it
    warns and succeeds; with one, it builds."""
    for name in ("setup.py", "pyproject.toml", "README.md", "LICENSE"):
        shutil.copy(ROOT / name, tmp_path / name)
    for package in ("dlog", "subscriptions"):
        (tmp_path / package).mkdir()
        (tmp_path / package / "__init__.py").write_text("")
    (tmp_path / "dlog" / "protocol").mkdir()
    (tmp_path / "dlog" / "protocol" / "__init__.py").write_text("")
    sources = [Path("dlog/_record_codec.c"), Path("dlog/protocol/_add_codec.c")]
    for source in [*sources, Path("dlog/_slots.h")]:
        shutil.copy(ROOT / source, tmp_path / source)
    suffix = sysconfig.get_config_var("EXT_SUFFIX")
    built = [tmp_path / source.with_suffix(suffix) for source in sources]

    def build(env: dict[str, str]) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [sys.executable, "setup.py", "build_ext", "--inplace"],
            capture_output=True,
            text=True,
            cwd=tmp_path,
            env={**os.environ, **env},
            timeout=300,
        )

    broken = build({"CC": "false", "LDSHARED": "false"})
    assert broken.returncode == 0, broken.stderr
    assert not any(path.exists() for path in built)
    done = build({})
    assert done.returncode == 0, done.stderr
    assert all(path.exists() for path in built)
