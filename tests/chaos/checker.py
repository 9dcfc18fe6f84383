"""An independent checker of a chaos run's history.

It shares no code with the product (stdlib only; nothing from dlog,
subscriptions or tests), so a bug in the product's DLSN or position code
cannot hide itself by also being in the checker.

History: JSON lines, one per invocation or completion, one file per actor
(``<proc>.jsonl``, written by tests/chaos/history.py) or one combined file::

    {"t": 1700000000.123, "proc": "writer-s1-2", "op": 17, "type": "invoke",
     "f": "write", "value": {...}}

``t`` is time.time(); ``proc`` names an actor incarnation; ``op`` is unique
within its proc and grows in invocation order. ``type`` is "invoke", then
"ok", "fail" (definitely did not happen) or "info" (unknown); an invoke with
no completion is unknown too. DLSNs are ``[segment, entry, slot]`` lists,
compared as tuples; ``null`` is "before the beginning". Functions:

- open      {"stream"} -> ok {}            (fences the stream's previous writer)
- write     {"stream", "id"} -> ok {"dlsn"}   (payload = id; ids unique in the run;
            "proxy-writer-*" procs write through a proxy and have no open)
- read      {"stream"} -> ok {"records": [[id, dlsn], ...]}   (one tailing batch)
- commit    {"stream", "subscriber", "store", "dlsn"} -> ok {}
- position  {"stream", "subscriber", "store"} -> ok {"dlsn": D|null}
- migrate   {"stream", "subscriber", "to"} -> ok {"dlsn": D|null}
- truncate  {"stream", "dlsn"} -> ok {}    (records before dlsn may vanish)
- fault     {"kind", "target"} -> ok {...} (informational)

Final state (JSON, read back through a fresh client after recovery)::

    {"streams": {s: [[id, dlsn], ...]}, "subscriptions": {"s/sub": D|null},
     "spark": {"stream", "subscriber", "position", "output": [[id, dlsn], ...]}}

``spark`` may be absent (then spark-once is not checked).

Usage: ``python tests/chaos/checker.py HISTORY FINAL.json [--json]``, where
HISTORY is a .jsonl file or a directory of them. Exit 0: no violation;
1: a violation; 2: unreadable input.
"""

from __future__ import annotations

import argparse
import bisect
import json
import math
import os
import sys
from collections import Counter, defaultdict
from collections.abc import Iterable, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

__all__ = [
    "INVARIANTS",
    "HistoryError",
    "InvariantResult",
    "Report",
    "check",
    "load_final",
    "load_history",
    "main",
]

#: The invariants, in the order the plan numbers them.
INVARIANTS = (
    "acked-present",
    "no-duplicates",
    "no-phantoms",
    "ack-order",
    "fenced-absent",
    "reads-agree",
    "commit-durable",
    "position-monotone",
    "spark-once",
)

#: Violation examples kept per invariant (the count stays exact).
MAX_EXAMPLES = 20

OUTCOMES = ("ok", "fail", "unknown")

DLSN = tuple[int, ...]
#: Sorts below every DLSN: a null position.
BEFORE_ALL: DLSN = ()


class HistoryError(ValueError):
    """The history or final state cannot be read (exit code 2)."""


# --------------------------------------------------------------------- loading


def _parse_lines(lines: Iterable[str], source: str) -> list[dict[str, Any]]:
    """Parse one actor's lines; only the last non-blank line may be torn."""
    out: list[dict[str, Any]] = []
    pending: tuple[int, str] | None = None  # an unparsable line, fatal unless last
    for number, raw in enumerate(lines, start=1):
        line = raw.strip()
        if not line:
            continue
        if pending is not None:
            bad_number, reason = pending
            raise HistoryError(f"{source}: line {bad_number}: malformed history line ({reason})")
        try:
            obj = json.loads(line)
        except ValueError as exc:
            pending = (number, str(exc))
            continue
        if not isinstance(obj, dict):
            raise HistoryError(f"{source}: line {number}: not a JSON object")
        missing = [k for k in ("proc", "op", "type", "f") if k not in obj]
        if missing or obj["type"] not in ("invoke", "ok", "fail", "info"):
            raise HistoryError(
                f"{source}: line {number}: not a history event "
                f"(missing {missing or 'nothing'}, type {obj.get('type')!r})"
            )
        out.append(obj)
    return out


