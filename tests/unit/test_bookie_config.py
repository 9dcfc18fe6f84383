"""BookieConfig: BookKeeper's key names and defaults, Java-properties loading,
validation errors that name the key, dumps/load round trip, documented file."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from dlog.conf.base import parse_properties, parse_set_options
from dlog.conf.bookie import DB_LEDGER_STORAGE, BookieConfig
from dlog.errors import ConfigError

REPO_ROOT = Path(__file__).resolve().parents[2]

# BookKeeper ServerConfiguration defaults (formats.md sections 1, 4, 5).
BK_DEFAULTS = {
    "bookiePort": 3181,
    "nettyMaxFrameSizeBytes": 5 * 1024 * 1024,
    "journalMaxGroupWaitMSec": 2,
    "journalBufferedWritesThreshold": 524288,
    "journalBufferedEntriesThreshold": 0,
    "journalFlushWhenQueueEmpty": False,
    "journalSyncData": True,
    "journalPreAllocSizeMB": 16,
    "journalWriteBufferSizeKB": 64,
    "journalAlignmentSize": 512,
    "journalMaxSizeMB": 2048,
    "journalMaxBackups": 5,
    "journalQueueSize": 10000,
    "logSizeLimit": 1024 * 1024 * 1024,
    "flushInterval": 10000,
    "flushEntrylogBytes": 0,
    "entryLogPerLedgerEnabled": False,
    "maximumNumberOfActiveEntryLogs": 500,
    "entrylogMapAccessExpiryTimeInSeconds": 300,
    "dbStorage_readAheadCacheBatchSize": 100,
    "dbStorage_maxThrottleTimeMs": 10000,
    "ledgerStorageClass": DB_LEDGER_STORAGE,
}


def write(tmp_path: Path, text: str, name: str = "bookie.conf") -> Path:
    p = tmp_path / name
    p.write_text(text)
    return p


# ---------------------------------------------------------------------------
# defaults
# ---------------------------------------------------------------------------


def test_defaults_equal_bookkeeper() -> None:
    props = BookieConfig().to_properties()
    for key, value in BK_DEFAULTS.items():
        assert props[key] == value, key
        assert type(props[key]) is type(value), key


def test_default_attributes() -> None:
    c = BookieConfig()
    assert c.bookie_port == 3181
    assert c.journal_max_group_wait_msec == 2
    assert c.journal_buffered_writes_threshold == 524288
    assert c.journal_max_size_mb == 2048
    assert c.journal_max_backups == 5
    assert c.flush_interval == 10000
    assert c.log_size_limit == 1 << 30
    assert c.db_storage_max_throttle_time_ms == 10000
    assert c.netty_max_frame_size_bytes == 5 << 20
    assert len(c.journal_directories) == 1
    assert len(c.ledger_directories) == 1


def test_load_without_file_is_defaults() -> None:
    assert BookieConfig.load() == BookieConfig()


def test_keys_are_unique_and_complete() -> None:
    keys = BookieConfig.setting_keys()
    assert len(keys) == len(set(keys))
    assert set(BK_DEFAULTS) <= set(keys)
    assert [k for k, *_ in BookieConfig.describe()] == keys
    assert set(BookieConfig().to_properties()) == set(keys)


def test_every_setting_is_documented() -> None:
    for key, _default, doc, _unit in BookieConfig.describe():
        assert doc.strip(), key


# ---------------------------------------------------------------------------
# parsing
# ---------------------------------------------------------------------------


def test_load_file_with_comments_continuations_and_separators(tmp_path: Path) -> None:
    conf = write(
        tmp_path,
        "# a comment\n"
        "! another comment style\n"
        "\n"
        "   # indented comment\n"
        "bookiePort=3999\n"
        "journalMaxGroupWaitMSec: 7\n"
        "journalMaxBackups   =   3   \n"
        "journalSyncData false\n"
        "journalDirectories=/data/j1,\\\n"
        "    /data/j2,\\\n"
        "    /data/j3\n"
        "ledgerDirectories = /data/l1\n"
        "metadataServiceUri=zk+hierarchical://zk1:2181;zk2:2181/ledgers\n"
        "diskUsageThreshold=0.5\n"
        "diskUsageLwmThreshold=0.25\n",
    )
    c = BookieConfig.load(conf)
    assert c.bookie_port == 3999
    assert c.journal_max_group_wait_msec == 7
    assert c.journal_max_backups == 3
    assert c.journal_sync_data is False
    assert c.journal_directories == ["/data/j1", "/data/j2", "/data/j3"]
    assert c.ledger_directories == ["/data/l1"]
    assert c.metadata_service_uri == "zk+hierarchical://zk1:2181;zk2:2181/ledgers"
    assert c.disk_usage_threshold == 0.5
    assert c.disk_usage_lwm_threshold == 0.25
    # everything not mentioned keeps its default
    assert c.journal_max_size_mb == 2048
    assert c.flush_interval == 10000


def test_parse_properties_details() -> None:
    props = parse_properties(
        "a=1\nb: 2\nc 3\nd=x=y\ne=\nf=with spaces inside  \ng=a:b\n# h=9\n"
        "long=one\\\n  two\\\n  three\n"
    )
    assert props == {
        "a": "1",
        "b": "2",
        "c": "3",
        "d": "x=y",
        "e": "",
        "f": "with spaces inside",
        "g": "a:b",
        "long": "onetwothree",
    }


def test_continuation_at_end_of_file() -> None:
    assert parse_properties("k=abc\\") == {"k": "abc"}


@pytest.mark.parametrize(
    "raw,expected",
    [("true", True), ("TRUE", True), ("yes", True), ("on", True), ("1", True)]
    + [("false", False), ("False", False), ("no", False), ("off", False), ("0", False)],
)
def test_bool_spellings(raw: str, expected: bool) -> None:
    assert BookieConfig.load(overrides={"journalSyncData": raw}).journal_sync_data is expected


def test_int_spellings() -> None:
    assert BookieConfig.load(overrides={"logSizeLimit": "0x100000"}).log_size_limit == 1 << 20
    assert BookieConfig.load(overrides={"flushInterval": "12_000"}).flush_interval == 12000
    assert BookieConfig.load(overrides={"bookiePort": " 4000 "}).bookie_port == 4000


def test_unknown_key_names_the_key(tmp_path: Path) -> None:
    conf = write(tmp_path, "bookiePort=3181\njournalMaxGroupWaitMsec=5\n")
    with pytest.raises(ConfigError) as exc:
        BookieConfig.load(conf)
    assert exc.value.key == "journalMaxGroupWaitMsec"
    assert "journalMaxGroupWaitMsec" in str(exc.value)
    assert "unknown" in str(exc.value)


def test_unknown_override_names_the_key() -> None:
    with pytest.raises(ConfigError) as exc:
        BookieConfig.load(overrides={"noSuchSetting": "1"})
    assert exc.value.key == "noSuchSetting"


@pytest.mark.parametrize(
    "key,value",
    [
        ("bookiePort", "31x81"),
        ("bookiePort", "3181.0"),
        ("journalMaxBackups", ""),
        ("journalSyncData", "maybe"),
        ("entryLogPerLedgerEnabled", "2"),
        ("diskUsageThreshold", "lots"),
        ("diskUsageThreshold", ""),
        ("logSizeLimit", "1GiB"),
    ],
)
def test_bad_values_name_the_key(tmp_path: Path, key: str, value: str) -> None:
    conf = write(tmp_path, f"{key}={value}\n")
    with pytest.raises(ConfigError) as exc:
        BookieConfig.load(conf)
    assert exc.value.key == key
    assert str(exc.value).startswith(f"{key}:")


@pytest.mark.parametrize(
    "key,value",
    [
        ("bookiePort", 0),
        ("bookiePort", 65536),
        ("journalMaxGroupWaitMSec", -1),
        ("journalBufferedWritesThreshold", 0),
        ("journalMaxSizeMB", 0),
        ("journalMaxBackups", -1),
        ("journalAlignmentSize", 256),
        ("journalAlignmentSize", 1000),
        ("logSizeLimit", 1024),
        ("flushInterval", 1),
        ("diskUsageThreshold", 1.5),
        ("diskUsageLwmThreshold", -0.1),
        ("nettyMaxFrameSizeBytes", 100),
        ("dbStorage_maxThrottleTimeMs", -5),
        ("ledgerStorageClass", "org.apache.bookkeeper.bookie.SortedLedgerStorage"),
        ("metadataServiceUri", "http://localhost:2181/ledgers"),
        ("metadataServiceUri", "zk+flat://localhost:2181/ledgers"),
        ("journalDirectories", ""),
        ("ledgerDirectories", " , "),
    ],
)
def test_out_of_range_values_rejected(key: str, value: object) -> None:
    with pytest.raises(ConfigError) as exc:
        BookieConfig.load(overrides={key: value})
    assert exc.value.key == key


@pytest.mark.parametrize("value", ["nan", "NaN", "-nan", float("nan"), "inf"])
def test_nan_is_not_in_range(value: object) -> None:
    with pytest.raises(ConfigError) as exc:
        BookieConfig.load(overrides={"diskUsageThreshold": value})
    assert exc.value.key == "diskUsageThreshold"


def test_in_range_edges_accepted() -> None:
    c = BookieConfig.load(
        overrides={
            "bookiePort": 65535,
            "journalAlignmentSize": 4096,
            "logSizeLimit": 1024 * 1024,
            "diskUsageThreshold": 1.0,
            "diskUsageLwmThreshold": 0.0,
        }
    )
    assert (c.bookie_port, c.journal_alignment_size, c.log_size_limit) == (65535, 4096, 1 << 20)


def test_cross_setting_checks() -> None:
    with pytest.raises(ConfigError) as exc:
        BookieConfig.load(overrides={"diskUsageThreshold": 0.5, "diskUsageLwmThreshold": 0.6})
    assert exc.value.key == "diskUsageLwmThreshold"
    with pytest.raises(ConfigError) as exc:
        BookieConfig.load(overrides={"journalDirectories": "/a,/b,/a"})
    assert exc.value.key == "journalDirectories"
    with pytest.raises(ConfigError) as exc:
        BookieConfig.load(overrides={"ledgerDirectories": ["/x", "/x"]})
    assert exc.value.key == "ledgerDirectories"


def test_duplicate_key_is_an_error(tmp_path: Path) -> None:
    conf = write(tmp_path, "bookiePort=3181\n# comment\njournalMaxBackups=2\nbookiePort: 3182\n")
    with pytest.raises(ConfigError) as exc:
        BookieConfig.load(conf)
    assert exc.value.key == "bookiePort"
    assert "twice" in str(exc.value)
    assert ":4" in str(exc.value)  # names the line of the second occurrence


def test_missing_file_is_config_error(tmp_path: Path) -> None:
    with pytest.raises(ConfigError) as exc:
        BookieConfig.load(tmp_path / "nope.conf")
    assert "nope.conf" in str(exc.value)


def test_line_without_key_is_error() -> None:
    with pytest.raises(ConfigError):
        parse_properties("=value\n")


# ---------------------------------------------------------------------------
# overrides
# ---------------------------------------------------------------------------


def test_set_overrides_apply_on_top_of_file(tmp_path: Path) -> None:
    conf = write(tmp_path, "bookiePort=4000\njournalMaxBackups=2\n")
    overrides = parse_set_options(
        ["bookiePort=4001", " flushInterval = 500 ", "journalSyncData=no"]
    )
    assert overrides == {"bookiePort": "4001", "flushInterval": "500", "journalSyncData": "no"}
    c = BookieConfig.load(conf, overrides)
    assert c.bookie_port == 4001
    assert c.journal_max_backups == 2
    assert c.flush_interval == 500
    assert c.journal_sync_data is False


def test_set_override_with_equals_in_value() -> None:
    assert parse_set_options(["bookieId=a=b"]) == {"bookieId": "a=b"}


@pytest.mark.parametrize("item", ["bookiePort", "=3", "  =x"])
def test_bad_set_option(item: str) -> None:
    with pytest.raises(ConfigError):
        parse_set_options([item])


def test_override_is_validated(tmp_path: Path) -> None:
    conf = write(tmp_path, "bookiePort=4000\n")
    with pytest.raises(ConfigError) as exc:
        BookieConfig.load(conf, {"bookiePort": "-1"})
    assert exc.value.key == "bookiePort"
    with pytest.raises(ConfigError) as exc:
        BookieConfig.load(conf, {"bogus": "1"})
    assert exc.value.key == "bogus"


def test_attribute_names_and_keyword_overrides() -> None:
    c = BookieConfig.load(overrides={"bookie_port": 5000}, journal_max_backups=1)
    assert c.bookie_port == 5000
    assert c.journal_max_backups == 1


def test_with_overrides_returns_validated_copy() -> None:
    base = BookieConfig.load(overrides={"bookiePort": 4000})
    c = base.with_overrides({"journalMaxBackups": "9"})
    assert c.bookie_port == 4000 and c.journal_max_backups == 9
    assert base.journal_max_backups == 5
    with pytest.raises(ConfigError):
        base.with_overrides({"journalMaxBackups": "-2"})


# ---------------------------------------------------------------------------
# output
# ---------------------------------------------------------------------------


def test_dumps_load_round_trip_defaults(tmp_path: Path) -> None:
    c = BookieConfig()
    assert BookieConfig.load(write(tmp_path, c.dumps())) == c


def test_dumps_load_round_trip_changed(tmp_path: Path) -> None:
    c = BookieConfig.load(
        overrides={
            "bookiePort": 4181,
            "journalDirectories": "/j1,/j2",
            "ledgerDirectories": "/l1,/l2,/l3",
            "journalSyncData": False,
            "journalFlushWhenQueueEmpty": True,
            "diskUsageThreshold": 0.8125,
            "diskUsageLwmThreshold": 0.1,
            "advertisedAddress": "10.0.0.7",
            "metadataServiceUri": "zk+hierarchical://a:2181;b:2182/my/ledgers",
        }
    )
    text = c.dumps()
    back = BookieConfig.load(write(tmp_path, text))
    assert back == c
    assert back.dumps() == text
    assert c != BookieConfig()


@settings(max_examples=60, deadline=None)
@given(
    port=st.integers(min_value=1, max_value=65535),
    wait=st.integers(min_value=0, max_value=10**6),
    backups=st.integers(min_value=0, max_value=1000),
    hi=st.floats(min_value=0.0, max_value=1.0, allow_nan=False),
    frac=st.floats(min_value=0.0, max_value=1.0, allow_nan=False),
    flag=st.booleans(),
    dirs=st.lists(
        st.text(alphabet="abcdefghijklmnopqrstuvwxyz0123456789_-./", min_size=1, max_size=12),
        min_size=1,
        max_size=4,
        unique=True,
    ),
)
def test_dumps_load_round_trip_property(
    port: int, wait: int, backups: int, hi: float, frac: float, flag: bool, dirs: list[str]
) -> None:
    c = BookieConfig.load(
        overrides={
            "bookiePort": port,
            "journalMaxGroupWaitMSec": wait,
            "journalMaxBackups": backups,
            "diskUsageThreshold": hi,
            "diskUsageLwmThreshold": hi * frac,
            "entryLogPerLedgerEnabled": flag,
            "ledgerDirectories": dirs,
        }
    )
    assert BookieConfig.load(overrides=parse_properties(c.dumps())) == c


def test_render_documented_has_every_key_with_default(tmp_path: Path) -> None:
    text = BookieConfig.render_documented()
    lines = text.splitlines()
    for key, default, _doc, _unit in BookieConfig.describe():
        if isinstance(default, bool):
            shown = "true" if default else "false"
        elif isinstance(default, list):
            shown = ",".join(default)
        else:
            shown = str(default)
        assert f"#{key}={shown}" in lines, key
    # All commented out: loading it gives the defaults.
    assert BookieConfig.load(write(tmp_path, text)) == BookieConfig()
    # Uncommenting every setting line also gives the defaults.
    uncommented = "\n".join(
        line[1:] if line.startswith("#") and "=" in line and " " not in line.split("=")[0] else line
        for line in lines
    )
    assert BookieConfig.load(write(tmp_path, uncommented, "u.conf")) == BookieConfig()


def test_repo_bookie_conf_matches_defaults() -> None:
    path = REPO_ROOT / "conf" / "bookie.conf"
    if not path.exists():
        pytest.fail(
            f"{path} is missing: the repo should ship the documented bookie configuration "
            "(BookieConfig.render_documented())"
        )
    text = path.read_text()
    assert BookieConfig.load(path) == BookieConfig()
    keys = set(BookieConfig.setting_keys())
    # Each key appears as a (possibly commented-out) `key=value` line.
    setting_lines = {}
    for line in text.splitlines():
        match = re.match(r"^#?\s*([A-Za-z_][\w.]*)\s*[=:](.*)$", line.strip())
        if match and match.group(1) in keys:
            setting_lines[match.group(1)] = match.group(2).strip()
    missing = sorted(keys - set(setting_lines))
    assert not missing, f"conf/bookie.conf has no key=value line for {missing}"
    # The values it documents are the defaults.
    documented = BookieConfig.load(overrides=setting_lines)
    assert documented == BookieConfig(), "conf/bookie.conf documents non-default values"
