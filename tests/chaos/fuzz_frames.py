"""A wire-frame fuzzer for a live bookie (BookKeeper v3: a 4-byte big-endian
length, then a protobuf ``Request``).

Every generated piece says what the bookie must do with it, so a run checks
behaviour and not only survival:

* ``ok``: a frame the bookie decodes and answers with exactly one response
  (EBADREQ, EUA, ENOLEDGER... or a real result), the connection stays usable;
* ``close``: a violation (oversize or negative length, undecodable
  protobuf) after which the bookie answers what it read before and closes;
* ``unknown``: a mutated frame that is either of the two;
* ``desync``: bytes after which the framing is lost (random bytes, a
  truncated frame followed by more frames, a splice of two frames);
* ``eof``: a truncated frame, then the client closes its side.

Nothing here may change a stored entry: writes to ledgers the fuzzer does
not own (``targets``) carry a wrong master key. Requests that create a
ledger on the bookie (a passing add, a fence read, a WRITE_LAC) use ids in
:data:`OWN_LEDGER_BASE` and up only, so a fuzzed bookie can keep serving a
real cluster whose ledger ids are small; mutation templates never include
them, because a flipped bit could turn an id into a small one.

``python tests/chaos/fuzz_frames.py --host H --port P --frames N --seed S``
runs :func:`fuzz_bookie` and prints its stats as JSON.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import random
import struct
import sys
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from dlog.errors import EOK
from dlog.ledger.bookie_client import BookieClient
from dlog.ledger.digest import CRC32C, DigestManager
from dlog.protocol import bookkeeper_pb2 as pb
from dlog.protocol import messages as m
from dlog.protocol.frame import DEFAULT_MAX_FRAME_SIZE, FrameDecoder

__all__ = [
    "KINDS",
    "OWN_LEDGER_BASE",
    "ConnectionResult",
    "expected_responses",
    "Piece",
    "FrameFuzzer",
    "afuzz_bookie",
    "acheck_bookie_intact",
    "check_bookie_intact",
    "fuzz_bookie",
    "rss_kb",
    "send_interleaving",
]

#: Ledger ids the fuzzer may create: seven high bits set, so no single bit
#: flip makes one small (the ids ZooKeeper hands out to real ledgers).
OWN_LEDGER_BASE = 0x7F00_0000_0000_0000
#: Ledger ids read (never written) when the caller names no targets.
READ_IDS = tuple(range(1, 33))
#: Claimed lengths over any sane nettyMaxFrameSizeBytes.
OVERSIZE_LENGTHS = (2**31 - 1, 2**31 - 2, 2**30, 0x7FFF0000, 1 << 28, DEFAULT_MAX_FRAME_SIZE * 4)
I64_EDGES = (0, 1, -1, -2, 2**63 - 1, -(2**63), 2**62, 2**32, -(2**31), 2**31 - 1)

OK, CLOSE, UNKNOWN, DESYNC, EOF = "ok", "close", "unknown", "desync", "eof"


@dataclass(frozen=True)
class Piece:
    """Bytes to write and what the bookie must do with them."""

    kind: str
    data: bytes
    effect: str


def frame(payload: bytes) -> bytes:
    return len(payload).to_bytes(4, "big") + payload


def _varint(value: int) -> bytes:
    if value < 0:
        value += 1 << 64
    out = bytearray()
    while value >= 0x80:
        out.append((value & 0x7F) | 0x80)
        value >>= 7
    out.append(value)
    return bytes(out)


def _field(number: int, wire: int) -> bytes:
    return _varint((number << 3) | wire)


def _ld(number: int, data: bytes) -> bytes:
    """A length-delimited field."""
    return _field(number, 2) + _varint(len(data)) + data


def raw_header(version: int, operation: int, txn: int, *, priority: int | None = None) -> bytes:
    """A BKPacketHeader built by hand, so enum values protobuf would refuse
    to set (unknown operations and versions) can be sent."""
    body = _field(1, 0) + _varint(version) + _field(2, 0) + _varint(operation)
    body += _field(3, 0) + _varint(txn)
    if priority is not None:
        body += _field(4, 0) + _varint(priority)
    return _ld(1, body)


def rss_kb(pid: int) -> tuple[int, int]:
    """(VmRSS, VmHWM) of ``pid`` in KiB."""
    rss = hwm = 0
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                rss = int(line.split()[1])
            elif line.startswith("VmHWM:"):
                hwm = int(line.split()[1])
    return rss, hwm


class FrameFuzzer:
    """Seeded generator of pieces; ``max_frame_size`` is the bookie's
    nettyMaxFrameSizeBytes (oversize lengths are chosen above it)."""

    def __init__(
        self,
        seed: int,
        *,
        targets: Sequence[int] = (),
        max_frame_size: int = DEFAULT_MAX_FRAME_SIZE,
        big_frames: bool = False,
    ) -> None:
        self.rng = random.Random(seed)
        #: Written to with wrong keys: they must exist on the bookie already,
        #: or the first such write would create them with the fuzzer's key.
        self.targets = tuple(targets)
        self.read_ids = self.targets or READ_IDS
        self.max_frame_size = max_frame_size
        self.big_frames = big_frames
        self.txn = 0
        self._own_key = self.rng.randbytes(20)
        rng = self.rng
        self.generators: dict[str, Callable[[], Piece]] = {
            "zero_length": self.zero_length,
            "no_header": self.no_header,
            "wrong_body": self.wrong_body,
            "unknown_operation": self.unknown_operation,
            "bad_version": self.bad_version,
            "absurd_read": self.absurd_read,
            "absurd_add": self.absurd_add,
            "wrong_key_write": self.wrong_key_write,
            "own_ledger": self.own_ledger,
            "misc_request": self.misc_request,
            "unknown_fields": self.unknown_fields,
            "random_payload": self.random_payload,
            "bad_protobuf": self.bad_protobuf,
            "oversize_length": self.oversize_length,
            "negative_length": self.negative_length,
            "mutated": self.mutated,
            "truncated_eof": self.truncated_eof,
            "truncated_more": self.truncated_more,
            "random_bytes": self.random_bytes,
            "splice": self.splice,
        }
        # Frames the bookie answers; drawn most often in long runs.
        self.answered = [
            "zero_length",
            "no_header",
            "wrong_body",
            "unknown_operation",
            "bad_version",
            "absurd_read",
            "absurd_add",
            "wrong_key_write",
            "own_ledger",
            "misc_request",
            "unknown_fields",
        ]
        self.breaking = [k for k in self.generators if k not in self.answered]
        self._rand = rng.random

    # -- helpers -------------------------------------------------------------------
    def next_txn(self) -> int:
        self.txn += 1
        return self.txn if self._rand() < 0.9 else self.rng.choice((0, 2**64 - 1, 2**63))

    def i64(self) -> int:
        r = self._rand()
        if r < 0.4:
            return self.rng.choice(I64_EDGES)
        if r < 0.7:
            return self.rng.randrange(-1000, 100_000)
        return self.rng.randrange(-(2**63), 2**63)

    def entry_body(self, ledger: int, entry: int, size: int = 32) -> bytes:
        """An entry body that passes the bookie's id check (ledger, entry, LAC first)."""
        return struct.pack(">qqq", ledger, entry, entry - 1) + self.rng.randbytes(size)

    def own_ledger_id(self) -> int:
        return OWN_LEDGER_BASE + self.rng.randrange(64)

    def template(self) -> bytes:
        """A valid request payload for mutation: none of them can create a
        ledger (see the module docstring)."""
        rng = self.rng
        txn = self.next_txn()
        r = rng.randrange(6)
        lid = rng.choice(self.read_ids) if rng.random() < 0.5 else self.i64()
        if r == 0:
            return m.read_request(txn, lid, self.i64()).SerializeToString()
        if r == 1:
            # Wrong ids in the body: refused before any ledger is looked at.
            return m.encode_add_request(txn, lid, 5, b"k", b"\0" * 24 + rng.randbytes(8))
        if r == 2:
            return m.read_lac_request(txn, lid).SerializeToString()
        if r == 3:
            return m.list_of_entries_request(txn, lid).SerializeToString()
        if r == 4:
            return m.force_ledger_request(txn, lid).SerializeToString()
        return m.bookie_info_request(txn).SerializeToString()

    # -- answered frames ---------------------------------------------------------------
    def zero_length(self) -> Piece:
        return Piece("zero_length", b"\0\0\0\0", OK)

    def no_header(self) -> Piece:
        body = m.read_request(1, 1, 1).readRequest.SerializeToString()
        return Piece("no_header", frame(_ld(100, body)), OK)

    def wrong_body(self) -> Piece:
        """A valid header whose body is another operation's, or missing."""
        rng = self.rng
        op = rng.choice(list(m.OP_FIELDS))
        others = [f for o, (f, _) in m.OP_FIELDS.items() if o != op]
        header = pb.BKPacketHeader(txnId=self.next_txn())
        header.version = m.VERSION_THREE
        header.operation = op  # type: ignore[assignment]  # any operation, by design
        req = pb.Request(header=header)
        if rng.random() < 0.7:
            name = rng.choice(others)
            sub = getattr(req, name)
            sub.SetInParent()
            for f in sub.DESCRIPTOR.fields:
                if f.type == f.TYPE_BYTES:
                    setattr(sub, f.name, rng.randbytes(rng.randrange(8)))
                elif (
                    f.type in (f.TYPE_INT64, f.TYPE_INT32, f.TYPE_UINT64) and f.name != "requested"
                ):
                    setattr(sub, f.name, rng.randrange(1000))
        payload = req.SerializePartialToString()
        # AUTH and START_TLS are answered EBADREQ with or without a body.
        return Piece("wrong_body", frame(payload), OK)

    def unknown_operation(self) -> Piece:
        op = self.rng.choice((0, 11, 12, 99, 2**31 - 1, 2**32 + 1, 2**63))
        payload = raw_header(3, op, self.next_txn()) + _ld(100, b"\x08\x01\x10\x01")
        return Piece("unknown_operation", frame(payload), OK)

    def bad_version(self) -> Piece:
        version = self.rng.choice((0, 1, 2, 4, 255, 2**40))
        req = m.read_request(0, self.rng.choice(self.read_ids), 0).readRequest.SerializeToString()
        payload = raw_header(version, m.READ_ENTRY, self.next_txn()) + _ld(100, req)
        return Piece("bad_version", frame(payload), OK)

    def absurd_read(self) -> Piece:
        rng = self.rng
        lid = rng.choice(self.read_ids) if rng.random() < 0.3 else self.i64()
        req = m.read_request(self.next_txn(), lid, self.i64())
        rr = req.readRequest
        r = rng.random()
        if r < 0.2:
            rr.flag = m.ENTRY_PIGGYBACK
        if 0.2 <= r < 0.35:
            # A long poll with a short timeout: answered soon, on any ledger.
            rr.previousLAC = self.i64()
            rr.timeOut = rng.choice((0, 1, 5, -1, -(2**63)))
        if 0.35 <= r < 0.5 and lid in self.targets:
            # A fence with a wrong key on a ledger the fuzzer does not own.
            rr.flag = m.FENCE_LEDGER
            rr.masterKey = rng.choice((b"", rng.randbytes(20)))
        if 0.5 <= r < 0.55:
            rr.flag = m.FENCE_LEDGER  # fence without a key
        return Piece("absurd_read", frame(req.SerializeToString()), OK)

    def absurd_add(self) -> Piece:
        """Adds the bookie refuses before touching a ledger: bodies whose ids
        do not match, negative entries, short bodies, empty keys."""
        rng = self.rng
        lid, eid = self.i64(), self.i64()
        r = rng.randrange(4)
        if r == 0:
            body = rng.randbytes(rng.randrange(24))
        elif r == 1:
            body = struct.pack(">qq", lid, eid ^ 1) + rng.randbytes(16)
        elif r == 2:
            eid = -rng.randrange(1, 2**63)
            body = struct.pack(">qqq", lid, eid, 0)
        else:
            body = b""
        key = rng.choice((b"", rng.randbytes(rng.randrange(64))))
        payload = m.encode_add_request(self.next_txn(), lid, eid, key, body, rng.random() < 0.2)
        return Piece("absurd_add", frame(payload), OK)

    def wrong_key_write(self) -> Piece:
        """A well-formed write to a ledger the fuzzer does not own, with a
        wrong key: an add (over a stored entry or past the last), a
        recovery add, WRITE_LAC or WRITE_CLOSE. All must be refused."""
        rng = self.rng
        if not self.targets:
            return self.absurd_add()
        lid = rng.choice(self.targets)
        key = rng.choice((b"", rng.randbytes(20), b"\0" * 20))
        txn = self.next_txn()
        r = rng.randrange(4)
        if r <= 1:
            eid = rng.randrange(200)
            payload = m.encode_add_request(txn, lid, eid, key, self.entry_body(lid, eid), r == 1)
        elif r == 2:
            lac = rng.choice((2**63 - 1, 10**6, 0))
            body = struct.pack(">qq", lid, lac)
            payload = m.write_lac_request(txn, lid, lac, key, body).SerializeToString()
        else:
            payload = m.write_close_request(txn, lid, key).SerializeToString()
        return Piece("wrong_key_write", frame(payload), OK)

    def own_ledger(self) -> Piece:
        """Real writes and fences on the fuzzer's own ledgers."""
        rng = self.rng
        lid = self.own_ledger_id()
        txn = self.next_txn()
        r = rng.random()
        if r < 0.6:
            eid = rng.randrange(4096)
            body = self.entry_body(lid, eid, rng.randrange(64))
            payload = m.encode_add_request(txn, lid, eid, self._own_key, body)
        elif r < 0.8:
            payload = m.read_request(
                txn, lid, rng.randrange(-1, 4096), fence=True, master_key=self._own_key
            ).SerializeToString()
        else:
            lac = rng.randrange(-1, 4096)
            body = struct.pack(">qq", lid, lac)
            payload = m.write_lac_request(txn, lid, lac, self._own_key, body).SerializeToString()
        return Piece("own_ledger", frame(payload), OK)

    def misc_request(self) -> Piece:
        rng = self.rng
        txn = self.next_txn()
        lid = rng.choice(self.read_ids) if rng.random() < 0.4 else self.i64()
        r = rng.randrange(6)
        if r == 0:
            req = m.read_lac_request(txn, lid)
        elif r == 1:
            req = m.list_of_entries_request(txn, lid)
        elif r == 2:
            req = m.force_ledger_request(txn, lid)
        elif r == 3:
            req = m.bookie_info_request(txn)
            req.getBookieInfoRequest.requested = self.i64()
        elif r == 4:
            req = pb.Request(
                header=pb.BKPacketHeader(version=m.VERSION_THREE, operation=m.START_TLS, txnId=txn),
                startTLSRequest=pb.StartTLSRequest(),
            )
        else:
            req = pb.Request(
                header=pb.BKPacketHeader(version=m.VERSION_THREE, operation=m.AUTH, txnId=txn),
                authRequest=pb.AuthMessage(authPluginName="x", payload=rng.randbytes(8)),
            )
        payload = req.SerializeToString()
        if self.big_frames and rng.random() < 0.02:
            # A large frame under the limit: an unknown field pads it.
            payload += _ld(1000, bytes(rng.randrange(self.max_frame_size // 2)))
        return Piece("misc_request", frame(payload), OK)

    def unknown_fields(self) -> Piece:
        """A valid request padded with unknown fields, context pairs, a
        header priority, or nested unknown groups."""
        rng = self.rng
        payload = self.template()
        r = rng.randrange(4)
        if r == 0:
            payload += _ld(rng.randrange(300, 5000), rng.randbytes(rng.randrange(32)))
        elif r == 1:
            pairs = b"".join(
                _ld(200, _ld(1, b"k%d" % i) + _ld(2, rng.randbytes(4)))
                for i in range(rng.randrange(1, 50))
            )
            payload += pairs
        elif r == 2:
            payload += raw_header(3, m.READ_ENTRY, self.next_txn(), priority=2**32 - 1)
            payload += _ld(100, b"\x08\x01\x10\x01")
        else:
            depth = rng.randrange(1, 40)  # below protobuf's recursion limit
            payload += _field(1000, 3) * depth + _field(1000, 4) * depth
        return Piece("unknown_fields", frame(payload), OK)

    # -- frames that break the connection ------------------------------------------------
    def random_payload(self) -> Piece:
        """Random bytes, correctly framed: usually undecodable, sometimes a
        request with unknown fields only (answered EBADREQ)."""
        payload = self.rng.randbytes(self.rng.randrange(1, 200))
        try:
            pb.Request.FromString(payload)
        except Exception:
            return Piece("random_payload", frame(payload), CLOSE)
        return Piece("random_payload", frame(payload), OK)

    def bad_protobuf(self) -> Piece:
        rng = self.rng
        valid = self.template()
        choices = (
            b"\x0a\xff\xff\xff\xff\x0f",  # a length past the end
            b"\x08\xff",  # a truncated varint
            b"\x0f",  # wire type 7
            b"\x0c",  # an end-group with no start
            b"\x00",  # field number 0
            _field(1000, 3) * 200,  # unterminated, nested past the limit
            valid[: rng.randrange(1, max(2, len(valid)))],  # a valid request cut short
            valid + b"\x0a",  # a trailing tag with no value
        )
        payload = rng.choice(choices)
        try:
            pb.Request.FromString(payload)
        except Exception:
            return Piece("bad_protobuf", frame(payload), CLOSE)
        return Piece("bad_protobuf", frame(payload), UNKNOWN)

    def oversize_length(self) -> Piece:
        rng = self.rng
        size = rng.choice((*OVERSIZE_LENGTHS, self.max_frame_size + 1))
        size = max(size, self.max_frame_size + 1)
        return Piece(
            "oversize_length",
            struct.pack(">i", min(size, 2**31 - 1)) + rng.randbytes(rng.randrange(64)),
            CLOSE,
        )

    def negative_length(self) -> Piece:
        rng = self.rng
        size = rng.choice((-1, -(2**31), -4, -rng.randrange(1, 2**31)))
        return Piece(
            "negative_length", struct.pack(">i", size) + rng.randbytes(rng.randrange(16)), CLOSE
        )

    def mutated(self) -> Piece:
        """Bit flips, byte overwrites, insertions or deletions in a valid
        frame; those that touch the length prefix lose the framing."""
        rng = self.rng
        data = bytearray(frame(self.template()))
        touched_length = False
        for _ in range(rng.randrange(1, 4)):
            op = rng.randrange(4)
            pos = rng.randrange(len(data))
            if op == 0:
                data[pos] ^= 1 << rng.randrange(8)
            elif op == 1:
                data[pos] = rng.randrange(256)
            elif op == 2:
                data[pos:pos] = rng.randbytes(rng.randrange(1, 4))
                touched_length = True
            else:
                del data[pos : pos + rng.randrange(1, 4)]
                touched_length = True
            touched_length = touched_length or pos < 4
        out = bytes(data)
        if not touched_length and len(out) >= 4:
            payload = out[4:]
            try:
                pb.Request.FromString(payload)
            except Exception:
                return Piece("mutated", out, CLOSE)
            return Piece("mutated", out, OK)
        return Piece("mutated", out, DESYNC)

    def truncated_eof(self) -> Piece:
        """A length that promises more than is ever sent, then EOF."""
        rng = self.rng
        whole = frame(self.template())
        claimed = rng.choice((len(whole) - 4 + rng.randrange(1, 100), self.max_frame_size))
        cut = whole[4 : 4 + rng.randrange(len(whole) - 4)]
        return Piece("truncated_eof", struct.pack(">i", claimed) + cut, EOF)

    def truncated_more(self) -> Piece:
        """A length that promises more than this frame holds: the frames
        that follow become its payload."""
        rng = self.rng
        whole = frame(self.template())
        claimed = len(whole) - 4 + rng.randrange(1, 300)
        return Piece("truncated_more", struct.pack(">i", claimed) + whole[4:], DESYNC)

    def random_bytes(self) -> Piece:
        return Piece("random_bytes", self.rng.randbytes(self.rng.randrange(1, 300)), DESYNC)

    def splice(self) -> Piece:
        a, b = frame(self.template()), frame(self.template())
        i, j = self.rng.randrange(len(a)), self.rng.randrange(len(b))
        return Piece("splice", a[:i] + b[j:], DESYNC)

    # -- drawing ----------------------------------------------------------------------
    def piece(self, kind: str | None = None) -> Piece:
        if kind is None:
            kind = self.rng.choice(self.answered)
        return self.generators[kind]()

    def breaking_piece(self) -> Piece:
        return self.generators[self.rng.choice(self.breaking)]()


KINDS = tuple(FrameFuzzer(0).generators)


# ---------------------------------------------------------------------------
# One connection: an interleaving of pieces
# ---------------------------------------------------------------------------


@dataclass
class ConnectionResult:
    """What one connection saw. ``closed_by_bookie``: the bookie closed
    before the client sent EOF; ``hung``: it did not close in time."""

    responses: int = 0
    bad_responses: int = 0
    closed_by_bookie: bool = False
    hung: bool = False
    reset: bool = False
    statuses: list[int] = field(default_factory=list)


def expected_responses(pieces: Sequence[Piece]) -> tuple[int, bool]:
    """(n, exact): the bookie answers the ``ok`` pieces before the first
    other one (exactly so if that one is a ``close``, the last piece and an
    ``eof``, or there is none; at least so otherwise)."""
    n = 0
    for i, p in enumerate(pieces):
        if p.effect != OK:
            # Frames after a truncated one complete it: then it is a desync.
            return n, p.effect == CLOSE or (p.effect == EOF and i == len(pieces) - 1)
        n += 1
    return n, True


async def send_interleaving(
    host: str,
    port: int,
    pieces: Sequence[Piece],
    *,
    close_timeout: float = 15.0,
    decode: bool = True,
) -> ConnectionResult:
    """Send ``pieces`` on one connection, half-close, and read until the
    bookie closes. Every response is decoded when ``decode``."""
    reader, writer = await asyncio.open_connection(host, port)
    result = ConnectionResult()
    decoder = FrameDecoder(64 * 1024 * 1024)
    eof_sent = False

    async def read_all() -> None:
        while True:
            try:
                data = await reader.read(1 << 20)
            except (ConnectionResetError, BrokenPipeError):
                result.reset = True
                data = b""
            if not data:
                result.closed_by_bookie = not eof_sent
                return
            for payload in decoder.feed(data):
                result.responses += 1
                if decode:
                    try:
                        resp = pb.Response.FromString(bytes(payload))
                        result.statuses.append(resp.status)
                    except Exception:
                        result.bad_responses += 1

    reading = asyncio.create_task(read_all())
    try:
        first_other = next((p.effect for p in pieces if p.effect != OK), None)
        chunk: list[bytes] = []
        for i, p in enumerate(pieces):
            chunk.append(p.data)
            if len(chunk) >= 64 or i == len(pieces) - 1:
                writer.write(b"".join(chunk))
                chunk = []
                await writer.drain()
            if reading.done():
                break
        if first_other == CLOSE:
            # A violation with the framing intact: the bookie must close
            # on its own, without our EOF.
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(asyncio.shield(reading), close_timeout)
            if not reading.done():
                result.hung = True
        with contextlib.suppress(OSError):
            await writer.drain()
            eof_sent = True
            writer.write_eof()
        try:
            await asyncio.wait_for(asyncio.shield(reading), close_timeout)
        except TimeoutError:
            result.hung = True
    except (ConnectionResetError, BrokenPipeError):
        result.reset = True
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(asyncio.shield(reading), close_timeout)
    finally:
        reading.cancel()
        writer.close()
        with contextlib.suppress(Exception):
            await writer.wait_closed()
    return result


# ---------------------------------------------------------------------------
# The long run
# ---------------------------------------------------------------------------


async def afuzz_bookie(
    host: str,
    port: int,
    *,
    frames: int,
    seed: int,
    pid: int | None = None,
    connections: int = 4,
    targets: Sequence[int] = (),
    max_frame_size: int = DEFAULT_MAX_FRAME_SIZE,
    close_timeout: float = 15.0,
) -> dict[str, Any]:
    """See :func:`fuzz_bookie`."""
    stats: dict[str, Any] = {
        "frames": 0,
        "responses": 0,
        "bad_responses": 0,
        "connections": 0,
        "connections_closed_by_bookie": 0,
        "connections_reset": 0,
        "hung_connections": 0,
        "by_kind": {},
    }
    by_kind: dict[str, int] = stats["by_kind"]
    rss_peak = 0
    if pid is not None:
        before, _ = rss_kb(pid)
        stats["rss_before_kb"] = before
        rss_peak = before

    async def sample_rss() -> None:
        nonlocal rss_peak
        assert pid is not None
        while True:
            rss_peak = max(rss_peak, rss_kb(pid)[0])
            await asyncio.sleep(0.2)

    async def worker(n: int) -> None:
        fz = FrameFuzzer(seed * 1000 + n, targets=targets, max_frame_size=max_frame_size)
        rng = fz.rng
        while stats["frames"] < frames:
            # A connection's life: answered frames in bursts, then (mostly)
            # one that breaks it, then (sometimes) more frames after it.
            life = min(int(rng.expovariate(1 / 800)) + 1, frames - stats["frames"])
            pieces = [fz.piece() for _ in range(life)]
            if rng.random() < 0.8:
                pieces.append(fz.breaking_piece())
                pieces.extend(fz.piece() for _ in range(rng.randrange(4)))
            expected, exact = expected_responses(pieces)
            res = await send_interleaving(
                host, port, pieces, close_timeout=close_timeout, decode=False
            )
            stats["frames"] += len(pieces)
            for p in pieces:
                by_kind[p.kind] = by_kind.get(p.kind, 0) + 1
            stats["connections"] += 1
            stats["responses"] += res.responses
            stats["connections_closed_by_bookie"] += res.closed_by_bookie
            stats["connections_reset"] += res.reset
            stats["hung_connections"] += res.hung
            if res.responses < expected or (exact and res.responses != expected):
                stats["bad_responses"] += 1
                stats.setdefault("response_mismatches", []).append(
                    {
                        "expected": expected,
                        "exact": exact,
                        "got": res.responses,
                        "last": [p.kind for p in pieces[expected : expected + 2]],
                    }
                )

    sampler = asyncio.create_task(sample_rss()) if pid is not None else None
    t0 = time.monotonic()
    try:
        await asyncio.gather(*(worker(i) for i in range(connections)))
    finally:
        if sampler is not None:
            sampler.cancel()
    seconds = time.monotonic() - t0
    stats["seconds"] = round(seconds, 3)
    stats["frames_per_second"] = round(stats["frames"] / seconds) if seconds else 0
    if pid is not None:
        after, hwm = rss_kb(pid)
        stats["rss_after_kb"] = after
        stats["rss_peak_kb"] = max(rss_peak, after)
        stats["vm_hwm_kb"] = hwm
    if "response_mismatches" in stats:
        stats["response_mismatches"] = stats["response_mismatches"][:10]
    return stats


def fuzz_bookie(
    host: str,
    port: int,
    *,
    frames: int,
    seed: int,
    pid: int | None = None,
    connections: int = 4,
    targets: Sequence[int] = (),
    max_frame_size: int = DEFAULT_MAX_FRAME_SIZE,
) -> dict[str, Any]:
    """Send at least ``frames`` fuzzed frames to the bookie at host:port on
    ``connections`` concurrent connections (a new one whenever the bookie
    closes one) and return JSON-able stats. ``pid`` (the bookie's) adds
    its RSS before, after and at peak. ``bad_responses`` counts
    connections where the bookie answered fewer (or, where it is exact,
    other) responses than the frames it must answer; ``hung_connections``
    those it did not close within 15 s of EOF or a violation."""
    return asyncio.run(
        afuzz_bookie(
            host,
            port,
            frames=frames,
            seed=seed,
            pid=pid,
            connections=connections,
            targets=targets,
            max_frame_size=max_frame_size,
        )
    )


# ---------------------------------------------------------------------------
# After the fuzzing: is the bookie intact?
# ---------------------------------------------------------------------------


async def acheck_bookie_intact(
    host: str,
    port: int,
    entries: Mapping[tuple[int, int], bytes],
    *,
    absent: Iterable[tuple[int, int]] = (),
    keys: Mapping[int, bytes] | None = None,
    timeout: float = 30.0,
) -> None:
    """Raise AssertionError unless every entry in ``entries`` reads back
    unchanged, none in ``absent`` exists, the ledgers in ``keys`` still take
    an add with their own key (neither fenced nor re-keyed), and a fresh
    ledger takes an add and reads it back (a normal client is served)."""
    client = BookieClient(f"{host}:{port}")
    await asyncio.wait_for(client.connect(), timeout)
    problems: list[str] = []
    try:
        items = list(entries.items())
        for start in range(0, len(items), 200):
            batch = items[start : start + 200]
            got = await asyncio.wait_for(
                asyncio.gather(*(client.read_entry(lid, eid) for (lid, eid), _ in batch)), timeout
            )
            for ((lid, eid), want), resp in zip(batch, got, strict=True):
                rr = resp.readResponse
                if resp.status != EOK or rr.body != want:
                    problems.append(f"ledger {lid} entry {eid}: status {resp.status}, changed")
        for lid, eid in absent:
            resp = await asyncio.wait_for(client.read_entry(lid, eid), timeout)
            if resp.status == EOK:
                problems.append(f"ledger {lid} entry {eid} exists: the fuzzer wrote it")
        rng = random.Random()
        for lid, key in (keys or {}).items():
            last = max((e for (led, e) in entries if led == lid), default=-1)
            eid = last + 1 + rng.randrange(1000, 2000)
            body = DigestManager(lid, CRC32C, b"intact").compute(eid, -1, 0, b"after the fuzz")
            resp = await asyncio.wait_for(client.add_entry(lid, eid, key, body), timeout)
            if resp.status != EOK:
                problems.append(f"ledger {lid}: an add with its own key got status {resp.status}")
        lid = OWN_LEDGER_BASE + 2**40 + rng.randrange(2**40)
        key = rng.randbytes(20)
        body = DigestManager(lid, CRC32C, b"fresh").compute(0, -1, 5, b"fresh")
        resp = await asyncio.wait_for(client.add_entry(lid, 0, key, body), timeout)
        if resp.status != EOK:
            problems.append(f"a fresh add got status {resp.status}")
        else:
            got1 = await asyncio.wait_for(client.read_entry(lid, 0), timeout)
            if got1.status != EOK or got1.readResponse.body != body:
                problems.append(f"a fresh entry did not read back (status {got1.status})")
    finally:
        await client.close()
    if problems:
        raise AssertionError(f"{len(problems)} problems: " + "; ".join(problems[:10]))


def check_bookie_intact(
    host: str,
    port: int,
    entries: Mapping[tuple[int, int], bytes],
    *,
    absent: Iterable[tuple[int, int]] = (),
    keys: Mapping[int, bytes] | None = None,
) -> None:
    """Synchronous :func:`acheck_bookie_intact`."""
    asyncio.run(acheck_bookie_intact(host, port, entries, absent=absent, keys=keys))


def main(argv: Sequence[str] | None = None) -> int:
    p = argparse.ArgumentParser(description="Fuzz a live bookie's wire frames.")
    p.add_argument("--host", default="127.0.0.1")
    p.add_argument("--port", type=int, required=True)
    p.add_argument("--frames", type=int, default=1_000_000)
    p.add_argument("--seed", type=int, default=int.from_bytes(os.urandom(4), "big"))
    p.add_argument("--pid", type=int, default=None, help="the bookie's pid, for its RSS")
    p.add_argument("--connections", type=int, default=4)
    a = p.parse_args(argv)
    stats = fuzz_bookie(
        a.host, a.port, frames=a.frames, seed=a.seed, pid=a.pid, connections=a.connections
    )
    stats["seed"] = a.seed
    print(json.dumps(stats, indent=1))
    return 0 if not stats["hung_connections"] and not stats["bad_responses"] else 1


if __name__ == "__main__":
    sys.exit(main())
