"""The dlog Spark source's errors are one line, and ``source_error`` finds
that line in the text Spark wraps around it (tests/integration/
test_spark_source.py checks it on Spark's real errors)."""

from __future__ import annotations

from dlog.errors import DLogError, LogNotFoundError
from dlog.spark import (
    DlogSourceError,
    DlogSourceOptionError,
    DlogSourceStreamNotFoundError,
    source_error,
)

URI = "distributedlog://127.0.0.1:2181/messaging"

#: The shape of Spark's text when the source raised while handling another
#: dlog error (pyspark's streaming runner chains its own error after it).
SPARK_TEXT = """\
[PYTHON_DATA_SOURCE_ERROR] Failed to plan Python data source: Traceback (most recent call last):
  File "/work/main/dlog/spark/planning.py", line 458, in log
    raise self._no_stream(stream)
dlog.errors.ZooKeeperError: connection lost
  to 127.0.0.1:2181

During handling of the above exception, another exception occurred:

Traceback (most recent call last):
  File "/work/main/dlog/spark/source.py", line 101, in schema
dlog.spark.options.DlogSourceOptionError: dlog source option 'stream': stream 'x' does not exist

During handling of the above exception, another exception occurred:

UnboundLocalError: cannot access local variable 'reader' where it is not associated with a value
 SQLSTATE: 38000
\tat org.apache.spark.sql.errors.QueryCompilationErrors$.pythonDataSourceError(Q.scala:2576)
"""


def test_source_error_is_the_last_dlog_error_in_sparks_text() -> None:
    assert (
        source_error(RuntimeError(SPARK_TEXT))
        == "dlog source option 'stream': stream 'x' does not exist"
    )
    # Other dlog errors keep their class name (their message may not say).
    assert source_error(RuntimeError(SPARK_TEXT.split("\n\nDuring")[0])) == (
        "ZooKeeperError: connection lost"
    )


def test_source_error_of_errors_that_are_not_wrapped() -> None:
    assert source_error(DlogSourceOptionError("uri", "is required")) == (
        "dlog source option 'uri': is required"
    )
    assert source_error(LogNotFoundError("stream 'x' does not exist")) == (
        "LogNotFoundError: stream 'x' does not exist"
    )
    assert source_error(ValueError("mydlog.errors.XError: no")) is None
    assert source_error(RuntimeError("Traceback ...\nKeyError: 'dlog'")) is None


def test_source_errors_are_one_line_and_dlog_errors() -> None:
    wrapped = DlogSourceError("cannot check streams: ZooKeeperError: connection lost\n  to host\n")
    assert str(wrapped) == "cannot check streams: ZooKeeperError: connection lost to host"
    assert isinstance(wrapped, DLogError)
    missing = DlogSourceStreamNotFoundError(("a", "b"), URI)
    assert (
        str(missing)
        == f"dlog source option 'stream': streams 'a', 'b' do not exist in namespace {URI}"
    )
    assert isinstance(missing, LogNotFoundError) and isinstance(missing, ValueError)
    assert (missing.option, missing.streams) == ("stream", ("a", "b"))
