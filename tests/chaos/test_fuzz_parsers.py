"""Fuzzing the parsers of every stored format (issue 17).

Each parser is fed random bytes and valid encodings with random mutations
(bit flips, truncation, insertion, deletion, splicing two valid encodings,
trailing garbage). The common contract: it returns a value or raises its
module's documented error (a :mod:`dlog.errors` class) with a message; never
another exception type, never a hang, never a silent wrong value. What "silent
wrong value" means depends on the format and is written in each test's
docstring: a canonical format must re-encode a parsed value to the very bytes
it was given; a non-canonical one (protobuf) must at least round-trip the
value; a length-framed one must reject truncation and trailing bytes.

Replay parsers (journal, entry log) are run over files written with the
product's writer code and then corrupted: they must stop at or report the
corruption, and never yield a record that was not written, except where the
format cannot tell (it has no checksum: BookKeeper frames journal and entry
log records by length only, the entry's own digest is checked by the
client). Those limits are spelled out where they apply.
"""

from __future__ import annotations

import contextlib
import functools
import signal
import struct
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, TypeVar

import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from dlog.bookie import entry_log as el
from dlog.bookie import journal_format as jf
from dlog.bookie.cookie import Cookie, encode_dirs
from dlog.dlsn import DLSN, parse_dlsn
from dlog.errors import (
    CorruptedFileError,
    DLogError,
    InvalidCookieError,
    InvalidDLSNError,
    InvalidRecordError,
    MetadataError,
    MetadataSerializationError,
)
from dlog.ledger.metadata import LedgerMetadata, deserialize, serialize
from dlog.log_metadata import NamespaceBinding, decode_long, encode_long
from dlog.record import (
    MAX_TXID,
    LogRecord,
    RecordSetWriter,
    build_record_set,
    decode_entry,
    decode_record,
    encode_record,
)
from dlog.segment import LogSegmentMetadata
from subscriptions import format as sf
from tests.unit.test_ledger_metadata import metadatas
from tests.unit.test_segment import segments

T = TypeVar("T")

#: Every parse of at most a few KiB must be far quicker than this.
HANG_SECONDS = 5.0
FUZZ = settings(
    max_examples=300,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture],
)
FUZZ_FEW = settings(FUZZ, max_examples=120)


class Hang(BaseException):
    """A parser ran past :data:`HANG_SECONDS` (BaseException: no parser's
    ``except Exception`` can swallow it)."""


@contextlib.contextmanager
def time_limit(seconds: float = HANG_SECONDS) -> Iterator[None]:
    def fire(signum: int, frame: Any) -> None:
        raise Hang(f"parser still running after {seconds}s")

    old = signal.signal(signal.SIGALRM, fire)
    signal.setitimer(signal.ITIMER_REAL, seconds)
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, old)


def parse_or_error(
    parse: Callable[[], T], errors: type[DLogError] | tuple[type[DLogError], ...]
) -> T | None:
    """The parsed value, or None when ``parse`` raised one of ``errors`` with
    a message. Any other exception (or a hang) fails the test."""
    try:
        with time_limit():
            return parse()
    except errors as e:
        assert str(e).strip(), f"{type(e).__name__} without a message"
        return None


# ---------------------------------------------------------------------------
# mutations
# ---------------------------------------------------------------------------


@st.composite
def mutated(draw: st.DrawFn, valid: bytes, other: bytes = b"") -> bytes:
    """``valid`` changed by one to three random edits."""
    data = bytearray(valid)
    for _ in range(draw(st.integers(1, 3))):
        kind = draw(
            st.sampled_from(
                ["flip", "byte", "truncate", "insert", "delete", "splice", "append", "dup"]
            )
        )
        n = len(data)
        if kind == "flip" and n:
            i = draw(st.integers(0, n - 1))
            data[i] ^= 1 << draw(st.integers(0, 7))
        elif kind == "byte" and n:
            data[draw(st.integers(0, n - 1))] = draw(st.integers(0, 255))
        elif kind == "truncate":
            del data[draw(st.integers(0, n)) :]
        elif kind == "insert":
            i = draw(st.integers(0, n))
            data[i:i] = draw(st.binary(min_size=1, max_size=8))
        elif kind == "delete" and n:
            i = draw(st.integers(0, n - 1))
            del data[i : i + draw(st.integers(1, 8))]
        elif kind == "splice":
            cut = draw(st.integers(0, n))
            donor = other or valid
            data = data[:cut] + donor[draw(st.integers(0, len(donor))) :]
        elif kind == "append":
            data += draw(st.binary(min_size=1, max_size=8))
        elif kind == "dup" and n:
            i = draw(st.integers(0, n - 1))
            data[i:i] = data[i : i + draw(st.integers(1, 16))]
    return bytes(data)


