"""``--help`` reads well in a terminal: conventional usage lines
(``STREAM``, not ``{stream}``), value names instead of Python types
(``--uri URI``, nothing after a flag) and no reStructuredText markup."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from collections.abc import Iterator
from typing import Any

import pytest

from dlog.cli import build_command

#: What typer prints when left alone, and reStructuredText literals.
UNWANTED = [
    (re.compile(r"<(bool|str|int|float|path|list\[[^\]]*\]|int range|float range)>"), "a type"),
    (re.compile(r"Usage: .*\{[a-z_]+\}"), "a {name} in the usage line"),
    (re.compile(r"``"), "reStructuredText ``literal``"),
    (re.compile(r":(func|class|meth|mod|data):`"), "a Sphinx role"),
]


def _commands(command: Any, path: tuple[str, ...] = ()) -> Iterator[tuple[str, ...]]:
    yield path
    for name, sub in sorted(getattr(command, "commands", {}).items()):
        yield from _commands(sub, (*path, name))


COMMAND = build_command()
PATHS = list(_commands(COMMAND))


def _help(path: tuple[str, ...], capsys: pytest.CaptureFixture[str]) -> str:
    os.environ["COLUMNS"] = "120"
    with pytest.raises(SystemExit) as exit_info:
        COMMAND.main(args=[*path, "--help"], prog_name="dlog")
    assert exit_info.value.code == 0
    return capsys.readouterr().out


def test_every_command_is_checked() -> None:
    assert len(PATHS) > 30, PATHS
    assert ("tail",) in PATHS and ("subscriptions", "reset") in PATHS


@pytest.mark.parametrize("path", PATHS, ids=lambda p: " ".join(p) or "dlog")
def test_help_is_plain(path: tuple[str, ...], capsys: pytest.CaptureFixture[str]) -> None:
    text = _help(path, capsys)
    assert "Usage: dlog" in text
    for pattern, what in UNWANTED:
        m = pattern.search(text)
        assert m is None, f"dlog {' '.join(path)} --help shows {what}: {m.group(0)!r}\n{text}"


def test_usage_names_arguments_in_capitals(capsys: pytest.CaptureFixture[str]) -> None:
    text = _help(("subscriptions", "reset"), capsys)
    assert "Usage: dlog subscriptions reset [OPTIONS] STREAM SUBSCRIBER_ID" in text
    assert re.search(r"--uri\s+-u\s+URI\s", text), text
    assert re.search(r"--force\s+-f\s+Do not ask", text), text  # a flag: no value name


def test_the_installed_command_uses_it() -> None:
    """``python -m dlog`` (and so the ``dlog`` script) prints the plain help too."""
    r = subprocess.run(
        [sys.executable, "-m", "dlog", "tail", "--help"],
        capture_output=True,
        text=True,
        timeout=60,
        env={**os.environ, "COLUMNS": "120"},
    )
    assert r.returncode == 0, r.stderr
    assert "Usage: python -m dlog tail [OPTIONS] STREAM" in r.stdout, r.stdout
    assert "<bool>" not in r.stdout and "<str>" not in r.stdout
