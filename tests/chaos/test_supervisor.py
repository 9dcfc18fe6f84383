"""The chaos supervisor's actors and SIGTERM: a stop that arrives while an
actor is still starting (a replacement the supervisor started just before
the workload is stopped) ends it cleanly, not by SIGTERM's default action,
which the run would report as a crash (exit -15)."""

from __future__ import annotations

import os
from pathlib import Path

from tests.chaos.supervisor import Supervisor


def test_an_actor_stopped_while_its_interpreter_starts_exits_cleanly(tmp_path: Path) -> None:
    sup = Supervisor(tmp_path, tmp_path / "history", "distributedlog://127.0.0.1:1/ns", 1)
    # SIGTERM at once: the child is still starting Python, long before the
    # actor's main() runs.
    sup.add("reader-x", "reader", ["--stream", "x"], restart=False)
    assert sup.stop(timeout=30) == {"reader-x": 0}


_marker: list[Path] = []


def _in_forked_child() -> None:
    if _marker:
        _marker[0].write_text("at-fork handlers ran in the child")


os.register_at_fork(after_in_child=_in_forked_child)


def test_actors_start_without_at_fork_handlers_in_the_child(tmp_path: Path) -> None:
    """grpcio's at-fork handlers restart gRPC's poller in a forked child,
    and closing inherited descriptors before exec then makes the child
    abort (grpc/grpc#43055: an actor exited -6 in a full suite, whose
    process had loaded grpcio for other tests). The supervisor must start
    actors without running at-fork handlers in the child: no
    ``preexec_fn``, which forces a real fork(). A Python at-fork hook
    stands in for grpcio's, since both run exactly when a real fork() does."""
    marker = tmp_path / "forked"
    _marker.append(marker)
    try:
        sup = Supervisor(tmp_path, tmp_path / "history", "distributedlog://127.0.0.1:1/ns", 1)
        sup.add("reader-y", "reader", ["--stream", "y"], restart=False)
        assert sup.stop(timeout=30) == {"reader-y": 0}
    finally:
        _marker.clear()
    assert not marker.exists(), marker.read_text()