def mutations_of(valid: st.SearchStrategy[bytes]) -> st.SearchStrategy[tuple[bytes, bytes]]:
    """(original, mutated) pairs; splices take their donor from a second
    valid encoding."""
    return st.tuples(valid, valid).flatmap(
        lambda pair: st.tuples(st.just(pair[0]), mutated(pair[0], pair[1]))
    )


# ---------------------------------------------------------------------------
# ledger metadata (BookKeeper format 3, dlog's 4)
# ---------------------------------------------------------------------------

LEDGER_MD = metadatas().map(serialize)


def _ledger(data: bytes) -> LedgerMetadata | None:
    return parse_or_error(lambda: deserialize(data, 7), MetadataSerializationError)


@FUZZ
@given(st.binary(max_size=300) | st.binary(max_size=40).map(lambda b: jf_prefix(b)))
def test_ledger_metadata_random_bytes(data: bytes) -> None:
    """Random bytes (and random bytes after a valid header): a value that
    round-trips, or MetadataSerializationError."""
    md = _ledger(data)
    if md is not None:
        assert deserialize(serialize(md), 7) == md


def jf_prefix(body: bytes) -> bytes:
    return b"BookieMetadataFormatVersion\t3\n" + body


@FUZZ
@given(mutations_of(LEDGER_MD))
def test_ledger_metadata_mutations(pair: tuple[bytes, bytes]) -> None:
    """Mutated znode values. The message is length-delimited after the
    header, so a parse that succeeds consumed exactly the stated length; the
    value must re-serialize to bytes that parse to the same value. Protobuf
    has no checksum, so a flip inside a field's value can change the value
    undetectably; that is not asserted against."""
    _, data = pair
    md = _ledger(data)
    if md is not None:
        assert deserialize(serialize(md), 7) == md


@FUZZ_FEW
@given(LEDGER_MD, st.binary(min_size=1, max_size=16))
def test_ledger_metadata_truncation_and_trailing_bytes(valid: bytes, tail: bytes) -> None:
    """Every strict prefix and any trailing garbage are rejected: the header
    and the varint length say exactly how long the value is."""
    for cut in range(len(valid)):
        assert _ledger(valid[:cut]) is None, cut
    assert _ledger(valid + tail) is None


# ---------------------------------------------------------------------------
# segment metadata and the other stream znodes
# ---------------------------------------------------------------------------

SEGMENT = segments().map(lambda s: s.serialize())
SEGMENT_TEXT = st.text(alphabet="0123456789-;", max_size=120).map(lambda t: t.encode())


def _segment(data: bytes) -> LogSegmentMetadata | None:
    return parse_or_error(lambda: LogSegmentMetadata.parse(data), MetadataError)


@FUZZ
@given(st.binary(max_size=200) | SEGMENT_TEXT)
def test_segment_metadata_random_bytes(data: bytes) -> None:
    """The format is canonical text (decimal int64s joined by ``;``): a value
    parsed from any input serializes back to exactly that input, so no byte
    was ignored or reinterpreted."""
    seg = _segment(data)
    if seg is not None:
        assert seg.serialize() == data


