"""The chaos supervisor's actors and SIGTERM: a stop that arrives while an
actor is still starting (a replacement the supervisor started just before
the workload is stopped) ends it cleanly, not by SIGTERM's default action,
which the run would report as a crash (exit -15); and so does a stop that
arrives while an actor is ending on its own."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import time
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


_ENDING_ACTOR = """
import signal, sys
from tests.chaos import workload
signal.signal(signal.SIGTERM, lambda *_: None)  # as Actor.finishing leaves it
garbage = [[i] for i in range(2_000_000)]  # finalization frees it: slow
print("ending", flush=True)
workload._exit(3) if sys.argv[1] == "actor" else sys.exit(3)
"""


def _exit_code_under_sigterms(how: str) -> int:
    """Run an actor's last moments while SIGTERM arrives every millisecond,
    as when the runner stops the workload just as an actor ends on its own."""
    p = subprocess.Popen(
        [sys.executable, "-c", _ENDING_ACTOR, how],
        stdout=subprocess.PIPE,
        cwd=Path(__file__).resolve().parents[2],
    )
    assert p.stdout is not None
    assert p.stdout.readline() == b"ending\n"
    while p.poll() is None:
        with contextlib.suppress(ProcessLookupError):
            p.send_signal(signal.SIGTERM)
        time.sleep(0.001)
    return p.wait()


def test_an_actor_ending_on_its_own_keeps_its_exit_code_when_stopped() -> None:
    """Python's finalization resets the signals it handles to the default
    action, so a stop landing in an exit's last milliseconds used to kill an
    actor that had already returned its code (-15, reported as a crash)."""
    # The control: a plain exit under the same stops dies by SIGTERM, so
    # this test can tell the two apart.
    assert _exit_code_under_sigterms("plain") == -signal.SIGTERM
    assert _exit_code_under_sigterms("actor") == 3
