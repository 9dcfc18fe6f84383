"""The journal writer's pipe codecs: whatever pieces the pipe delivers the
bytes in, the reader gets back exactly the requests and answers sent."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from dlog import failpoints
from dlog.bookie import journal_pipe as jp

requests = st.one_of(
    st.builds(
        lambda records, payload: (jp.GROUP, records, payload),
        st.integers(0, 2**32 - 1),
        st.binary(max_size=300),
    ),
    st.just((jp.RESUME, 0, b"")),
    st.builds(
        lambda spec: (jp.FAILPOINTS, 0, spec.encode()),
        st.text(max_size=40),
    ),
)


def encode(kind: int, records: int, payload: bytes) -> bytes:
    if kind == jp.GROUP:
        return jp.group_header(records, len(payload)) + payload
    if kind == jp.RESUME:
        return jp.resume_request()
    return jp.failpoints_request(payload.decode())


def chunked(data: bytes, cuts: list[int]) -> list[bytes]:
    points = sorted({c % (len(data) + 1) for c in cuts} | {0, len(data)})
    return [data[a:b] for a, b in zip(points, points[1:], strict=False)]


@given(st.lists(requests, max_size=20), st.lists(st.integers(0, 10_000), max_size=30))
def test_requests_survive_any_chunking(sent: list[tuple[int, int, bytes]], cuts: list[int]) -> None:
    data = b"".join(encode(*r) for r in sent)
    reader = jp.RequestReader()
    got = [req for piece in chunked(data, cuts) for req in reader.feed(piece)]
    assert [(r.kind, r.records, r.payload) for r in got] == sent
    assert reader.pending == 0


@given(st.lists(requests, max_size=20), st.lists(st.integers(0, 10_000), max_size=30))
def test_requests_survive_one_buffer_read_into_again(
    sent: list[tuple[int, int, bytes]], cuts: list[int]
) -> None:
    """As the journal writer reads: every piece into the same buffer, the
    requests it completed used up before the next read overwrites it. The
    part of a request still incomplete must have been kept as a copy."""
    data = b"".join(encode(*r) for r in sent)
    reader = jp.RequestReader()
    buffer = bytearray(10_001 + len(data))
    view = memoryview(buffer)
    got = []
    for piece in chunked(data, cuts):
        buffer[:] = bytes(len(buffer))  # what an earlier read left is gone
        view[: len(piece)] = piece
        got += [(r.kind, r.records, bytes(r.payload)) for r in reader.feed(view[: len(piece)])]
        buffer[:] = b"\xff" * len(buffer)
    assert got == sent
    assert reader.pending == 0


acks = st.builds(
    jp.Ack,
    st.integers(-1, 2**31 - 1),
    *(st.integers(0, 2**64 - 1) for _ in range(3)),
    *(st.floats(allow_nan=False) for _ in range(3)),
    *(st.integers(0, 2**64 - 1) for _ in range(5)),
    message=st.text(max_size=50),
)


@given(st.lists(acks, max_size=10), st.lists(st.integers(0, 5_000), max_size=20))
def test_acks_survive_any_chunking(sent: list[jp.Ack], cuts: list[int]) -> None:
    data = b"".join(a.encode() for a in sent)
    reader = jp.AckReader()
    assert [a for piece in chunked(data, cuts) for a in reader.feed(piece)] == sent


def test_an_unknown_request_kind_is_refused() -> None:
    with pytest.raises(ValueError, match="unknown request kind 9"):
        jp.RequestReader().feed(bytes([9]) + bytes(jp.REQUEST_HEADER_SIZE - 1))


@pytest.mark.parametrize(
    ("spec", "passes", "expected"),
    [
        ("journal.write=eio", 0, "journal.write=eio"),
        ("journal.write=eio+3", 1, "journal.write=eio+2"),
        ("journal.write=eio+1", 1, "journal.write=eio"),
        ("journal.write=eio*3", 1, "journal.write=eio*2"),
        ("journal.write=hold+1*2", 2, "journal.write=hold*1"),
    ],
)
def test_failpoints_spec_is_what_is_left(spec: str, passes: int, expected: str) -> None:
    """A writer process started now gets the failpoints as they stand: the
    skips and firings already used are not given again."""
    failpoints.configure(spec)
    try:
        for _ in range(passes):
            failpoints.take_action("journal.write")
        assert failpoints.spec() == expected
    finally:
        failpoints.configure("")


def test_a_bad_request_header_is_refused_before_its_body_arrives() -> None:
    """A garbage header's length may be garbage too: waiting for that many
    bytes would hang the writer instead of failing it."""
    header = jp.REQUEST_HEADER_SIZE
    garbage = bytes([9]) + bytes(header - 5) + (2**31).to_bytes(4, "little")
    with pytest.raises(ValueError, match="unknown request kind 9"):
        jp.RequestReader().feed(garbage)
