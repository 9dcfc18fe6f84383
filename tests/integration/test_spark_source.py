"""The dlog Spark source against a real sandbox (ZooKeeper and 3 bookie
processes) and a local Spark session (``local[2]``), one of each for the
module: batch reads, Trigger.AvailableNow runs with a subscription, a query
killed with SIGKILL in the middle of a batch and restarted from its
checkpoint, and errors for bad options.

Needs pyspark, pyarrow and Java: without them these tests fail, never skip.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pyarrow  # noqa: F401 - the Python workers need it: fail here if it is missing
import pytest
from pyspark.sql import SparkSession

import dlog.spark
from dlog.dlsn import DLSN
from dlog.record import LogRecord
from dlog.sandbox.cluster import Sandbox
from dlog.sync import Namespace, SyncLogManager

pytestmark = pytest.mark.integration

JOB = Path(__file__).resolve().parent / "spark_stream_job.py"


# ---------------------------------------------------------------------------
# fixtures: one sandbox, one namespace and one Spark session for the module
# ---------------------------------------------------------------------------


@pytest.fixture(scope="module")
def ns(sandbox: Sandbox) -> Iterator[Namespace]:
    with Namespace.open(sandbox.namespace_uri) as namespace:
        yield namespace


@pytest.fixture(scope="module")
def spark() -> Iterator[SparkSession]:
    if shutil.which("java") is None and not os.environ.get("JAVA_HOME"):
        pytest.fail("Spark needs Java: no 'java' on PATH and JAVA_HOME is not set")
    saved = {k: os.environ.get(k) for k in ("PYSPARK_PYTHON", "PYSPARK_DRIVER_PYTHON")}
    os.environ["PYSPARK_PYTHON"] = sys.executable
    os.environ["PYSPARK_DRIVER_PYTHON"] = sys.executable
    session = (
        SparkSession.builder.master("local[2]")
        .appName("dlog-spark-tests")
        .config("spark.sql.shuffle.partitions", "2")
        .config("spark.driver.memory", "512m")
        .config("spark.ui.enabled", "false")
        .config("spark.driver.host", "127.0.0.1")
        .config("spark.driver.bindAddress", "127.0.0.1")
        .getOrCreate()
    )
    session.sparkContext.setLogLevel("ERROR")
    dlog.spark.register(session)
    try:
        yield session
    finally:
        session.stop()
        for k, v in saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v


# ---------------------------------------------------------------------------
# helpers
# ---------------------------------------------------------------------------


def payload_of(stream: str, i: int) -> bytes:
    if i % 97 == 0:
        return b""  # empty payloads are records too
    if i % 13 == 0:
        return bytes(range(256)) * 2  # not UTF-8
    return f"{stream}-{i:06d}".encode()


def write(
    lm: SyncLogManager, first: int, count: int, *, per_entry: int | None = None, close: bool = True
):  # type: ignore[no-untyped-def]
    """Write ``count`` records (txid = index) with a new writer (so a new
    segment); ``per_entry`` flushes every so many records (more entries).
    Returns (DLSNs, writer)."""
    writer = lm.open_writer()
    records = [LogRecord(i, payload_of(lm.name, i)) for i in range(first, first + count)]
    dlsns: list[DLSN] = []
    step = per_entry or count
    for k in range(0, count, step):
        dlsns += writer.write_bulk(records[k : k + step])
        writer.flush()
    if close:
        writer.close()
    wait_visible(lm, dlsns[-1])
    return dlsns, writer


def wait_visible(lm: SyncLogManager, dlsn: DLSN, timeout: float = 10.0) -> None:
    """Until readers see ``dlsn`` (an open segment's explicit LAC is async)."""
    deadline = time.monotonic() + timeout
    while lm.get_last_dlsn() < dlsn:
        assert time.monotonic() < deadline, f"{dlsn} not visible after {timeout} s"
        time.sleep(0.05)


def committed(ns: Namespace, stream: str, subscriber: str) -> DLSN:
    return ns.open_log(stream).subscriptions.get_last_commit_position(subscriber)


def source(spark: SparkSession, uri: str, streams: str, **options: str):  # type: ignore[no-untyped-def]
    reader = spark.read.format("dlog").option("uri", uri).option("stream", streams)
    for k, v in options.items():
        reader = reader.option(k, v)
    return reader


# ---------------------------------------------------------------------------
# batch
# ---------------------------------------------------------------------------


def test_batch_read_of_three_streams_returns_exactly_what_was_written(
    spark: SparkSession, ns: Namespace, sandbox: Sandbox
) -> None:
    a, b, c = (ns.open_log(s) for s in ("batch-a", "batch-b", "batch-c"))
    expected: dict[str, list[tuple[DLSN, int, bytes]]] = {}

    # a: a completed segment, then an in-progress one (its writer stays open)
    a1, _ = write(a, 0, 400)
    a2, open_writer = write(a, 400, 300, per_entry=10, close=False)
    # b: one completed segment of many entries
    b1, _ = write(b, 0, 1000, per_entry=50)
    # c: three small segments
    c1, _ = write(c, 0, 30)
    c2, _ = write(c, 30, 1)
    c3, _ = write(c, 31, 70, per_entry=7)
    for name, dlsns in (("batch-a", a1 + a2), ("batch-b", b1), ("batch-c", c1 + c2 + c3)):
        expected[name] = [(d, i, payload_of(name, i)) for i, d in enumerate(dlsns)]
    try:
        df = source(
            spark,
            sandbox.namespace_uri,
            "batch-a,batch-b,batch-c",
            entriesPerPartition="4",
            **{"dlog.bkc.readEntryTimeoutSec": "10"},
        ).load()
        assert df.schema.simpleString() == (
            "struct<stream:string,dlsn:string,segment:bigint,entry:bigint,slot:bigint,"
            "txid:bigint,payload:binary>"
        )
        rows = df.collect()
        for name, want in expected.items():
            got = [r for r in rows if r.stream == name]  # in read order
            assert len(got) == len(want), name
            for r, (dlsn, txid, payload) in zip(got, want, strict=True):
                assert r.dlsn == dlsn.serialize()
                assert (r.segment, r.entry, r.slot) == tuple(dlsn)
                assert r.txid == txid
                assert bytes(r.payload) == payload
        # Split by segment and by runs of at most 4 entries, read in parallel.
        assert df.rdd.getNumPartitions() >= 2 + 1 + 3 + 20 // 4

        # A DLSN range: both ends inclusive, in any DLSN form.
        lo, hi = a1[100], a2[150]
        ranged = source(
            spark,
            sandbox.namespace_uri,
            "batch-a",
            startingPosition=f"{lo[0]}/{lo[1]}/{lo[2]}",
            endingPosition=hi.serialize(),
        ).load()
        got = [(r.dlsn, r.txid) for r in ranged.collect()]
        assert got == [(d.serialize(), i) for i, d in enumerate(a1 + a2)][100 : 400 + 151]
    finally:
        open_writer.close()


# ---------------------------------------------------------------------------
# streaming
# ---------------------------------------------------------------------------


def run_available_now(
    spark: SparkSession, uri: str, streams: str, checkpoint: Path, **options: str
) -> list[tuple[str, str, int]]:
    """One Trigger.AvailableNow run; the (stream, dlsn, txid) of every row
    each batch delivered, in batch order."""
    rows: list[tuple[str, str, int]] = []

    def collect(df, batch_id: int) -> None:  # type: ignore[no-untyped-def]
        rows.extend(
            (r.stream, r.dlsn, r.txid) for r in df.select("stream", "dlsn", "txid").collect()
        )

    reader = spark.readStream.format("dlog").option("uri", uri).option("stream", streams)
    for k, v in options.items():
        reader = reader.option(k, v)
    query = (
        reader.load()
        .writeStream.foreachBatch(collect)
        .option("checkpointLocation", str(checkpoint))
        .trigger(availableNow=True)
        .start()
    )
    query.awaitTermination(120)
    assert not query.isActive, "the AvailableNow query did not finish"
    assert query.exception() is None, query.exception()
    return rows


def test_available_now_twice_reads_only_new_records_and_commits_the_subscription(
    spark: SparkSession, ns: Namespace, sandbox: Sandbox, tmp_path: Path
) -> None:
    uri = sandbox.namespace_uri
    x, y = ns.open_log("stream-x"), ns.open_log("stream-y")
    x1, _ = write(x, 0, 300, per_entry=25)
    y1, _ = write(y, 0, 200)
    checkpoint = tmp_path / "checkpoint"
    opts = {"subscription": "etl", "maxRecordsPerTrigger": "150"}

    def keys(stream: str, dlsns: list[DLSN], first_txid: int) -> list[tuple[str, str, int]]:
        return [(stream, d.serialize(), first_txid + i) for i, d in enumerate(dlsns)]

    first = run_available_now(spark, uri, "stream-x,stream-y", checkpoint, **opts)
    assert sorted(first) == sorted(keys("stream-x", x1, 0) + keys("stream-y", y1, 0))
    assert committed(ns, "stream-x", "etl") == x1[-1]
    assert committed(ns, "stream-y", "etl") == y1[-1]

    x2, _ = write(x, 300, 120, per_entry=40)  # a new segment
    y2, _ = write(y, 200, 80)
    second = run_available_now(spark, uri, "stream-x,stream-y", checkpoint, **opts)
    assert sorted(second) == sorted(keys("stream-x", x2, 300) + keys("stream-y", y2, 200))
    assert committed(ns, "stream-x", "etl") == x2[-1]
    assert committed(ns, "stream-y", "etl") == y2[-1]

    # A new query (no checkpoint) with the subscription starts after its last
    # commit, whatever startingPosition says.
    x3, _ = write(x, 420, 50)
    third = run_available_now(
        spark, uri, "stream-x,stream-y", tmp_path / "fresh", startingPosition="earliest", **opts
    )
    assert sorted(third) == sorted(keys("stream-x", x3, 420))
    assert committed(ns, "stream-x", "etl") == x3[-1]


def test_query_killed_mid_batch_restarts_from_checkpoint_without_gaps_or_duplicates(
    spark: SparkSession, ns: Namespace, sandbox: Sandbox, tmp_path: Path
) -> None:
    from tests.integration import spark_stream_job

    stream, subscriber = "killed", "killed-etl"
    lm = ns.open_log(stream)
    dlsns, _ = write(lm, 0, 120, per_entry=10)
    checkpoint, output = tmp_path / "checkpoint", tmp_path / "output"
    args = [
        "--uri",
        sandbox.namespace_uri,
        "--stream",
        stream,
        "--checkpoint",
        str(checkpoint),
        "--output",
        str(output),
        "--subscription",
        subscriber,
        "--max-records",
        "30",
        "--log-segment-store",
    ]
    log_path = tmp_path / "run1.log"
    with log_path.open("w") as log:
        proc = subprocess.Popen(
            [sys.executable, str(JOB), *args, "--sleep", "3"],
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,  # its own process group: the Spark JVM dies with it
        )
        try:
            # Kill once batch 0 is in Spark's commit log and batch 1 is being written.
            deadline = time.monotonic() + 150
            while not ((checkpoint / "commits" / "0").exists() and (output / "started-1").exists()):
                assert proc.poll() is None, log_path.read_text()[-3000:]
                assert time.monotonic() < deadline, log_path.read_text()[-3000:]
                time.sleep(0.1)
        finally:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
    assert sorted(p.name for p in output.glob("batch-*.json")) == ["batch-00000.json"]
    # The subscription is never ahead of what Spark committed.
    position = committed(ns, stream, subscriber)
    done = {row["dlsn"] for row in json.loads((output / "batch-00000.json").read_text())}
    assert all(d.serialize() in done for d in dlsns if d <= position)

    # Restart from the checkpoint (in this process's Spark session).
    spark_stream_job.run(spark, spark_stream_job.parse_args([*args, "--sleep", "0"]))

    rows = [row for f in sorted(output.glob("batch-*.json")) for row in json.loads(f.read_text())]
    got = [(row["dlsn"], row["txid"], bytes.fromhex(row["payload"])) for row in rows]
    assert len(got) == len({g[0] for g in got}), "a record was delivered twice"
    assert sorted(got) == sorted(
        (d.serialize(), i, payload_of(stream, i)) for i, d in enumerate(dlsns)
    )
    assert all(len(json.loads(f.read_text())) <= 30 for f in output.glob("batch-*.json"))
    assert committed(ns, stream, subscriber) == dlsns[-1]


# ---------------------------------------------------------------------------
# errors
# ---------------------------------------------------------------------------


def test_bad_options_fail_with_a_message_naming_the_option(
    spark: SparkSession, ns: Namespace, sandbox: Sandbox, tmp_path: Path
) -> None:
    uri = sandbox.namespace_uri
    ns.open_log("exists")  # created on open
    cases = [
        (
            source(spark, uri, "exists", startingPosition="abc"),
            "dlog source option 'startingPosition': 'abc' is not a DLSN, 'earliest' or 'latest'",
        ),
        (
            spark.read.format("dlog").option("stream", "exists"),
            "dlog source option 'uri': is required: the namespace URI, "
            "e.g. distributedlog://127.0.0.1:2181/messaging",
        ),
        (
            source(spark, uri, "exists,no-such-stream"),
            f"dlog source option 'stream': stream 'no-such-stream' does not exist in namespace {uri}",
        ),
    ]
    for reader, message in cases:
        with pytest.raises(Exception) as info:
            reader.load().collect()
        text = str(info.value)
        assert message in text
        # Spark's error wraps it in tracebacks; source_error is its one line.
        assert len(text.splitlines()) > 1
        assert dlog.spark.source_error(info.value) == message

    # A streaming query meets endingPosition only once it runs: the error
    # comes out of the query (StreamingQueryException), the dlog line in it.
    query = (
        spark.readStream.format("dlog")
        .option("uri", uri)
        .option("stream", "exists")
        .option("endingPosition", "latest")
        .load()
        .writeStream.format("noop")
        .option("checkpointLocation", str(tmp_path / "checkpoint"))
        .trigger(availableNow=True)
        .start()
    )
    with pytest.raises(Exception) as info:
        query.awaitTermination(120)
    assert len(str(info.value).splitlines()) > 1
    assert dlog.spark.source_error(info.value) == (
        "dlog source option 'endingPosition': is for batch reads (spark.read) only, "
        "not for readStream"
    )
