"""The dlog Spark source's options checked on the driver, before any query
(``dlog.spark.check_options``), against a real sandbox (ZooKeeper and 3
bookie processes): every problem is one DlogSourceError whose message is
one line. And examples/spark_pipeline.py run as a user runs it: a missing
stream or namespace prints that one line, not Spark's tracebacks.

None of these start Spark (the checks run before it would).
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

import dlog.spark
from dlog.errors import LogNotFoundError
from dlog.sandbox.cluster import Sandbox
from dlog.spark import DlogSourceError, DlogSourceOptionError, DlogSourceStreamNotFoundError
from dlog.sync import Namespace

pytestmark = pytest.mark.integration

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "spark_pipeline.py"


@pytest.fixture(scope="module")
def ns(sandbox: Sandbox) -> Iterator[Namespace]:
    with Namespace.open(sandbox.namespace_uri) as namespace:
        for stream in ("present", "other"):
            if not namespace.log_exists(stream):
                namespace.create_log(stream)
        yield namespace


def missing_namespace(uri: str) -> str:
    """A namespace URI on the sandbox's ZooKeeper that was never created."""
    return uri.rsplit("/", 1)[0] + "/never-created"


def check_error(options: dict[str, str], *, streaming: bool = False) -> DlogSourceError:
    with pytest.raises(DlogSourceError) as info:
        dlog.spark.check_options(options, streaming=streaming)
    message = str(info.value)
    assert "\n" not in message and message == message.strip(), repr(message)
    return info.value


# ---------------------------------------------------------------------------
# check_options
# ---------------------------------------------------------------------------


def test_options_that_name_what_exists_pass_and_come_back_parsed(uri: str, ns: Namespace) -> None:
    parsed = dlog.spark.check_options(
        {"uri": uri, "stream": "present,other", "startingPosition": "1/0/0", "subscription": "etl"},
        streaming=True,
    )
    assert parsed.streams == ("present", "other")
    assert parsed.subscription == "etl"


def test_a_missing_stream_is_one_line_naming_it(uri: str, ns: Namespace) -> None:
    error = check_error({"uri": uri, "stream": "present,events"}, streaming=True)
    assert str(error) == (
        f"dlog source option 'stream': stream 'events' does not exist in namespace {uri}"
    )
    assert isinstance(error, DlogSourceStreamNotFoundError)
    assert isinstance(error, LogNotFoundError)  # what the library raises for a missing stream
    assert error.streams == ("events",)
    assert not ns.log_exists("events")  # checking never creates the stream


def test_every_missing_stream_is_named_in_the_one_error(uri: str, ns: Namespace) -> None:
    error = check_error({"uri": uri, "stream": "nope-1,present,nope-2"})
    assert isinstance(error, DlogSourceStreamNotFoundError)
    assert error.streams == ("nope-1", "nope-2")
    assert str(error) == (
        f"dlog source option 'stream': streams 'nope-1', 'nope-2' do not exist in namespace {uri}"
    )


def test_a_namespace_that_was_never_created_is_one_line_and_stays_uncreated(
    uri: str, ns: Namespace
) -> None:
    missing = missing_namespace(uri)
    error = check_error({"uri": missing, "stream": "present"}, streaming=True)
    assert isinstance(error, DlogSourceOptionError) and error.option == "uri"
    assert str(error).startswith(f"dlog source option 'uri': namespace {missing} does not exist")
    # A second check fails the same way: the first one bound nothing.
    assert str(check_error({"uri": missing, "stream": "present"})) == str(error)


@pytest.mark.parametrize(
    ("options", "streaming", "option", "message"),
    [
        (
            {"startingPosition": "1/x/0"},
            True,
            "startingPosition",
            "'1/x/0' is not a DLSN, 'earliest' or 'latest'",
        ),
        (
            {"startingPosition": json.dumps({"present": "latest", "other": "0/0/0"})},
            True,
            "startingPosition",
            "'0/0/0' is not a record position: the segment sequence number must be at "
            "least 1 and the entry and slot ids at least 0",
        ),
        ({"endingPosition": "abc"}, False, "endingPosition", "'abc' is not a DLSN"),
        (
            {"endingPosition": "latest"},
            True,
            "endingPosition",
            "is for batch reads (spark.read) only, not for readStream",
        ),
        ({"subscription": "a/b"}, True, "subscription", "'a/b' is not a valid znode name"),
        ({"colour": "red"}, False, "colour", "unknown option (the dlog source takes uri, "),
        ({"dlog.noSuchSetting": "1"}, False, "dlog.noSuchSetting", "is not a dlog setting"),
        ({"maxRecordsPerTrigger": "0"}, True, "maxRecordsPerTrigger", "must be at least 1"),
    ],
)
def test_a_bad_option_is_one_line_naming_it(
    uri: str,
    ns: Namespace,
    options: dict[str, str],
    streaming: bool,
    option: str,
    message: str,
) -> None:
    error = check_error({"uri": uri, "stream": "present,other", **options}, streaming=streaming)
    assert isinstance(error, DlogSourceOptionError)
    assert error.option == option
    assert str(error).startswith(f"dlog source option {option!r}: ")
    assert message in str(error)


