"""kill -9 things while a consumer commits, and check where the next owner
resumes.

A committed position must survive any crash: after a kill, the next
owner's ``acquire`` (a fencing takeover) must return the last acknowledged
commit or a later one that was in flight at the kill, never anything lower
and never a DLSN the dead consumer did not send. Consumers are forked from
a zygote (see subscription_committer.py) so that a hundred kills stay fast.
"""

from __future__ import annotations

import asyncio
import random
import time
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from dlog.conf.dlog import DLogConfig
from dlog.dlsn import NonInclusiveLowerBound
from dlog.errors import NoSuchLedgerError
from dlog.ledger.metadata import LedgerMetadata, LedgerState
from dlog.namespace import Namespace
from dlog.sandbox.bookies import BookieProcess
from subscriptions.format import SegmentSubscription
from tests.fault.subscription_committer import (
    STREAM,
    SUBSCRIBER,
    Child,
    Position,
    Transcript,
    Zygote,
)

pytestmark = pytest.mark.fault


def commit(n: int) -> Position:
    """The DLSN a consumer sends as its n-th commit."""
    return (1, n, 0)


@dataclass
class Positions:
    """What the next owner may resume at, from what earlier rounds printed.

    Every DLSN is sent in one round only (each round starts above all
    earlier ones), so a resume position names exactly which commit it is.
    """

    acked: Position = tuple(NonInclusiveLowerBound)  # type: ignore[assignment]
    in_flight: set[Position] = field(default_factory=set)
    max_sent: int = 0
    previous: str = "none"
    resumed_in_flight: int = 0

    @property
    def first(self) -> int:
        """Where the next round starts committing: above every DLSN sent."""
        return self.max_sent + 1

    def check_start(self, name: str, child: Child) -> None:
        start = child.transcript.start
        assert start is not None
        if start < self.acked:
            what = "LOWER than the last acknowledged commit (a lost commit)"
        elif start != self.acked and start not in self.in_flight:
            what = "a DLSN that was never sent"
        else:
            if start != self.acked:
                self.resumed_in_flight += 1
            return
        in_flight = sorted(self.in_flight)
        raise AssertionError(
            f"{name}: resumed at {start}, {what}; last acknowledged {self.acked}, "
            f"in flight at the kill {in_flight[:5]}..{in_flight[-5:]} ({len(in_flight)})\n"
            f"previous round: {self.previous}\nthis round: {child.report()}"
        )

    def advance(self, name: str, child: Child) -> None:
        """After ``child`` was killed: its last acknowledged commit and the
        later ones it sent are what the next owner may resume at."""
        t = child.transcript
        if t.start is None:
            # Killed before its takeover finished: it sent nothing, and the
            # position is still one of those the previous round left.
            assert not t.sent, t.tail
            return
        assert set(t.acks) <= set(t.sent), f"{name}: acknowledged a commit it never sent"
        self.acked = max([t.start, *map(commit, t.acks)])
        self.in_flight = {commit(n) for n in t.sent if commit(n) > self.acked}
        self.max_sent = max([self.max_sent, *t.sent])
        self.previous = child.report()


@dataclass
class Stats:
    """Where the kills landed, to show the test hits what it aims at."""

    before_start: int = 0
    mid_flight: int = 0
    mid_switch: int = 0
    acks: int = 0

    def count(self, t: Transcript) -> None:
        self.acks += len(t.acks)
        if t.start is None:
            self.before_start += 1
        if len(t.sent) > len(t.acks):
            self.mid_flight += 1

    def found(self, t: Transcript) -> None:
        """The znode the next owner found names a segment switch the dead
        owner had begun (``next_segment_id``) but not finished."""
        assert t.found is not None
        segment, next_segment, _ = t.found
        if next_segment not in ("None", segment):
            self.mid_switch += 1


def test_kill_9_a_committing_consumer_100_times(
    bookie_cluster, zk_server, zk_root: str, ledgers_uri: str, tmp_path: Path
) -> None:
    """Kills land during the takeover, right after it, and (mostly) with
    1-16 commits in flight, with segments rolling every 7-20 entries."""
    bookie_cluster(3)
    uri = f"distributedlog://{zk_server.connect_string}{zk_root}/ns"
    rng = random.Random(100)
    positions = Positions()
    stats = Stats()
    rounds = 100
    with Zygote(tmp_path / "consumers") as zygote:
        began = time.monotonic()
        for round_ in range(rounds + 1):
            name = f"round-{round_}"
            child = zygote.spawn(
                name,
                uri=uri,
                ledgers_uri=ledgers_uri,
                max_entries=rng.randint(7, 20),
                depth=rng.randint(1, 16),
                first=positions.first,
            )
            moment = rng.random()
            if round_ == rounds or moment < 0.1:
                child.wait_for(lambda t: t.start is not None, "START")
            elif moment < 0.2:
                # during the takeover: fencing, intent, new segment, switch
                child.wait_for(lambda t: t.opened, "OPENED")
                time.sleep(rng.uniform(0, 0.06))
            elif moment < 0.6:
                acks = int(rng.choice([1, 4, 16, 64, 256]) * rng.uniform(1, 4))
                child.wait_for(lambda t, k=acks: len(t.acks) >= k, f"{acks} ACKs")
            else:
                # at any moment of the commit flow, segment switches included
                child.wait_for(lambda t: t.start is not None, "START")
                time.sleep(rng.uniform(0, 0.3))
            t = child.kill()
            stats.found(t)
            if t.start is not None:
                positions.check_start(name, child)
            if round_ < rounds:
                stats.count(t)
                positions.advance(name, child)
        elapsed = time.monotonic() - began
    print(
        f"\n{rounds} kill -9 rounds in {elapsed:.1f}s ({elapsed / (rounds + 1):.2f}s a round): "
        f"{stats.mid_flight} with commits in flight, {stats.before_start} during the takeover, "
        f"{stats.mid_switch} in a segment switch; {stats.acks} commits acknowledged; "
        f"{positions.resumed_in_flight} resumed at an unacknowledged commit"
    )
    # The test is about kills with commits in flight: most rounds must be.
    assert stats.mid_flight >= rounds // 2, stats


