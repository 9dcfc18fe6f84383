"""The history checker on synthetic histories: a clean one passes, and each
invariant has a history that breaks it alone (so a checker that stopped
looking at one invariant fails here, not silently in a chaos run)."""

from __future__ import annotations

import ast
import copy
import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

from tests.chaos.checker import INVARIANTS, HistoryError, check, load_history, main

CHECKER = Path(__file__).with_name("checker.py")
ROOT = CHECKER.parents[2]

Event = dict[str, Any]


class History:
    """Builds events with explicit times (so real-time order is chosen by the test)."""

    def __init__(self) -> None:
        self.events: list[Event] = []
        self.ops: dict[str, int] = {}

    def invoke(self, t: float, proc: str, f: str, **value: Any) -> tuple[str, int, str]:
        op = self.ops.get(proc, 0)
        self.ops[proc] = op + 1
        self.events.append(
            {"t": t, "proc": proc, "op": op, "type": "invoke", "f": f, "value": value}
        )
        return proc, op, f

    def done(self, t: float, key: tuple[str, int, str], kind: str = "ok", **value: Any) -> None:
        proc, op, f = key
        self.events.append({"t": t, "proc": proc, "op": op, "type": kind, "f": f, "value": value})

    def call(
        self, t: float, t_done: float, proc: str, f: str, result: dict[str, Any], **value: Any
    ) -> None:
        self.done(t_done, self.invoke(t, proc, f, **value), **result)

    def observe(self, t: float, t_done: float, dlsn: list[int] | None, store: str = "zk") -> None:
        """consumer-s-sub-1 reads subscriber sub's position on stream s."""
        self.call(
            t,
            t_done,
            "consumer-s-sub-1",
            "position",
            {"dlsn": dlsn},
            stream="s",
            subscriber="sub",
            store=store,
        )


W = "writer-s-0"


def rid(i: int) -> str:
    return f"{W}:{i}"


def clean() -> tuple[list[Event], dict[str, Any]]:
    """A small history touching every invariant, with no violation."""
    h = History()
    h.call(1, 2, W, "open", {}, stream="s")
    for i in range(4):
        h.call(3 + i, 3.5 + i, W, "write", {"dlsn": [1, i, 0]}, stream="s", id=rid(i))
    h.done(7.5, h.invoke(7, W, "write", stream="s", id=rid(4)), "fail", error="rejected")
    h.done(8.5, h.invoke(8, W, "write", stream="s", id=rid(5)), "info", error="timeout")
    h.invoke(9, W, "write", stream="s", id=rid(6))  # never completed, never landed
    h.call(10, 10.5, W, "write", {"dlsn": [1, 5, 0]}, stream="s", id=rid(7))
    h.call(4, 4.2, "reader-s-0", "read", {"records": [[rid(0), [1, 0, 0]]]}, stream="s")
    h.call(
        6.8,
        7,
        "reader-s-0",
        "read",
        {"records": [[rid(i), [1, i, 0]] for i in (1, 2, 3)]},
        stream="s",
    )
    c = "consumer-s-sub-0"
    sub = {"stream": "s", "subscriber": "sub"}
    h.call(5, 5.1, c, "commit", {}, store="zk", dlsn=[1, 1, 0], **sub)
    h.call(6, 6.1, c, "position", {"dlsn": [1, 1, 0]}, store="zk", **sub)
    h.call(7.2, 7.3, c, "commit", {}, store="zk", dlsn=[1, 3, 0], **sub)
    h.done(8.7, h.invoke(8.6, c, "commit", store="zk", dlsn=[1, 4, 0], **sub), "info", error="x")
    h.call(9, 9.1, "migrator-0", "migrate", {"dlsn": [1, 3, 0]}, to="log-segment", **sub)
    h.call(9.5, 9.6, c, "position", {"dlsn": [1, 3, 0]}, store="log-segment", **sub)
    h.call(11, 11.1, "retention-0", "truncate", {}, stream="s", dlsn=[1, 0, 0])
    h.call(2, 2.1, "nemesis", "fault", {"pid": 7}, kind="kill", target="bookie-1")
    final = {
        "streams": {
            "s": [[rid(i), [1, i, 0]] for i in range(4)]
            + [[rid(5), [1, 4, 0]], [rid(7), [1, 5, 0]]]
        },
        "subscriptions": {"s/sub": [1, 3, 0], "s/spark": [1, 3, 0]},
        "spark": {
            "stream": "s",
            "subscriber": "spark",
            "position": [1, 3, 0],
            "output": [[rid(i), [1, i, 0]] for i in range(4)],
        },
    }
    return h.events, final


