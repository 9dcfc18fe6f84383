"""A bulk write's DLSNs, computed on demand from the entries holding its records."""

from __future__ import annotations

import pytest

from dlog.dlsn import DLSN
from dlog.writer import WrittenDLSNs


def test_dlsns_run_over_each_entry_in_order() -> None:
    parts = [(1, 7, 3, 2), (1, 8, 0, 3), (2, 0, 0, 1)]
    written = WrittenDLSNs(parts)
    expected = [DLSN(1, 7, 3), DLSN(1, 7, 4), DLSN(1, 8, 0), DLSN(1, 8, 1), DLSN(1, 8, 2)]
    expected.append(DLSN(2, 0, 0))
    assert list(written) == expected and written == expected
    assert len(written) == 6 and written.entries == 3
    assert [written[i] for i in range(6)] == expected
    assert [written[i] for i in range(-6, 0)] == expected
    assert written[1:4] == expected[1:4] and written[::-2] == expected[::-2]
    assert type(written[0]) is DLSN
    for bad in (6, -7):
        with pytest.raises(IndexError):
            written[bad]
    assert written == WrittenDLSNs(parts) and written != expected[:-1]


def test_an_empty_bulk() -> None:
    assert len(WrittenDLSNs([])) == 0 and list(WrittenDLSNs([])) == []
