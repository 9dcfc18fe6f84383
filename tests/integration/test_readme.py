"""The README's code, run as a reader would run it: every ```python and ```sh
block, in order, against one sandbox (ZooKeeper and 3 bookie processes).

The README's example URI becomes the sandbox's, and its sandbox directory a
temporary one. Python blocks run with this venv's Python, sh blocks with
bash (``set -euo pipefail``, this venv's bin first on PATH), each from the
checkout with a timeout: a snippet that never ends fails. A block that is
not to be run has ``<!-- not run: reason -->`` on the line above it; any
other block that is neither python nor sh fails the check.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
import textwrap
from dataclasses import dataclass
from pathlib import Path

import pytest

from dlog.sandbox.cluster import Sandbox

ROOT = Path(__file__).resolve().parents[2]
README = ROOT / "README.md"
#: What the README writes where the reader puts their own values.
EXAMPLE_URI = "distributedlog://127.0.0.1:2181/messaging"
EXAMPLE_SANDBOX_DIR = "/tmp/dlog-sandbox"
RUNNABLE = ("python", "sh")
#: Seconds a block may take; Spark starts a JVM and a local cluster.
TIMEOUT = 90
SPARK_TIMEOUT = 240

_FENCE = re.compile(r"^\s*```(\S*)\s*$")  # also indented, in a list
_NOT_RUN = re.compile(r"^<!--\s*not run:\s*(\S.*?)\s*-->$")


@dataclass
class Block:
    line: int  # of the opening fence, 1-based
    lang: str
    code: str
    not_run: str | None  # the reason, when marked

    def __str__(self) -> str:
        return f"README.md:{self.line} ({self.lang or 'no language'})"


def readme_blocks(text: str) -> list[Block]:
    blocks: list[Block] = []
    lines = text.splitlines()
    i = 0
    while i < len(lines):
        m = _FENCE.match(lines[i])
        if m is None:
            i += 1
            continue
        start = i
        j = i + 1
        while j < len(lines) and lines[j].strip() != "```":
            j += 1
        assert j < len(lines), f"README.md:{start + 1}: the code block is never closed"
        above = next((line for line in reversed(lines[:start]) if line.strip()), "")
        mark = _NOT_RUN.match(above.strip())
        blocks.append(
            Block(
                start + 1,
                m.group(1),
                textwrap.dedent("\n".join(lines[start + 1 : j]) + "\n"),
                mark.group(1) if mark else None,
            )
        )
        i = j + 1
    return blocks


def test_every_block_is_run_or_marked_not_run() -> None:
    blocks = readme_blocks(README.read_text())
    unmarked = [str(b) for b in blocks if b.lang not in RUNNABLE and b.not_run is None]
    assert not unmarked, (
        f"neither python nor sh, and not marked <!-- not run: reason -->: {unmarked}"
    )
    assert any(b.lang == "python" and b.not_run is None for b in blocks)
    assert any(b.lang == "sh" and b.not_run is None for b in blocks)
    text = README.read_text()
    # Every marker sits right above a block (a stale one would hide nothing).
    markers = [n for n, line in enumerate(text.splitlines(), 1) if _NOT_RUN.match(line.strip())]
    assert len(markers) == sum(b.not_run is not None for b in blocks), markers


def run_block(block: Block, uri: str, tmp_path: Path) -> subprocess.CompletedProcess[str]:
    code = block.code.replace(EXAMPLE_URI, uri).replace(
        EXAMPLE_SANDBOX_DIR, str(tmp_path / "sandbox")
    )
    env = {k: v for k, v in os.environ.items() if not k.startswith(("DLOG_", "PYSPARK_"))}
    env["PATH"] = f"{Path(sys.executable).parent}{os.pathsep}{env.get('PATH', '')}"
    env["COLUMNS"] = "200"
    if block.lang == "python":
        script = tmp_path / f"readme_line_{block.line}.py"
        script.write_text(code)
        command = [sys.executable, str(script)]
    else:
        command = ["bash", "-euo", "pipefail", "-c", code]
    timeout = SPARK_TIMEOUT if "pyspark" in code else TIMEOUT
    try:
        return subprocess.run(
            command,
            cwd=ROOT,
            env=env,
            capture_output=True,
            text=True,
            timeout=timeout,
            stdin=subprocess.DEVNULL,
        )
    except subprocess.TimeoutExpired as e:

        def text(out: bytes | str | None) -> str:
            return out.decode(errors="replace") if isinstance(out, bytes) else out or ""

        pytest.fail(
            f"{block} did not finish within {timeout} s\n"
            f"stdout:\n{text(e.stdout)}\nstderr:\n{text(e.stderr)}"
        )


@pytest.mark.integration
@pytest.mark.timeout(900)
def test_readme_blocks_run(sandbox: Sandbox, tmp_path: Path) -> None:
    text = README.read_text()
    assert EXAMPLE_URI in text and EXAMPLE_SANDBOX_DIR in text
    blocks = [b for b in readme_blocks(text) if b.not_run is None]
    try:
        for block in blocks:
            done = run_block(block, sandbox.namespace_uri, tmp_path)
            assert done.returncode == 0, (
                f"{block} exited with {done.returncode}\n"
                f"stdout:\n{done.stdout}\nstderr:\n{done.stderr}"
            )
    finally:
        # A block that starts its own sandbox and then fails leaves it running.
        if (tmp_path / "sandbox" / "sandbox.json").exists():
            subprocess.run(
                [
                    sys.executable,
                    "-m",
                    "dlog",
                    "sandbox",
                    "stop",
                    "--dir",
                    str(tmp_path / "sandbox"),
                ],
                capture_output=True,
                timeout=120,
            )