def only(report: Any, name: str) -> None:
    assert report.violated == [name], report.table()


def test_clean_history_passes() -> None:
    events, final = clean()
    report = check(events, final)
    assert report.ok, report.table()
    for name in INVARIANTS:
        assert report.invariants[name].checked > 0, name
    assert report.ops["write"] == {"ok": 5, "fail": 1, "unknown": 2}
    assert report.ops["commit"] == {"ok": 2, "fail": 0, "unknown": 1}
    assert report.warnings == []


def test_order_of_lines_does_not_matter() -> None:
    """Per-actor files are concatenated, so events come in no global order."""
    events, final = clean()
    assert check(list(reversed(events)), final).ok


# ---------------------------------------------------------------- one invariant each


def test_acked_record_missing() -> None:
    events, final = clean()
    final["streams"]["s"].pop()  # rid(7): acked, not read, past Spark's position
    report = check(events, final)
    only(report, "acked-present")
    assert report.invariants["acked-present"].violation_count == 1
    assert rid(7) in report.invariants["acked-present"].violations[0]


def test_acked_record_at_another_dlsn() -> None:
    events, final = clean()
    final["streams"]["s"][-1][1] = [2, 0, 0]
    only(check(events, final), "acked-present")


def test_truncate_excuses_absence_but_not_duplicates() -> None:
    events, final = clean()
    h = History()
    h.invoke(12, "retention-1", "truncate", stream="s", dlsn=[1, 2, 0])  # outcome unknown
    del final["streams"]["s"][0:2]
    del final["spark"]  # its completeness would need the records too
    assert check(events + h.events, final).ok
    # A failed truncate excuses nothing.
    h2 = History()
    h2.done(
        12.5,
        h2.invoke(12, "retention-1", "truncate", stream="s", dlsn=[1, 2, 0]),
        "fail",
        error="no",
    )
    report = check(events + h2.events, final)
    assert set(report.violated) == {"acked-present", "reads-agree"}
    # Duplicates are never excused.
    final["streams"]["s"].append([rid(3), [1, 6, 0]])
    assert "no-duplicates" in check(events + h.events, final).violated


def test_duplicate_of_an_unacked_write() -> None:
    events, final = clean()
    final["streams"]["s"].append([rid(5), [1, 6, 0]])
    report = check(events, final)
    only(report, "no-duplicates")
    assert report.invariants["no-duplicates"].violation_count == 1


def test_phantom_record() -> None:
    events, final = clean()
    final["streams"]["s"].append(["nobody:1", [1, 6, 0]])
    only(check(events, final), "no-phantoms")


def test_failed_write_present_is_a_phantom() -> None:
    events, final = clean()
    final["streams"]["s"].append([rid(4), [1, 6, 0]])
    only(check(events, final), "no-phantoms")


def test_record_of_another_stream_is_a_phantom() -> None:
    events, final = clean()
    final["streams"]["other"] = [[rid(6), [1, 0, 0]]]
    only(check(events, final), "no-phantoms")


def two_proxy_writers(a_dlsn: list[int], b_dlsn: list[int], b_invoked: float) -> list[Event]:
    """a is acked at t=2; b (another proc) is invoked at b_invoked."""
    h = History()
    h.call(1, 2, "proxy-writer-0", "write", {"dlsn": a_dlsn}, stream="t", id="a")
    h.call(b_invoked, 4, "proxy-writer-1", "write", {"dlsn": b_dlsn}, stream="t", id="b")
    return h.events


def test_ack_order_real_time() -> None:
    events, final = clean()
    final["streams"]["t"] = [["b", [1, 0, 0]], ["a", [1, 1, 0]]]
    report = check(events + two_proxy_writers([1, 1, 0], [1, 0, 0], 3), final)
    only(report, "ack-order")
    # Concurrent (b invoked before a was acked): either order is fine.
    assert check(events + two_proxy_writers([1, 1, 0], [1, 0, 0], 1.5), final).ok


