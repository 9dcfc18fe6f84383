"""A hypothesis state machine over the log-segment store: three store
instances (each its own ZooKeeper session and ledger client) on real
ZooKeeper and bookie processes commit, take over, release, crash (also in
the middle of a segment switch or a takeover, parked at a failpoint while
the others act) and have their sessions expire.

After every step:

* **one owner**: every commit acknowledged after the latest takeover won
  was acknowledged to that takeover's instance;
* **no regression**: a fresh instance reads a position at least every
  acknowledged commit (once live owners have published their LAC: a read
  may lag a live owner's last moment, see subscriptions.store), and a
  takeover resumes at least there too; positions are always DLSNs that
  were committed;
* **liveness**: the owner's commits succeed when no takeover is under way.

A real cluster is not deterministic, so hypothesis cannot replay a failing
example faithfully (it reports "Flaky"): the machine records the first
violation itself, with the steps that led to it, and the test reports that.
For the same reason no draw may depend on what the cluster did (see the
rules' comment).

Examples: ``DLOG_STATEFUL_EXAMPLES`` (default 40) of up to
``DLOG_STATEFUL_STEPS`` (default 30) steps; the run prints which
failpoints it parked at and how each park ended.
"""

from __future__ import annotations

import asyncio
import collections
import concurrent.futures
import contextvars
import dataclasses
import functools
import itertools
import os
import sys
import traceback
from collections.abc import Callable, Coroutine
from typing import Any, ClassVar, TypeVar

import pytest
from hypothesis import HealthCheck, Phase, settings
from hypothesis import event as hypothesis_event
from hypothesis import strategies as st
from hypothesis.errors import InvalidArgument
from hypothesis.stateful import (
    RuleBasedStateMachine,
    invariant,
    rule,
    run_state_machine_as_test,
)

from dlog import failpoints
from dlog.conf.dlog import DLogConfig
from dlog.dlsn import DLSN, NonInclusiveLowerBound
from dlog.errors import DLogError, SubscriptionFencedError
from dlog.loop_thread import LoopThread
from dlog.namespace import Namespace
from dlog.zk import NoNodeError
from subscriptions.log_segment import LogSegmentSubscriptionsStore
from tests.compat.distributedlog_rules import java_is_valid, java_position
from tests.crash import crash, expire_session

pytestmark = pytest.mark.timeout(900)

T = TypeVar("T")
F = TypeVar("F", bound=Callable[..., Any])
SID = "s"
SLOTS = 3
MAX_ENTRIES = 4  # a roll every few commits

ROLL_POINTS = [
    "subscriptions.roll.after_intent",
    "subscriptions.roll.after_new_segment",
    "subscriptions.roll.after_switch",
    "subscriptions.roll.after_close",
    "subscriptions.roll.after_delete",
]
#: A takeover goes through the switch's steps 1-3 after winning the znode.
TAKEOVER_POINTS = [
    "subscriptions.takeover.before_claim",
    "subscriptions.takeover.after_claim",
    "subscriptions.roll.after_new_segment",
    "subscriptions.roll.after_switch",
    "subscriptions.roll.after_delete",
]
WON_BY = {p for p in TAKEOVER_POINTS if p != "subscriptions.takeover.before_claim"}

#: (kind, point, ending) -> times: what the run explored.
COVERAGE: collections.Counter[tuple[str, str, str]] = collections.Counter()
#: Which instance the running coroutine acts for (tasks inherit it), so a
#: failpoint gate stops only the instance a rule means.
ACTOR: contextvars.ContextVar[int | None] = contextvars.ContextVar("actor", default=None)
#: The first violation found, with the steps of its example.
VIOLATIONS: list[str] = []
_streams = itertools.count()


def event(message: str) -> None:
    """hypothesis's ``event``, also callable from the deterministic sweep."""
    try:
        hypothesis_event(message)
    except InvalidArgument:
        pass  # not inside a hypothesis example


@dataclasses.dataclass
class Instance:
    slot: int
    ns: Namespace
    store: LogSegmentSubscriptionsStore
    #: Believes it owns the subscription (acquired, not released).
    acquired: bool = False
    #: Parked at a failpoint: (kind, point, gate).
    parked: tuple[str, str, failpoints.Gate] | None = None
    #: A takeover running in the background (parked).
    takeover: concurrent.futures.Future[DLSN] | None = None
    #: When that takeover won the znode, if it is parked after winning.
    won_at: int | None = None


