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

Schema: ``stream string, dlsn string, segment long, entry long, slot long,
txid long, payload binary`` (``dlsn`` in the base64 form tools print).
Options: :mod:`dlog.spark.options`; offsets and commits:
:mod:`dlog.spark.source`; partition planning: :mod:`dlog.spark.planning`.

Needs the ``spark`` extra (``pip install 'dlog[spark]'``: pyspark and
pyarrow) on the driver and on every executor, and ``PYSPARK_PYTHON`` naming
an interpreter that can import dlog.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

__all__ = ["FORMAT", "register"]

#: The format name: ``spark.read.format(dlog.spark.FORMAT)``.
FORMAT = "dlog"


def register(spark: SparkSession) -> None:
    """Register the ``dlog`` format with ``spark`` (once per session)."""
    from dlog.spark.source import DlogDataSource

    spark.dataSource.register(DlogDataSource)
