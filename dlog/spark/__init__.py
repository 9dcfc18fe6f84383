"""dlog streams as a Spark data source (PySpark 4 Python Data Source API).

    from pyspark.sql import SparkSession
    import dlog.spark

    spark = SparkSession.builder.getOrCreate()
    dlog.spark.register(spark)

    # batch: every record durable now
    df = (spark.read.format("dlog")
          .option("uri", "distributedlog://127.0.0.1:2181/messaging")
          .option("stream", "events")
          .load())

    # structured streaming, progress kept as the subscription "etl"
    stream = (spark.readStream.format("dlog")
              .option("uri", uri).option("stream", "events")
              .option("subscription", "etl")
              .load())

Check the options on the driver first (before any query starts) to get a
problem as one line rather than as Spark's error around it::

    try:
        dlog.spark.check_options({"uri": uri, "stream": "events"}, streaming=True)
    except dlog.spark.DlogSourceError as e:
        sys.exit(f"error: {e}")   # e.g. dlog source option 'stream': stream
                                  # 'events' does not exist in namespace ...

A dlog error raised once the query runs reaches you inside Spark's error
(Python and JVM tracebacks): ``dlog.spark.source_error(exc)`` is its line.

Schema: ``stream string, dlsn string, segment long, entry long, slot long,
txid long, payload binary`` (``dlsn`` in the base64 form tools print).
Options: :mod:`dlog.spark.options`; offsets and commits:
:mod:`dlog.spark.source`; partition planning: :mod:`dlog.spark.planning`.

Needs the ``spark`` extra (``pip install 'dlog[spark]'``: pyspark and
pyarrow) on the driver and on every executor, and ``PYSPARK_PYTHON`` naming
an interpreter that can import dlog.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from dlog.spark.options import (
    DlogSourceError,
    DlogSourceOptionError,
    DlogSourceStreamNotFoundError,
    SourceOptions,
    source_error,
)

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

__all__ = [
    "FORMAT",
    "DlogSourceError",
    "DlogSourceOptionError",
    "DlogSourceStreamNotFoundError",
    "check_options",
    "register",
    "source_error",
]

#: The format name: ``spark.read.format(dlog.spark.FORMAT)``.
FORMAT = "dlog"


def register(spark: SparkSession) -> None:
    """Register the ``dlog`` format with ``spark`` (once per session)."""
    from dlog.spark.source import DlogDataSource

    spark.dataSource.register(DlogDataSource)


def check_options(options: Mapping[str, Any], *, streaming: bool = False) -> SourceOptions:
    """Check the source's ``options`` on the driver before a query starts
    (connects to the namespace); DlogSourceError with a one-line message.
    See :func:`dlog.spark.source.check_options`."""
    from dlog.spark.source import check_options as check

    return check(options, streaming=streaming)