class Cluster:
    uri: str
    ledgers_uri: str
    loop: LoopThread


def step(fn: F) -> F:
    """Log the step; record the first violation (or hang) with the log."""

    @functools.wraps(fn)
    def wrapper(self: SubscriptionMachine, *args: Any, **kwargs: Any) -> Any:
        self.log.append(f"{fn.__name__}{kwargs or ''}")
        try:
            return fn(self, *args, **kwargs)
        except (AssertionError, TimeoutError, DLogError) as e:
            if not VIOLATIONS:
                steps = "\n".join(f"  {i}. {s}" for i, s in enumerate(self.log, 1))
                where = "".join(traceback.format_exception(e)[-6:])
                VIOLATIONS.append(
                    f"{type(e).__name__}: {e}\nafter these steps:\n{steps}\n\nraised at:\n{where}"
                )
            raise

    return wrapper  # type: ignore[return-value]


class SubscriptionMachine(RuleBasedStateMachine):
    cluster: ClassVar[Cluster]

    def __init__(self) -> None:
        super().__init__()
        self.log: list[str] = []
        self.stream = f"sm-{os.getpid()}-{next(_streams)}"
        self.clock = itertools.count()
        self.instances = [self._open(slot) for slot in range(SLOTS)]
        self.reader_ns = self._namespace()
        self.reader = self.run(self._store(self.reader_ns))
        self.acks: list[tuple[int, DLSN, int]] = []  # (slot, commit, stamp)
        self.sent: set[DLSN] = set()
        self.java_seen = NonInclusiveLowerBound
        self.next_entry = 0
        self.owner: int | None = None
        #: When the latest takeover won (or the owner released): only the
        #: owner may have a commit acknowledged after it.
        self.won_at = -1
        #: Another instance started a takeover since the owner won: it may
        #: have fenced the owner, even if it then crashed or lost.
        self.contested = False

    # ------------------------------------------------------------------
    # plumbing
    # ------------------------------------------------------------------
    def run(self, coro: Coroutine[Any, Any, T], timeout: float = 60.0) -> T:
        return self.cluster.loop.run(asyncio.wait_for(coro, timeout))

    def _namespace(self) -> Namespace:
        conf = DLogConfig.load(
            overrides={
                "bkc.metadataServiceUri": self.cluster.ledgers_uri,
                "ensemble-size": 3,
                "write-quorum-size": 2,
                "ack-quorum-size": 2,
                "zkSessionTimeoutSeconds": 4,
                "logSegmentBasedSubscriptionsStoreEnabled": True,
                "subscriptionSegmentMaxEntries": MAX_ENTRIES,
                "createStreamIfNotExists": True,
            }
        )
        return self.run(Namespace.open(self.cluster.uri, conf, bind=True))

    async def _store(self, ns: Namespace) -> LogSegmentSubscriptionsStore:
        store = (await ns.open_log(self.stream)).subscriptions
        assert isinstance(store, LogSegmentSubscriptionsStore)
        return store

    def _open(self, slot: int) -> Instance:
        ns = self._namespace()
        return Instance(slot, ns, self.run(self._store(ns)))

    def _next_commits(self, n: int) -> list[DLSN]:
        out = []
        for _ in range(n):
            self.next_entry += 1
            out.append(DLSN(1, self.next_entry, 0))
        self.sent.update(out)
        return out

    def _max_acked(self, before: int | None = None) -> DLSN:
        acked = [d for _, d, stamp in self.acks if before is None or stamp < before]
        return max(acked, default=NonInclusiveLowerBound)

    async def _commit(self, inst: Instance, dlsn: DLSN) -> int | DLogError:
        """Commit; the stamp of its acknowledgment, or the error."""
        try:
            ACTOR.set(inst.slot)
            await inst.store.advance_commit_position(SID, dlsn)
        except DLogError as e:
            return e
        return next(self.clock)

    async def _commit_all(self, inst: Instance, dlsns: list[DLSN]) -> list[int | DLogError]:
        return list(await asyncio.gather(*(self._commit(inst, d) for d in dlsns)))

    def _record(self, inst: Instance, dlsns: list[DLSN], outcomes: list[int | DLogError]) -> None:
        for dlsn, outcome in zip(dlsns, outcomes, strict=True):
            if isinstance(outcome, int):
                self.acks.append((inst.slot, dlsn, outcome))
                if outcome > self.won_at:
                    assert inst.slot == self.owner, (
                        f"slot {inst.slot} had {dlsn} acknowledged after slot {self.owner}'s "
                        f"takeover won: two owners"
                    )
            else:
                event(f"commit failed: {type(outcome).__name__}")
        acked = [d for d, o in zip(dlsns, outcomes, strict=True) if isinstance(o, int)]
        self.log.append(f"   acked {acked}")

    def _takeover_done(self, inst: Instance, position: DLSN, won_at: int) -> None:
        self.log.append(f"   slot {inst.slot} took over at {position}")
        assert position >= self._max_acked(before=won_at), (
            f"slot {inst.slot} resumed at {position}, below an acknowledged commit "
            f"{self._max_acked(before=won_at)}"
        )
        assert position == NonInclusiveLowerBound or position in self.sent, position
        if won_at >= self.won_at:
            self.owner, self.won_at = inst.slot, won_at
            # Uncontested, unless another takeover is still under way (it
            # may have fenced this one's segment already).
            self.contested = any(i.takeover is not None for i in self.instances if i is not inst)
        inst.acquired = True

    def _owning_state(self, inst: Instance) -> bool:
        st_ = inst.store._subs.get(SID)
        return st_ is not None and st_.error is None

    def _eligible(self, **want: bool) -> list[Instance]:
        out = []
        for inst in self.instances:
            facts = {
                "acquired": inst.acquired,
                "parked": inst.parked is not None,
                "taking_over": inst.takeover is not None,
                "owning": self._owning_state(inst),
            }
            if all(facts[k] == v for k, v in want.items()):
                out.append(inst)
        return out

    def _parked_points(self) -> set[str]:
        return {i.parked[1] for i in self.instances if i.parked is not None}

    async def _settle(self) -> None:
        """Wait until live owners have published their LAC."""
        for inst in self.instances:
            st_ = inst.store._subs.get(SID)
            if st_ is None or st_.error is not None:
                continue
            if st_.appender is not None:
                await asyncio.wait_for(st_.appender.lac_settled(), 5)

    async def _arm(self, point: str, inst: Instance) -> failpoints.Gate:
        """A gate only ``inst``'s coroutines (and the tasks they start) stop at."""
        slot = inst.slot
        return failpoints.arm(point, only=lambda: ACTOR.get() == slot)

    async def _as(self, inst: Instance, coro: Coroutine[Any, Any, T]) -> T:
        """Run ``coro`` as ``inst`` (its tasks inherit the tag)."""
        ACTOR.set(inst.slot)
        return await coro

    async def _reached(
        self, gate: failpoints.Gate, gave_up: Callable[[], bool], timeout: float = 30.0
    ) -> bool:
        """Whether the gate parked someone, before ``gave_up()`` (the switch
        or takeover ended without getting there)."""
        for _ in range(int(timeout / 0.005)):
            if gate.reached:
                return True
            if gave_up():
                break
            await asyncio.sleep(0.005)
        gate.release()  # never reached: disarm it
        return False

    # ------------------------------------------------------------------
    # parking and resuming
    # ------------------------------------------------------------------
    def _park_roll(self, inst: Instance, point: str) -> bool:
        """Commit until a roll starts, parking it at ``point``."""
        gate = self.run(self._arm(point, inst))
        st_ = inst.store._subs[SID]
        dlsns: list[DLSN] = []
        outcomes: list[int | DLogError] = []
        for _ in range(MAX_ENTRIES + 1):
            if st_.switching is not None or st_.error is not None:
                break  # a roll is on (committing now would wait for it to park)
            [dlsn] = self._next_commits(1)
            dlsns.append(dlsn)
            outcomes.append(self.run(self._commit(inst, dlsn)))
        self._record(inst, dlsns, outcomes)
        switching = st_.switching
        if not self.run(self._reached(gate, lambda: switching is None or switching.done())):
            return False
        inst.parked = ("roll", point, gate)
        self.log.append(f"   slot {inst.slot}'s roll parked at {point}")
        return True

    def _park_takeover(self, inst: Instance, point: str) -> bool:
        self.contested = True
        gate = self.run(self._arm(point, inst))
        takeover = asyncio.run_coroutine_threadsafe(
            self._as(inst, inst.store.acquire(SID)), self.cluster.loop.loop
        )
        if not self.run(self._reached(gate, takeover.done)):
            # It did not get there (an empty subscription has no old
            # segment to delete...): an ordinary takeover then.
            self._finish_takeover(inst, takeover, None)
            return False
        inst.parked, inst.takeover = ("takeover", point, gate), takeover
        if point in WON_BY:
            # The znode is this instance's now, though acquire has not returned.
            inst.won_at = self.won_at = next(self.clock)
            self.owner = inst.slot
        self.log.append(f"   slot {inst.slot}'s takeover parked at {point}")
        return True

    def _finish_takeover(
        self, inst: Instance, takeover: concurrent.futures.Future[DLSN], won_at: int | None
    ) -> None:
        try:
            position = takeover.result(60)
        except SubscriptionFencedError as e:
            self.log.append(f"   slot {inst.slot}'s takeover failed: {e}")
            event("takeover failed: fenced")
            return
        self._takeover_done(inst, position, won_at if won_at is not None else next(self.clock))

    def _resume(self, inst: Instance) -> None:
        kind, point, gate = inst.parked  # type: ignore[misc]
        inst.parked = None
        self.log.append(f"   resume slot {inst.slot} ({kind} at {point})")
        self.cluster.loop.loop.call_soon_threadsafe(gate.release)
        if inst.takeover is not None:
            takeover, inst.takeover = inst.takeover, None
            won_at, inst.won_at = inst.won_at, None
            self._finish_takeover(inst, takeover, won_at)
            COVERAGE[(kind, point, "resumed")] += 1
            return
        st_ = inst.store._subs.get(SID)
        if st_ is not None and st_.switching is not None:
            self.run(asyncio.wait([st_.switching], timeout=30))
        ok = st_ is not None and st_.error is None
        COVERAGE[(kind, point, "resumed" if ok else "resumed, then fenced")] += 1

    # ------------------------------------------------------------------
    # rules
    # ------------------------------------------------------------------
    # No rule has a precondition and no draw depends on the cluster: every
    # example draws the same shape of data whatever the cluster did, which
    # hypothesis checks (a precondition or a ``sampled_from`` over the
    # instances in some state makes the draws follow the cluster's timing,
    # and hypothesis then stops with FlakyStrategyDefinition). A rule whose
    # instance is not in the state it needs skips, saying so.
    slots = st.integers(0, SLOTS - 1)

    def _pick(self, pick: int, candidates: list[Instance]) -> Instance | None:
        """The ``pick``-th of ``candidates`` (cyclically), or None to skip."""
        if not candidates:
            event("skipped: no instance in the state the rule needs")
            self.log.append("   skipped: no instance in the state it needs")
            return None
        return candidates[pick % len(candidates)]

    def _skip(self, why: str) -> None:
        event(f"skipped: {why}")
        self.log.append(f"   skipped: {why}")

    @rule(pick=slots, n=st.integers(1, 6), concurrent=st.booleans())
    @step
    def commit(self, pick: int, n: int, concurrent: bool) -> None:
        inst = self._pick(pick, self._eligible(acquired=True, parked=False))
        if inst is None:
            return
        dlsns = self._next_commits(n)
        self.log.append(f"   slot {inst.slot} commits {dlsns[0]}..{dlsns[-1]}")
        liveness = inst.slot == self.owner and not self.contested

        async def go() -> list[int | DLogError]:
            if concurrent:
                return await self._commit_all(inst, dlsns)
            out: list[int | DLogError] = []
            for d in dlsns:
                out.append(await self._commit(inst, d))
            return out

        outcomes = self.run(go())
        self._record(inst, dlsns, outcomes)
        if liveness:
            errors = [o for o in outcomes if not isinstance(o, int)]
            assert not errors, f"the owner's commits failed with no takeover under way: {errors}"

    @rule(pick=slots)
    @step
    def acquire(self, pick: int) -> None:
        inst = self._pick(pick, self._eligible(parked=False, taking_over=False))
        if inst is not None:
            self._acquire(inst)

    def _acquire(self, inst: Instance) -> None:
        cached = self._owning_state(inst)  # then acquire only returns it
        self.contested = self.contested or not cached
        self.log.append(f"   slot {inst.slot}{' (cached)' if cached else ''}")
        try:
            position = self.run(self._as(inst, inst.store.acquire(SID)))
        except SubscriptionFencedError as e:
            event(f"acquire failed: {e}")
            return
        if not cached:
            self._takeover_done(inst, position, next(self.clock))

    @rule(pick_a=slots, pick_b=slots, n=st.integers(1, 8))
    @step
    def commit_during_takeover(self, pick_a: int, pick_b: int, n: int) -> None:
        """Commits in flight on one instance while another takes over."""
        a = self._pick(pick_a, self._eligible(acquired=True, parked=False))
        if a is None:
            return
        takers = self._eligible(parked=False, taking_over=False, owning=False)
        b = self._pick(pick_b, [b for b in takers if b is not a])
        if b is None:
            return
        dlsns = self._next_commits(n)
        self.log.append(
            f"   slot {a.slot} commits {dlsns[0]}..{dlsns[-1]}; slot {b.slot} takes over"
        )

        async def go() -> tuple[list[int | DLogError], DLSN | DLogError, int]:
            commits = asyncio.gather(*(self._commit(a, d) for d in dlsns))
            try:
                position: DLSN | DLogError = await self._as(b, b.store.acquire(SID))
            except SubscriptionFencedError as e:
                position = e
            stamp = next(self.clock)
            return list(await commits), position, stamp

        outcomes, position, stamp = self.run(go())
        if isinstance(position, DLSN):
            # Acks that completed before the takeover returned are checked
            # against its position; later ones must not be the old owner's.
            self._takeover_done(b, position, stamp)
        self._record(a, dlsns, outcomes)

    @rule(pick=slots)
    @step
    def release(self, pick: int) -> None:
        inst = self._pick(pick, self._eligible(acquired=True, parked=False))
        if inst is None:
            return
        self.log.append(f"   slot {inst.slot}")
        self.run(self._as(inst, inst.store.release(SID)))
        inst.acquired = False
        if inst.slot == self.owner:
            self.owner, self.won_at = None, next(self.clock)

    @rule(pick=slots, n=st.integers(1, 3))
    @step
    def commit_then_crash(self, pick: int, n: int) -> None:
        """kill -9 right after acknowledgments, before the owner can publish
        the LAC that covers them: a read must still find them."""
        inst = self._pick(pick, self._eligible(acquired=True, parked=False))
        if inst is None:
            return
        dlsns = self._next_commits(n)
        self.log.append(f"   slot {inst.slot} commits {dlsns[0]}..{dlsns[-1]}, then dies")

        async def go() -> list[int | DLogError]:
            out = [await self._commit(inst, d) for d in dlsns]
            await crash(inst.ns)  # before yielding: the LAC task never runs
            return out

        if inst.takeover is not None:
            inst.takeover.cancel()
        self._record(inst, dlsns, self.run(go()))
        self.instances[inst.slot] = self._open(inst.slot)

    @rule(slot=slots, expire=st.booleans())
    @step
    def fault(self, slot: int, expire: bool) -> None:
        """kill -9 an instance (a fresh one takes its slot), or expire its
        ZooKeeper session (it lives on). One rule, so faults stay a minority
        of the steps."""
        inst = self.instances[slot]
        if expire:
            self.run(expire_session(inst.ns.zk))
            return
        if inst.takeover is not None:
            inst.takeover.cancel()
        if inst.parked is not None:
            COVERAGE[(inst.parked[0], inst.parked[1], "crash")] += 1
            event(f"crash parked at {inst.parked[1]}")
        self.run(crash(inst.ns))
        self.instances[slot] = self._open(slot)

    @rule(pick=slots, point=st.sampled_from(ROLL_POINTS))
    @step
    def park_a_roll(self, pick: int, point: str) -> None:
        if len(self._parked_points()) >= 2 or point in self._parked_points():
            return self._skip(f"already parked at {sorted(self._parked_points())}")
        inst = self._pick(pick, self._eligible(parked=False, owning=True, taking_over=False))
        if inst is not None:
            self._park_roll(inst, point)

    @rule(pick=slots, point=st.sampled_from(TAKEOVER_POINTS))
    @step
    def park_a_takeover(self, pick: int, point: str) -> None:
        if len(self._parked_points()) >= 2 or point in self._parked_points():
            return self._skip(f"already parked at {sorted(self._parked_points())}")
        inst = self._pick(pick, self._eligible(parked=False, owning=False, taking_over=False))
        if inst is not None:
            self._park_takeover(inst, point)

    @rule(pick=slots)
    @step
    def resume(self, pick: int) -> None:
        inst = self._pick(pick, self._eligible(parked=True))
        if inst is not None:
            self._resume(inst)

    @rule(
        pick_old=slots,
        pick_new=slots,
        roll_at=st.sampled_from(ROLL_POINTS),
        takeover_at=st.sampled_from(TAKEOVER_POINTS),
        roll_first=st.booleans(),
        old_commits=st.integers(0, 4),
    )
    @step
    def a_takeover_races_a_roll(
        self,
        pick_old: int,
        pick_new: int,
        roll_at: str,
        takeover_at: str,
        roll_first: bool,
        old_commits: int,
    ) -> None:
        """The owner's roll parks at one step, another instance's takeover at
        another; they resume in either order, and the old owner commits
        once its switch is done."""
        if roll_at == takeover_at:
            return self._skip("one failpoint cannot park both sides")
        if self._parked_points():
            return self._skip(f"already parked at {sorted(self._parked_points())}")
        old = self._pick(pick_old, self._eligible(parked=False, owning=True, taking_over=False))
        if old is None:
            return
        takers = self._eligible(parked=False, owning=False, taking_over=False)
        new = self._pick(pick_new, [i for i in takers if i is not old])
        if new is None:
            return
        self._race(old, new, roll_at, takeover_at, roll_first, old_commits)

    def _race(
        self,
        old: Instance,
        new: Instance,
        roll_at: str,
        takeover_at: str,
        roll_first: bool,
        old_commits: int,
    ) -> bool:
        """Park ``old``'s roll at ``roll_at`` and ``new``'s takeover at
        ``takeover_at``, resume them in the given order; whether both parked."""
        if not self._park_roll(old, roll_at):
            return False
        both = self._park_takeover(new, takeover_at)
        first, second = (old, new) if roll_first else (new, old)
        for inst in (first, second):
            if inst.parked is not None:
                self._resume(inst)
            if inst is old and old_commits:
                dlsns = self._next_commits(old_commits)
                self._record(old, dlsns, self.run(self._commit_all(old, dlsns)))
        if both:
            order = "roll first" if roll_first else "takeover first"
            COVERAGE[("race", f"{roll_at} / {takeover_at}", order)] += 1
        return both

    # ------------------------------------------------------------------
    # invariants
    # ------------------------------------------------------------------
    @invariant()
    @step
    def a_fresh_read_is_at_least_every_acknowledged_commit(self) -> None:
        self.run(self._settle())
        position = self.run(self.reader.get_last_commit_position(SID))
        assert position >= self._max_acked(), (
            f"a fresh read returned {position}, below the acknowledged {self._max_acked()}"
        )
        assert position == NonInclusiveLowerBound or position in self.sent, position
        # What a Java consumer reads: a valid position (never "the start"
        # because of an unreadable znode), one committed, never going back.
        try:
            data, _ = self.run(self.reader.zk.get(self.reader.znode(SID)))
        except NoNodeError:
            return
        assert java_is_valid(data), data
        java = java_position(data)
        assert java == NonInclusiveLowerBound or java in self.sent, java
        assert java >= self.java_seen, f"Java's position went back from {self.java_seen} to {java}"
        self.java_seen = java

    def teardown(self) -> None:
        try:
            # Let every parked switch and takeover finish: they must end
            # without breaking anything either.
            for inst in self.instances:
                if inst.parked is not None:
                    self._resume(inst)
            self.a_fresh_read_is_at_least_every_acknowledged_commit()
        finally:
            for inst in self.instances:
                if inst.takeover is not None:
                    inst.takeover.cancel()
                self.run(crash(inst.ns))
            self.run(self.reader_ns.close())
            self.run(failpoints_off())


