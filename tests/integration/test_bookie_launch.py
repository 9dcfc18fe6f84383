"""Starting bookie processes (``dlog.sandbox.bookies``) when one fails."""

from __future__ import annotations

import asyncio
import time

import pytest

from dlog.sandbox.bookies import BookieLaunchError, BookieProcess, wait_registered
from dlog.uri import parse_metadata_service_uri


def test_a_bookie_dying_after_its_port_answered_fails_the_wait_at_once(  # type: ignore[no-untyped-def]
    bookie_cluster, ledgers_uri, tmp_path
) -> None:
    """The shape of a CI failure: another server already held the bookie's
    port, so the new process died ("address already in use") while the
    other bookie answered its probes; the launcher then waited its whole
    timeout for a registration that could not come, and said only "did not
    register". It must fail as soon as the process is gone, with its log."""
    (other,) = bookie_cluster(1).bookies
    twin = BookieProcess(tmp_path / "twin", f"{ledgers_uri}-twin", port=other.port)
    twin.start(60.0)  # returns: the port answers, but not from this process
    began = time.monotonic()
    with pytest.raises(BookieLaunchError) as raised:
        twin.wait_registered(60.0)
    assert time.monotonic() - began < 30
    message = str(raised.value)
    assert f"bookie {twin.bookie_id} exited with code" in message
    assert "before it registered in ZooKeeper" in message
    assert "already in use" in message  # the bookie's own log says why
    assert other.is_running()


def test_a_bookie_that_never_registers_is_reported_with_its_log(  # type: ignore[no-untyped-def]
    bookie_cluster, ledgers_uri
) -> None:
    """A bookie alive but not registered where the launcher looks: the
    timeout names it and quotes its log, so a failed run says why."""
    (bookie,) = bookie_cluster(1).bookies
    uri = parse_metadata_service_uri(ledgers_uri)
    with pytest.raises(BookieLaunchError) as raised:
        asyncio.run(wait_registered(uri.hosts, f"{uri.ledgers_root}-elsewhere", [bookie], 1.0))
    message = str(raised.value)
    assert f"bookies {bookie.bookie_id} did not register in ZooKeeper within 1.0s" in message
    assert f"--- {bookie.bookie_id}, still running, log tail:" in message
    assert "registered bookie at" in message  # its own log, registered in its own root
