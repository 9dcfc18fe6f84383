"""The bookie's layers point one way: the storage core never reaches up
into the network layer or the service that composes them."""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

import dlog

BOOKIE = Path(dlog.__file__).parent / "bookie" / "bookie.py"
ABOVE_THE_CORE = {"dlog.bookie.server", "dlog.bookie.service", "dlog.bookie.main"}


def imported_modules(path: Path) -> set[str]:
    """Every module ``path`` imports, at the top or inside a function."""
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module:
            found.add(node.module)
            found.update(f"{node.module}.{alias.name}" for alias in node.names)
    return found


def test_the_bookie_core_does_not_import_its_server() -> None:
    assert not imported_modules(BOOKIE) & ABOVE_THE_CORE


def test_importing_the_core_loads_no_network_layer() -> None:
    code = (
        "import sys, dlog.bookie.bookie; "
        f"print(sorted(set({sorted(ABOVE_THE_CORE)!r}) & set(sys.modules)))"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True
    ).stdout
    assert out.strip() == "[]"
