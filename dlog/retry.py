"""The project's one retry policy (what KazooRetry is to kazoo).

Every caller that wants "try again a few times with backoff" goes through
here, so backoff, jitter and the notion of *retriable* live in one place:

- :func:`retry_zk` retries a ZooKeeper call after transient connection
  problems (:data:`RETRIABLE_ZK_ERRORS`: connection loss, timeout); anything
  else, including ``NoNodeError`` or ``BadVersionError``, is the caller's
  business. :mod:`dlog.zk` runs every operation under it (:data:`ZK_POLICY`).
- :func:`retry_async` retries a coroutine while it fails with a dlog error
  whose ``retriable`` flag is set (see :mod:`dlog.errors`).

A retried operation must be safe to repeat; callers of non-idempotent
ZooKeeper writes check for their own earlier success (the error raised
after a retry says how many attempts were made: ``ZooKeeperError.attempts``).
"""

from __future__ import annotations

import dataclasses
import logging
import random
from collections.abc import Awaitable, Callable
from typing import TypeVar

from tenacity import (
    AsyncRetrying,
    RetryCallState,
    retry_if_exception,
    stop_after_attempt,
)

from dlog.errors import ConnectionLossError, ZooKeeperTimeoutError

log = logging.getLogger(__name__)

T = TypeVar("T")

__all__ = [
    "DEFAULT_POLICY",
    "RETRIABLE_ZK_ERRORS",
    "ZK_POLICY",
    "RetryPolicy",
    "is_retriable",
    "is_transient_zk",
    "retry_async",
    "retry_zk",
]

#: ZooKeeper errors after which the same call may simply be tried again: the
#: client reconnects by itself. (A session expiry is not among them: what the
#: session held, its locks and ephemeral znodes, is gone.)
RETRIABLE_ZK_ERRORS: tuple[type[BaseException], ...] = (
    ConnectionLossError,
    ZooKeeperTimeoutError,
)


@dataclasses.dataclass(frozen=True)
class RetryPolicy:
    """How often and how patiently to retry.

    The n-th wait is ``min(initial_backoff * 2**(n-1) + U(0, jitter), max_backoff)``
    seconds; jitter keeps many clients that failed together from retrying
    in lockstep.
    """

    attempts: int = 5
    initial_backoff: float = 0.05
    max_backoff: float = 2.0
    jitter: float = 0.05

    def __post_init__(self) -> None:
        if self.attempts < 1:
            raise ValueError(f"attempts must be >= 1, got {self.attempts}")
        if self.initial_backoff < 0 or self.max_backoff < 0 or self.jitter < 0:
            raise ValueError("backoff and jitter must not be negative")

    def backoff(self, attempt: int) -> float:
        """Seconds to wait after failed attempt number ``attempt`` (1-based)."""
        delay = self.initial_backoff * 2 ** (attempt - 1) + random.uniform(0, self.jitter)
        return min(delay, self.max_backoff)

    def retrying(self, predicate: Callable[[BaseException], bool]) -> AsyncRetrying:
        """A tenacity controller retrying exceptions for which ``predicate``
        holds; cancellation and other BaseExceptions always go through."""
        return AsyncRetrying(
            stop=stop_after_attempt(self.attempts),
            wait=lambda state: self.backoff(state.attempt_number),
            retry=retry_if_exception(lambda e: isinstance(e, Exception) and predicate(e)),
            before_sleep=_log_retry,
            reraise=True,
        )

    async def call(
        self, fn: Callable[[], Awaitable[T]], predicate: Callable[[BaseException], bool]
    ) -> T:
        """Await ``fn()`` under this policy, retrying errors ``predicate`` accepts."""
        async for attempt in self.retrying(predicate):
            with attempt:
                result = await fn()
        return result


#: Default for dlog operations (see :func:`retry_async`).
DEFAULT_POLICY = RetryPolicy()

#: Default for single ZooKeeper calls: about 9 s of attempts, close to the
#: default 10 s session timeout; kazoo reconnects (to another server if need
#: be) within it, and past it the session is likely gone anyway.
ZK_POLICY = RetryPolicy(attempts=10, initial_backoff=0.05, max_backoff=2.0, jitter=0.05)


def _log_retry(state: RetryCallState) -> None:
    exc = state.outcome.exception() if state.outcome is not None else None
    wait = state.next_action.sleep if state.next_action is not None else 0.0
    log.debug("attempt %d failed with %r; retrying in %.3fs", state.attempt_number, exc, wait)


def is_retriable(exc: BaseException) -> bool:
    """True for errors that declare themselves worth another try."""
    return getattr(exc, "retriable", False) is True


def is_transient_zk(exc: BaseException) -> bool:
    """True for the ZooKeeper errors :func:`retry_zk` retries."""
    return isinstance(exc, RETRIABLE_ZK_ERRORS)


async def retry_async(
    fn: Callable[[], Awaitable[T]],
    policy: RetryPolicy = DEFAULT_POLICY,
    *,
    retry_on: Callable[[BaseException], bool] = is_retriable,
) -> T:
    """Await ``fn()`` until it succeeds, a non-retriable error is raised, or
    ``policy.attempts`` are used up; the last error is re-raised as is."""
    return await policy.call(fn, retry_on)


async def retry_zk(
    fn: Callable[[], Awaitable[T]],
    *,
    attempts: int | None = None,
    policy: RetryPolicy = ZK_POLICY,
) -> T:
    """Await the ZooKeeper call ``fn()``, retrying it after connection loss
    or an operation timeout; every other error goes straight to the caller."""
    if attempts is not None:
        policy = dataclasses.replace(policy, attempts=attempts)
    return await policy.call(fn, is_transient_zk)
