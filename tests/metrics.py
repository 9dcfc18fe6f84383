"""Reading a process's Prometheus endpoint in a test."""

from __future__ import annotations

import urllib.request


def scrape(port: int, timeout: float = 10.0) -> str:
    """The text ``/metrics`` on 127.0.0.1:``port`` serves now."""
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=timeout) as r:
        return str(r.read().decode())


def metric(text: str, name: str, **labels: str) -> float:
    """The value of one series of ``name`` in scraped ``text`` (the series
    with exactly ``labels``, in the order given); 0 when it is absent."""
    want = ",".join(f'{k}="{v}"' for k, v in labels.items())
    for line in text.splitlines():
        if line.startswith(f"{name}{{{want}}} ") or (not labels and line.startswith(f"{name} ")):
            return float(line.rsplit(" ", 1)[1])
    return 0.0
