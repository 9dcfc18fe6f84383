"""Shared fixtures: a real ZooKeeper server for the whole session, and a
fresh ZooKeeper root per test so tests never see each other's znodes.

Bookies started by ``make_bookie`` and ``bookie_cluster`` run with
``entryLogPerLedgerEnabled`` from the ``entry_log_per_ledger`` fixture: off,
unless ``DLOG_TEST_ENTRY_LOG_PER_LEDGER=1`` turns it on for the whole run.
A module marked ``pytestmark = pytest.mark.both_entry_log_modes`` runs each
of its bookie tests twice, once per mode (a representative subset: running
every module twice would double the suite's time).
"""

from __future__ import annotations

import logging
import os
import signal
import socket
import uuid
from collections.abc import AsyncIterator, Iterator

import pytest

from dlog.sandbox.zookeeper import ZooKeeperServer
from dlog.zk import ZooKeeper

# Clients still connected when the session's ZooKeeper stops log a warning
# per reconnect attempt; it is noise in test output.
logging.getLogger("kazoo").setLevel(logging.ERROR)

# A suite started in the background by a non-interactive shell (``make test
# &``, nohup) inherits SIGINT ignored, and so would every process it starts:
# tests that interrupt a CLI (Ctrl-C) would see it ignore them. Handled here,
# SIGINT reaches children at its default, as from a terminal.
if signal.getsignal(signal.SIGINT) == signal.SIG_IGN:
    signal.signal(signal.SIGINT, signal.default_int_handler)


#: Test ids of the two entry log modes.
ENTRY_LOG_MODES = {False: "single-log", True: "log-per-ledger"}


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line(
        "markers",
        "both_entry_log_modes: run the module's bookie tests with entryLogPerLedgerEnabled "
        "off and on",
    )


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    if "entry_log_per_ledger" in metafunc.fixturenames and metafunc.definition.get_closest_marker(
        "both_entry_log_modes"
    ):
        metafunc.parametrize(
            "entry_log_per_ledger",
            list(ENTRY_LOG_MODES),
            ids=list(ENTRY_LOG_MODES.values()),
            indirect=True,
        )


#: BookKeeper's and dlog's default ports: the bookie, its Prometheus
#: endpoint (AutoRecovery's too), the HTTP admin API, the bookie's and the
#: namespace's gRPC control planes.
DEFAULT_PORTS = (3181, 8000, 8080, 4181, 4182)


@pytest.fixture(scope="session", autouse=True)
def default_ports_taken() -> Iterator[list[int]]:
    """Hold the default ports for the whole run, so that a test whose
    process binds one by default fails every time, not only when another
    test's process (run at the same time by another worker) holds it.
    Returns the ports this process holds (another worker, or the machine,
    may hold the rest)."""
    held: list[socket.socket] = []
    for port in DEFAULT_PORTS:
        s = socket.socket()
        try:
            s.bind(("0.0.0.0", port))
            s.listen(1)
        except OSError:
            s.close()
            continue
        held.append(s)
    yield [s.getsockname()[1] for s in held]
    for s in held:
        s.close()


@pytest.fixture
def entry_log_per_ledger(request: pytest.FixtureRequest) -> bool:
    """``entryLogPerLedgerEnabled`` for this test's bookies (see the module doc)."""
    param = getattr(request, "param", None)
    if param is not None:
        return bool(param)
    return os.environ.get("DLOG_TEST_ENTRY_LOG_PER_LEDGER", "") not in ("", "0", "false")


@pytest.fixture(scope="session")
def zk_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ZooKeeperServer]:
    """A real standalone ZooKeeper (Debian package, machine Java) on loopback.

    Fails loudly, never skips, when Java or ZooKeeper is missing."""
    worker = os.environ.get("PYTEST_XDIST_WORKER", "main")
    server = ZooKeeperServer(tmp_path_factory.mktemp(f"zk-{worker}"))
    server.start()
    yield server
    server.stop()


@pytest.fixture
def zk_root() -> str:
    """A unique chroot-like path prefix for one test."""
    return f"/t-{uuid.uuid4().hex[:12]}"