async def failpoints_off() -> None:
    failpoints.configure("")


@pytest.fixture
def machine_cluster(bookie_cluster, zk_server, zk_root, ledgers_uri):
    bookie_cluster(3)
    cluster = Cluster()
    cluster.uri = f"distributedlog://{zk_server.connect_string}{zk_root}/ns"
    cluster.ledgers_uri = ledgers_uri
    cluster.loop = LoopThread("state-machine")
    SubscriptionMachine.cluster = cluster
    COVERAGE.clear()
    VIOLATIONS.clear()
    try:
        yield cluster
    finally:
        cluster.loop.stop()


def test_every_takeover_step_races_every_roll_step(machine_cluster) -> None:
    """Deterministic sweep: for each step a roll can park at, each step a
    takeover can park at, and both orders of resuming, the owner rolls
    while another instance takes over; the invariants hold after each,
    and the winner's next commits succeed. (The random machine below
    explores further, but may not draw every pair in one run.)"""
    machine = SubscriptionMachine()
    combos = [
        (roll_at, takeover_at, roll_first)
        for roll_at in ROLL_POINTS
        for takeover_at in TAKEOVER_POINTS
        if roll_at != takeover_at
        for roll_first in (True, False)
    ]
    missed = []
    try:
        for roll_at, takeover_at, roll_first in combos:
            machine.log.append(f"race {roll_at} / {takeover_at}, roll first: {roll_first}")
            if machine.owner is None:
                machine._acquire(machine.instances[0])
            old = machine.instances[machine.owner]  # type: ignore[index]
            # The owner passes it round. An instance taken over that has not
            # written since believes it still owns (acquire would just
            # return its position): a commit teaches it.
            new = machine.instances[(old.slot + 1) % SLOTS]
            if machine._owning_state(new):
                [dlsn] = machine._next_commits(1)
                machine._record(new, [dlsn], [machine.run(machine._commit(new, dlsn))])
                assert not machine._owning_state(new)
            if not machine._race(old, new, roll_at, takeover_at, roll_first, old_commits=2):
                missed.append((roll_at, takeover_at, roll_first))
            machine.a_fresh_read_is_at_least_every_acknowledged_commit()
            # Liveness: whoever owns it now commits without errors.
            owner = machine.instances[machine.owner]  # type: ignore[index]
            dlsns = machine._next_commits(3)
            outcomes = machine.run(machine._commit_all(owner, dlsns))
            machine._record(owner, dlsns, outcomes)
            assert all(isinstance(o, int) for o in outcomes), outcomes
            machine.a_fresh_read_is_at_least_every_acknowledged_commit()
        machine.teardown()
    except BaseException:
        print("\n".join(machine.log), file=sys.stderr)
        raise
    assert not missed, f"these races never parked both sides: {missed}"


