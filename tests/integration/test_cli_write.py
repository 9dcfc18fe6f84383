"""`dlog write` and `dlog namespace`, run as a user runs them (``python -m
dlog ...`` subprocesses) against one sandbox (ZooKeeper and 3 bookie
processes) started for the module, with ZooKeeper checked directly for what
was left behind: writing never creates a namespace, creates a missing
stream only if createStreamIfNotExists, and a first write that fails (or
writes nothing) leaves no stream, segment or ledger behind."""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator

import pytest

from dlog.conf.bookkeeper import ClientConfig
from dlog.conf.dlog import DLogConfig
from dlog.dlsn import DLSN
from dlog.errors import LogNotFoundError
from dlog.ledger.client import BookKeeper
from dlog.log_metadata import LogMetadataStore, LogPaths
from dlog.namespace import Namespace
from dlog.sandbox.cluster import Sandbox
from dlog.zk import ZooKeeper
from tests.cli import cli_env, dlog, error_line, ok

pytestmark = pytest.mark.integration


def failure(r: subprocess.CompletedProcess[str]) -> str:
    """A failure the library also logs on its way (the writer's errors, at
    WARNING and above): exit 1, no traceback, the `error:` line last."""
    assert r.returncode == 1, f"exit {r.returncode}\nstdout:\n{r.stdout}\nstderr:\n{r.stderr}"
    assert "Traceback" not in r.stderr, r.stderr
    lines = [line for line in r.stderr.splitlines() if line.strip()]
    assert lines and lines[-1].startswith("error: "), r.stderr
    return lines[-1]


def field(out: str, name: str) -> str:
    for line in out.splitlines():
        key, sep, value = line.partition(":")
        if sep and key == name:
            return value.strip()
    raise AssertionError(f"no {name!r} line in:\n{out}")


# -- what is in ZooKeeper ---------------------------------------------------------


def _zk(sandbox: Sandbox, fn):  # type: ignore[no-untyped-def]
    async def go():  # type: ignore[no-untyped-def]
        zk = ZooKeeper(sandbox.zk_connect_string)
        await zk.start()
        try:
            return await fn(zk)
        finally:
            await zk.stop()

    return asyncio.run(go())


def exists(sandbox: Sandbox, path: str) -> bool:
    return bool(_zk(sandbox, lambda zk: _exists(zk, path)))


async def _exists(zk: ZooKeeper, path: str) -> bool:
    return await zk.exists(path) is not None


def _paths(sandbox: Sandbox, stream: str) -> LogPaths:
    """The stream's znode paths (building them needs no session)."""
    return LogMetadataStore(None, sandbox.namespace_path).paths(stream)  # type: ignore[arg-type]


def lock_holders(sandbox: Sandbox, stream: str) -> list[str]:
    p = _paths(sandbox, stream)

    async def go(zk: ZooKeeper) -> list[str]:
        return await zk.get_children(p.lock) if await _exists(zk, p.lock) else []

    return list(_zk(sandbox, go))


def root_children(sandbox: Sandbox) -> set[str]:
    return set(_zk(sandbox, lambda zk: zk.get_children("/")))


def ledgers(sandbox: Sandbox) -> set[int]:
    async def go() -> set[int]:
        conf = ClientConfig().with_overrides({"metadataServiceUri": sandbox.metadata_service_uri})
        async with BookKeeper(conf=conf) as bk:
            return set(await bk.list_ledgers())

    return asyncio.run(go())


def records(uri: str, stream: str) -> list[bytes]:
    """The stream's records (LogNotFoundError if it does not exist)."""

    async def go() -> list[bytes]:
        conf = DLogConfig.load(overrides={"createStreamIfNotExists": False})
        async with await Namespace.open(uri, conf) as ns:
            reader = await (await ns.open_log(stream)).open_reader()
            out: list[bytes] = []
            while batch := await reader.read_bulk(100, timeout=1):
                out += [r.payload for r in batch]
            await reader.close()
            return out

    return asyncio.run(go())


def unique(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:8]}"


# -- namespaces -------------------------------------------------------------------


