"""The pure decisions under the ledger appender and the log-segment store:
when a ledger rolls, when another commit append is sent, which append a
commit waits for."""

from __future__ import annotations

import asyncio

import pytest
from hypothesis import given
from hypothesis import strategies as st

from dlog.dlsn import DLSN
from dlog.errors import (
    BKTransmitError,
    LedgerFencedError,
    LockingError,
    SubscriptionFencedError,
    WriteError,
    WriteFencedError,
)
from dlog.ledger.appender import (
    MAX_AGE,
    MAX_BYTES,
    MAX_ENTRIES,
    LedgerAppender,
    RollPolicy,
    close_context,
    fail_futures,
    roll_reason,
)
from dlog.ledger.metadata import CloseReason
from dlog.tasks import BackgroundTasks
from subscriptions.log_segment import MAX_INFLIGHT, appends_to_send, covering_append


def test_roll_reasons_in_order() -> None:
    policy = RollPolicy(max_entries=10, max_bytes=100, max_age=60.0)
    assert roll_reason(policy, 9, 99, 59.9) is None
    assert roll_reason(policy, 10, 0, 0) == MAX_ENTRIES
    assert roll_reason(policy, 0, 100, 0) == MAX_BYTES
    assert roll_reason(policy, 0, 0, 60.0) == MAX_AGE
    # The first limit reached wins, checked entries, bytes, age.
    assert roll_reason(policy, 10, 100, 60.0) == MAX_ENTRIES
    assert roll_reason(policy, 0, 100, 60.0) == MAX_BYTES


def test_no_limit_never_rolls() -> None:
    assert roll_reason(RollPolicy(), 10**9, 10**12, 10**6) is None
    assert roll_reason(RollPolicy(max_bytes=5), 10**9, 4, 10**6) is None


@given(
    entries=st.integers(0, 1000),
    nbytes=st.integers(0, 10**6),
    age=st.floats(0, 10**4),
    limits=st.tuples(
        st.none() | st.integers(1, 1000),
        st.none() | st.integers(1, 10**6),
        st.none() | st.floats(1, 10**4),
    ),
)
def test_rolls_exactly_when_a_limit_is_reached(entries, nbytes, age, limits) -> None:
    policy = RollPolicy(*limits)
    reached = (
        (policy.max_entries is not None and entries >= policy.max_entries)
        or (policy.max_bytes is not None and nbytes >= policy.max_bytes)
        or (policy.max_age is not None and age >= policy.max_age)
    )
    assert (roll_reason(policy, entries, nbytes, age) is not None) == reached


def test_close_context_names_the_roll_reason() -> None:
    assert close_context(MAX_ENTRIES).reason is CloseReason.MAX_ENTRY_COUNT_REACHED
    assert close_context(MAX_BYTES).reason is CloseReason.MAX_LENGTH_REACHED
    assert close_context(MAX_AGE, expect_delete_after=7).reason is CloseReason.TIME_ROTATION
    assert close_context(MAX_AGE, expect_delete_after=7).expect_delete_after_ms == 7
    assert close_context("takeover").reason is CloseReason.CLIENT_SHUTDOWN


def d(entry: int) -> DLSN:
    return DLSN(1, entry, 0)


def test_appends_to_send_coalesces_beyond_the_in_flight_limit() -> None:
    assert appends_to_send(0, d(2), d(1))
    assert not appends_to_send(0, d(1), d(1)), "nothing new asked for"
    assert appends_to_send(MAX_INFLIGHT - 1, d(2), d(1))
    assert not appends_to_send(MAX_INFLIGHT, d(2), d(1)), "full: commits wait and coalesce"


def test_a_commit_waits_for_the_first_append_covering_it() -> None:
    targets = [d(3), d(7), d(9)]
    assert covering_append(targets, d(1)) == 0
    assert covering_append(targets, d(3)) == 0
    assert covering_append(targets, d(4)) == 1
    assert covering_append(targets, d(9)) == 2
    assert covering_append(targets, d(10)) is None
    assert covering_append([], d(1)) is None


async def test_fail_futures_fails_each_with_its_own_copy() -> None:
    loop = asyncio.get_running_loop()
    done = loop.create_future()
    done.set_result(1)
    futs = [loop.create_future(), loop.create_future(), done]
    fail_futures(futs, WriteError("boom"))
    e0, e1 = futs[0].exception(), futs[1].exception()
    assert isinstance(e0, WriteError) and isinstance(e1, WriteError) and e0 is not e1
    assert done.result() == 1


class _Handle:
    ledger_id = 5