#: Batches of random walks the machine below may run to reach its coverage.
MAX_BATCHES = 3


def _explored_enough() -> bool:
    """Parked rolls and takeovers, at four or more of the switch's steps."""
    parked_points = {(k, p) for k, p, _ in COVERAGE if k != "race"}
    return {k for k, _ in parked_points} >= {"roll", "takeover"} and len(parked_points) >= 4


def test_log_segment_store_state_machine(machine_cluster) -> None:
    # It must park rolls and takeovers, at several of the switch's steps:
    # here they also meet crashes, expiries and commits. Every pair of steps
    # is raced for certain by the sweep above; how many points one batch of
    # random walks reaches varies from run to run (one CI run reached 5,
    # another parked no roll at all), so a batch short of that is followed
    # by another, with fresh draws, up to MAX_BATCHES.
    for _ in range(MAX_BATCHES):
        try:
            run_state_machine_as_test(
                SubscriptionMachine,
                settings=settings(
                    max_examples=int(os.environ.get("DLOG_STATEFUL_EXAMPLES", "40")),
                    stateful_step_count=int(os.environ.get("DLOG_STATEFUL_STEPS", "30")),
                    deadline=None,
                    # Shrinking replays examples, which a real cluster does not
                    # repeat exactly: report the first violation instead.
                    phases=[Phase.explicit, Phase.reuse, Phase.generate],
                    suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much],
                ),
            )
        except BaseException:
            if VIOLATIONS:
                pytest.fail(VIOLATIONS[0], pytrace=False)
            raise
        if _explored_enough():
            break
    report = "\n".join(f"  {k} {p}: {e} x{n}" for (k, p, e), n in sorted(COVERAGE.items()))
    print(f"state machine parked at:\n{report}", file=sys.stderr)
    assert _explored_enough(), f"too little explored:\n{report}"
