"""Electing the one auditor, as upstream's ZkLedgerAuditorManager does.

Each candidate creates an EPHEMERAL_SEQUENTIAL vote ``V_<seq>`` under
``<ledgers root>/underreplication/auditorelection``, its data an
AuditorVoteFormat (text) naming the candidate. The lowest sequence is the
auditor: it writes its vote into ``auditorelection`` itself, for whoever
looks. Every other candidate watches only the vote just before its own (no
herd when the auditor dies) and runs again when that one goes.

A vote lives as long as its ZooKeeper session: when the session expires
the vote is gone, so a waiting candidate votes again, and an elected one
learns it is no longer the auditor from :meth:`AuditorElection.wait_lost`.
"""

from __future__ import annotations

import asyncio
import functools
import logging

from dlog.errors import (
    ConnectionLossError,
    DLogError,
    NodeExistsError,
    NoNodeError,
    SessionExpiredError,
    ZooKeeperClosedError,
    ZooKeeperTimeoutError,
)
from dlog.protocol import underreplication as fmt
from dlog.zk import WatchedEvent, ZooKeeper

log = logging.getLogger(__name__)


class ElectionClosedError(DLogError):
    """The candidate resigned while it waited to be elected."""

    default_message = "the candidate resigned from the auditor election"


#: Seconds between tries while kazoo replaces an expired session.
_SESSION_RETRY_DELAY = 0.2


def _poke(event: asyncio.Event, _watched: WatchedEvent) -> None:
    event.set()


def _sorted_votes(children: list[str]) -> list[str]:
    votes = [c for c in children if c.startswith(fmt.VOTE_PREFIX)]
    ordered: list[tuple[int, str]] = []
    for v in votes:
        try:
            ordered.append((fmt.vote_sequence(v), v))
        except ValueError:
            log.warning("ignoring a malformed auditor vote %r", v)
    return [v for _, v in sorted(ordered)]


