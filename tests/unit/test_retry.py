"""dlog.retry: the one retry policy."""

from __future__ import annotations

import asyncio

import pytest

from dlog.errors import NoSuchLedgerError, ZooKeeperError
from dlog.retry import RetryPolicy, is_retriable, retry_async, retry_zk
from dlog.zk import ConnectionLossError, NoNodeError

FAST = RetryPolicy(attempts=4, initial_backoff=0.001, max_backoff=0.002, jitter=0.001)


def flaky(failures: list[BaseException], result: object = "ok"):
    calls = 0

    async def fn() -> object:
        nonlocal calls
        calls += 1
        if failures:
            raise failures.pop(0)
        return result

    return fn, lambda: calls


async def test_retry_zk_retries_connection_loss_then_succeeds() -> None:
    fn, calls = flaky([ConnectionLossError(), ConnectionLossError()])
    assert await retry_zk(fn, policy=FAST) == "ok"
    assert calls() == 3


async def test_retry_zk_gives_up_and_reraises_the_last_error() -> None:
    fn, calls = flaky([ConnectionLossError() for _ in range(10)])
    with pytest.raises(ConnectionLossError):
        await retry_zk(fn, policy=FAST)
    assert calls() == 4
    fn, calls = flaky([ConnectionLossError() for _ in range(10)])
    with pytest.raises(ConnectionLossError):
        await retry_zk(fn, attempts=2, policy=FAST)
    assert calls() == 2


async def test_retry_zk_does_not_retry_answers() -> None:
    fn, calls = flaky([NoNodeError()])
    with pytest.raises(NoNodeError):
        await retry_zk(fn, policy=FAST)
    assert calls() == 1


async def test_retry_async_follows_the_retriable_flag() -> None:
    assert is_retriable(ZooKeeperError()) and not is_retriable(NoSuchLedgerError())
    assert not is_retriable(ValueError())
    fn, calls = flaky([ZooKeeperError(), ZooKeeperError()], result=5)
    assert await retry_async(fn, FAST) == 5 and calls() == 3
    fn, calls = flaky([NoSuchLedgerError()])
    with pytest.raises(NoSuchLedgerError):
        await retry_async(fn, FAST)
    assert calls() == 1


async def test_cancellation_is_never_retried() -> None:
    fn, calls = flaky([asyncio.CancelledError()])
    with pytest.raises(asyncio.CancelledError):
        await retry_async(fn, FAST, retry_on=lambda e: True)
    assert calls() == 1


def test_backoff_grows_is_capped_and_jittered() -> None:
    p = RetryPolicy(attempts=10, initial_backoff=0.1, max_backoff=1.0, jitter=0.05)
    assert 0.1 <= p.backoff(1) <= 0.15
    assert 0.4 <= p.backoff(3) <= 0.45
    assert p.backoff(9) == 1.0
    with pytest.raises(ValueError):
        RetryPolicy(attempts=0)
