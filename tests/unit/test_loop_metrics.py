"""The hot path's histograms (dlog.loop_metrics): what a scrape exports."""

from __future__ import annotations

import pytest
from prometheus_client import CollectorRegistry, generate_latest

from dlog.loop_metrics import LoopMetrics


def _exported(registry: CollectorRegistry, name: str) -> dict[str, float]:
    """Bucket, sum and count samples of ``name`` as a scrape reads them."""
    out = {}
    for line in generate_latest(registry).decode().splitlines():
        if line.startswith(name) and not line.startswith("#"):
            key, value = line.rsplit(" ", 1)
            out[key[len(name) :]] = float(value)
    return out


def test_observe_n_counts_n_events_that_took_as_long() -> None:
    registry = CollectorRegistry()
    h = LoopMetrics(registry).histogram("t_wait_seconds", "A wait.")
    h.observe(0.0003)  # one event
    h.observe(0.003, 10)  # ten records that all waited 3 ms
    got = _exported(registry, "t_wait_seconds")
    assert got['_bucket{le="0.0005"}'] == 1
    assert got['_bucket{le="0.002"}'] == 1
    assert got['_bucket{le="0.005"}'] == 11
    assert got['_bucket{le="+Inf"}'] == 11
    assert got["_count"] == 11
    assert abs(got["_sum"] - (0.0003 + 0.03)) < 1e-12


def test_a_scrape_restricted_to_some_names_finds_them() -> None:
    """``/metrics?name[]=...`` (prometheus_client's restricted registry)
    collects only the collectors that own those names: loop metrics must be
    described to be found (a benchmark polls a bookie's flush histogram so,
    twice a second, not its whole exposition)."""
    registry = CollectorRegistry()
    metrics = LoopMetrics(registry)
    h = metrics.histogram("t_flush_seconds", "A flush.")
    c = metrics.counter("t_adds", "Adds.", ["status"])
    h.observe(0.5)
    c.inc(3, ("ok",))
    text = generate_latest(
        registry.restricted_registry(["t_flush_seconds_count", "t_adds_total"])
    ).decode()
    samples = [line for line in text.splitlines() if not line.startswith("#")]
    assert samples == ["t_flush_seconds_count 1.0", 't_adds_total{status="ok"} 3.0']


def test_attached_later_exports_metrics_added_before_and_after() -> None:
    """A ledger client makes its metrics before a process attaches them to
    its endpoint; the replication worker adds more after. A restricted
    scrape finds both (the registry knows every name), and detaching
    frees the names for a restarted service's set."""
    registry = CollectorRegistry()
    client = LoopMetrics()
    before = client.counter("t_before", "Made before attach.")
    client.attach(registry)
    client.attach(registry)  # again: a no-op
    after = client.counter("t_after", "Made after attach.")
    before.inc()
    after.inc(2)
    text = generate_latest(registry.restricted_registry(["t_before_total", "t_after_total"]))
    samples = [line for line in text.decode().splitlines() if not line.startswith("#")]
    assert samples == ["t_before_total 1.0", "t_after_total 2.0"]
    with pytest.raises(ValueError, match="another registry"):
        client.attach(CollectorRegistry())
    with pytest.raises(ValueError):  # prometheus_client: a duplicated name
        _twin(registry)
    client.detach()
    assert "t_before" not in generate_latest(registry).decode()
    _twin(registry)  # the names are free again


def _twin(registry: CollectorRegistry) -> None:
    twin = LoopMetrics()
    twin.counter("t_before", "A restarted service's.")
    twin.attach(registry)
