"""Fixtures for tests that drive a whole cluster the way a user would."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from dlog.sandbox.cluster import Sandbox


@pytest.fixture(scope="module")
def sandbox(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Sandbox]:
    """ZooKeeper and three bookie processes, shared by one test module."""
    name = request.module.__name__.rpartition(".")[2]
    sb = Sandbox(tmp_path_factory.mktemp(name), bookies=3).start()
    try:
        yield sb
    finally:
        sb.stop()


@pytest.fixture
def uri(sandbox: Sandbox) -> str:
    """The sandbox's namespace URI (distributedlog://...)."""
    return sandbox.namespace_uri
