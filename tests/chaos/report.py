"""The chaos run's report: faults injected per kind, operations by outcome,
invariants checked and violations, and the runner's own checks (progress
after healing, Spark caught up, frame fuzz, full replication)."""

from __future__ import annotations

import json
from typing import TYPE_CHECKING

from rich.console import Console
from rich.table import Table

if TYPE_CHECKING:
    from tests.chaos.checker import Report
    from tests.chaos.run import Run


def print_report(run: Run, report: Report) -> bool:
    """Print the tables; save ``report.json``; whether the run passed."""
    console = Console(width=120, force_terminal=False)

    faults = Table(title="faults injected")
    faults.add_column("kind")
    faults.add_column("count", justify="right")
    for kind, n in sorted(run.faults.items()):
        faults.add_row(kind, str(n))
    faults.add_row("total", str(sum(run.faults.values())))
    console.print(faults)

    ops = Table(title="operations by outcome")
    for col in ("operation", "ok", "fail", "unknown"):
        ops.add_column(col, justify="left" if col == "operation" else "right")
    for f, counts in sorted(report.ops.items()):
        ops.add_row(f, *(str(counts.get(k, 0)) for k in ("ok", "fail", "unknown")))
    console.print(ops)

    inv = Table(title="invariants")
    inv.add_column("invariant")
    inv.add_column("checked", justify="right")
    inv.add_column("violations", justify="right")
    for name, r in report.invariants.items():
        inv.add_row(name, str(r.checked), str(r.violation_count))
    console.print(inv)

    checks = Table(title="cluster checks")
    checks.add_column("check")
    checks.add_column("result")
    checks.add_column("details")
    runner_ok = True
    for name, result in run.checks.items():
        ok = bool(result.get("ok"))
        runner_ok &= ok
        details = {k: v for k, v in result.items() if k != "ok"}
        checks.add_row(name, "ok" if ok else "FAILED", json.dumps(details)[:200])
    console.print(checks)

    for name, r in report.invariants.items():
        for v in r.violations[:10]:
            console.print(f"VIOLATION {name}: {v}")
    for w in report.warnings[:20]:
        console.print(f"warning: {w}")
    for e in run.fault_errors[:20]:
        console.print(f"fault error: {e}")

    passed = report.ok and runner_ok
    (run.dir / "report.json").write_text(
        json.dumps(
            {
                "seed": run.args.seed,
                "passed": passed,
                "faults": dict(run.faults),
                "fault_errors": run.fault_errors,
                "checks": run.checks,
                "phases_seconds": run.phases,
                "checker": report.to_json(),
            },
            indent=1,
            default=str,
        )
    )
    console.print(
        f"chaos: {'PASSED' if passed else 'FAILED'}: {sum(run.faults.values())} faults, "
        f"{sum(r.violation_count for r in report.invariants.values())} violations"
    )
    return passed