def test_write_to_a_mistyped_namespace_creates_nothing(sandbox: Sandbox) -> None:
    before = root_children(sandbox)
    zk = sandbox.zk_connect_string
    for path in ("/nope", f"{sandbox.namespace_path}/nope", f"{sandbox.namespace_path}x/deeper"):
        typo = f"distributedlog://{zk}{path}"
        line = error_line(dlog("write", "events", uri=typo, input="a\nb\n"))
        assert f"namespace {typo} does not exist" in line, line
        assert f"create it with `dlog namespace create {typo}`" in line, line
        assert not exists(sandbox, path), path
        # The other commands agree that it does not exist.
        assert "does not exist" in error_line(dlog("stream", "list", uri=typo))
        assert "does not exist" in error_line(dlog("namespace", "show", typo))
    assert root_children(sandbox) == before
    assert "nope" not in ok(dlog("stream", "list", uri=sandbox.namespace_uri)).split()


def test_namespace_create_then_write(sandbox: Sandbox) -> None:
    uri = f"distributedlog://{sandbox.zk_connect_string}/{unique('created')}"
    r = dlog("namespace", "create", uri)
    # Bound by default to /ledgers on its own ZooKeeper: the sandbox's bookies.
    assert ok(r).strip() == f"created namespace {uri}, bound to {sandbox.metadata_service_uri}"
    assert r.stderr == ""
    out = ok(dlog("write", "events", uri=uri, input="a\nb\n"))
    assert "wrote 2 record(s) to events" in out, out
    assert records(uri, "events") == [b"a", b"b"]

    out = ok(dlog("namespace", "show", uri))
    assert field(out, "namespace") == uri
    assert field(out, "ledgers uri") == sandbox.metadata_service_uri
    assert field(out, "streams") == "1"
    assert ok(dlog("namespace", "show", env={"DLOG_URI": uri})) == out
    assert ok(dlog("namespace", "show", uri=uri)) == out

    # Creating it again for the same bookies is not an error; for others it is.
    again = ok(dlog("namespace", "create", "--uri", uri))
    assert (
        again.strip() == f"namespace {uri} already exists, bound to {sandbox.metadata_service_uri}"
    )
    other = f"zk+hierarchical://{sandbox.zk_connect_string}/other-ledgers"
    line = error_line(dlog("namespace", "create", uri, "--ledgers-uri", other))
    assert f"already exists, bound to {sandbox.metadata_service_uri}" in line, line
    assert field(ok(dlog("namespace", "show", uri)), "ledgers uri") == sandbox.metadata_service_uri


def test_namespace_create_arguments(sandbox: Sandbox) -> None:
    zk = sandbox.zk_connect_string
    assert "DLOG_URI" in error_line(dlog("namespace", "create"), 2)
    assert "DLOG_URI" in error_line(dlog("namespace", "show"), 2)
    a, b = f"distributedlog://{zk}/{unique('a')}", f"distributedlog://{zk}/{unique('b')}"
    assert "two namespace URIs" in error_line(dlog("namespace", "create", a, uri=b), 2)
    assert "invalid --ledgers-uri" in error_line(
        dlog("namespace", "create", a, "--ledgers-uri", "http://x/ledgers"), 2
    )
    assert not exists(sandbox, a.rpartition("/")[2])

    # --ledgers-uri, from $DLOG_URI; no bookie there yet: created, with a warning.
    empty = f"zk+hierarchical://{zk}/{unique('no-bookies')}"
    r = dlog("namespace", "create", "--ledgers-uri", empty, env={"DLOG_URI": a})
    assert ok(r).strip() == f"created namespace {a}, bound to {empty}"
    assert "warning: no bookie has registered under" in r.stderr, r.stderr
    shown = ok(dlog("namespace", "show", a))
    assert field(shown, "ledgers uri") == empty and field(shown, "streams") == "0"

    # bkc.metadataServiceUri from --set is the default binding.
    ok(dlog("namespace", "create", b, "--set", f"bkc.metadataServiceUri={empty}"))
    assert field(ok(dlog("namespace", "show", b)), "ledgers uri") == empty


def test_namespace_commands_report_an_unreachable_zookeeper_in_seconds() -> None:
    for command in ("create", "show"):
        t0 = time.monotonic()
        line = error_line(dlog("namespace", command, "distributedlog://127.0.0.1:1/ns"))
        assert "within 5 s (zkConnectionTimeoutSeconds)" in line, line
        assert time.monotonic() - t0 < 20


