"""Ports for the sandbox's servers (ZooKeeper, bookies, metrics, gRPC)."""

from __future__ import annotations

import socket
import subprocess
import sys
import textwrap

import pytest

from dlog.sandbox import ports
from dlog.sandbox.ports import PORT_FLOOR, ephemeral_ports, free_port


def test_free_ports_are_outside_the_ephemeral_range_and_bindable() -> None:
    """A port from the ephemeral range can be taken as an outgoing
    connection's source port before its server binds it ("address already
    in use": a benchmark's bookie failed to start so)."""
    low, high = ephemeral_ports()
    assert 1024 <= low <= high <= 65535
    chosen = [free_port() for _ in range(100)]
    assert len(set(chosen)) == len(chosen)  # a process is never given a port twice
    for port in chosen:
        assert PORT_FLOOR <= port < low or high < port <= 65535, port
    with socket.socket() as s:
        s.bind(("127.0.0.1", chosen[0]))


def test_a_port_is_not_handed_out_twice_while_its_server_is_down(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A bookie killed and not yet restarted leaves its port unbound; the
    same process must not give that port to another server meanwhile.
    Three candidate ports, all bindable and unleased: three calls get the
    three, and a fourth none of them."""
    low = 65533
    monkeypatch.setattr(ports, "ephemeral_ports", lambda: (ports.PORT_FLOOR, low - 1))
    monkeypatch.setattr(ports, "port_free", lambda host, port: True)
    monkeypatch.setattr(ports, "_lease", lambda port: True)
    monkeypatch.setattr(ports, "_chosen", set())
    assert sorted(free_port() for _ in range(3)) == [65533, 65534, 65535]
    assert free_port() not in (65533, 65534, 65535)


def test_a_port_leased_by_another_live_process_is_not_chosen() -> None:
    """The CI failure this prevents: a test worker chose port P for a bookie
    while P, chosen by another worker, had no server (its bookie between a
    kill and a restart). The other bookie came back on P first, ours died
    with "address already in use", and the other one answered its probes.

    A child process leases ports and stays alive; every port it holds must
    be refused here, though each is bindable."""
    child = subprocess.Popen(
        [
            sys.executable,
            "-c",
            textwrap.dedent(
                """
                import sys
                from dlog.sandbox.ports import free_port
                print(" ".join(str(free_port()) for _ in range(1000)), flush=True)
                sys.stdin.read()
                """
            ),
        ],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert child.stdout is not None
        held = {int(p) for p in child.stdout.readline().split()}
        assert len(held) == 1000
        for port in held:  # unbound, yet not free
            with socket.socket() as s:
                s.bind(("127.0.0.1", port))
        ours = {free_port() for _ in range(1000)}
        assert not ours & held
    finally:
        assert child.stdin is not None
        child.stdin.close()
        child.wait(10)
    # Its leases went with it: its ports can be leased again.
    assert all(ports._lease(p) for p in held)
