"""The polling helper the integration tests share (tests/waiting.py): a
check that never holds must fail the test, or every wait would pass."""

from __future__ import annotations

import asyncio

import pytest

from tests.waiting import eventually


async def test_a_check_that_never_holds_fails_naming_what() -> None:
    with pytest.raises(AssertionError, match="not within 0.1 s: the ledger to close"):
        await eventually(lambda: False, 0.1, "the ledger to close", interval=0.01)


async def test_an_async_check_is_awaited() -> None:
    async def never() -> bool:
        await asyncio.sleep(0)
        return False

    with pytest.raises(AssertionError):
        await eventually(never, 0.1, interval=0.01)


@pytest.mark.parametrize("sync", [True, False])
async def test_returns_once_the_check_holds(sync: bool) -> None:
    calls = []

    def count() -> bool:
        calls.append(1)
        return len(calls) >= 3

    async def count_async() -> bool:
        return count()

    await eventually(count if sync else count_async, 5.0, interval=0.001)
    assert len(calls) == 3
