"""Opening and creating a namespace against a real ZooKeeper: opening never
creates one (a mistyped URI must leave no znode), creating one is
:meth:`Namespace.create` (or ``open(bind=True)`` for set-up code)."""

from __future__ import annotations

import re

import pytest

from dlog.conf.dlog import DLogConfig
from dlog.errors import LogNotFoundError, NamespaceExistsError, NamespaceNotFoundError
from dlog.log_metadata import bind_namespace, read_namespace_binding
from dlog.namespace import Namespace
from dlog.sandbox.zookeeper import ZooKeeperServer
from dlog.sync import SyncNamespace
from dlog.zk import ZooKeeper

pytestmark = pytest.mark.integration


@pytest.fixture
def uri(zk_server: ZooKeeperServer, zk_root: str) -> str:
    return f"distributedlog://{zk_server.connect_string}{zk_root}/ns"


def conf(ledgers_uri: str, **settings: object) -> DLogConfig:
    return DLogConfig.load(overrides={"bkc.metadataServiceUri": ledgers_uri, **settings})


async def test_open_refuses_a_namespace_never_created_and_creates_nothing(
    zk: ZooKeeper, uri: str, zk_root: str, ledgers_uri: str
) -> None:
    with pytest.raises(NamespaceNotFoundError) as caught:
        await Namespace.open(uri, conf(ledgers_uri))
    message = str(caught.value)
    assert f"namespace {uri} does not exist" in message
    assert f"dlog namespace create {uri}" in message
    assert isinstance(caught.value, LogNotFoundError)  # what callers caught before
    assert await zk.exists(zk_root) is None  # not the namespace, not even its parent


async def test_open_refuses_an_unbound_namespace_znode(
    zk: ZooKeeper, uri: str, zk_root: str, ledgers_uri: str
) -> None:
    """A znode without a binding (DistributedLog's unbind leaves it empty)
    is not a namespace, and opening it does not bind it."""
    await zk.ensure_path(f"{zk_root}/ns")
    with pytest.raises(NamespaceNotFoundError):
        await Namespace.open(uri, conf(ledgers_uri))
    assert await read_namespace_binding(zk, f"{zk_root}/ns") is None


async def test_create_binds_then_open_uses_the_binding(
    zk: ZooKeeper, uri: str, zk_root: str, ledgers_uri: str
) -> None:
    async with await Namespace.create(uri, conf(ledgers_uri)) as ns:
        assert ns.binding is not None and ns.binding.metadata_service_uri == ledgers_uri
    binding = await read_namespace_binding(zk, f"{zk_root}/ns")
    assert binding is not None and binding.metadata_service_uri == ledgers_uri
    # Opening it needs no metadataServiceUri: the binding says where the bookies are.
    async with await Namespace.open(uri) as ns:
        assert ns.binding == binding
        assert ns.bk.conf.metadata_service_uri == ledgers_uri
    # Creating it again for the same bookies is fine.
    async with await Namespace.create(uri, ledgers_uri=ledgers_uri) as ns:
        assert ns.binding == binding


async def test_create_refuses_a_namespace_bound_to_other_bookies(
    zk: ZooKeeper, uri: str, zk_root: str, ledgers_uri: str
) -> None:
    async with await Namespace.create(uri, ledgers_uri=ledgers_uri):
        pass
    other = ledgers_uri.replace("/ledgers", "/other-ledgers")
    with pytest.raises(
        NamespaceExistsError, match=re.escape(f"already exists, bound to {ledgers_uri}")
    ):
        await Namespace.create(uri, ledgers_uri=other)
    binding = await read_namespace_binding(zk, f"{zk_root}/ns")
    assert binding is not None and binding.metadata_service_uri == ledgers_uri


async def test_create_refuses_a_namespace_inside_another(
    zk: ZooKeeper, uri: str, zk_root: str, ledgers_uri: str
) -> None:
    """It would show up in the outer namespace as a stream."""
    async with await Namespace.create(uri, ledgers_uri=ledgers_uri):
        pass
    with pytest.raises(NamespaceExistsError, match=re.escape(f"inside namespace {uri}")):
        await Namespace.create(f"{uri}/inner", ledgers_uri=ledgers_uri)
    assert await zk.exists(f"{zk_root}/ns/inner") is None


async def test_create_defaults_to_the_ledgers_of_the_same_zookeeper(
    zk_server: ZooKeeperServer, uri: str
) -> None:
    async with await Namespace.create(uri) as ns:
        assert ns.binding is not None
        assert ns.binding.metadata_service_uri == (
            f"zk+hierarchical://{zk_server.connect_string}/ledgers"
        )


async def test_open_with_bind_binds_once_and_keeps_an_existing_binding(
    zk: ZooKeeper, uri: str, zk_root: str, ledgers_uri: str
) -> None:
    async with await Namespace.open(uri, conf(ledgers_uri), bind=True) as ns:
        assert ns.binding is not None and ns.binding.metadata_service_uri == ledgers_uri
    other = ledgers_uri.replace("/ledgers", "/other-ledgers")
    async with await Namespace.open(uri, conf(other), bind=True) as ns:
        assert ns.binding is not None and ns.binding.metadata_service_uri == ledgers_uri


async def test_streams_of_a_created_namespace_follow_create_stream_if_not_exists(
    zk: ZooKeeper, uri: str, zk_root: str, ledgers_uri: str
) -> None:
    await bind_namespace(zk, f"{zk_root}/ns", ledgers_uri)
    async with await Namespace.open(uri, conf(ledgers_uri, createStreamIfNotExists=False)) as ns:
        with pytest.raises(LogNotFoundError, match="does not exist"):
            await ns.open_log("events")
        assert not await ns.log_exists("events")
    async with await Namespace.open(uri, conf(ledgers_uri)) as ns:  # the default: true
        await ns.open_log("events")
        assert await ns.get_logs() == ["events"]


def test_blocking_twins_open_and_create(
    uri: str, zk_server: ZooKeeperServer, zk_root: str, ledgers_uri: str
) -> None:
    with pytest.raises(NamespaceNotFoundError, match="dlog namespace create"):
        SyncNamespace.open(uri, {"bkc.metadataServiceUri": ledgers_uri})
    with SyncNamespace.create(uri, ledgers_uri=ledgers_uri) as ns:
        ns.create_log("events")
    with SyncNamespace.open(uri) as ns:
        assert ns.get_logs() == ["events"]
        assert ns.namespace.binding is not None
        assert ns.namespace.binding.metadata_service_uri == ledgers_uri
