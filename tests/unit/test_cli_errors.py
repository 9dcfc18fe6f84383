"""How the ``dlog`` command prints an error (dlog.cli.common.fail)."""

from __future__ import annotations

import pytest
import typer

from dlog.cli.common import fail


def test_one_error_prefix_a_line_even_for_a_quoted_child_error(
    capsys: pytest.CaptureFixture[str],
) -> None:
    """A sandbox quotes a bookie's last log line, itself an ``error:`` line;
    it is printed once prefixed, not as ``error: error: ...``."""
    exit_ = fail(
        "sandbox did not start: bookie on port 1 exited with code 1:\n"
        "error: cannot start the bookie: [Errno 98] Address already in use",
        3,
    )
    assert isinstance(exit_, typer.Exit) and exit_.exit_code == 3
    lines = capsys.readouterr().err.splitlines()
    assert lines == [
        "error: sandbox did not start: bookie on port 1 exited with code 1:",
        "error: cannot start the bookie: [Errno 98] Address already in use",
    ]