class AuditorElection:
    """One candidate for auditor (a bookie or an AutoRecovery daemon)."""

    def __init__(self, zk: ZooKeeper, ledgers_root: str, candidate_id: str) -> None:
        self.zk = zk
        self.ledgers_root = ledgers_root.rstrip("/")
        self.candidate_id = candidate_id
        self.path = fmt.election_path(self.ledgers_root)
        #: Our vote's full path, while we have one.
        self.vote: str | None = None
        self.elected = False
        self.attempts = 0
        self._resigned = False
        self._wakeup = asyncio.Event()

    async def run_for_auditor(self) -> None:
        """Vote, and return once elected; meanwhile watch the predecessor.

        Raises :class:`ElectionClosedError` if :meth:`resign` is called
        meanwhile. Cancelled, it withdraws the vote."""
        self._resigned = False
        try:
            while True:
                self._check_resigned()
                self.attempts += 1
                try:
                    if await self._try_once():
                        return
                except SessionExpiredError as e:
                    if isinstance(e, ZooKeeperClosedError):
                        raise
                    # Our vote went with the session; kazoo opens a new one.
                    log.warning("%s: %s; voting again", self.candidate_id, e)
                    self.vote = None
                    await asyncio.sleep(_SESSION_RETRY_DELAY)
        except asyncio.CancelledError:
            await self._withdraw()
            raise

    async def _try_once(self) -> bool:
        """Vote (if we have no vote), and either win or wait for the
        predecessor to change; True when elected."""
        await self._ensure_election_path()
        vote = await self._ensure_vote()
        votes = _sorted_votes(await self.zk.get_children(self.path))
        mine = vote.rsplit("/", 1)[1]
        if mine not in votes:  # lost with our session: vote again
            self.vote = None
            return False
        i = votes.index(mine)
        if i == 0:
            await self.zk.set(self.path, fmt.encode_vote(self.candidate_id))
            self.elected = True
            log.info("%s is the auditor (vote %s)", self.candidate_id, mine)
            return True
        changed = asyncio.Event()
        self._wakeup = changed
        predecessor = f"{self.path}/{votes[i - 1]}"
        if await self.zk.exists(predecessor, watch=functools.partial(_poke, changed)):
            log.info(
                "%s waits for auditor election: watching %s",
                self.candidate_id,
                votes[i - 1],
            )
            # Woken when the predecessor goes, when the session is
            # lost (every watch fires), or by resign().
            await changed.wait()
        return False

    async def wait_lost(self) -> None:
        """Once elected: return when our vote is gone (deleted, or lost with
        an expired session), when we are no longer the auditor."""
        while self.vote is not None and not self._resigned:
            changed = asyncio.Event()
            self._wakeup = changed
            try:
                stat = await self.zk.exists(self.vote, watch=functools.partial(_poke, changed))
            except SessionExpiredError:
                break  # and the vote with it
            if stat is None or stat.ephemeralOwner != self.zk.session_id:
                break
            await changed.wait()
        if self.elected:
            log.warning("%s is no longer the auditor: its vote is gone", self.candidate_id)
        self.elected = False
        self.vote = None

    async def resign(self) -> None:
        """Withdraw from the election (delete our vote): the next candidate
        takes over. A pending :meth:`run_for_auditor` raises
        :class:`ElectionClosedError`."""
        self._resigned = True
        self._wakeup.set()
        await self._withdraw()

    async def _withdraw(self) -> None:
        vote, self.vote = self.vote, None
        self.elected = False
        if vote is None:
            return
        try:
            await self.zk.delete(vote)
        except NoNodeError:
            pass
        except DLogError as e:
            log.warning("could not delete auditor vote %s: %s", vote, e)

    def _check_resigned(self) -> None:
        if self._resigned:
            raise ElectionClosedError()

    async def _ensure_election_path(self) -> None:
        for path in (fmt.base_path(self.ledgers_root), self.path):
            if await self.zk.exists(path) is None:
                try:
                    await self.zk.create(path, makepath=True)
                except NodeExistsError:
                    pass

    async def _ensure_vote(self) -> str:
        """Our vote: the one we have if it still exists, else a new one."""
        if self.vote is not None:
            stat = await self.zk.exists(self.vote)
            if stat is not None and stat.ephemeralOwner == self.zk.session_id:
                return self.vote
            self.vote = None
        while True:
            try:
                # A sequential create retried after a connection loss could
                # leave a vote of ours that we would not know: try once, and
                # clear up after a failed attempt.
                self.vote = await self.zk.create(
                    f"{self.path}/{fmt.VOTE_PREFIX}",
                    fmt.encode_vote(self.candidate_id),
                    ephemeral=True,
                    sequence=True,
                    retry=False,
                )
                return self.vote
            except (ConnectionLossError, ZooKeeperTimeoutError) as e:
                log.info("voting for auditor: %s; clearing up and voting again", e)
                await self._delete_stray_votes()

    async def _delete_stray_votes(self) -> None:
        """Delete the votes of our session (from attempts whose answer was lost)."""
        for child in await self.zk.get_children(self.path):  # retried until connected
            path = f"{self.path}/{child}"
            stat = await self.zk.exists(path)
            if stat is not None and stat.ephemeralOwner == self.zk.session_id:
                try:
                    await self.zk.delete(path, stat.version)
                except NoNodeError:
                    pass


async def current_auditor(zk: ZooKeeper, ledgers_root: str) -> str | None:
    """The elected auditor's id (the lowest vote's), None when nobody runs."""
    path = fmt.election_path(ledgers_root)
    while True:
        try:
            votes = _sorted_votes(await zk.get_children(path))
        except NoNodeError:
            return None
        if not votes:
            return None
        try:
            data, _ = await zk.get(f"{path}/{votes[0]}")
        except NoNodeError:
            continue  # it just went: look again
        return fmt.decode_vote(data)