def overlapping_writes(proc: str, *, opened: bool) -> list[Event]:
    """x then y invoked by ``proc``, both acked, y before x in the log."""
    h = History()
    if opened:
        h.call(0.5, 0.6, proc, "open", {}, stream="t")
    x = h.invoke(1, proc, "write", stream="t", id="x")
    y = h.invoke(1.1, proc, "write", stream="t", id="y")
    h.done(2, y, dlsn=[1, 0, 0])
    h.done(2, x, dlsn=[1, 1, 0])
    return h.events


def test_ack_order_per_proc() -> None:
    """Overlapping writes of one writer (so real time allows both orders)
    must still land in invoke order: one LogWriter sequences them."""
    events, final = clean()
    final["streams"]["t"] = [["y", [1, 0, 0]], ["x", [1, 1, 0]]]
    report = check(events + overlapping_writes("writer-t-0", opened=True), final)
    only(report, "ack-order")
    assert "invoked x before y" in report.invariants["ack-order"].violations[0]


def test_ack_order_through_a_proxy_is_real_time_only() -> None:
    """Through a proxy, two writes in flight at once may land either way (a
    send retried on another proxy overtakes): no sequence numbers."""
    events, final = clean()
    final["streams"]["t"] = [["y", [1, 0, 0]], ["x", [1, 1, 0]]]
    assert check(events + overlapping_writes("proxy-writer-t-0", opened=False), final).ok


def takeover(
    old_write_outcome: str, present: bool, old_write_at: float = 7
) -> tuple[list[Event], dict[str, Any]]:
    """writer-u-0 opens u and writes; writer-u-1 opens at 5-6; then
    writer-u-0 writes again (invoked at old_write_at)."""
    events, final = clean()
    h = History()
    h.call(1, 2, "writer-u-0", "open", {}, stream="u")
    h.call(3, 3.5, "writer-u-0", "write", {"dlsn": [1, 0, 0]}, stream="u", id="old-1")
    h.call(5, 6, "writer-u-1", "open", {}, stream="u")
    late = h.invoke(old_write_at, "writer-u-0", "write", stream="u", id="old-2")
    if old_write_outcome == "ok":
        h.done(old_write_at + 0.5, late, dlsn=[1, 1, 0])
    elif old_write_outcome == "fail":
        h.done(old_write_at + 0.5, late, "fail", error="fenced")
    h.call(8, 8.5, "writer-u-1", "write", {"dlsn": [2, 0, 0]}, stream="u", id="new-1")
    final["streams"]["u"] = [["old-1", [1, 0, 0]]]
    if present:
        final["streams"]["u"].append(["old-2", [1, 1, 0]])
    final["streams"]["u"].append(["new-1", [2, 0, 0]])
    return events + h.events, final


def test_fenced_writer_acked_after_takeover() -> None:
    events, final = takeover("ok", present=True)
    report = check(events, final)
    only(report, "fenced-absent")
    assert "writer-u-1 opened" in report.invariants["fenced-absent"].violations[0]


def test_fenced_writer_present_with_unknown_outcome() -> None:
    only(check(*takeover("unknown", present=True)), "fenced-absent")


def test_fenced_writer_rejected_is_clean() -> None:
    assert check(*takeover("fail", present=False)).ok
    # Invoked before the takeover completed: it may have landed.
    assert check(*takeover("ok", present=True, old_write_at=5.5)).ok


def test_read_at_another_dlsn() -> None:
    events, final = clean()
    h = History()
    h.call(12, 12.1, "reader-s-1", "read", {"records": [[rid(5), [1, 9, 0]]]}, stream="s")
    only(check(events + h.events, final), "reads-agree")


def test_read_of_a_lost_record() -> None:
    events, final = clean()
    h = History()
    h.call(9, 9.1, "reader-s-1", "read", {"records": [[rid(6), [1, 6, 0]]]}, stream="s")
    only(check(events + h.events, final), "reads-agree")