@pytest.mark.parametrize(
    ("error", "passthrough", "fenced_by", "expected"),
    [
        (LedgerFencedError("x"), (), (LedgerFencedError,), WriteFencedError),
        (WriteError("x"), (), (LedgerFencedError,), BKTransmitError),
        (LockingError("x"), (LockingError,), (LedgerFencedError,), LockingError),
        (ValueError("x"), (), (LedgerFencedError,), BKTransmitError),
        (
            SubscriptionFencedError("x"),
            (),
            (LedgerFencedError, SubscriptionFencedError),
            WriteFencedError,
        ),
        # A bookie error is never passed through, even if the owner passes its base.
        (WriteError("x"), (Exception,), (LedgerFencedError,), BKTransmitError),
    ],
)
def test_map_error(error, passthrough, fenced_by, expected) -> None:
    appender = LedgerAppender(
        _Handle(),  # type: ignore[arg-type]
        name="stream 's'",
        tasks=BackgroundTasks(),
        fenced=lambda: WriteFencedError("fenced"),
        fenced_by=fenced_by,
        passthrough=passthrough,
    )
    mapped = appender.map_error(error)
    assert type(mapped) is expected
    if expected is BKTransmitError:
        assert str(mapped).startswith("stream 's': writing to bookies failed")


class _FakeHandle:
    """Appends complete when the test says; explicit LACs are recorded."""

    ledger_id = 6
    is_closed = False

    def __init__(self) -> None:
        self.futures: list[asyncio.Future[int]] = []
        self.last_add_confirmed = -1
        self.lac_published = -1
        self.lacs: list[int] = []

    @property
    def pending(self) -> int:
        return sum(not f.done() for f in self.futures)

    def append_nowait(self, data: bytes) -> asyncio.Future[int]:
        self.futures.append(asyncio.get_running_loop().create_future())
        return self.futures[-1]

    def complete(self, entry_id: int) -> None:
        self.last_add_confirmed = entry_id
        self.futures[entry_id].set_result(entry_id)

    def send_lac(self) -> asyncio.Future[list[object]] | None:
        if self.last_add_confirmed <= self.lac_published:
            return None
        self.lac_published = self.last_add_confirmed
        self.lacs.append(self.last_add_confirmed)
        answered = asyncio.get_running_loop().create_future()
        answered.set_result([])
        return answered

    async def write_lac(self) -> None:
        sent = self.send_lac()
        if sent is not None:
            await sent


def _appender(handle: _FakeHandle, eager: bool) -> LedgerAppender:
    return LedgerAppender(
        handle,  # type: ignore[arg-type]
        name="stream 's'",
        tasks=BackgroundTasks(),
        fenced=lambda: WriteFencedError("fenced"),
        lac_eager=eager,
    )


@pytest.mark.parametrize("eager", [False, True])
async def test_an_eager_appender_publishes_the_lac_while_appends_are_in_flight(eager) -> None:
    handle = _FakeHandle()
    appender = _appender(handle, eager)
    for _ in range(3):
        appender.append(b"x", lambda f: None)
    handle.complete(0)
    for _ in range(5):
        await asyncio.sleep(0)
    # Entry 1 went out before entry 0 completed: only an explicit LAC tells
    # readers about entry 0 while entries 1 and 2 are in flight.
    assert handle.lacs == ([0] if eager else [])
    handle.complete(1)
    handle.complete(2)
    for _ in range(5):
        await asyncio.sleep(0)
    await appender.lac_settled()
    assert handle.lacs[-1] == 2  # idle: published either way


@pytest.mark.parametrize("eager", [False, True])
async def test_the_lac_goes_out_before_the_woken_callers_next_batch(eager) -> None:
    """A caller whose write completed is woken through its future and then
    builds its next batch on the loop (a millisecond for a thousand
    records). The explicit LAC a tailing reader in another process waits
    for must already be sent by then, not queued behind that batch."""
    handle = _FakeHandle()
    appender = _appender(handle, eager)
    loop = asyncio.get_running_loop()
    seen: list[list[int]] = []

    def resolve_the_callers_future(entry: asyncio.Future[int]) -> None:
        # As the writer resolves a write's future: the caller's callback
        # runs one loop pass later and wakes its task, which runs one after.
        caller = loop.create_future()
        caller.add_done_callback(lambda _: loop.call_soon(lambda: seen.append(list(handle.lacs))))
        caller.set_result(None)

    appender.append(b"x", resolve_the_callers_future)
    handle.complete(0)
    for _ in range(5):
        await asyncio.sleep(0)
    assert seen == [[0]]
    await appender.lac_settled()
    assert handle.lacs == [0]
