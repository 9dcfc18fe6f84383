"""Ports for the sandbox's servers (ZooKeeper, bookies, metrics, gRPC)."""

from __future__ import annotations

import socket

from dlog.sandbox.zookeeper import PORT_FLOOR, ephemeral_ports, free_port


def test_free_ports_are_outside_the_ephemeral_range_and_bindable() -> None:
    """A port from the ephemeral range can be taken as an outgoing
    connection's source port before its server binds it ("address already
    in use": a benchmark's bookie failed to start so)."""
    low, high = ephemeral_ports()
    assert 1024 <= low <= high <= 65535
    ports = {free_port() for _ in range(100)}
    assert len(ports) > 50  # random, so that processes choosing at once differ
    for port in ports:
        assert PORT_FLOOR <= port < low or high < port <= 65535, port
    with socket.socket() as s:
        s.bind(("127.0.0.1", ports.pop()))
