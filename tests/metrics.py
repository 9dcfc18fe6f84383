"""Reading a process's Prometheus endpoint in a test."""

from __future__ import annotations

import re
import urllib.request
from collections import Counter
from pathlib import Path

from prometheus_client.parser import text_string_to_metric_families


def scrape(port: int, timeout: float = 10.0) -> str:
    """The text ``/metrics`` on 127.0.0.1:``port`` serves now."""
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=timeout) as r:
        return str(r.read().decode())


def counters(text: str, prefix: str) -> Counter[str]:
    """Every counter series whose family starts with ``prefix`` in scraped
    ``text``, as ``name{label=value,...}`` (``name`` when unlabelled) ->
    value; ``_created`` series are left out."""
    out: Counter[str] = Counter()
    for family in text_string_to_metric_families(text):
        if family.type != "counter" or not family.name.startswith(prefix):
            continue
        for sample in family.samples:
            if sample.name.endswith("_total"):
                labels = ",".join(f"{k}={v}" for k, v in sorted(sample.labels.items()))
                out[f"{sample.name}{{{labels}}}" if labels else sample.name] += int(sample.value)
    return out


def metric(text: str, name: str, **labels: str) -> float:
    """The value of one series of ``name`` in scraped ``text`` (the series
    with exactly ``labels``, in the order given); 0 when it is absent."""
    want = ",".join(f'{k}="{v}"' for k, v in labels.items())
    for line in text.splitlines():
        if line.startswith(f"{name}{{{want}}} ") or (not labels and line.startswith(f"{name} ")):
            return float(line.rsplit(" ", 1)[1])
    return 0.0


README = Path(__file__).resolve().parents[1] / "README.md"


def documented(*tables: str) -> dict[str, tuple[str, frozenset[str]]]:
    """Name -> (type, label names) of every metric in README's Metrics
    tables headed ``#### <table>``, for each of ``tables``."""
    section = README.read_text().split("\n### Metrics\n", 1)[1].split("\n### ", 1)[0]
    out: dict[str, tuple[str, frozenset[str]]] = {}
    for table in tables:
        body = section.split(f"\n#### {table}\n", 1)[1].split("\n#### ", 1)[0]
        rows = [line for line in body.splitlines() if line.startswith("| `")]
        assert rows, f"README has no metrics table {table!r}"
        for row in rows:
            name, kind, labels = (cell.strip() for cell in row.split("|")[1:4])
            out[name.strip("`")] = (kind, frozenset(re.findall(r"`([a-z_]+)`", labels)))
    return out


def exposed(text: str) -> dict[str, tuple[str, set[str]]]:
    """Name -> (type, label names seen in samples) of each metric family in
    a scrape; prometheus_client's ``_created`` series are left out."""
    out: dict[str, tuple[str, set[str]]] = {}
    for line in text.splitlines():
        if line.startswith("# TYPE "):
            _, _, name, kind = line.split(" ")
            out[name] = (kind, set())
    created = {n for n in out if n.endswith("_created")}
    for name in created:
        base = name.removesuffix("_created")
        if f"{base}_total" in out or base in out:
            del out[name]
    for line in text.splitlines():
        if line.startswith("#") or "{" not in line:
            continue
        series, labels = line.split("{", 1)
        family = next(
            (f for f in (series, series.rsplit("_", 1)[0]) if f in out), None
        )  # a histogram's _bucket, _sum, _count
        if family is not None:
            out[family][1].update(re.findall(r'([a-z_]+)="', labels.split("}", 1)[0]))
    return out


def assert_documented(text: str, *tables: str) -> None:
    """A process's scrape exports exactly the metrics README's ``tables``
    list: none missing, none undocumented, each of its type and with no
    label the table does not name."""
    want, got = documented(*tables), exposed(text)
    assert set(got) - set(want) == set(), "exported but not in README's Metrics"
    assert set(want) - set(got) == set(), "in README's Metrics but not exported"
    for name, (kind, labels) in got.items():
        assert kind == want[name][0], (name, kind)
        assert labels - {"le"} <= want[name][1], (name, labels)