def load_history(path_or_lines: str | os.PathLike[str] | Iterable[str]) -> list[dict[str, Any]]:
    """The events of a history file, a directory of per-actor ``*.jsonl``
    files, or an iterable of lines. A torn last line (kill -9 mid-write) is
    dropped, per file; a malformed line anywhere else is an error naming its
    line number."""
    if isinstance(path_or_lines, str | os.PathLike):
        path = Path(path_or_lines)
        try:
            if path.is_dir():
                events: list[dict[str, Any]] = []
                for file in sorted(path.glob("*.jsonl")):
                    with open(file, encoding="utf-8", errors="replace") as f:
                        events.extend(_parse_lines(f, str(file)))
                return events
            with open(path, encoding="utf-8", errors="replace") as f:
                return _parse_lines(f, str(path))
        except OSError as exc:
            raise HistoryError(f"{path}: {exc}") from exc
    return _parse_lines(path_or_lines, "<lines>")


def load_final(path: str | os.PathLike[str]) -> dict[str, Any]:
    """The final state written by the runner."""
    try:
        with open(path, encoding="utf-8") as f:
            final = json.load(f)
    except (OSError, ValueError) as exc:
        raise HistoryError(f"{path}: {exc}") from exc
    if not isinstance(final, dict):
        raise HistoryError(f"{path}: the final state is not a JSON object")
    return final


# ---------------------------------------------------------------------- report


@dataclass
class InvariantResult:
    """One invariant: how many things were checked, how many broke it."""

    checked: int = 0
    violation_count: int = 0
    violations: list[str] = field(default_factory=list)

    def violate(self, message: str) -> None:
        self.violation_count += 1
        if len(self.violations) < MAX_EXAMPLES:
            self.violations.append(message)


@dataclass
class Report:
    """The checker's verdict: per invariant, and operations by f and outcome."""

    invariants: dict[str, InvariantResult] = field(
        default_factory=lambda: {name: InvariantResult() for name in INVARIANTS}
    )
    ops: dict[str, dict[str, int]] = field(default_factory=dict)
    #: Oddities of the history itself (orphan completions...); not violations.
    warnings: list[str] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return all(r.violation_count == 0 for r in self.invariants.values())

    @property
    def violated(self) -> list[str]:
        """Names of the invariants with at least one violation."""
        return [n for n, r in self.invariants.items() if r.violation_count]

    def to_json(self) -> dict[str, Any]:
        data = asdict(self)
        data["ok"] = self.ok
        return data

    def table(self) -> str:
        rows = [f"{'invariant':<20} {'checked':>10} {'violations':>10}"]
        for name, r in self.invariants.items():
            rows.append(f"{name:<20} {r.checked:>10} {r.violation_count:>10}")
        rows.append("")
        rows.append(f"{'f':<20} {'ok':>10} {'fail':>10} {'unknown':>10}")
        for f, counts in sorted(self.ops.items()):
            rows.append(
                f"{f:<20} {counts.get('ok', 0):>10} {counts.get('fail', 0):>10} "
                f"{counts.get('unknown', 0):>10}"
            )
        for name, r in self.invariants.items():
            if r.violation_count:
                rows.append("")
                rows.append(f"{name}: {r.violation_count} violation(s)")
                rows.extend(f"  - {v}" for v in r.violations)
                if r.violation_count > len(r.violations):
                    rows.append(f"  ... and {r.violation_count - len(r.violations)} more")
        if self.warnings:
            rows.append("")
            rows.append(f"warnings: {len(self.warnings)}")
            rows.extend(f"  - {w}" for w in self.warnings[:MAX_EXAMPLES])
        rows.append("")
        rows.append("OK" if self.ok else "VIOLATIONS: " + ", ".join(self.violated))
        return "\n".join(rows)


# ---------------------------------------------------------------------- model


@dataclass
class Op:
    """An invocation joined with its completion (if any)."""

    proc: str
    op: int
    f: str
    t: float
    value: dict[str, Any]
    outcome: str = "unknown"  # ok | fail | unknown
    done_t: float = math.inf  # completion time; inf if none (never "before" anything)
    result: dict[str, Any] = field(default_factory=dict)

    @property
    def stream(self) -> str:
        return str(self.value.get("stream"))