@FUZZ
@given(mutations_of(SEGMENT))
def test_segment_metadata_mutations(pair: tuple[bytes, bytes]) -> None:
    """Mutations: rejected, or canonical (re-serializes to the same bytes).
    A mutation that turns one valid number into another (a digit flipped,
    ``;12`` cut to ``;1``) is undetectable: the format has no checksum or
    length. Canonicity still guarantees the parse means what the bytes say."""
    original, data = pair
    seg = _segment(data)
    if seg is not None:
        assert seg.serialize() == data
        if data != original:
            assert seg != LogSegmentMetadata.parse(original)


@FUZZ
@given(
    st.binary(max_size=40)
    | st.text(alphabet="0123456789-+ _", max_size=30).map(lambda t: t.encode())
    | st.integers(-(2**63), 2**63 - 1).map(encode_long).flatmap(lambda v: mutated(v))
)
@example(b"1" * 5000)  # int() of > 4300 digits raised a bare ValueError
def test_long_znodes(data: bytes) -> None:
    """``ledgers`` / ``maxtxid``: canonical decimal int64 (empty reads 0)."""
    value = parse_or_error(lambda: decode_long(data, "/s/maxtxid"), MetadataError)
    if value is not None:
        assert encode_long(value) == data or (data == b"" and value == 0)


BINDING = st.builds(
    NamespaceBinding,
    bk_zk_servers=st.sampled_from(["zk1:2181", "a:1,b:2"]),
    bk_ledgers_path=st.sampled_from(["/ledgers", "/bk/ledgers"]),
    dl_zk_servers=st.sampled_from(["zk1:2181", "c:3"]),
    sanity_check_txnid=st.booleans(),
    encode_region_id=st.booleans(),
    first_log_segment_seq_no=st.none() | st.integers(0, 2**63 - 1),
    federated_namespace=st.booleans(),
).map(lambda b: b.serialize())


@FUZZ
@given(mutations_of(BINDING) | st.binary(max_size=100).map(lambda b: (b"", b"1\nBKDL\n" + b)))
@example((b"", b"1\nBKDL\n" + b"[" * 100_000))  # json RecursionError escaped
@example((b"", b'1\nBKDL\n{"' + b"1" * 5000 + b'":1}'))  # int() of a huge field id
def test_namespace_binding(pair: tuple[bytes, bytes]) -> None:
    """The namespace znode (DLMetadata + thrift JSON BKDLConfig): a value or
    MetadataError; a parsed value round-trips. Thrift JSON is not canonical
    (unknown fields are skipped, as thrift does), so bytes need not match."""
    _, data = pair
    b = parse_or_error(lambda: NamespaceBinding.parse(data, "/ns"), MetadataError)
    if b is not None:
        assert NamespaceBinding.parse(b.serialize()) == b


# ---------------------------------------------------------------------------
# DLSNs and subscriber znodes
# ---------------------------------------------------------------------------

INT64 = st.integers(-(2**63), 2**63 - 1)
DLSNS = st.builds(DLSN, INT64, INT64, INT64)


@FUZZ
@given(mutations_of(DLSNS.map(lambda d: d.serialize_bytes())))
def test_dlsn_bytes_mutations(pair: tuple[bytes, bytes]) -> None:
    """Fixed-length versioned bytes: every length change is rejected; a
    value parsed from version-1 bytes re-serializes to the same bytes."""
    original, data = pair
    d = parse_or_error(lambda: DLSN.deserialize_bytes(data), InvalidDLSNError)
    if d is not None:
        assert len(data) == len(original) or data[0] == 0
        if data[0] == 1:
            assert d.serialize_bytes() == data


@FUZZ
@example((DLSN(0, 0, 0).serialize().encode(), b"\tAQAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA=="))
@given(mutations_of(DLSNS.map(lambda d: d.serialize().encode())))
def test_dlsn_text_mutations(pair: tuple[bytes, bytes]) -> None:
    """Base64 / ``DLSN{...}`` text: a parsed DLSN's canonical base64 parses
    back to it; canonical base64 input must be exactly what it re-encodes to
    (after the surrounding whitespace parse_dlsn ignores)."""
    _, data = pair
    text = data.decode("latin-1")
    d = parse_or_error(lambda: parse_dlsn(text), InvalidDLSNError)
    if d is not None:
        assert parse_dlsn(d.serialize()) == d
        typed = text.strip()
        if typed.endswith("="):
            assert d.serialize(version=data_version(typed)) == typed