def test_reads_go_backwards() -> None:
    events, final = clean()
    h = History()
    h.call(12, 12.1, "reader-s-1", "read", {"records": [[rid(2), [1, 2, 0]]]}, stream="s")
    h.call(13, 13.1, "reader-s-1", "read", {"records": [[rid(1), [1, 1, 0]]]}, stream="s")
    report = check(events + h.events, final)
    only(report, "reads-agree")
    assert "after [1,2,0]" in report.invariants["reads-agree"].violations[0]


def test_commit_lost() -> None:
    events, final = clean()
    h = History()
    h.call(
        12,
        12.1,
        "consumer-s-sub-1",
        "commit",
        {},
        stream="s",
        subscriber="sub",
        store="log-segment",
        dlsn=[1, 5, 0],
    )
    only(check(events + h.events, final), "commit-durable")


def test_commit_lost_to_null() -> None:
    events, final = clean()
    h = History()
    h.call(1, 1.1, "c", "commit", {}, stream="s", subscriber="other", store="zk", dlsn=[1, 0, 0])
    final["subscriptions"]["s/other"] = None
    only(check(events + h.events, final), "commit-durable")
    del final["subscriptions"]["s/other"]
    only(check(events + h.events, final), "commit-durable")


def test_unknown_commit_may_be_lost() -> None:
    events, final = clean()
    h = History()
    h.invoke(
        12, "consumer-s-sub-1", "commit", stream="s", subscriber="sub", store="zk", dlsn=[1, 5, 0]
    )
    assert check(events + h.events, final).ok


def test_position_goes_backwards() -> None:
    events, final = clean()
    h = History()
    # After the commit of [1,3,0] completed (7.3), another store's position says [1,1,0].
    h.observe(8, 8.1, [1, 1, 0], store="log-segment")
    report = check(events + h.events, final)
    only(report, "position-monotone")
    assert "commit by consumer-s-sub-0" in report.invariants["position-monotone"].violations[0]


def test_position_concurrent_with_commit_is_fine() -> None:
    events, final = clean()
    h = History()
    h.observe(7.25, 7.4, [1, 1, 0])
    assert check(events + h.events, final).ok


def test_migration_loses_position() -> None:
    events, final = clean()
    h = History()
    h.call(12, 12.1, "migrator-1", "migrate", {"dlsn": None}, stream="s", subscriber="sub", to="zk")
    only(check(events + h.events, final), "position-monotone")


def test_final_below_an_observation() -> None:
    events, final = clean()
    h = History()
    h.observe(12, 12.1, [1, 4, 0])
    only(check(events + h.events, final), "position-monotone")


def test_spark_duplicate() -> None:
    events, final = clean()
    final["spark"]["output"].append([rid(2), [1, 2, 0]])
    report = check(events, final)
    only(report, "spark-once")
    assert report.invariants["spark-once"].violation_count == 1


def test_spark_missing_a_committed_record() -> None:
    events, final = clean()
    del final["spark"]["output"][1]
    only(check(events, final), "spark-once")


def test_spark_phantom() -> None:
    events, final = clean()
    final["spark"]["output"].append(["nobody:2", [1, 9, 0]])
    only(check(events, final), "no-phantoms")


def test_no_spark_means_not_checked() -> None:
    events, final = clean()
    del final["spark"]
    report = check(events, final)
    assert report.ok
    assert report.invariants["spark-once"].checked == 0


def test_examples_capped_counts_exact() -> None:
    events, final = clean()
    final["streams"]["s"].extend([f"ghost:{i}", [2, i, 0]] for i in range(100))
    r = check(events, final).invariants["no-phantoms"]
    assert r.violation_count == 100
    assert len(r.violations) == 20


# ----------------------------------------------------------------------- loading


def lines_of(events: list[Event]) -> list[str]:
    return [json.dumps(e) + "\n" for e in events]


