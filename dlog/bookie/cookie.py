"""Bookie cookies: proof that a set of directories belongs to this bookie.

The same cookie is written to ZooKeeper (``<ledgers>/cookies/<bookieId>``)
and to a ``VERSION`` file in every journal and ledger ``current/`` dir, in
BookKeeper's text format (layout version, newline, ``CookieFormat`` in
protobuf text). At start the bookie refuses to run on directories that
belong to another bookie or cluster, or that lost their cookie (a wiped or
swapped disk): serving from them would silently lose data.
"""

from __future__ import annotations

import dataclasses
import logging
import os
import re
from pathlib import Path

from google.protobuf import text_format

from dlog.errors import InvalidCookieError
from dlog.protocol.data_formats_pb2 import CookieFormat
from dlog.zk import NodeExistsError, NoNodeError, ZooKeeper

log = logging.getLogger(__name__)

LAYOUT_VERSION = 5
VERSION_FILE = "VERSION"
SEPARATOR = "\t"
_LAYOUT_VERSION = re.compile(r"[+-]?[0-9]{1,9}", re.ASCII)
#: What Java's String.trim() removes: every char up to and including space.
_JAVA_TRIM = "".join(map(chr, range(33)))
#: The escapes of protobuf's text format that BookKeeper's parser (Java's
#: TextFormat) and Python's both read, and read alike. Any other backslash
#: sequence is refused, as Java refuses it: Python's parser would keep it
#: as text, with only a DeprecationWarning.
_ESCAPE = re.compile(r"""\\(?:[abfnrtv\\'"]|[0-7]|x[0-9a-fA-F]|u[0-9a-fA-F]{4}|U[0-9a-fA-F]{8})""")


def _bad_escape(text: str) -> str | None:
    """The first backslash sequence in ``text`` that is no valid escape, or None."""
    pos = text.find("\\")
    while pos >= 0:
        match = _ESCAPE.match(text, pos)
        if match is None:
            return text[pos : pos + 2]
        pos = text.find("\\", match.end())
    return None


def encode_dirs(dirs: list[str]) -> str:
    return str(len(dirs)) + "".join(SEPARATOR + d for d in dirs)


@dataclasses.dataclass(frozen=True)
class Cookie:
    bookie_id: str
    journal_dirs: str
    ledger_dirs: str
    instance_id: str | None = None
    layout_version: int = LAYOUT_VERSION

    @classmethod
    def for_bookie(
        cls,
        bookie_id: str,
        journal_dirs: list[str],
        ledger_dirs: list[str],
        instance_id: str | None,
    ) -> Cookie:
        return cls(bookie_id, ",".join(journal_dirs), encode_dirs(ledger_dirs), instance_id)

    def encode(self) -> bytes:
        fmt = CookieFormat(
            bookieHost=self.bookie_id, journalDir=self.journal_dirs, ledgerDirs=self.ledger_dirs
        )
        if self.instance_id:
            fmt.instanceId = self.instance_id
        return f"{self.layout_version}\n{text_format.MessageToString(fmt)}".encode()

    @classmethod
    def decode(cls, data: bytes, where: str) -> Cookie:
        try:
            text = data.decode()
        except UnicodeDecodeError:
            raise InvalidCookieError(f"{where}: cookie is not readable (not UTF-8)") from None
        first, _, rest = text.partition("\n")
        # A plain decimal, as BookKeeper's Integer.parseInt reads it: Python's
        # int() would also take "5_0" (50) and non-ASCII digits.
        first = first.strip(_JAVA_TRIM)
        if not _LAYOUT_VERSION.fullmatch(first):
            raise InvalidCookieError(
                f"{where}: cookie is not readable (layout version {first[:20]!r} "
                "is not a decimal integer)"
            )
        version = int(first)
        if version == 3:
            lines = rest.splitlines()
            if len(lines) < 3:
                raise InvalidCookieError(f"{where}: truncated version 3 cookie")
            return cls(lines[0], lines[1], lines[2], None, 3)
        if version < 3:
            raise InvalidCookieError(f"{where}: cookie layout version {version} is too old")
        bad = _bad_escape(rest)
        if bad is not None:
            raise InvalidCookieError(f"{where}: cookie is not readable: invalid escape {bad!r}")
        fmt = CookieFormat()
        try:
            text_format.Parse(rest, fmt)
        except text_format.ParseError as e:
            raise InvalidCookieError(f"{where}: cookie is not readable: {e}") from None
        if not fmt.IsInitialized():  # BookKeeper's CookieFormat.Builder.build() rejects these too
            # types-protobuf leaves FindInitializationErrors out of Message.
            missing = ", ".join(fmt.FindInitializationErrors())  # type: ignore[attr-defined]
            raise InvalidCookieError(f"{where}: cookie lacks required fields: {missing}")
        return cls(fmt.bookieHost, fmt.journalDir, fmt.ledgerDirs, fmt.instanceId or None, version)

    def mismatch(self, other: Cookie) -> str | None:
        """Why ``other`` does not belong to the same bookie, or None."""
        if other.bookie_id != self.bookie_id:
            return f"it belongs to bookie {other.bookie_id!r}, this bookie is {self.bookie_id!r}"
        if other.journal_dirs != self.journal_dirs:
            return f"journal directories differ ({other.journal_dirs!r} vs {self.journal_dirs!r})"
        if other.ledger_dirs != self.ledger_dirs:
            return f"ledger directories differ ({other.ledger_dirs!r} vs {self.ledger_dirs!r})"
        if (other.instance_id or None) != (self.instance_id or None):
            return f"it belongs to cluster instance {other.instance_id!r}, this cluster is {self.instance_id!r}"
        return None