def data_version(text: str) -> int:
    import base64

    return base64.b64decode(text)[0]


SUBSCRIPTION = st.builds(
    sf.SegmentSubscription,
    name=st.text(max_size=20),
    segment_id=st.none() | st.integers(0, 2**63 - 1),
    last_commit=DLSNS,
    next_segment_id=st.none() | st.integers(0, 2**63 - 1),
    previous_segment_id=st.none() | st.integers(0, 2**63 - 1),
)
SUB_RECORD = SUBSCRIPTION.map(sf.encode_segment_subscription)
ZK_POSITION = DLSNS.map(sf.encode_zk_position)


@FUZZ
@given(
    mutations_of(ZK_POSITION | SUB_RECORD),
    st.none() | SUB_RECORD | SUB_RECORD.flatmap(lambda r: mutated(r)),
)
def test_subscriber_znode_mutations(pair: tuple[bytes, bytes], record: bytes | None) -> None:
    """A subscriber znode (either store) with an optional ``segment`` child:
    a value or MetadataError naming the znode. A ZooKeeper position must be
    canonical base64 (it re-encodes to the same bytes); a record's value
    round-trips (protobuf: not canonical, no checksum, so a flipped value
    byte is undetectable)."""
    _, data = pair
    sub = parse_or_error(
        lambda: sf.decode_subscriber(data, record, "/s/subscribers/x"), MetadataError
    )
    if isinstance(sub, sf.ZkPosition):
        assert record is None
        assert sf.encode_zk_position(sub.position) == data or (
            data == b"" and sub.position == sf.NonInclusiveLowerBound
        )
    elif sub is not None:
        assert sf.decode_record(sf.encode_segment_subscription(sub), "x") == sub


@FUZZ
@given(st.binary(max_size=60) | mutations_of(DLSNS.map(sf.encode_commit)).map(lambda p: p[1]))
def test_subscription_commit_records(data: bytes) -> None:
    """An ``AdvanceLastCommitDLSN`` entry of a subscription segment."""
    d = parse_or_error(lambda: sf.decode_commit(data, "ledger 3 entry 4"), MetadataError)
    if d is not None:
        assert sf.decode_commit(sf.encode_commit(d), "x") == d


# ---------------------------------------------------------------------------
# records, record sets and entries
# ---------------------------------------------------------------------------

TXIDS = st.integers(0, 2**63 - 2)
PAYLOADS = st.binary(max_size=40)
RECORD = st.builds(
    lambda txid, payload, pos: encode_record(LogRecord(txid, payload), pos),
    TXIDS,
    PAYLOADS,
    st.integers(0, 2**31 - 1),
)


@FUZZ
@given(st.binary(max_size=80) | mutations_of(RECORD).map(lambda p: p[1]))
def test_log_record(data: bytes) -> None:
    """One LogRecord: its header states the payload length, so the format is
    canonical: a parsed record re-encodes to exactly the input (trailing
    bytes and short payloads are errors)."""
    got = parse_or_error(lambda: decode_record(data), InvalidRecordError)
    if got is not None:
        rec, pos = got
        assert encode_record(rec, pos) == data


@st.composite
def entries(draw: st.DrawFn, enveloped: bool = True) -> bytes:
    w = RecordSetWriter(
        compression=draw(st.sampled_from(["none", "lz4"])) if enveloped else "none",
        enveloped=enveloped,
    )
    for _ in range(draw(st.integers(0, 4))):
        if draw(st.booleans()):
            w.append(LogRecord(draw(TXIDS), draw(PAYLOADS)))
        else:
            members = draw(st.lists(PAYLOADS, max_size=4))
            w.append(LogRecord(draw(TXIDS), build_record_set(members), record_set=True))
    return w.build()