def test_torn_last_line_and_blank_lines() -> None:
    events, _ = clean()
    lines = lines_of(events)
    lines.insert(3, "\n")
    torn = lines + [lines[0][: len(lines[0]) // 2]]
    assert load_history(torn) == events


def test_malformed_line_in_the_middle() -> None:
    events, _ = clean()
    lines = lines_of(events)
    lines[4] = '{"t": 1, "proc": "x", "op"\n'
    with pytest.raises(HistoryError, match="line 5"):
        load_history(lines)
    lines[4] = '{"t": 1}\n'
    with pytest.raises(HistoryError, match="line 5"):
        load_history(lines)


def test_directory_of_actor_files_each_torn(tmp_path: Path) -> None:
    """Each actor's file may have its own torn last line (kill -9)."""
    events, final = clean()
    by_proc: dict[str, list[Event]] = {}
    for e in events:
        by_proc.setdefault(e["proc"], []).append(e)
    for proc, mine in by_proc.items():
        (tmp_path / f"{proc}.jsonl").write_text("".join(lines_of(mine)) + '{"t": 99, "pr')
    loaded = load_history(tmp_path)
    assert sorted(map(json.dumps, loaded)) == sorted(map(json.dumps, events))
    assert check(loaded, final).ok


# --------------------------------------------------------------------------- cli


def run_cli(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, str(CHECKER), *args], capture_output=True, text=True, cwd=ROOT, timeout=60
    )


def test_cli_exit_codes(tmp_path: Path) -> None:
    events, final = clean()
    hist = tmp_path / "history.jsonl"
    hist.write_text("".join(lines_of(events)))
    good = tmp_path / "final.json"
    good.write_text(json.dumps(final))
    res = run_cli(str(hist), str(good))
    assert res.returncode == 0, res.stdout + res.stderr
    assert "acked-present" in res.stdout and "OK" in res.stdout

    final["streams"]["s"].pop()
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps(final))
    res = run_cli(str(hist), str(bad), "--json")
    assert res.returncode == 1, res.stdout + res.stderr
    data = json.loads(res.stdout)
    assert data["ok"] is False
    assert data["invariants"]["acked-present"]["violation_count"] == 1

    assert run_cli(str(tmp_path / "missing.jsonl"), str(good)).returncode == 2
    broken = tmp_path / "broken.jsonl"
    broken.write_text("".join(lines_of(events[:3])) + "garbage\n" + "".join(lines_of(events[3:])))
    res = run_cli(str(broken), str(good))
    assert res.returncode == 2 and "line 4" in res.stderr
    notjson = tmp_path / "final.txt"
    notjson.write_text("{")
    assert run_cli(str(hist), str(notjson)).returncode == 2
    assert main([str(hist), str(good)]) == 0


def test_checker_is_independent_of_the_product() -> None:
    """stdlib only: a shared bug in dlog could not hide from the checker."""
    tree = ast.parse(CHECKER.read_text())
    modules: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            modules.update(a.name for a in node.names)
        elif isinstance(node, ast.ImportFrom):
            assert node.level == 0, "relative import"
            modules.add(node.module or "")
    tops = {m.split(".")[0] for m in modules}
    assert tops <= set(sys.stdlib_module_names), tops - set(sys.stdlib_module_names)
    assert not tops & {"dlog", "subscriptions", "tests"}


def test_a_large_history_is_checked_whole() -> None:
    """200,000 lines, every one judged. (An O(n^2) check would not finish
    within the test timeout; how fast it is, is not this test's business.)"""
    n = 100_000
    events: list[Event] = [
        {"t": 0.0, "proc": W, "op": 0, "type": "invoke", "f": "open", "value": {"stream": "s"}},
        {"t": 0.1, "proc": W, "op": 0, "type": "ok", "f": "open", "value": {}},
    ]
    records = []
    for i in range(1, n + 1):
        value = {"stream": "s", "id": rid(i)}
        events.append(
            {"t": float(i), "proc": W, "op": i, "type": "invoke", "f": "write", "value": value}
        )
        events.append(
            {
                "t": i + 5.0,
                "proc": W,
                "op": i,
                "type": "ok",
                "f": "write",
                "value": {"dlsn": [1, i, 0]},
            }
        )
        records.append([rid(i), [1, i, 0]])
    report = check(events, {"streams": {"s": records}, "subscriptions": {}})
    assert report.ok
    assert report.invariants["acked-present"].checked == n


# -------------------------------------------------------------------- hypothesis


