"""Cheap metrics for the hot path, exported through prometheus_client.

``prometheus_client``'s Counter and Histogram take a lock on every update;
at tens of thousands of requests a second that lock is a visible share of
a bookie's CPU. These counters and histograms are plain Python numbers,
updated by one thread (the event loop), and read by the exporter through a
collector at scrape time. Use them only from a single thread.
"""

from __future__ import annotations

import bisect
from collections.abc import Iterable, Sequence

from prometheus_client import CollectorRegistry
from prometheus_client.core import CounterMetricFamily, HistogramMetricFamily
from prometheus_client.registry import Collector

LATENCY_BUCKETS: tuple[float, ...] = (
    0.0001,
    0.00025,
    0.0005,
    0.001,
    0.002,
    0.005,
    0.01,
    0.025,
    0.05,
    0.1,
    0.25,
    0.5,
    1.0,
    2.5,
    10.0,
)


class LoopCounter:
    """A counter with optional labels, updated from one thread."""

    def __init__(self, name: str, documentation: str, labelnames: Sequence[str] = ()) -> None:
        self.name = name
        self.documentation = documentation
        self.labelnames = tuple(labelnames)
        self.values: dict[tuple[str, ...], float] = {}

    def inc(self, amount: float = 1.0, labels: tuple[str, ...] = ()) -> None:
        self.values[labels] = self.values.get(labels, 0.0) + amount

    def get(self, labels: tuple[str, ...] = ()) -> float:
        return self.values.get(labels, 0.0)

    def collect(self) -> CounterMetricFamily:
        family = CounterMetricFamily(self.name, self.documentation, labels=self.labelnames)
        for labels, value in list(self.values.items()):
            family.add_metric(list(labels), value)
        return family


class LoopHistogram:
    """A histogram updated from one thread; ``observe`` is a bisect and two adds."""

    def __init__(
        self, name: str, documentation: str, buckets: Sequence[float] = LATENCY_BUCKETS
    ) -> None:
        self.name = name
        self.documentation = documentation
        self.bounds = list(buckets)
        self.counts = [0] * (len(self.bounds) + 1)
        self.sum = 0.0
        self.count = 0

    def observe(self, value: float, n: int = 1) -> None:
        """Count ``value`` ``n`` times (``n`` events that took as long)."""
        self.counts[bisect.bisect_left(self.bounds, value)] += n
        self.sum += value * n
        self.count += n

    def collect(self) -> HistogramMetricFamily:
        cumulative = []
        running = 0
        counts = list(self.counts)
        for bound, c in zip(self.bounds, counts, strict=False):
            running += c
            cumulative.append((repr(float(bound)), running))
        running += counts[-1]
        cumulative.append(("+Inf", running))
        return HistogramMetricFamily(
            self.name, self.documentation, buckets=cumulative, sum_value=self.sum
        )


class LoopMetrics(Collector):
    """A set of loop-local metrics registered as one collector.

    It describes its metrics, so the registry knows their names: a scrape
    restricted to some (``/metrics?name[]=...``, as a benchmark polling one
    histogram twice a second makes) collects this collector, not every one
    (a whole bookie's exposition takes 2-3 ms of the interpreter lock), and
    finds these metrics in it rather than nothing."""

    def __init__(self, registry: CollectorRegistry | None = None) -> None:
        self._metrics: list[LoopCounter | LoopHistogram] = []
        self._registry = registry
        if registry is not None:
            registry.register(self)

    def _add(self, metric: LoopCounter | LoopHistogram) -> None:
        self._metrics.append(metric)
        if self._registry is not None:
            # The registry reads the names once, when a collector registers.
            self._registry.unregister(self)
            self._registry.register(self)

    def attach(self, registry: CollectorRegistry) -> None:
        """Export these metrics, and any added later, through ``registry``
        (a process's endpoint): a library object such as the ledger client
        makes its metrics before the process that runs it picks where they
        go."""
        if self._registry is registry:
            return
        if self._registry is not None:
            raise ValueError("these metrics are exported through another registry already")
        registry.register(self)  # raises on a name another collector has
        self._registry = registry

    def detach(self) -> None:
        """Stop exporting through the registry given to ``attach``, so a new
        set of the same names (a restarted service's) can take its place."""
        if self._registry is not None:
            self._registry.unregister(self)
            self._registry = None

    def counter(self, name: str, documentation: str, labelnames: Sequence[str] = ()) -> LoopCounter:
        c = LoopCounter(name, documentation, labelnames)
        self._add(c)
        return c

    def histogram(
        self, name: str, documentation: str, buckets: Sequence[float] = LATENCY_BUCKETS
    ) -> LoopHistogram:
        h = LoopHistogram(name, documentation, buckets)
        self._add(h)
        return h

    def describe(self) -> Iterable[CounterMetricFamily | HistogramMetricFamily]:
        return self.collect()

    def collect(self) -> Iterable[CounterMetricFamily | HistogramMetricFamily]:
        for m in self._metrics:
            yield m.collect()