class Inspector:
    """Reads the subscription's znode and ledger metadata from the test
    process, to find the bookies of the segment in use."""

    def __init__(self, uri: str, ledgers_uri: str) -> None:
        self.runner = asyncio.Runner()
        conf = DLogConfig.load(
            overrides={
                "bkc.metadataServiceUri": ledgers_uri,
                "logSegmentBasedSubscriptionsStoreEnabled": True,
            }
        )
        self.ns = self.runner.run(Namespace.open(uri, conf, bind=True))
        self.store = self.runner.run(self.ns.open_log(STREAM)).subscriptions

    def segment(self) -> int:
        znode, _ = self.runner.run(self.store.read_znode(SUBSCRIBER))
        assert isinstance(znode, SegmentSubscription) and znode.segment_id is not None, znode
        return znode.segment_id

    def metadata(self, ledger_id: int) -> LedgerMetadata | None:
        try:
            return self.runner.run(self.ns.bk.ledger_metadata(ledger_id))
        except NoSuchLedgerError:
            return None

    def current(self) -> tuple[int, LedgerMetadata]:
        """The segment in use and its metadata (retried across a roll that
        deletes the segment between the two reads)."""
        while True:
            segment = self.segment()
            md = self.metadata(segment)
            if md is not None:
                return segment, md

    def close(self) -> None:
        self.runner.run(self.ns.close())
        self.runner.close()

    def __enter__(self) -> Inspector:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def test_kill_9_a_bookie_of_the_segment_ensemble_20_times(
    bookie_cluster, zk_server, zk_root: str, ledgers_uri: str, tmp_path: Path
) -> None:
    """Each round kills a bookie of the segment in use (a spare bookie lets
    the segment change ensemble), lets commits go on without it, restarts it
    and kills the consumer: in even rounds after the restart, in odd rounds
    while the bookie is still down, so that the next owner takes over with a
    bookie missing and the last acknowledged commits are ones made without
    it."""
    cluster = bookie_cluster(4)
    bookies = {b.bookie_id: b for b in cluster.bookies}
    uri = f"distributedlog://{zk_server.connect_string}{zk_root}/ns"
    rng = random.Random(20)
    positions = Positions()
    rounds = 20
    replaced = rolled = 0
    down: BookieProcess | None = None  # still down from the previous round
    with Zygote(tmp_path / "consumers") as zygote, Inspector(uri, ledgers_uri) as inspect:
        began = time.monotonic()
        for round_ in range(rounds + 1):
            name = f"round-{round_}"
            child = zygote.spawn(
                name,
                uri=uri,
                ledgers_uri=ledgers_uri,
                max_entries=rng.choice([20, 60, 300]),
                depth=rng.randint(1, 16),
                first=positions.first,
            )
            child.wait_for(lambda t: t.start is not None, "START")
            positions.check_start(name, child)
            if down is not None:
                down.restart()
                down = None
            if round_ == rounds:
                child.kill()
                break
            child.wait_for(lambda t: len(t.acks) >= 20, "20 ACKs")
            segment, md = inspect.current()
            victim = bookies[rng.choice(md.ensembles[-1][1])]
            since = len(child.transcript.acks)
            victim.kill()
            killed_at = time.monotonic()
            # Commits sent after the kill; 50 of them take at least three
            # appends (at most 16 in flight), so the ensemble must change.
            child.wait_for(
                lambda t, s=since, k=killed_at: t.acked_sent_after(k, s) >= 50,
                f"50 commits acknowledged without {victim.bookie_id}",
            )
            md = inspect.metadata(segment)
            if md is None or md.state != LedgerState.OPEN or inspect.segment() != segment:
                rolled += 1  # the segment rolled before or during the outage
            else:
                assert victim.bookie_id not in md.ensembles[-1][1], (
                    f"{name}: segment {segment} still writes to the dead bookie "
                    f"{victim.bookie_id} after 50 acknowledged commits: {md.ensembles}"
                )
                replaced += 1
            if round_ % 2 == 0:
                victim.restart()
                since = len(child.transcript.acks)
                restarted_at = time.monotonic()
                child.wait_for(
                    lambda t, s=since, k=restarted_at: t.acked_sent_after(k, s) >= 20,
                    "20 commits acknowledged after the restart",
                )
            else:
                down = victim
            child.kill()
            positions.advance(name, child)
        elapsed = time.monotonic() - began
    print(
        f"\n{rounds} bookie kill rounds in {elapsed:.1f}s ({elapsed / rounds:.2f}s a round): "
        f"ensemble changed in {replaced}, segment rolled in {rolled}; "
        f"{positions.resumed_in_flight} resumed at an unacknowledged commit"
    )