@FUZZ
@given(mutations_of(entries(enveloped=False)))
def test_raw_entry_records_are_canonical(pair: tuple[bytes, bytes]) -> None:
    """An entry without envelope is a sequence of length-framed records: a
    parse covers every byte, so re-encoding the records gives the input back;
    a record set member's bytes round-trip through build_record_set."""
    _, data = pair
    recs = parse_or_error(
        lambda: decode_entry(data, 1, 2, enveloped=False, expand_record_sets=False),
        InvalidRecordError,
    )
    if recs is None:
        return
    assert b"".join(encode_record(r, r.position) for r in recs) == data
    for r in recs:
        if r.record_set:
            members = parse_or_error(
                functools.partial(
                    decode_entry, encode_record(r, r.position), 1, 2, enveloped=False
                ),
                InvalidRecordError,
            )
            if members is not None:  # a set whose stored bytes hold its members exactly
                assert build_record_set([m.payload for m in members]) == r.payload


@FUZZ
@given(mutations_of(entries()))
def test_enveloped_entry_mutations(pair: tuple[bytes, bytes]) -> None:
    """Enveloped entries (LZ4 or not): InvalidRecordError or records; a
    decompressed size claim must not drive allocation (the parser caps it);
    what decodes re-encodes (uncompressed) to an entry with the same
    records. LZ4 and the envelope carry no checksum: a flip inside a payload
    is undetectable here (BookKeeper's entry digest catches it on read)."""
    _, data = pair
    recs = parse_or_error(lambda: decode_entry(data, 1, 2), InvalidRecordError)
    if recs is None:
        return
    raw = parse_or_error(
        lambda: decode_entry(data, 1, 2, expand_record_sets=False), InvalidRecordError
    )
    assert raw is not None
    if any(r.end_of_stream and r.txid != MAX_TXID for r in raw):
        # A flipped flag bit made an end-of-stream marker of an ordinary
        # record: readers take what is stored, but no writer can build it
        # (LogRecord refuses), so there is nothing to re-encode.
        return
    w = RecordSetWriter()
    w.extend(LogRecord(r.txid, r.payload, **_flags(r)) for r in raw)
    again = decode_entry(w.build(), 1, 2)
    assert [(r.txid, r.payload, r.dlsn, r.flags) for r in again] == [
        (r.txid, r.payload, r.dlsn, r.flags) for r in recs
    ]


def _flags(r: LogRecord) -> dict[str, bool]:
    return {"control": r.control, "end_of_stream": r.end_of_stream, "record_set": r.record_set}


# ---------------------------------------------------------------------------
# the cookie
# ---------------------------------------------------------------------------

COOKIE = st.builds(
    lambda host, j, dirs, inst: Cookie(host, j, encode_dirs(dirs), inst).encode(),
    st.text(min_size=1, max_size=12),
    st.text(max_size=12),
    st.lists(st.text(alphabet="/abc", max_size=6), max_size=3),
    st.none() | st.text(min_size=1, max_size=12),
)


@FUZZ
@given(mutations_of(COOKIE))
@example((b"", b'5_0\nbookieHost: "h"\njournalDir: "/j"\nledgerDirs: "1"\n'))  # read as 50
def test_cookie_mutations(pair: tuple[bytes, bytes]) -> None:
    """A cookie (``VERSION`` file or znode): InvalidCookieError or a cookie
    whose layout version was written as a plain decimal (BookKeeper's
    ``Integer.parseInt``) and that round-trips through encode (protobuf text
    is not canonical: whitespace and field order may differ)."""
    _, data = pair
    c = parse_or_error(lambda: Cookie.decode(data, "/d/VERSION"), InvalidCookieError)
    if c is None:
        return
    first = data.split(b"\n", 1)[0].strip(bytes(range(33)))
    assert first.lstrip(b"+-").isdigit() and int(first) == c.layout_version
    if c.layout_version > 3:
        assert Cookie.decode(c.encode(), "x") == c


# ---------------------------------------------------------------------------
# the journal: headers, meta-records, lastMark, replay scan
# ---------------------------------------------------------------------------


def _entry(ledger: int, entry: int, payload: bytes) -> bytes:
    return struct.pack(">qq", ledger, entry) + payload