@st.composite
def single_writer(draw: st.DrawFn) -> tuple[list[Event], dict[str, Any], list[str]]:
    """A valid single-writer history: random outcomes and overlapping
    in-flight writes; the log holds every ok write and some unknown ones,
    in invoke order. Also a reader and a committing consumer."""
    n = draw(st.integers(1, 30))
    outcomes = draw(
        st.lists(st.sampled_from(["ok", "fail", "info", "none"]), min_size=n, max_size=n)
    )
    landed = draw(st.lists(st.booleans(), min_size=n, max_size=n))
    delays = draw(st.lists(st.floats(0.01, 5), min_size=n, max_size=n))
    h = History()
    h.call(0, 0.5, W, "open", {}, stream="s")
    final_log: list[list[Any]] = []
    acked: list[str] = []
    pending = []
    for i in range(n):
        key = h.invoke(1 + i, W, "write", stream="s", id=rid(i))
        if outcomes[i] == "ok" or (outcomes[i] in ("info", "none") and landed[i]):
            final_log.append([rid(i), [1, len(final_log), 0]])
        if outcomes[i] == "ok":
            acked.append(rid(i))
            pending.append((1 + i + delays[i], key, {"dlsn": final_log[-1][1]}))
        elif outcomes[i] == "fail":
            h.done(1 + i + delays[i], key, "fail", error="no")
        elif outcomes[i] == "info":
            h.done(1 + i + delays[i], key, "info", error="?")
    for t, key, value in pending:
        h.done(t, key, **value)
    end = float(n + 10)
    # A reader saw a prefix of the log, in batches.
    seen = draw(st.integers(0, len(final_log)))
    cuts = sorted(draw(st.lists(st.integers(0, seen), max_size=4)))
    for j, (lo, hi) in enumerate(zip([0, *cuts], [*cuts, seen], strict=True)):
        h.call(
            end + j, end + j + 0.1, "reader-s-0", "read", {"records": final_log[lo:hi]}, stream="s"
        )
    # A consumer committed increasing positions of the log; the final one is
    # the last ok commit or an unknown one after it.
    sub = {"stream": "s", "subscriber": "sub", "store": "zk"}
    position = None
    if final_log:
        picks = sorted(draw(st.lists(st.integers(0, len(final_log) - 1), max_size=4)))
        for j, p in enumerate(picks):
            d = final_log[p][1]
            if draw(st.booleans()):
                h.call(end + 10 + j, end + 10.5 + j, "consumer-0", "commit", {}, dlsn=d, **sub)
                position = d
            else:
                h.invoke(end + 10 + j, "consumer-0", "commit", dlsn=d, **sub)
                if draw(st.booleans()):
                    position = d
    final = {"streams": {"s": final_log}, "subscriptions": {"s/sub": position}}
    return h.events, final, acked


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(single_writer())
def test_valid_histories_never_violate(case: tuple[list[Event], dict[str, Any], list[str]]) -> None:
    events, final, _ = case
    report = check(events, final)
    assert report.ok, report.table()


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(single_writer(), st.sampled_from(["drop", "duplicate", "reorder", "phantom"]), st.data())
def test_mutated_histories_always_violate(
    case: tuple[list[Event], dict[str, Any], list[str]], mutation: str, data: st.DataObject
) -> None:
    events, final, acked = case
    final = copy.deepcopy(final)
    log = final["streams"]["s"]
    at = {r: i for i, (r, _) in enumerate(log)}
    if mutation == "drop":
        assume(acked)
        log.pop(at[data.draw(st.sampled_from(acked))])
    elif mutation == "duplicate":
        assume(log)
        i = data.draw(st.integers(0, len(log) - 1))
        j = data.draw(st.integers(0, len(log)))
        log.insert(j, [log[i][0], [2, 0, 0]])
    elif mutation == "reorder":
        assume(len(acked) >= 2)
        a, b = data.draw(st.lists(st.sampled_from(acked), min_size=2, max_size=2, unique=True))
        i, j = at[a], at[b]
        if data.draw(st.booleans()):
            log[i], log[j] = log[j], log[i]  # records move with their DLSNs
        else:
            log[i][0], log[j][0] = log[j][0], log[i][0]  # ids swap DLSNs
    else:
        log.insert(data.draw(st.integers(0, len(log))), ["phantom:0", [1, 99, 0]])
    assert not check(events, final).ok