def _read_dir_cookie(d: Path) -> Cookie | None:
    try:
        return Cookie.decode((d / VERSION_FILE).read_bytes(), str(d / VERSION_FILE))
    except FileNotFoundError:
        return None


def _write_dir_cookie(d: Path, cookie: Cookie) -> None:
    tmp = d / (VERSION_FILE + ".tmp")
    with open(tmp, "wb") as f:
        f.write(cookie.encode())
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, d / VERSION_FILE)


def _holds_data(d: Path) -> bool:
    return any(
        name.endswith((".txn", ".log")) or name in ("ledgers", "locations", "lastMark")
        for name in os.listdir(d)
    )


async def _holds(zk: ZooKeeper, path: str, data: bytes) -> bool:
    try:
        current, _ = await zk.get(path)
    except NoNodeError:
        return False
    return current == data


async def verify_or_create(
    zk: ZooKeeper, ledgers_root: str, expected: Cookie, dirs: list[Path]
) -> None:
    """Check the cookies of ``dirs`` (journal and ledger ``current/`` dirs)
    against ZooKeeper's, or write them all for a brand-new bookie."""
    zk_path = f"{ledgers_root}/cookies/{expected.bookie_id}"
    try:
        data, _ = await zk.get(zk_path)
        zk_cookie: Cookie | None = Cookie.decode(data, zk_path)
    except NoNodeError:
        zk_cookie = None
    dir_cookies = {d: _read_dir_cookie(d) for d in dirs}

    if zk_cookie is None and all(c is None for c in dir_cookies.values()):
        used = [str(d) for d in dirs if _holds_data(d)]
        if used:
            raise InvalidCookieError(
                f"directories {', '.join(used)} hold bookie data but no cookie, and ZooKeeper has no "
                f"cookie for {expected.bookie_id}: they may belong to another bookie; refusing to start"
            )
        try:
            await zk.create(zk_path, expected.encode(), makepath=True)
        except NodeExistsError as e:
            # Retried after a connection loss, the create may meet its own cookie.
            if e.attempts < 2 or not await _holds(zk, zk_path, expected.encode()):
                raise InvalidCookieError(
                    f"another bookie registered the cookie {zk_path} while this one was starting"
                ) from None
        for d in dirs:
            _write_dir_cookie(d, expected)
        log.info(
            "new bookie %s: wrote cookies to ZooKeeper and %d directories",
            expected.bookie_id,
            len(dirs),
        )
        return

    if zk_cookie is None:
        have = [str(d) for d, c in dir_cookies.items() if c is not None]
        raise InvalidCookieError(
            f"ZooKeeper has no cookie for {expected.bookie_id} but {', '.join(have)} have one: "
            "the bookie's registration was removed or the directories belong to another cluster; "
            "refusing to start"
        )
    problem = expected.mismatch(zk_cookie)
    if problem:
        raise InvalidCookieError(f"cookie in ZooKeeper ({zk_path}) does not match: {problem}")
    for d, c in dir_cookies.items():
        if c is None:
            raise InvalidCookieError(
                f"{d} has lost its cookie (a new or wiped disk?) while ZooKeeper knows bookie "
                f"{expected.bookie_id}: refusing to start, data would be missing"
            )
        problem = expected.mismatch(c)
        if problem:
            raise InvalidCookieError(f"{d / VERSION_FILE} does not match this bookie: {problem}")
