"""Auditor election against a real ZooKeeper, candidates on separate
sessions: upstream's ZkLedgerAuditorManager votes (V_<seq>, lowest wins,
the winner's id written into auditorelection), a loser watching only its
predecessor, and a vote lost with its session."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

import pytest
from kazoo.client import KazooClient

from dlog.autorecovery.election import AuditorElection, ElectionClosedError, current_auditor
from dlog.sandbox.zookeeper import ZooKeeperServer
from dlog.zk import ZooKeeper


class Candidate:
    """A candidate on its own session, recording the znodes it watches."""

    def __init__(self, zk: ZooKeeper, root: str, name: str) -> None:
        self.zk = zk
        self.name = name
        self.watched: list[str] = []
        real = zk.exists

        async def exists(path: str, watch: Any = None, **kw: Any) -> Any:
            if watch is not None and "/auditorelection/" in path:
                self.watched.append(path.rsplit("/", 1)[1])
            return await real(path, watch, **kw)

        zk.exists = exists  # type: ignore[method-assign]
        self.election = AuditorElection(zk, root, name)
        self.task: asyncio.Task[None] = asyncio.create_task(self.election.run_for_auditor())

    async def elected(self, timeout: float = 10) -> None:
        await asyncio.wait_for(asyncio.shield(self.task), timeout)

    @property
    def vote_name(self) -> str:
        assert self.election.vote is not None
        return self.election.vote.rsplit("/", 1)[1]


Factory = Callable[[str], Awaitable[Candidate]]


@pytest.fixture
def root(zk_root: str) -> str:
    return f"{zk_root}/ledgers"


@pytest.fixture
async def candidate(zk_server: ZooKeeperServer, root: str) -> AsyncIterator[Factory]:
    made: list[Candidate] = []

    async def make(name: str) -> Candidate:
        zk = ZooKeeper(zk_server.connect_string)
        await zk.start()
        c = Candidate(zk, root, name)
        made.append(c)
        # Vote in the order made: wait for this candidate's vote.
        for _ in range(200):
            if c.election.vote is not None or c.task.done():
                break
            await asyncio.sleep(0.02)
        return c

    yield make
    for c in made:
        c.task.cancel()
        await asyncio.gather(c.task, return_exceptions=True)
        if c.zk.connected:
            await c.zk.stop()


async def settle() -> None:
    await asyncio.sleep(0.5)


async def test_lowest_vote_wins_and_the_next_takes_over(
    candidate: Factory, root: str, zk: ZooKeeper
) -> None:
    assert await current_auditor(zk, root) is None
    a, b, c = await candidate("a:3181"), await candidate("b:3181"), await candidate("c:3181")
    await a.elected()
    await settle()
    assert not b.task.done() and not c.task.done()
    assert a.election.elected and not b.election.elected
    assert await current_auditor(zk, root) == "a:3181"
    election = f"{root}/underreplication/auditorelection"
    data, _ = await zk.get(election)
    assert data == b'bookieId: "a:3181"\n'
    votes = sorted(await zk.get_children(election))
    assert votes == [a.vote_name, b.vote_name, c.vote_name]
    assert all(v.startswith("V_") and len(v) == 12 for v in votes)
    vote_data, stat = await zk.get(f"{election}/{b.vote_name}")
    assert vote_data == b'bookieId: "b:3181"\n'
    assert stat.ephemeralOwner == b.zk.session_id
    # Each loser watches only its predecessor: no herd on the auditor.
    assert b.watched == [a.vote_name]
    assert c.watched == [b.vote_name]

    await a.zk.stop()  # the auditor dies
    await b.elected()
    assert await current_auditor(zk, root) == "b:3181"
    assert (await zk.get(election))[0] == b'bookieId: "b:3181"\n'
    await settle()
    assert not c.task.done()
    assert c.watched == [b.vote_name], "c was woken by a vote it does not follow"


async def test_a_loser_dying_moves_the_watch_not_the_auditor(
    candidate: Factory, root: str, zk: ZooKeeper
) -> None:
    a, b, c = await candidate("a"), await candidate("b"), await candidate("c")
    await a.elected()
    await b.zk.stop()
    await settle()
    assert not c.task.done()
    assert c.watched == [b.vote_name, a.vote_name]
    assert await current_auditor(zk, root) == "a"
    await a.election.resign()  # the auditor steps down: its vote goes
    assert not a.election.elected
    await c.elected()
    assert await current_auditor(zk, root) == "c"


async def test_resign_while_waiting(candidate: Factory, root: str, zk: ZooKeeper) -> None:
    a, b = await candidate("a"), await candidate("b")
    await a.elected()
    vote = b.vote_name
    await b.election.resign()
    with pytest.raises(ElectionClosedError):
        await asyncio.wait_for(b.task, 10)
    assert vote not in await zk.get_children(f"{root}/underreplication/auditorelection")


async def test_cancelled_candidate_withdraws(candidate: Factory, root: str, zk: ZooKeeper) -> None:
    a, b = await candidate("a"), await candidate("b")
    await a.elected()
    b.task.cancel()
    await asyncio.gather(b.task, return_exceptions=True)
    assert await zk.get_children(f"{root}/underreplication/auditorelection") == [a.vote_name]


async def expire(zk: ZooKeeper, zk_server: ZooKeeperServer) -> None:
    """Expire ``zk``'s session for real: another client attaches to it and
    closes it (kazoo's own test trick)."""
    session_id, password = zk.client.client_id
    other = KazooClient(hosts=zk_server.connect_string, client_id=(session_id, password))
    await asyncio.to_thread(other.start)
    await asyncio.to_thread(other.stop)
    await asyncio.to_thread(other.close)


async def test_session_expiry(
    candidate: Factory, root: str, zk: ZooKeeper, zk_server: ZooKeeperServer
) -> None:
    a, b = await candidate("a"), await candidate("b")
    await a.elected()
    lost = asyncio.create_task(a.election.wait_lost())
    await settle()
    assert not lost.done()
    old_session = a.zk.session_id
    await expire(a.zk, zk_server)
    await asyncio.wait_for(lost, 20)  # the elected one learns it is no longer auditor
    assert not a.election.elected
    await b.elected(20)
    assert await current_auditor(zk, root) == "b"

    # a runs again, on the new session kazoo opened by itself, and waits behind b.
    rerun = asyncio.create_task(a.election.run_for_auditor())
    await settle()
    assert not rerun.done()
    assert a.zk.session_id != old_session
    b_lost = asyncio.create_task(b.election.wait_lost())
    await expire(b.zk, zk_server)
    await asyncio.wait_for(b_lost, 20)
    await asyncio.wait_for(rerun, 20)
    assert await current_auditor(zk, root) == "a"


async def test_a_waiting_vote_lost_with_its_session_is_cast_again(
    candidate: Factory, root: str, zk: ZooKeeper, zk_server: ZooKeeperServer
) -> None:
    a, b = await candidate("a"), await candidate("b")
    await a.elected()
    first_vote = b.vote_name
    await expire(b.zk, zk_server)
    for _ in range(200):
        if b.election.vote is not None and b.vote_name != first_vote:
            break
        await asyncio.sleep(0.05)
    votes = await zk.get_children(f"{root}/underreplication/auditorelection")
    assert first_vote not in votes and b.vote_name in votes
    await a.election.resign()
    await b.elected()
    assert await current_auditor(zk, root) == "b"
