"""Bookie cookies in BookKeeper's text format (the pure encode/decode and
mismatch parts of dlog.bookie.cookie)."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from dlog.bookie.cookie import LAYOUT_VERSION, Cookie, encode_dirs
from dlog.errors import InvalidCookieError

# Written the way BookKeeper's Cookie.toString() does it: layout version,
# newline, then CookieFormat in protobuf text format.
BK_COOKIE = (
    b"5\n"
    b'bookieHost: "10.0.0.1:3181"\n'
    b'journalDir: "/bk/journal"\n'
    b'ledgerDirs: "2\\t/bk/ledgers1\\t/bk/ledgers2"\n'
    b'instanceId: "3f1c2a9e-2c54-4a4e-9d6a-1b5c0e6d7f80"\n'
)


def cookie(**kw: object) -> Cookie:
    base = dict(
        bookie_id="127.0.0.1:3181",
        journal_dirs="/data/journal",
        ledger_dirs=encode_dirs(["/data/l1", "/data/l2"]),
        instance_id="instance-1",
    )
    base.update(kw)
    return Cookie(**base)  # type: ignore[arg-type]


def test_encode_dirs() -> None:
    assert encode_dirs(["/a"]) == "1\t/a"
    assert encode_dirs(["/a", "/b", "/c"]) == "3\t/a\t/b\t/c"
    assert encode_dirs([]) == "0"


def test_for_bookie() -> None:
    c = Cookie.for_bookie("h:1", ["/j1", "/j2"], ["/l1", "/l2"], "inst")
    assert c.bookie_id == "h:1"
    assert c.journal_dirs == "/j1,/j2"
    assert c.ledger_dirs == "2\t/l1\t/l2"
    assert c.instance_id == "inst"
    assert c.layout_version == LAYOUT_VERSION == 5


def test_encode_is_bookkeeper_text_format() -> None:
    text = cookie().encode().decode()
    lines = text.splitlines()
    assert lines[0] == "5"
    assert lines[1:] == [
        'bookieHost: "127.0.0.1:3181"',
        'journalDir: "/data/journal"',
        'ledgerDirs: "2\\t/data/l1\\t/data/l2"',
        'instanceId: "instance-1"',
    ]


def test_encode_without_instance_id_omits_it() -> None:
    text = cookie(instance_id=None).encode().decode()
    assert "instanceId" not in text
    assert Cookie.decode(text.encode(), "x").instance_id is None


def test_decode_bookkeeper_cookie() -> None:
    c = Cookie.decode(BK_COOKIE, "zk")
    assert c == Cookie(
        "10.0.0.1:3181",
        "/bk/journal",
        "2\t/bk/ledgers1\t/bk/ledgers2",
        "3f1c2a9e-2c54-4a4e-9d6a-1b5c0e6d7f80",
        5,
    )
    # re-encoding gives back BookKeeper's bytes
    assert c.encode() == BK_COOKIE


def test_decode_layout_4_and_index_dirs() -> None:
    data = b'4\nbookieHost: "h:3181"\njournalDir: "/j"\nledgerDirs: "1\\t/l"\nindexDirs: "1\\t/i"\n'
    c = Cookie.decode(data, "f")
    assert (c.bookie_id, c.journal_dirs, c.ledger_dirs, c.instance_id, c.layout_version) == (
        "h:3181",
        "/j",
        "1\t/l",
        None,
        4,
    )


def test_decode_version_3() -> None:
    c = Cookie.decode(b"3\nhost:3181\n/journal\n1\t/ledgers\n", "VERSION")
    assert c == Cookie("host:3181", "/journal", "1\t/ledgers", None, 3)
    assert c.layout_version == 3
    assert c.mismatch(Cookie("host:3181", "/journal", "1\t/ledgers")) is None


@settings(max_examples=200, deadline=None)
@given(
    host=st.text(min_size=1, max_size=30),
    journal=st.text(max_size=40),
    ledgers=st.lists(
        st.text(
            alphabet=st.characters(exclude_categories=("Cs",), exclude_characters="\t"), max_size=20
        ),
        max_size=4,
    ),
    instance=st.none() | st.text(min_size=1, max_size=36),
)
def test_round_trip(host: str, journal: str, ledgers: list[str], instance: str | None) -> None:
    c = Cookie(host, journal, encode_dirs(ledgers), instance)
    data = c.encode()
    assert data.startswith(b"5\n")
    back = Cookie.decode(data, "prop")
    assert back == c
    assert back.mismatch(c) is None
    assert back.ledger_dirs.split("\t")[1:] == ledgers


@pytest.mark.parametrize(
    "data",
    [
        b"",
        b"\xff\xfe\x00garbage",
        b"hello world\n",
        b'five\nbookieHost: "h"\n',
        b"2\nh\n/j\n1\t/l\n",  # too old
        b"1\n",
        b"3\nhost:3181\n/journal\n",  # truncated version 3
        b"3\n",
        b"5\nthis is not protobuf text",
        b'5\nbookieHost: "h"\njournalDir: "/j"\nledgerDirs: "1\\t/l"\nnoSuchField: "x"\n',
        b"5\nbookieHost: 12\n",
        b'5\nbookieHost: "unterminated\n',
        # missing required fields (BookKeeper's CookieFormat.build() rejects these)
        b"5\n",
        b'5\nbookieHost: "h:3181"\n',
        b'5\nbookieHost: "h:3181"\njournalDir: "/j"\n',
    ],
)
def test_garbage_rejected(data: bytes) -> None:
    with pytest.raises(InvalidCookieError) as exc:
        Cookie.decode(data, "/some/VERSION")
    assert "/some/VERSION" in str(exc.value)


@pytest.mark.filterwarnings("error")
@settings(max_examples=300, deadline=None)
@given(data=st.binary(max_size=200))
def test_random_bytes_decode_or_invalid_cookie(data: bytes) -> None:
    try:
        c = Cookie.decode(data, "fuzz")
    except InvalidCookieError:
        return
    assert c.layout_version >= 3


@pytest.mark.filterwarnings("error")
@pytest.mark.parametrize("escape", ["\\q", "\\?", "\\8", "\\x", "\\xg", "\\u12", "\\U0041"])
def test_invalid_escapes_rejected_as_bookkeeper_does(escape: str) -> None:
    """Java's TextFormat refuses a backslash sequence it does not know;
    Python's would keep it as text with a DeprecationWarning."""
    data = f'5\nbookieHost: "h{escape}"\njournalDir: "/j"\nledgerDirs: "1\\t/l"\n'.encode()
    with pytest.raises(InvalidCookieError, match="invalid escape"):
        Cookie.decode(data, "/some/VERSION")