def _dlsn(value: Any) -> DLSN:
    """A JSON DLSN as a comparable tuple; null sorts below everything."""
    if value is None:
        return BEFORE_ALL
    return tuple(int(x) for x in value)


def _show(d: DLSN) -> str:
    return "null" if d == BEFORE_ALL else "[" + ",".join(map(str, d)) + "]"


def _join(history: Sequence[dict[str, Any]], report: Report) -> list[Op]:
    """Pair each invoke with its completion by (proc, op)."""
    ops: dict[tuple[str, Any], Op] = {}
    completions: list[dict[str, Any]] = []
    for e in history:
        if e["type"] == "invoke":
            key = (e["proc"], e["op"])
            if key in ops:
                report.warnings.append(f"{e['proc']} op {e['op']}: invoked twice")
                continue
            value = e.get("value") or {}
            ops[key] = Op(e["proc"], e["op"], e["f"], float(e.get("t", 0.0)), value)
        else:
            completions.append(e)
    for e in completions:
        found = ops.get((e["proc"], e["op"]))
        if found is None:
            report.warnings.append(f"{e['proc']} op {e['op']}: {e['type']} without an invoke")
            continue
        if found.done_t != math.inf or found.outcome != "unknown":
            report.warnings.append(f"{e['proc']} op {e['op']}: completed twice")
            continue
        found.outcome = "unknown" if e["type"] == "info" else e["type"]
        found.done_t = float(e.get("t", math.inf))
        found.result = e.get("value") or {}
    return list(ops.values())


class _Log:
    """One stream's final log, indexed by record id."""

    def __init__(self, records: Sequence[Sequence[Any]]) -> None:
        self.records = [(str(rid), _dlsn(d)) for rid, d in records]
        self.index: dict[str, list[int]] = defaultdict(list)
        for i, (rid, _) in enumerate(self.records):
            self.index[rid].append(i)

    def position(self, rid: str) -> int | None:
        where = self.index.get(rid)
        return where[0] if where else None

    def dlsns(self, rid: str) -> list[DLSN]:
        return [self.records[i][1] for i in self.index.get(rid, ())]


# ------------------------------------------------------------------- checking


def check(history: Sequence[dict[str, Any]], final: dict[str, Any]) -> Report:
    """Check all invariants of a history (events as load_history returns
    them) against the final state."""
    report = Report()
    ops = _join(history, report)
    counts: dict[str, Counter[str]] = defaultdict(Counter)
    for o in ops:
        counts[o.f][o.outcome] += 1
    report.ops = {f: {k: c[k] for k in OUTCOMES} for f, c in sorted(counts.items())}

    by_f: dict[str, list[Op]] = defaultdict(list)
    for o in ops:
        by_f[o.f].append(o)
    streams = {str(s): _Log(recs) for s, recs in (final.get("streams") or {}).items()}
    # Per stream, the highest DLSN of a truncate that may have happened.
    truncated: dict[str, DLSN] = {}
    for o in by_f["truncate"]:
        if o.outcome != "fail":
            d = _dlsn(o.value.get("dlsn"))
            truncated[o.stream] = max(truncated.get(o.stream, BEFORE_ALL), d)

    def excused(stream: str, d: DLSN) -> bool:
        return d < truncated.get(stream, BEFORE_ALL)

    writes = by_f["write"]
    _acked_present(report.invariants["acked-present"], writes, streams, excused)
    _no_duplicates(report.invariants["no-duplicates"], streams)
    _no_phantoms(report.invariants["no-phantoms"], writes, by_f["read"], streams, final)
    writers = {o.proc for o in by_f["open"]}
    _ack_order(report.invariants["ack-order"], writes, streams, writers)
    _fenced_absent(report.invariants["fenced-absent"], writes, by_f["open"], streams)
    _reads_agree(report.invariants["reads-agree"], by_f["read"], streams, excused)
    _commit_durable(report.invariants["commit-durable"], by_f["commit"], final)
    _position_monotone(
        report.invariants["position-monotone"],
        by_f["commit"],
        by_f["position"],
        by_f["migrate"],
        final,
    )
    _spark_once(report.invariants["spark-once"], final, streams, excused)
    return report