@st.composite
def journals(draw: st.DrawFn) -> tuple[bytes, list[bytes], list[int]]:
    """(file bytes, records, end offset of each record) as the journal
    thread writes them: records in groups, each group padded to 512."""
    data = bytearray(jf.header_bytes())
    records: list[bytes] = []
    ends: list[int] = []
    for i in range(draw(st.integers(1, 8))):
        kind = draw(st.sampled_from(["entry", "entry", "key", "fence", "lac"]))
        if kind == "entry":
            rec = _entry(draw(st.integers(0, 5)), i, draw(st.binary(max_size=60)))
        elif kind == "key":
            rec = jf.ledger_key_record(draw(st.integers(0, 5)), draw(st.binary(max_size=20)))
        elif kind == "fence":
            rec = jf.fence_record(draw(st.integers(0, 5)))
        else:
            rec = jf.explicit_lac_record(draw(st.integers(0, 5)), draw(st.binary(max_size=20)))
        data += jf.frame_record(rec)
        records.append(rec)
        ends.append(len(data))
        if draw(st.booleans()):
            data += jf.padding_record(len(data), 512)
    data += bytes(draw(st.sampled_from([0, 4, 512])))
    return bytes(data), records, ends


def _scan(path: Path, data: bytes) -> list[bytes] | None:
    path.write_bytes(data)
    return parse_or_error(lambda: [r for _, r in jf.scan_journal(path)], CorruptedFileError)


def _replay_parse(record: bytes) -> None:
    """What the bookie's replay does with a record's bytes."""
    _, eid = jf.parse_ids(record)
    if eid in (jf.METAENTRY_ID_LEDGER_KEY, jf.METAENTRY_ID_LEDGER_EXPLICITLAC):
        jf.parse_meta_payload(record)


@settings(FUZZ, max_examples=40)
@given(journals(), st.lists(st.integers(0, 1 << 16), max_size=20))
def test_journal_truncated(
    tmp_path: Path, journal: tuple[bytes, list[bytes], list[int]], extra: list[int]
) -> None:
    """A journal cut (a crash) replays exactly the records that were
    complete before the cut, in order, and nothing else. Cuts: around every
    record's length field and end, inside the header, and random ones."""
    data, records, ends = journal
    path = tmp_path / "1.txn"
    starts = [jf.HEADER_SIZE] + ends
    cuts = {c + d for c in starts + ends for d in range(-1, 6)} | {e % len(data) for e in extra}
    for cut in sorted(c for c in cuts if jf.HEADER_SIZE <= c <= len(data)):
        got = _scan(path, data[:cut])
        assert got == records[: sum(1 for e in ends if e <= cut)], cut
    for cut in (0, 3, 4, 7, 8, 100, jf.HEADER_SIZE - 1):
        assert _scan(path, data[:cut]) in (None, [])


@FUZZ
@given(journals(), st.data())
def test_journal_corrupted(
    tmp_path: Path, journal: tuple[bytes, list[bytes], list[int]], data: st.DataObject
) -> None:
    """Corruption (flips, overwritten bytes) anywhere: the scan stops or
    raises CorruptedFileError, never crashes or hangs, and every record
    that ends before the first damaged byte is replayed unchanged. After the
    damage nothing can be promised: records are framed by length only, as in
    BookKeeper, so a length that now lands inside another record gives a
    record that was never written, and a flipped payload byte goes unseen
    (the entry's digest, checked by the client, is what catches those). The
    meta-record parsers applied to whatever comes out only raise
    CorruptedFileError."""
    raw, records, ends = journal
    corrupt = bytearray(raw)
    first = len(raw)
    for _ in range(data.draw(st.integers(1, 4))):
        i = data.draw(st.integers(jf.HEADER_SIZE, len(raw) - 1))
        corrupt[i] ^= data.draw(st.integers(1, 255))  # never a no-op
        first = min(first, i)
    path = tmp_path / "1.txn"
    got = _scan(path, bytes(corrupt))
    intact = sum(1 for e in ends if e <= first)
    if got is not None:
        assert got[:intact] == records[:intact]
        for rec in got:
            parse_or_error(functools.partial(_replay_parse, rec), CorruptedFileError)


