"""dlog's optional C extensions, and the one switch that turns them off.

Some per-record and per-request loops have C twins, built when the package
is installed on a machine with a C compiler (setup.py). Each module that
has one keeps its complete Python code and calls :func:`extension` once,
at import: the C module if it was built, else None and the Python code
runs alone. ``DLOG_PURE_PYTHON=1`` in the environment makes every such
module run its Python code, to rule an extension out when chasing a bug.
"""

from __future__ import annotations

import importlib
import os
from types import ModuleType

__all__ = ["PURE_PYTHON_ENV", "extension"]

#: The environment variable that turns every extension off.
PURE_PYTHON_ENV = "DLOG_PURE_PYTHON"


def extension(name: str) -> ModuleType | None:
    """The extension module ``name`` (``"dlog._record_codec"``...), or None
    when it was not built or ``DLOG_PURE_PYTHON`` is set."""
    if os.environ.get(PURE_PYTHON_ENV):
        return None
    try:
        return importlib.import_module(name)
    except ImportError:
        return None