def _acked_present(
    r: InvariantResult, writes: list[Op], streams: dict[str, _Log], excused: Any
) -> None:
    """1. Every ok write is in the final log exactly once, at its acked DLSN."""
    for w in writes:
        if w.outcome != "ok":
            continue
        r.checked += 1
        rid = str(w.value.get("id"))
        acked = _dlsn(w.result.get("dlsn"))
        log = streams.get(w.stream)
        found = log.dlsns(rid) if log else []
        if not found:
            if not excused(w.stream, acked):
                r.violate(f"{w.stream}: acked write {rid} at {_show(acked)} ({w.proc}) is missing")
        elif len(found) > 1:
            r.violate(f"{w.stream}: acked write {rid} is in the log {len(found)} times")
        elif found[0] != acked:
            r.violate(
                f"{w.stream}: acked write {rid} was acked at {_show(acked)} "
                f"but is at {_show(found[0])}"
            )


def _no_duplicates(r: InvariantResult, streams: dict[str, _Log]) -> None:
    """2. No record id appears twice in the final log (whatever its outcome)."""
    for s, log in sorted(streams.items()):
        for rid, where in log.index.items():
            r.checked += 1
            if len(where) > 1:
                r.violate(
                    f"{s}: {rid} appears {len(where)} times, at "
                    + ", ".join(_show(log.records[i][1]) for i in where)
                )


def _no_phantoms(
    r: InvariantResult,
    writes: list[Op],
    reads: list[Op],
    streams: dict[str, _Log],
    final: dict[str, Any],
) -> None:
    """3. Every id in the final log, reads and Spark output was written to that
    stream (and a write that definitely failed must not be there)."""
    outcomes: dict[tuple[str, str], set[str]] = defaultdict(set)
    for w in writes:
        outcomes[(w.stream, str(w.value.get("id")))].add(w.outcome)

    def seen(stream: str, rid: str, where: str) -> None:
        r.checked += 1
        got = outcomes.get((stream, rid))
        if not got:
            r.violate(f"{stream}: {rid} in {where} was never written to {stream}")
        elif got == {"fail"}:
            r.violate(f"{stream}: {rid} in {where} is from a write that failed")

    for s, log in sorted(streams.items()):
        for rid in log.index:
            seen(s, rid, "the final log")
    for o in reads:
        if o.outcome == "ok":
            for rid, _ in o.result.get("records") or ():
                seen(o.stream, str(rid), f"a read by {o.proc}")
    spark = final.get("spark")
    if spark:
        for rid, _ in spark.get("output") or ():
            seen(str(spark.get("stream")), str(rid), "Spark's output")


def _ack_order(
    r: InvariantResult, writes: list[Op], streams: dict[str, _Log], writers: set[str]
) -> None:
    """4. A write acked before another was invoked is before it in the log;
    one writer's ok writes are in the log in invoke order. That last rule
    holds for a proc that opened a writer (``writers``): one LogWriter
    sequences what it is given. Through a proxy it holds only in real time:
    DistributedLog's protocol has no sequence numbers, so two writes in
    flight at once may be reordered when a failed send is retried on
    another proxy."""
    by_stream: dict[str, list[tuple[Op, int]]] = defaultdict(list)
    for w in writes:
        log = streams.get(w.stream)
        pos = log.position(str(w.value.get("id"))) if log else None
        if pos is not None:
            by_stream[w.stream].append((w, pos))
    for s, placed in sorted(by_stream.items()):
        # Real time: sweep invokes in time order over acks completed earlier.
        acks = sorted(
            ((w.done_t, pos, w) for w, pos in placed if w.outcome == "ok"), key=lambda x: x[0]
        )
        best: tuple[int, Op] | None = None  # the latest log position among acks so far
        i = 0
        for w, pos in sorted(placed, key=lambda x: x[0].t):
            while i < len(acks) and acks[i][0] < w.t:
                if best is None or acks[i][1] > best[0]:
                    best = (acks[i][1], acks[i][2])
                i += 1
            r.checked += 1
            if best is not None and best[0] > pos:
                a = best[1]
                r.violate(
                    f"{s}: {a.value.get('id')} was acked before {w.value.get('id')} was "
                    f"invoked, but is after it in the log"
                )
        # Per proc: ok writes in invoke (op) order.
        per_proc: dict[str, list[tuple[Op, int]]] = defaultdict(list)
        for w, pos in placed:
            if w.outcome == "ok" and w.proc in writers:
                per_proc[w.proc].append((w, pos))
        for proc, mine in sorted(per_proc.items()):
            mine.sort(key=lambda x: x[0].op)
            for (a, pa), (b, pb) in zip(mine, mine[1:], strict=False):
                r.checked += 1
                if pa > pb:
                    r.violate(
                        f"{s}: {proc} invoked {a.value.get('id')} before {b.value.get('id')}, "
                        f"both acked, but the log has them the other way round"
                    )


