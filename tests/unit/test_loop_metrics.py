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