@FUZZ
@given(st.binary(max_size=40) | mutations_of(st.just(jf.header_bytes())).map(lambda p: p[1]))
def test_journal_header(data: bytes) -> None:
    """A header is accepted only with the magic and a known version; the
    first record offset is then 8 (before V5) or 512."""
    off = parse_or_error(lambda: jf.check_header(data, Path("x.txn")), CorruptedFileError)
    if off is not None:
        version = struct.unpack_from(">i", data, 4)[0]
        assert data[:4] == jf.MAGIC and 1 <= version <= jf.VERSION
        assert off == (512 if version >= 5 else 8)


@FUZZ
@given(
    st.binary(max_size=60)
    | st.builds(jf.ledger_key_record, st.integers(0, 9), PAYLOADS).flatmap(lambda r: mutated(r))
    | st.builds(jf.explicit_lac_record, st.integers(0, 9), PAYLOADS).flatmap(lambda r: mutated(r))
)
@example(jf.ledger_key_record(1, b"key") + b"junk")  # trailing bytes were ignored
def test_journal_meta_records(record: bytes) -> None:
    """Ledger-key and explicit-LAC records carry a length-prefixed payload
    that must fill the record exactly (BookKeeper writes nothing after it):
    a parsed payload re-frames to the input."""
    ids = parse_or_error(lambda: jf.parse_ids(record), CorruptedFileError)
    payload = parse_or_error(lambda: jf.parse_meta_payload(record), CorruptedFileError)
    if payload is not None:
        assert ids is not None
        assert record[:16] + struct.pack(">i", len(payload)) + payload == record


@FUZZ
@given(st.binary(max_size=40))
def test_last_mark(data: bytes) -> None:
    """lastMark is exactly two longs; anything else is CorruptedFileError."""
    mark = parse_or_error(lambda: jf.LogMark.from_bytes(data), CorruptedFileError)
    if mark is not None:
        assert mark.to_bytes() == data


# ---------------------------------------------------------------------------
# entry logs: header, the replay/GC scan, the ledgers map
# ---------------------------------------------------------------------------


@st.composite
def entry_logs(draw: st.DrawFn) -> tuple[list[tuple[int, bytes]], bool]:
    items = draw(
        st.lists(st.tuples(st.integers(0, 4), st.binary(max_size=50)), min_size=1, max_size=8)
    )
    return items, draw(st.booleans())


def _write_entry_log(
    d: Path, items: list[tuple[int, bytes]], seal: bool
) -> tuple[el.EntryLogger, Path, list[tuple[int, int, bytes]]]:
    logger = el.EntryLogger([d])
    f = logger.create_log()
    written = []
    for i, (lid, payload) in enumerate(items):
        entry = _entry(lid, i, payload)
        f.add(lid, entry)
        written.append((lid, i, entry))
    f.flush()
    if seal:
        f.seal()
    else:
        f.close_unsealed()
    return logger, logger.path_of(f.log_id), written


def _scan_log(logger: el.EntryLogger, log_id: int) -> list[tuple[int, int, bytes]] | None:
    def run() -> list[tuple[int, int, bytes]]:
        out = []
        for lid, eid, loc, size in logger.scan(log_id):
            out.append((lid, eid, logger.read_entry(loc, lid, eid)))
            assert len(out[-1][2]) == size
        return out

    return parse_or_error(run, CorruptedFileError)