@pytest.fixture
def ledgers_uri(zk_server: ZooKeeperServer, zk_root: str) -> str:
    """A metadata service URI whose ledgers root is private to this test."""
    return f"zk+hierarchical://{zk_server.connect_string}{zk_root}/ledgers"


@pytest.fixture
async def zk(zk_server: ZooKeeperServer) -> AsyncIterator[ZooKeeper]:
    client = ZooKeeper(zk_server.connect_string)
    await client.start()
    yield client
    await client.stop()


@pytest.fixture
async def make_bookie(tmp_path, ledgers_uri, entry_log_per_ledger):  # type: ignore[no-untyped-def]
    """Start in-process bookies (real server, real files) sharing this
    test's ledgers root; all are stopped at the end of the test. Each is a
    BookieService: ``.server`` and ``.core`` (the Bookie).

    ``conf_file``: a bookie.conf read as ``dlog bookie --conf`` reads it;
    its keys win over the fixture's settings (directories, port, metadata
    service) and ``overrides``."""
    from dlog.bookie.service import BookieService
    from dlog.conf.bookie import BookieConfig
    from dlog.sandbox.bookies import bookie_config
    from dlog.sandbox.ports import free_port

    started: list[BookieService] = []

    async def factory(
        name: str = "b0",
        port: int | None = None,
        *,
        conf_file: os.PathLike[str] | str | None = None,
        **overrides: object,
    ) -> BookieService:
        conf = bookie_config(
            tmp_path / name,
            port=port or free_port(),
            metadata_service_uri=ledgers_uri,
            **{"entryLogPerLedgerEnabled": entry_log_per_ledger, **overrides},
        )
        if conf_file is not None:
            conf = BookieConfig.load(conf_file, defaults=conf.to_properties())
        bookie = BookieService(conf)
        await bookie.start()
        started.append(bookie)
        return bookie

    yield factory

    for b in started:
        if not b.stopped:
            await b.stop()


@pytest.fixture
def bookie_cluster(tmp_path, ledgers_uri, entry_log_per_ledger):  # type: ignore[no-untyped-def]
    """Start N real bookie processes (``python -m dlog bookie``) on this
    test's ledgers root; they can be kill -9'd and restarted."""
    from dlog.sandbox.bookies import BookieCluster

    clusters: list[BookieCluster] = []

    def factory(count: int = 3, **overrides: object) -> BookieCluster:
        cluster = BookieCluster(
            tmp_path / f"cluster-{len(clusters)}",
            ledgers_uri,
            count,
            **{"entryLogPerLedgerEnabled": entry_log_per_ledger, **overrides},
        )
        clusters.append(cluster)
        return cluster.start()

    yield factory
    for c in clusters:
        c.stop()


#: Namespace settings for tests: 3 bookies, quick session expiry.
TEST_NAMESPACE_SETTINGS = {
    "ensemble-size": 3,
    "write-quorum-size": 2,
    "ack-quorum-size": 2,
    "zkSessionTimeoutSeconds": 4,
}


@pytest.fixture
async def open_namespace(make_bookie, zk_server, zk_root, ledgers_uri):  # type: ignore[no-untyped-def]
    """``await open_namespace(**settings)``: a dlog namespace (its own
    ZooKeeper session and ledger client) on 3 in-process bookies
    (``open_namespace.bookies``, for tests that stop some); every namespace
    opened is closed at the end of the test."""
    from dlog.conf.dlog import DLogConfig
    from dlog.namespace import Namespace

    bookies = [await make_bookie(f"b{i}") for i in range(3)]
    opened: list[Namespace] = []

    async def factory(**settings: object) -> Namespace:
        conf = DLogConfig.load(
            overrides={**TEST_NAMESPACE_SETTINGS, "bkc.metadataServiceUri": ledgers_uri, **settings}
        )
        ns = await Namespace.open(
            f"distributedlog://{zk_server.connect_string}{zk_root}/ns", conf, bind=True
        )
        opened.append(ns)
        return ns

    factory.bookies = bookies  # type: ignore[attr-defined]
    yield factory
    from dlog import failpoints

    failpoints.configure("")
    for ns in opened:
        try:
            await ns.close()
        except Exception:
            pass