def test_namespace_create_refuses_a_namespace_inside_another(sandbox: Sandbox) -> None:
    inner = f"{sandbox.namespace_uri}/{unique('inner')}"
    line = error_line(dlog("namespace", "create", inner))
    assert f"inside namespace {sandbox.namespace_uri}" in line, line
    assert not exists(sandbox, inner.removeprefix(f"distributedlog://{sandbox.zk_connect_string}"))


# -- streams ----------------------------------------------------------------------


def test_a_missing_stream_is_created_only_if_create_stream_if_not_exists(
    sandbox: Sandbox, uri: str
) -> None:
    refused = unique("refused")
    r = dlog("write", refused, "--set", "createStreamIfNotExists=false", uri=uri, input="x\n")
    line = error_line(r)
    assert f"stream {refused!r} does not exist" in line and "createStreamIfNotExists" in line
    assert not exists(sandbox, f"{sandbox.namespace_path}/{refused}")

    created = unique("created")
    r = dlog("write", created, "--set", "createStreamIfNotExists=true", uri=uri, input="x\n")
    assert "wrote 1 record(s)" in ok(r)
    assert records(uri, created) == [b"x"]
    # Its default is true, as in DistributedLog.
    default = unique("default")
    ok(dlog("write", default, uri=uri, input="y\n"))
    assert records(uri, default) == [b"y"]
    # An existing stream is written to whatever the setting says.
    r = dlog("write", created, "--set", "createStreamIfNotExists=false", uri=uri, input="z\n")
    assert "wrote 1 record(s)" in ok(r)
    assert records(uri, created) == [b"x", b"z"]


def test_a_failed_first_write_leaves_nothing_behind(sandbox: Sandbox, uri: str) -> None:
    """Four bookies wanted, three there: the first segment cannot start."""
    before = ledgers(sandbox)
    doomed = unique("doomed")
    too_many = ("--set", "bkcEnsembleSize=4")
    line = failure(dlog("write", doomed, *too_many, uri=uri, input="a\nb\n"))
    assert "not enough bookies" in line, line
    assert not exists(sandbox, f"{sandbox.namespace_path}/{doomed}")
    assert doomed not in ok(dlog("stream", "list", uri=uri)).split()
    assert ledgers(sandbox) == before

    # A stream that existed before the failed write stays, empty or not.
    empty, written = unique("empty"), unique("written")
    ok(dlog("stream", "create", empty, uri=uri))
    ok(dlog("write", written, uri=uri, input="kept\n"))
    for stream in (empty, written):
        assert "not enough bookies" in failure(
            dlog("write", stream, *too_many, uri=uri, input="c\n")
        )
        assert exists(sandbox, f"{sandbox.namespace_path}/{stream}")
    assert records(uri, written) == [b"kept"]
    assert records(uri, empty) == []


def test_an_empty_first_write_leaves_nothing_behind(sandbox: Sandbox, uri: str) -> None:
    stream = unique("nothing")
    r = dlog("write", stream, uri=uri, input="")
    assert r.returncode == 0 and r.stdout == "" and "nothing written" in r.stderr, r
    assert not exists(sandbox, f"{sandbox.namespace_path}/{stream}")


#: Settings under which one paused bookie holds every write back.
EVERY_BOOKIE_ACKS = (
    *("--set", "bkcEnsembleSize=3"),
    *("--set", "bkcWriteQuorumSize=3"),
    *("--set", "bkcAckQuorumSize=3"),
)


@contextlib.contextmanager
def paused(pid: int) -> Iterator[None]:
    os.kill(pid, signal.SIGSTOP)
    try:
        yield
    finally:
        os.kill(pid, signal.SIGCONT)


def test_a_first_write_failing_in_its_first_segment_leaves_nothing_behind(
    sandbox: Sandbox, uri: str
) -> None:
    """Every bookie must acknowledge and one is paused: the segment and its
    ledger are created, no record is acknowledged, and both go again."""
    before = ledgers(sandbox)
    stream = unique("stalled")
    quorum = [*EVERY_BOOKIE_ACKS, "--set", "bkc.addEntryTimeoutSec=1"]
    pid = sandbox.bookies[0].pid
    assert pid is not None
    with paused(pid):
        line = failure(dlog("write", stream, *quorum, uri=uri, input="a\n"))
    assert not exists(sandbox, f"{sandbox.namespace_path}/{stream}"), line
    assert ledgers(sandbox) == before


