"""``dlog shell`` commands for AutoRecovery: listunderreplicated, autorecovery, lostbookierecoverydelay, whoisauditor.

They register on :data:`dlog.cli.shell.app`, imported by :mod:`dlog.cli` right after it.
"""

from __future__ import annotations

from dlog.cli.shell import app  # noqa: F401
