"""Configuration errors: one load reports every bad key (one ConfigError, one
line per key, ``key`` the first), each saying where the key was given (the
file, ``--set``, Python overrides); cross-setting checks all at once; layers
(CLI defaults, file, --set) replace a key given in any spelling."""

from __future__ import annotations

from pathlib import Path

import pytest

from dlog.cli.common import load_config
from dlog.conf import BookieConfig, DLogConfig
from dlog.conf.base import parse_properties, parse_set_options
from dlog.errors import ConfigError


def lines(e: pytest.ExceptionInfo[ConfigError]) -> list[str]:
    return str(e.value).splitlines()


def test_every_bad_key_of_a_file_and_its_overrides_in_one_error(tmp_path: Path) -> None:
    conf = tmp_path / "dlog.conf"
    conf.write_text(
        "zkSessionTimeoutSeconds=thirty\n"
        "writerOutputBuferSize=1\n"  # misspelt
        "bkcEnsembleSize=3\n"
        "bkc.addEntryTimeoutSec=0\n"
        "bkc.noSuchSetting=1\n"
    )
    with pytest.raises(ConfigError) as e:
        DLogConfig.load(conf, {"compressionType": "zstd"}, readAheadBatchSize=0)
    assert e.value.key == "zkSessionTimeoutSeconds"  # the first, as for a single error
    assert sorted(lines(e)) == sorted(
        [
            f"zkSessionTimeoutSeconds: expected an integer, got 'thirty' (in {conf})",
            f"writerOutputBuferSize: unknown setting (in {conf})",
            f"bkc.addEntryTimeoutSec: must be at least 1, got 0 (in {conf})",
            f"bkc.noSuchSetting: unknown setting (in {conf})",
            "compressionType: must be one of none, lz4, got 'zstd' (in overrides)",
            "readAheadBatchSize: must be at least 1, got 0 (in overrides)",
        ]
    )


def test_set_options_say_set_and_python_overrides_say_overrides(tmp_path: Path) -> None:
    conf = tmp_path / "dlog.conf"
    conf.write_text("logSegmentRollingMinutes=30\n")
    with pytest.raises(ConfigError) as e:
        load_config(DLogConfig, conf, ["noSuchKey=1", "lockTimeoutSeconds=-1"])
    assert lines(e) == [
        "noSuchKey: unknown setting (in --set)",
        "lockTimeoutSeconds: must be at least 0, got -1 (in --set)",
    ]
    with pytest.raises(ConfigError) as e:
        load_config(DLogConfig, None, ["noSuchKey=1"])
    assert lines(e) == ["noSuchKey: unknown setting (in --set)"]
    with pytest.raises(ConfigError) as e:
        DLogConfig.load(overrides={"noSuchKey": 1})
    assert lines(e) == ["noSuchKey: unknown setting (in overrides)"]
    with pytest.raises(ConfigError) as e:
        DLogConfig().with_overrides({"noSuchKey": 1})
    assert lines(e) == ["noSuchKey: unknown setting (in overrides)"]
    with pytest.raises(ConfigError) as e:
        BookieConfig.from_mapping({"noSuchKey": 1}, "sandbox --set")
    assert lines(e) == ["noSuchKey: unknown setting (in sandbox --set)"]


def test_every_cross_setting_problem_at_once() -> None:
    with pytest.raises(ConfigError) as e:
        DLogConfig.load(
            bkcEnsembleSize=1,  # write quorum stays 3
            periodicFlushFrequencyMilliSeconds=0,
            readerIdleErrorThresholdMillis=1000,
        )
    assert [line.split(":")[0] for line in lines(e)] == [
        "bkcWriteQuorumSize",
        "periodicFlushFrequencyMilliSeconds",
        "readerIdleErrorThresholdMillis",
    ]
    with pytest.raises(ConfigError) as e:
        BookieConfig.load(
            overrides={
                "diskUsageThreshold": 0.5,
                "diskUsageLwmThreshold": 0.6,
                "journalDirectories": "/a,/a",
            }
        )
    assert [line.split(":")[0] for line in lines(e)] == [
        "diskUsageLwmThreshold",
        "journalDirectories",
    ]


def test_combinations_are_checked_only_once_every_value_is_valid() -> None:
    """With the bad ensemble size replaced by its default (3), the write
    quorum of 5 would be reported against a value nobody gave."""
    with pytest.raises(ConfigError) as e:
        DLogConfig.load(bkcEnsembleSize="five", bkcWriteQuorumSize=5)
    assert lines(e) == ["bkcEnsembleSize: expected an integer, got 'five' (in overrides)"]


def test_file_syntax_problems_come_with_the_bad_values(tmp_path: Path) -> None:
    conf = tmp_path / "bookie.conf"
    conf.write_text("bookiePort=1\n=orphan\nbookiePort=2\njournalSyncData=maybe\n")
    with pytest.raises(ConfigError) as e:
        BookieConfig.load(conf)
    assert lines(e) == [
        f"{conf}:2: line has no key",
        f"bookiePort: given twice ({conf}:3)",
        f"journalSyncData: expected true or false, got 'maybe' (in {conf})",
    ]
    with pytest.raises(ConfigError) as e:
        parse_properties("=a\n=b\n", "x.conf")
    assert lines(e) == ["x.conf:1: line has no key", "x.conf:2: line has no key"]


def test_every_malformed_set_item() -> None:
    with pytest.raises(ConfigError) as e:
        parse_set_options(["bookiePort", "journalSyncData=true", "=3"])
    assert lines(e) == [
        "bookiePort: expected key=value after --set",
        "=3: expected key=value after --set",
    ]


def test_a_deprecated_spelling_given_twice_in_one_layer_is_reported(tmp_path: Path) -> None:
    conf = tmp_path / "dlog.conf"
    conf.write_text(
        "ensemble-size=3\nbkcEnsembleSize=3\nReadAheadBatchSize=2\nreadAheadBatchSize=4\n"
    )
    with pytest.raises(ConfigError) as e:
        DLogConfig.load(conf)
    assert lines(e) == [
        f"bkcEnsembleSize: given twice, as 'ensemble-size' and as 'bkcEnsembleSize' (in {conf})",
        f"readAheadBatchSize: given twice, as 'ReadAheadBatchSize' and as 'readAheadBatchSize' "
        f"(in {conf})",
    ]


def test_a_later_layer_replaces_a_key_given_in_another_spelling(tmp_path: Path) -> None:
    conf = tmp_path / "dlog.conf"
    conf.write_text("ensemble-size=5\nread_ahead_batch_size=3\n")
    cfg = load_config(DLogConfig, conf, ["bkcEnsembleSize=4", "readAheadBatchSize=9"])
    assert (cfg.ensemble_size, cfg.read_ahead_batch_size) == (4, 9)
    cfg = DLogConfig.load(conf).with_overrides({"ensemble-size": 3})
    assert cfg.ensemble_size == 3


def test_command_defaults_yield_to_every_source(tmp_path: Path) -> None:
    defaults = {"lockTimeoutSeconds": 7, "bkcEnsembleSize": 4}
    cfg = load_config(DLogConfig, None, [], defaults=defaults)
    assert (cfg.lock_timeout_seconds, cfg.ensemble_size) == (7, 4)
    conf = tmp_path / "dlog.conf"
    conf.write_text("ensemble-size=5\n")
    cfg = load_config(DLogConfig, conf, ["lockTimeoutSeconds=2"], defaults=defaults)
    assert (cfg.lock_timeout_seconds, cfg.ensemble_size) == (2, 5)
    assert DLogConfig.load(defaults=defaults, lock_timeout_seconds=1).lock_timeout_seconds == 1