@FUZZ_FEW
@given(entry_logs(), st.data())
def test_entry_log_corrupted(
    tmp_path_factory: pytest.TempPathFactory,
    log: tuple[list[tuple[int, bytes]], bool],
    data: st.DataObject,
) -> None:
    """An entry log truncated or with damaged bytes: the scan (replay, GC
    extraction) yields the entries written before the damage unchanged and
    then stops or raises CorruptedFileError; the ledgers map of a sealed log
    is read exactly or rejected. Records have no checksum (BookKeeper's
    layout), so a damaged length that lands inside another record, or a
    damaged payload byte, is not detectable by the scan."""
    items, seal = log
    d = tmp_path_factory.mktemp("el")
    logger, path, written = _write_entry_log(d, items, seal)
    try:
        log_id = int(path.name[:-4], 16)
        assert _scan_log(logger, log_id) == written
        expected_map = logger.read_ledgers_map(log_id)
        good = path.read_bytes()
        end_of_entries = el.HEADER_SIZE + sum(4 + len(e) for _, _, e in written)
        bad = bytearray(good)
        if data.draw(st.booleans()):
            cut = data.draw(st.integers(el.HEADER_SIZE, len(good)))
            del bad[cut:]
            first = cut
        else:
            first = len(good)
            for _ in range(data.draw(st.integers(1, 3))):
                i = data.draw(st.integers(0, len(good) - 1))
                bad[i] ^= 1 << data.draw(st.integers(0, 7))
                first = min(first, i)
        path.write_bytes(bytes(bad))
        logger.close()
        logger = el.EntryLogger([d])
        got = _scan_log(logger, log_id)
        if seal and first < end_of_entries and len(bad) < len(good):
            assert got is None, "a sealed log cut short scanned without an error"
        if first >= el.HEADER_SIZE and got is not None:
            offset = el.HEADER_SIZE
            intact = 0
            for _, _, e in written:
                offset += 4 + len(e)
                if offset > min(first, end_of_entries):
                    break
                intact += 1
            assert got[:intact] == written[:intact]
        m = parse_or_error(lambda: logger.read_ledgers_map(log_id), CorruptedFileError)
        if first >= len(good):  # nothing damaged (a cut at the very end)
            assert m == expected_map
    finally:
        logger.close()


@pytest.mark.parametrize("damage", ["cut", "zero-length", "negative-length", "map-offset"])
def test_sealed_entry_log_damage_is_reported(tmp_path: Path, damage: str) -> None:
    """Regression: a sealed log whose scan stopped early (a record length
    zeroed, negative, or the file cut short) ended quietly, so a compaction
    copied the entries before the damage and then removed the log with the
    live entries after it. The entries end where the map starts: any other
    end is CorruptedFileError. And a header whose map offset lies past the
    file (bit 56 flipped) made reading the map raise a bare OSError (EINVAL
    from seek)."""
    logger, path, written = _write_entry_log(tmp_path, [(1, b"a" * 10)] * 3, True)
    log_id = int(path.name[:-4], 16)
    data = bytearray(path.read_bytes())
    second = el.HEADER_SIZE + 4 + len(written[0][2])
    if damage == "cut":
        del data[second:]
    elif damage == "map-offset":
        data[8] ^= 1
    else:
        data[second : second + 4] = struct.pack(">i", 0 if damage == "zero-length" else -7)
    path.write_bytes(bytes(data))
    logger.close()
    logger = el.EntryLogger([tmp_path])
    try:
        with pytest.raises(CorruptedFileError, match="ledgers map"):
            list(logger.scan(log_id))
        if damage in ("cut", "map-offset"):
            with pytest.raises(CorruptedFileError, match="ledgers map"):
                logger.read_ledgers_map(log_id)
    finally:
        logger.close()


@FUZZ
@example(struct.pack(">4siqi", b"BKLO", 1, -5, 0))  # negative map offset was accepted
@example(struct.pack(">4siqi", b"BKLO", 1, 2048, -1))  # and a negative count
@given(
    st.binary(max_size=40)
    | mutations_of(st.builds(el.header_bytes, st.integers(0, 2**40), st.integers(0, 2**20))).map(
        lambda p: p[1]
    )
)
def test_entry_log_header(data: bytes) -> None:
    """An entry log header: magic, version 1 and a ledgers map offset and
    count that are not negative (BookKeeper never writes one), or
    CorruptedFileError."""
    got = parse_or_error(lambda: el.parse_header(data, "x.log"), CorruptedFileError)
    if got is not None:
        assert el.header_bytes(*got)[:20] == data[:20]
        assert got[0] >= 0 and got[1] >= 0