def _writer(uri: str, stream: str, *args: str) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, "-m", "dlog", "write", stream, "--uri", uri, *args],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=cli_env(),
    )


def _interrupt(proc: subprocess.Popen[str]) -> tuple[int, str]:
    proc.send_signal(signal.SIGINT)
    try:
        _out, err = proc.communicate(timeout=30)
    finally:
        proc.kill()
    return proc.returncode, err


def _wait_for(fn, timeout: float = 30):  # type: ignore[no-untyped-def]
    deadline = time.monotonic() + timeout
    while True:
        try:
            return fn()
        except (LogNotFoundError, AssertionError):
            if time.monotonic() > deadline:
                raise
            time.sleep(0.2)


def test_an_interrupted_first_write_keeps_the_stream_only_with_records(
    sandbox: Sandbox, uri: str
) -> None:
    """Ctrl-C before any line: nothing is left. Ctrl-C after a record was
    acknowledged: the stream and the record stay."""
    idle = unique("idle")
    proc = _writer(uri, idle)
    try:

        def writing() -> None:  # the writer holds the stream's lock, waiting on stdin
            assert lock_holders(sandbox, idle)

        _wait_for(writing)
    finally:
        code, err = _interrupt(proc)
    assert code == 130 and "interrupted" in err, err
    assert not exists(sandbox, f"{sandbox.namespace_path}/{idle}")

    kept = unique("kept")
    proc = _writer(uri, kept)
    try:
        assert proc.stdin is not None
        proc.stdin.write("acked\n")
        proc.stdin.flush()

        def acknowledged() -> None:
            assert records(uri, kept) == [b"acked"]

        _wait_for(acknowledged)
    finally:
        code, err = _interrupt(proc)
    assert code == 130 and "interrupted" in err, err
    assert records(uri, kept) == [b"acked"]


def test_an_interrupted_first_write_waits_for_what_is_in_flight(sandbox: Sandbox, uri: str) -> None:
    """Ctrl-C while the first record waits for a paused bookie: the record
    may yet be acknowledged, so the write settles it before deciding, and
    once it is, the stream stays."""
    stream = unique("in-flight")
    path = f"{sandbox.namespace_path}/{stream}"
    pid = sandbox.bookies[0].pid
    assert pid is not None
    with paused(pid):
        proc = _writer(uri, stream, *EVERY_BOOKIE_ACKS, "--set", "bkc.addEntryTimeoutSec=60")
        try:
            assert proc.stdin is not None
            proc.stdin.write("late\n")
            proc.stdin.flush()

            def segment_started() -> None:
                assert exists(sandbox, path) and _zk(
                    sandbox, lambda zk: zk.get_children(_paths(sandbox, stream).ledgers)
                )

            _wait_for(segment_started)
            proc.send_signal(signal.SIGINT)
            time.sleep(1)
            assert proc.poll() is None  # waiting for the paused bookie
        except BaseException:
            proc.kill()
            raise
    try:
        _out, err = proc.communicate(timeout=30)
    finally:
        proc.kill()
    assert proc.returncode == 130 and "interrupted" in err, err
    assert records(uri, stream) == [b"late"]


def test_an_interrupted_first_write_keeps_a_stream_someone_subscribed_to(
    sandbox: Sandbox, uri: str
) -> None:
    """No record, but a subscriber appeared meanwhile: the stream is in use."""
    stream = unique("subscribed")
    proc = _writer(uri, stream)
    try:

        def writing() -> None:
            assert lock_holders(sandbox, stream)

        _wait_for(writing)

        async def subscribe() -> None:
            conf = DLogConfig.load(overrides={"createStreamIfNotExists": False})
            async with await Namespace.open(uri, conf) as ns:
                store = (await ns.open_log(stream)).subscriptions
                await store.reset_position("app", DLSN.INITIAL)

        asyncio.run(subscribe())
    finally:
        code, err = _interrupt(proc)
    assert code == 130 and "interrupted" in err, err
    assert exists(sandbox, _paths(sandbox, stream).subscriber("app"))
