"""Fixtures of the unit tests.

``spark_codec`` runs a Spark executor test module twice: with the C codec
(dlog/_record_codec.c) and with the Python paths alone. A module opts in
with ``pytestmark = pytest.mark.usefixtures("spark_codec")``."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from dlog.spark import columns


@pytest.fixture(scope="module", params=["c", "python"])
def spark_codec(request: pytest.FixtureRequest) -> Iterator[str]:
    """The C codec, or none (module-scoped: hypothesis tests share it)."""
    built = columns._codec
    assert built is not None, "dlog._record_codec is not built (make install builds it)"
    columns._codec = built if request.param == "c" else None
    try:
        yield request.param
    finally:
        columns._codec = built
