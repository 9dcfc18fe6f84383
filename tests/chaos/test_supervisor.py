"""The chaos supervisor's actors and SIGTERM: a stop that arrives while an
actor is still starting (a replacement the supervisor started just before
the workload is stopped) ends it cleanly, not by SIGTERM's default action,
which the run would report as a crash (exit -15)."""

from __future__ import annotations

from pathlib import Path

from tests.chaos.supervisor import Supervisor


def test_an_actor_stopped_while_its_interpreter_starts_exits_cleanly(tmp_path: Path) -> None:
    sup = Supervisor(tmp_path, tmp_path / "history", "distributedlog://127.0.0.1:1/ns", 1)
    # SIGTERM at once: the child is still starting Python, long before the
    # actor's main() runs.
    sup.add("reader-x", "reader", ["--stream", "x"], restart=False)
    assert sup.stop(timeout=30) == {"reader-x": 0}
