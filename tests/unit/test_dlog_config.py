"""DLogConfig: DistributedLog's key names and defaults (checked against
DistributedLogConfiguration.java), dlog's deliberate defaults, loading,
aliases of deprecated keys, errors that name the key, nested bkc.* settings,
cross-field checks, and the documented conf/dlog.conf."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from dlog.conf import DLogConfig
from dlog.conf.base import parse_properties
from dlog.conf.bookkeeper import ClientConfig
from dlog.errors import ConfigError

REPO_ROOT = Path(__file__).resolve().parents[2]

# Key -> default, from DistributedLogConfiguration.java (BKDL_*_DEFAULT), for
# the settings where dlog keeps DistributedLog's default.
DL_DEFAULTS = {
    "zkSessionTimeoutSeconds": 30,
    "lockTimeoutSeconds": 30,
    "firstLogsegmentSequenceNumber": 1,
    "createStreamIfNotExists": True,
    "bkcEnsembleSize": 3,
    "bkcWriteQuorumSize": 3,
    "bkcAckQuorumSize": 2,
    "digestPw": "",
    "logSegmentRollingMinutes": 120,
    "maxLogSegmentBytes": 256 * 1024 * 1024,
    "logSegmentRetentionHours": 72,
    "explicitTruncationByApp": False,
    "enableImmediateFlush": False,
    "logFlushTimeoutSeconds": 30,
    "compressionType": "none",
    "readerIdleWarnThresholdMillis": 120000,
    "readerIdleErrorThresholdMillis": 2**31 - 1,  # Integer.MAX_VALUE
    "readAheadWaitTime": 200,
    "readLACLongPollTimeout": 1000,
}

# Where dlog deliberately departs from DistributedLog (DL's default in the comment).
DLOG_DEFAULTS = {
    "writerOutputBufferSize": 262144,  # DL 1024
    "periodicFlushFrequencyMilliSeconds": 2,  # DL 0
    "readAheadBatchSize": 64,  # DL 2
    "readAheadMaxRecords": 100000,  # DL 10
    "bkDigestType": "CRC32C",  # DL has no key; always CRC32
    "retentionCheckIntervalMinutes": 10,  # dlog extension
    "zkConnectionTimeoutSeconds": 0,  # dlog extension: 0 = zkSessionTimeoutSeconds
    "logSegmentBasedSubscriptionsStoreEnabled": False,  # dlog extension
    "subscriptionSegmentMaxEntries": 50000,
    "subscriptionSegmentMaxBytes": 16 * 1024 * 1024,
    "subscriptionSegmentMaxAgeMinutes": 240,
}


def write(tmp_path: Path, text: str, name: str = "dlog.conf") -> Path:
    p = tmp_path / name
    p.write_text(text)
    return p


# ---------------------------------------------------------------------------
# defaults
# ---------------------------------------------------------------------------


def test_defaults_equal_distributedlog() -> None:
    props = DLogConfig().to_properties()
    for key, value in DL_DEFAULTS.items():
        assert props[key] == value, key
        assert type(props[key]) is type(value), key


def test_dlog_specific_defaults() -> None:
    props = DLogConfig().to_properties()
    for key, value in DLOG_DEFAULTS.items():
        assert props[key] == value, key


def test_departures_document_distributedlogs_default() -> None:
    docs = {key: doc for key, _default, doc, _unit in DLogConfig.describe()}
    assert "1024" in docs["writerOutputBufferSize"]
    assert "default is 0" in docs["periodicFlushFrequencyMilliSeconds"]
    assert "default is 2," in docs["readAheadBatchSize"]
    assert "default is 10;" in docs["readAheadMaxRecords"]
    assert "CRC32" in docs["bkDigestType"]
    for key in DLOG_DEFAULTS:
        if key not in ("writerOutputBufferSize", "periodicFlushFrequencyMilliSeconds"):
            assert "dlog" in docs[key], key


def test_zk_connect_timeout_is_the_session_timeout_unless_set() -> None:
    """Library users keep waiting their session timeout for a connection."""
    assert DLogConfig.load(zkSessionTimeoutSeconds=12).zk_connect_timeout == 12
    cfg = DLogConfig.load(zkSessionTimeoutSeconds=12, zkConnectionTimeoutSeconds=3)
    assert cfg.zk_connect_timeout == 3


def test_nested_client_defaults_equal_client_config() -> None:
    cfg = DLogConfig()
    assert cfg.bkc == ClientConfig()
    props = cfg.to_properties()
    for key, value in ClientConfig().to_properties().items():
        assert props[f"bkc.{key}"] == value


def test_keys_include_nested_keys() -> None:
    keys = DLogConfig.setting_keys()
    assert "bkc.addEntryTimeoutSec" in keys
    assert "writerOutputBufferSize" in keys
    assert len(keys) == len(set(keys))


# ---------------------------------------------------------------------------
# loading
# ---------------------------------------------------------------------------


def test_load_file(tmp_path: Path) -> None:
    p = write(
        tmp_path,
        "# a DistributedLog-style file\n"
        "zkSessionTimeoutSeconds=10\n"
        "bkcEnsembleSize=5\n"
        "bkcWriteQuorumSize=3\n"
        "bkcAckQuorumSize=2\n"
        "writerOutputBufferSize=0\n"
        "enableImmediateFlush = true\n"
        "compressionType=lz4\n"
        "bkDigestType=CRC32\n"
        "bkc.addEntryTimeoutSec=9\n",
    )
    cfg = DLogConfig.load(p)
    assert cfg.zk_session_timeout_seconds == 10
    assert (cfg.ensemble_size, cfg.write_quorum_size, cfg.ack_quorum_size) == (5, 3, 2)
    assert cfg.writer_output_buffer_size == 0
    assert cfg.enable_immediate_flush is True
    assert cfg.compression_type == "lz4"
    assert cfg.bk_digest_type == "CRC32"
    assert cfg.bkc.add_entry_timeout_sec == 9
    assert cfg.bkc.read_entry_timeout_sec == 5  # untouched nested default


def test_overrides_apply_on_top_of_file(tmp_path: Path) -> None:
    p = write(tmp_path, "logSegmentRollingMinutes=30\n")
    cfg = DLogConfig.load(p, {"logSegmentRollingMinutes": "45"}, maxLogSegmentBytes=4096)
    assert cfg.log_segment_rolling_minutes == 45
    assert cfg.max_log_segment_bytes == 4096


def test_attribute_names_accepted_as_overrides() -> None:
    cfg = DLogConfig.load(read_ahead_batch_size=8)
    assert cfg.read_ahead_batch_size == 8


def test_dumps_round_trips() -> None:
    cfg = DLogConfig.load(
        **{"digestPw": "s3cret", "bkc.maxOutstandingReads": 12, "readAheadMaxRecords": 7}
    )
    again = DLogConfig.from_mapping(parse_properties(cfg.dumps()))
    assert again == cfg


@pytest.mark.parametrize(
    ("old", "new", "attr", "value"),
    [
        ("ensemble-size", "bkcEnsembleSize", "ensemble_size", 4),
        ("write-quorum-size", "bkcWriteQuorumSize", "write_quorum_size", 2),
        ("ack-quorum-size", "bkcAckQuorumSize", "ack_quorum_size", 1),
        ("ReadAheadBatchSize", "readAheadBatchSize", "read_ahead_batch_size", 16),
        ("ReadAheadMaxEntries", "readAheadMaxRecords", "read_ahead_max_records", 500),
        ("ReadAheadWaitTime", "readAheadWaitTime", "read_ahead_wait_time", 50),
        (
            "first-logsegment-sequence-number",
            "firstLogsegmentSequenceNumber",
            "first_log_segment_sequence_number",
            7,
        ),
    ],
)
def test_deprecated_distributedlog_keys_are_aliases(
    tmp_path: Path, old: str, new: str, attr: str, value: int
) -> None:
    cfg = DLogConfig.load(write(tmp_path, f"{old}={value}\n"))
    assert getattr(cfg, attr) == value
    assert new in cfg.to_properties() and old not in cfg.to_properties()
    with pytest.raises(ConfigError) as e:
        DLogConfig.load(write(tmp_path, f"{old}={value}\n{new}={value}\n", "both.conf"))
    assert e.value.key == new
    assert old in str(e.value) and new in str(e.value)


# ---------------------------------------------------------------------------
# errors name the key
# ---------------------------------------------------------------------------


def test_unknown_key_is_named(tmp_path: Path) -> None:
    with pytest.raises(ConfigError) as e:
        DLogConfig.load(write(tmp_path, "writerOutputBuferSize=1\n"))
    assert e.value.key == "writerOutputBuferSize"
    assert "unknown" in str(e.value)


def test_unknown_nested_key_is_named_with_prefix() -> None:
    with pytest.raises(ConfigError) as e:
        DLogConfig.load(**{"bkc.noSuchSetting": "1"})
    assert e.value.key == "bkc.noSuchSetting"


@pytest.mark.parametrize(
    ("key", "value", "needle"),
    [
        ("zkSessionTimeoutSeconds", "thirty", "integer"),
        ("zkSessionTimeoutSeconds", "0", "at least 1"),
        ("enableImmediateFlush", "maybe", "true or false"),
        ("compressionType", "zstd", "none, lz4"),
        ("bkDigestType", "crc32c", "CRC32, CRC32C, HMAC, DUMMY"),
        ("writerOutputBufferSize", str(2 * 1024 * 1024), "at most"),
        ("writerOutputBufferSize", "-1", "at least 0"),
        ("readAheadBatchSize", "0", "at least 1"),
        ("bkcEnsembleSize", "0", "at least 1"),
        ("maxLogSegmentBytes", "1", "at least 1024"),
        ("readerIdleErrorThresholdMillis", str(2**31), "at most"),
        ("bkc.addEntryTimeoutSec", "0", "at least 1"),
        ("bkc.metadataServiceUri", "http://x/ledgers", "scheme"),
    ],
)
def test_bad_values_name_the_key(key: str, value: str, needle: str) -> None:
    with pytest.raises(ConfigError) as e:
        DLogConfig.load(**{key: value})
    assert e.value.key == key
    assert needle in str(e.value)


# ---------------------------------------------------------------------------
# cross-field validation
# ---------------------------------------------------------------------------


def test_write_quorum_may_not_exceed_ensemble() -> None:
    with pytest.raises(ConfigError) as e:
        DLogConfig.load(bkcEnsembleSize=2, bkcWriteQuorumSize=3, bkcAckQuorumSize=2)
    assert e.value.key == "bkcWriteQuorumSize"
    assert "bkcEnsembleSize" in str(e.value)


def test_ack_quorum_may_not_exceed_write_quorum() -> None:
    with pytest.raises(ConfigError) as e:
        DLogConfig.load(bkcEnsembleSize=3, bkcWriteQuorumSize=2, bkcAckQuorumSize=3)
    assert e.value.key == "bkcAckQuorumSize"


def test_smaller_quorums_are_fine() -> None:
    cfg = DLogConfig.load(bkcEnsembleSize=1, bkcWriteQuorumSize=1, bkcAckQuorumSize=1)
    assert (cfg.ensemble_size, cfg.write_quorum_size, cfg.ack_quorum_size) == (1, 1, 1)
    cfg = DLogConfig.load(bkcEnsembleSize=5, bkcWriteQuorumSize=3, bkcAckQuorumSize=2)
    assert cfg.ensemble_size == 5


def test_quorum_check_uses_aliased_values_too() -> None:
    with pytest.raises(ConfigError) as e:
        DLogConfig.load(**{"ensemble-size": 1})  # write quorum stays 3
    assert e.value.key == "bkcWriteQuorumSize"


def test_buffering_without_periodic_flush_is_rejected() -> None:
    with pytest.raises(ConfigError) as e:
        DLogConfig.load(periodicFlushFrequencyMilliSeconds=0)
    assert e.value.key == "periodicFlushFrequencyMilliSeconds"
    # no buffering: nothing can wait, so no periodic flush is fine
    cfg = DLogConfig.load(periodicFlushFrequencyMilliSeconds=0, writerOutputBufferSize=0)
    assert cfg.periodic_flush_frequency_milli_seconds == 0


def test_idle_error_threshold_not_below_warn_threshold() -> None:
    with pytest.raises(ConfigError) as e:
        DLogConfig.load(readerIdleErrorThresholdMillis=1000)
    assert e.value.key == "readerIdleErrorThresholdMillis"
    cfg = DLogConfig.load(readerIdleErrorThresholdMillis=1000, readerIdleWarnThresholdMillis=500)
    assert cfg.reader_idle_error_threshold_millis == 1000


def test_with_overrides_revalidates() -> None:
    cfg = DLogConfig()
    assert cfg.with_overrides({"bkcAckQuorumSize": 1}).ack_quorum_size == 1
    with pytest.raises(ConfigError):
        cfg.with_overrides({"bkcAckQuorumSize": 4})


# ---------------------------------------------------------------------------
# the documented file
# ---------------------------------------------------------------------------


def test_conf_file_mentions_every_key_and_loads_to_defaults(tmp_path: Path) -> None:
    path = REPO_ROOT / "conf" / "dlog.conf"
    text = path.read_text()
    commented = set(re.findall(r"^#([A-Za-z][\w.\-]*)=", text, re.MULTILINE))
    assert set(DLogConfig.setting_keys()) <= commented
    # As shipped (everything commented out) it loads to the defaults ...
    assert DLogConfig.load(path) == DLogConfig()
    # ... and uncommenting every line still gives exactly the defaults.
    uncommented = re.sub(r"^#([A-Za-z][\w.\-]*=)", r"\1", text, flags=re.MULTILINE)
    assert DLogConfig.load(write(tmp_path, uncommented)) == DLogConfig()


def test_conf_file_is_current() -> None:
    assert (REPO_ROOT / "conf" / "dlog.conf").read_text().rstrip("\n") == (
        DLogConfig.render_documented().rstrip("\n")
    )
