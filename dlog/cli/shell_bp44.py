"""``dlog shell`` commands for BP-44's ownership and lifecycle hints: listorphaned, showowner, predictlifespan, orphanauditinterval.

They register on :data:`dlog.cli.shell.app`, imported by :mod:`dlog.cli` right after it.
"""

from __future__ import annotations

from dlog.cli.shell import app  # noqa: F401