def test_ending_position_is_fine_for_a_batch_read(uri: str, ns: Namespace) -> None:
    parsed = dlog.spark.check_options(
        {"uri": uri, "stream": "present", "endingPosition": "latest"}, streaming=False
    )
    assert parsed.ending_given


# ---------------------------------------------------------------------------
# examples/spark_pipeline.py, as a user runs it
# ---------------------------------------------------------------------------


def run_example(*args: str, timeout: float = 120) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, str(EXAMPLE), *args],
        capture_output=True,
        text=True,
        timeout=timeout,
        stdin=subprocess.DEVNULL,
    )


def one_line(result: subprocess.CompletedProcess[str]) -> str:
    """The example failed with exactly one line of output, no traceback."""
    output = result.stdout + result.stderr
    assert result.returncode != 0, output
    assert "Traceback" not in output and "py4j" not in output.lower(), output
    lines = output.strip().splitlines()
    assert len(lines) == 1, output
    return lines[0]


def test_example_once_without_the_stream_prints_one_line_naming_it(
    uri: str, ns: Namespace, tmp_path: Path
) -> None:
    assert not ns.log_exists("events")
    line = one_line(run_example("--uri", uri, "--once", "--output", str(tmp_path)))
    assert line.startswith(
        "spark_pipeline.py: dlog source option 'stream': "
        f"stream 'events' does not exist in namespace {uri}; "
    )
    assert "--generate N" in line and "dlog write events" in line  # how to fill it
    assert not ns.log_exists("events")


def test_example_on_a_namespace_never_created_prints_one_line_naming_it(
    uri: str, ns: Namespace, tmp_path: Path
) -> None:
    missing = missing_namespace(uri)
    line = one_line(run_example("--uri", missing, "--once", "--output", str(tmp_path)))
    assert line.startswith(f"spark_pipeline.py: dlog source option 'uri': namespace {missing} ")
    assert "does not exist" in line
    # --generate does not create it either: the namespace must exist.
    line = one_line(run_example("--uri", missing, "--generate", "5", "--output", str(tmp_path)))
    assert f"namespace {missing} does not exist" in line


def test_example_generate_writes_json_events_before_the_check(
    uri: str, ns: Namespace, tmp_path: Path
) -> None:
    # A bad --from fails the check after --generate wrote: no Spark needed.
    # --generate creates the stream even where streams are not created on open.
    args = ["--uri", uri, "--stream", "generated", "--generate", "50", "--batch", "--from", "soon"]
    args += ["--set", "createStreamIfNotExists=false"]
    before = time.time() * 1000
    for _ in range(2):  # the second time on a stream that has records
        result = run_example(*args, "--output", str(tmp_path))
        assert result.stdout.startswith("wrote 50 sample events to stream 'generated'"), result
        assert result.returncode == 1, result
        assert result.stderr == (
            "spark_pipeline.py: dlog source option 'startingPosition': "
            "'soon' is not a DLSN, 'earliest' or 'latest'\n"
        )
    with ns.open_log("generated").open_reader() as reader:
        records = [reader.read_next(timeout=10) for _ in range(100)]
    txids = [r.txid for r in records if r is not None]
    assert len(txids) == 100 and txids == sorted(set(txids))  # increasing over both runs
    for r in records:
        assert r is not None
        event = json.loads(r.payload)
        assert set(event) == {"ts", "key", "value"}
        assert event["key"] in {"checkout", "login", "search", "view"}
        assert before - 13 * 60_000 < event["ts"] < time.time() * 1000 + 6_000
