"""The hot path's histograms (dlog.loop_metrics): what a scrape exports."""

from __future__ import annotations

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
