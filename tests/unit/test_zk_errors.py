"""dlog.zk is the one kazoo boundary: kazoo's exceptions become dlog errors
with the right class, codes and retriable flag, and no other module
imports kazoo."""

from __future__ import annotations

import ast
from pathlib import Path

import kazoo.exceptions as kz
import pytest
from kazoo.handlers.threading import KazooTimeoutError

import dlog.zk
from dlog import errors
from dlog.errors import (
    BadVersionError,
    ConnectionLossError,
    DLogError,
    LogError,
    NodeExistsError,
    NoNodeError,
    NotEmptyError,
    RolledBackError,
    SessionExpiredError,
    ZooKeeperClosedError,
    ZooKeeperError,
    ZooKeeperTimeoutError,
)
from dlog.retry import is_retriable, is_transient_zk
from dlog.zk import first_error, translate

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.parametrize(
    ("kazoo_error", "cls", "zk_code", "retriable"),
    [
        (kz.NoNodeError(), NoNodeError, -101, False),
        (kz.NodeExistsError(), NodeExistsError, -110, False),
        (kz.BadVersionError(), BadVersionError, -103, False),
        (kz.NotEmptyError(), NotEmptyError, -111, False),
        (kz.ConnectionLoss(), ConnectionLossError, -4, True),
        (kz.ConnectionDropped("socket connection broken"), ConnectionLossError, -4, True),
        (kz.OperationTimeoutError(), ZooKeeperTimeoutError, -7, True),
        (KazooTimeoutError("no answer"), ZooKeeperTimeoutError, -7, True),
        (kz.SessionExpiredError(), SessionExpiredError, -112, True),
        (kz.ConnectionClosedError("Connection has been closed"), ZooKeeperClosedError, -112, False),
        (kz.RolledBackError(), RolledBackError, 0, False),
        # Codes without a class of their own keep ZooKeeper's code.
        (kz.NoAuthError(), ZooKeeperError, -102, True),
        (kz.MarshallingError(), ZooKeeperError, -5, True),
        (kz.KazooException("odd"), ZooKeeperError, -1, True),
    ],
)
def test_kazoo_errors_become_dlog_errors(
    kazoo_error: BaseException, cls: type[ZooKeeperError], zk_code: int, retriable: bool
) -> None:
    err = translate(kazoo_error, "get /a", "/a")
    assert type(err) is cls
    assert isinstance(err, ZooKeeperError) and isinstance(err, LogError)
    assert isinstance(err, DLogError) and not isinstance(err, kz.KazooException)
    assert err.zk_code == zk_code
    assert err.code == 505 and err.bk_code == -9
    assert err.retriable is retriable and is_retriable(err) is retriable
    assert is_transient_zk(err) is (cls in (ConnectionLossError, ZooKeeperTimeoutError))
    assert err.path == "/a" and err.attempts == 1
    assert err.message.startswith("ZooKeeper: get /a: ")
    assert type(kazoo_error).__name__ in err.message
    assert err.__cause__ is kazoo_error
    assert err.clone().zk_code == zk_code


def test_other_exceptions_pass_through() -> None:
    for exc in (ValueError("bad path"), NoNodeError(), TimeoutError()):
        assert translate(exc) is exc


def test_transaction_results_mark_ops_rolled_back() -> None:
    # ZooKeeper answers OK for the ops before the failed one and
    # RUNTIMEINCONSISTENCY for those after it: neither was applied.
    before = translate(kz.RolledBackError(), in_transaction=True)
    failed = translate(kz.BadVersionError(), in_transaction=True)
    after = translate(kz.RuntimeInconsistency(), in_transaction=True)
    assert type(before) is RolledBackError and before.zk_code == 0
    assert type(after) is RolledBackError and after.zk_code == -2
    assert type(failed) is BadVersionError
    assert first_error(["/a", before, failed, after]) is failed
    assert first_error([before, after]) is before
    assert first_error(["/a", None]) is None
    # Outside a transaction, RUNTIMEINCONSISTENCY is just an error.
    assert type(translate(kz.RuntimeInconsistency())) is ZooKeeperError


def test_the_names_other_modules_import_are_dlog_errors() -> None:
    for name in (
        "BadVersionError",
        "ConnectionLossError",
        "NodeExistsError",
        "NoNodeError",
        "NotEmptyError",
        "RolledBackError",
        "SessionExpiredError",
        "ZooKeeperError",
    ):
        assert getattr(dlog.zk, name) is getattr(errors, name)


def test_error_hierarchy() -> None:
    assert not hasattr(errors, "ZKError") and not hasattr(errors, "DLError")
    assert issubclass(errors.LogNotFoundError, LogError)
    assert issubclass(errors.ZooKeeperError, LogError)
    assert errors.OperationTimeoutError is not ZooKeeperTimeoutError
    journal = errors.JournalError("journal write failed", errno=28)
    assert isinstance(journal, errors.BookieIOError) and isinstance(journal, OSError)
    assert journal.errno == 28 and journal.code == -100 and journal.retriable
    from dlog.bookie.journal import JournalError

    assert JournalError is errors.JournalError


def _imports_kazoo(path: Path) -> bool:
    tree = ast.parse(path.read_text(), str(path))
    for node in ast.walk(tree):
        if isinstance(node, ast.Import) and any(
            a.name == "kazoo" or a.name.startswith("kazoo.") for a in node.names
        ):
            return True
        if isinstance(node, ast.ImportFrom) and (node.module or "").split(".")[0] == "kazoo":
            return True
    return False


def test_only_dlog_zk_imports_kazoo() -> None:
    files = sorted((ROOT / "dlog").rglob("*.py")) + sorted((ROOT / "subscriptions").rglob("*.py"))
    offenders = [str(f.relative_to(ROOT)) for f in files if _imports_kazoo(f)]
    assert offenders == ["dlog/zk.py"]