def _fenced_absent(
    r: InvariantResult, writes: list[Op], opens: list[Op], streams: dict[str, _Log]
) -> None:
    """5. Once P2's open completed at F, no write of an earlier-opened P1
    invoked after F is present or acked."""
    ok_opens: dict[str, list[tuple[float, str]]] = defaultdict(list)
    own: dict[tuple[str, str], list[float]] = defaultdict(list)
    for o in opens:
        if o.outcome == "ok":
            ok_opens[o.stream].append((o.done_t, o.proc))
            own[(o.stream, o.proc)].append(o.done_t)
    for fenced in ok_opens.values():
        fenced.sort()
    for times in own.values():
        times.sort()
    open_times = {s: [t for t, _ in v] for s, v in ok_opens.items()}
    for w in writes:
        mine = own.get((w.stream, w.proc))
        if not mine:
            continue  # not a direct writer (a proxy's, or it never opened)
        # P1's latest open that completed before this write was invoked.
        k = bisect.bisect_left(mine, w.t)
        if k == 0:
            continue
        opened = mine[k - 1]
        r.checked += 1
        # Opens by others that completed after P1's and before this invoke.
        when = open_times[w.stream]
        lo = bisect.bisect_right(when, opened)
        hi = bisect.bisect_left(when, w.t)
        fencers = [p for _, p in ok_opens[w.stream][lo:hi] if p != w.proc]
        if not fencers:
            continue
        rid = str(w.value.get("id"))
        log = streams.get(w.stream)
        present = log is not None and log.position(rid) is not None
        if w.outcome == "ok" or present:
            how = " and ".join(
                x for x, y in (("acked", w.outcome == "ok"), ("present", present)) if y
            )
            r.violate(
                f"{w.stream}: {rid} by {w.proc} was invoked after {fencers[0]} opened the "
                f"stream (fencing {w.proc}), yet it is {how}"
            )


def _reads_agree(
    r: InvariantResult, reads: list[Op], streams: dict[str, _Log], excused: Any
) -> None:
    """6. A tailing reader saw each record at its final DLSN, in increasing order."""
    per_reader: dict[tuple[str, str], list[Op]] = defaultdict(list)
    for o in reads:
        if o.outcome == "ok":
            per_reader[(o.proc, o.stream)].append(o)
    for (proc, s), batches in sorted(per_reader.items()):
        batches.sort(key=lambda o: o.op)
        log = streams.get(s)
        last: DLSN | None = None
        for o in batches:
            for rid, d in o.result.get("records") or ():
                rid, seen = str(rid), _dlsn(d)
                r.checked += 1
                found = log.dlsns(rid) if log else []
                if not found:
                    if not excused(s, seen):
                        r.violate(f"{s}: {proc} read {rid} at {_show(seen)}; not in the final log")
                elif seen not in found:
                    r.violate(
                        f"{s}: {proc} read {rid} at {_show(seen)}; the log has it at "
                        f"{', '.join(map(_show, found))}"
                    )
                if last is not None and seen <= last:
                    r.violate(f"{s}: {proc} read {rid} at {_show(seen)} after {_show(last)}")
                last = seen


def _subscriber(o: Op) -> str:
    return f"{o.value.get('stream')}/{o.value.get('subscriber')}"