@pytest.mark.filterwarnings("error")
@pytest.mark.parametrize(
    ("escape", "value"),
    [("\\t", "\t"), ("\\\\", "\\"), ("\\'", "'"), ('\\"', '"'), ("\\101", "A"),
     ("\\x41", "A"), ("\\u00e9", "\u00e9"), ("\\U0001F600", "\U0001F600"), ("\\303\\251", "\u00e9")],
)  # fmt: skip
def test_valid_escapes_read(escape: str, value: str) -> None:
    data = f'5\nbookieHost: "h{escape}"\njournalDir: "/j"\nledgerDirs: "1\\t/l"\n'.encode()
    assert Cookie.decode(data, "v").bookie_id == "h" + value


@pytest.mark.filterwarnings("error")
@settings(max_examples=300, deadline=None)
@given(host=st.text(alphabet="\\abfnrtvxuU01789?\"'qA", max_size=12))
def test_any_escapes_decode_or_invalid_cookie(host: str) -> None:
    """Whatever follows a backslash: a cookie, or InvalidCookieError (never
    a warning or another exception)."""
    data = f'5\nbookieHost: "{host}"\njournalDir: "/j"\nledgerDirs: "1\\t/l"\n'.encode()
    try:
        Cookie.decode(data, "fuzz")
    except InvalidCookieError:
        pass


def test_mismatch_messages() -> None:
    me = cookie()
    assert me.mismatch(cookie()) is None
    assert me.mismatch(cookie(layout_version=4)) is None  # version is not identity

    msg = me.mismatch(cookie(bookie_id="10.9.9.9:3181"))
    assert msg is not None and "10.9.9.9:3181" in msg and "127.0.0.1:3181" in msg
    assert "bookie" in msg

    msg = me.mismatch(cookie(journal_dirs="/other/journal"))
    assert msg is not None and "journal" in msg and "/other/journal" in msg

    msg = me.mismatch(cookie(ledger_dirs=encode_dirs(["/data/l1"])))
    assert msg is not None and "ledger" in msg and "/data/l1" in msg

    msg = me.mismatch(cookie(instance_id="instance-2"))
    assert msg is not None and "instance-2" in msg and "instance-1" in msg

    msg = me.mismatch(cookie(instance_id=None))
    assert msg is not None and "instance" in msg


def test_mismatch_treats_empty_instance_as_none() -> None:
    assert cookie(instance_id=None).mismatch(cookie(instance_id="")) is None
    assert cookie(instance_id="").mismatch(cookie(instance_id=None)) is None


def test_mismatch_reports_first_difference_in_order() -> None:
    other = cookie(bookie_id="x:1", journal_dirs="/x", ledger_dirs="1\t/x", instance_id="y")
    msg = cookie().mismatch(other)
    assert msg is not None and "x:1" in msg and "journal" not in msg


def test_ledger_dir_order_matters() -> None:
    a = cookie(ledger_dirs=encode_dirs(["/l1", "/l2"]))
    b = cookie(ledger_dirs=encode_dirs(["/l2", "/l1"]))
    assert a.mismatch(b) is not None