def _commit_durable(r: InvariantResult, commits: list[Op], final: dict[str, Any]) -> None:
    """7. A subscription's final position is at or past its highest ok commit."""
    best: dict[str, tuple[DLSN, Op]] = {}
    for c in commits:
        if c.outcome == "ok":
            d = _dlsn(c.value.get("dlsn"))
            key = _subscriber(c)
            if key not in best or d > best[key][0]:
                best[key] = (d, c)
    positions = final.get("subscriptions") or {}
    for key, (d, c) in sorted(best.items()):
        r.checked += 1
        got = positions.get(key)
        if key not in positions:
            r.violate(f"{key}: no final position, yet {c.proc} committed {_show(d)}")
        elif got is None or _dlsn(got) < d:
            r.violate(f"{key}: final position {_show(_dlsn(got))} is below acked commit {_show(d)}")


def _position_monotone(
    r: InvariantResult,
    commits: list[Op],
    positions: list[Op],
    migrates: list[Op],
    final: dict[str, Any],
) -> None:
    """8. No observed position is below a commit or observation that completed
    before it was invoked. (The final position is compared with earlier
    observations only: against ok commits it is commit-durable's job.)"""
    bounds: dict[str, list[tuple[float, DLSN, str]]] = defaultdict(list)
    observed: dict[str, list[tuple[float, DLSN, str]]] = defaultdict(list)
    for c in commits:
        if c.outcome == "ok":
            bounds[_subscriber(c)].append(
                (c.done_t, _dlsn(c.value.get("dlsn")), f"commit by {c.proc}")
            )
    for o in (*positions, *migrates):
        if o.outcome == "ok":
            d = _dlsn(o.result.get("dlsn"))
            what = f"{o.f} by {o.proc}"
            bounds[_subscriber(o)].append((o.done_t, d, what))
            observed[_subscriber(o)].append((o.t, d, what))
    for key in sorted(set(bounds) | set(observed)):
        bs = sorted(bounds.get(key, ()), key=lambda b: b[0])
        times = [b[0] for b in bs]
        # prefix[i]: the highest bound among bs[:i+1], and what set it.
        prefix: list[tuple[DLSN, str]] = []
        for _, d, what in bs:
            prefix.append((d, what) if not prefix or d > prefix[-1][0] else prefix[-1])
        for t, d, what in observed.get(key, ()):
            r.checked += 1
            k = bisect.bisect_left(times, t)
            if k and prefix[k - 1][0] > d:
                hi, by = prefix[k - 1]
                r.violate(f"{key}: {what} saw {_show(d)} after {by} had {_show(hi)}")
    final_positions = final.get("subscriptions") or {}
    for key, got in sorted(final_positions.items()):
        r.checked += 1
        seen = [b for b in bounds.get(key, ()) if not b[2].startswith("commit ")]
        if seen:
            _, hi, by = max(seen, key=lambda b: b[1])
            if _dlsn(got) < hi:
                r.violate(f"{key}: final position {_show(_dlsn(got))} is below {by}'s {_show(hi)}")


def _spark_once(
    r: InvariantResult, final: dict[str, Any], streams: dict[str, _Log], excused: Any
) -> None:
    """9. Spark wrote each record at most once, and every record of its stream
    up to its committed position."""
    spark = final.get("spark")
    if not spark:
        return  # not checked
    s = str(spark.get("stream"))
    out = Counter(str(rid) for rid, _ in spark.get("output") or ())
    for rid, n in sorted(out.items()):
        r.checked += 1
        if n > 1:
            r.violate(f"{s}: Spark wrote {rid} {n} times")
    position = _dlsn(spark.get("position"))
    log = streams.get(s)
    for rid, d in log.records if log else ():
        if d > position:
            continue
        r.checked += 1
        if rid not in out and not excused(s, d):
            r.violate(
                f"{s}: {rid} at {_show(d)} is at or before Spark's position {_show(position)} but not in its output"
            )


# ------------------------------------------------------------------------- cli


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="Check a chaos run's history.")
    parser.add_argument("history", help="a history .jsonl file or a directory of them")
    parser.add_argument("final", help="the final state (JSON)")
    parser.add_argument("--json", action="store_true", help="print the report as JSON")
    args = parser.parse_args(argv)
    try:
        history = load_history(args.history)
        final = load_final(args.final)
        report = check(history, final)
    except (HistoryError, TypeError, ValueError, KeyError, AttributeError) as exc:
        print(f"checker: unreadable input: {exc}", file=sys.stderr)
        return 2
    print(json.dumps(report.to_json(), indent=2) if args.json else report.table())
    return 0 if report.ok else 1


if __name__ == "__main__":
    sys.exit(main())
