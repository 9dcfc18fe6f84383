"""`dlog tail -n` (the last N records), `--limit` (the first N) and
`dlog dlsn`, run as a user runs them (``python -m dlog ...`` subprocesses)
against one sandbox (ZooKeeper and 3 bookie processes) started for the
module. Records are written from Python so that each test knows exactly
which entries and segments hold them."""

from __future__ import annotations

import asyncio
import time

import pytest

from dlog import positions
from dlog.conf.dlog import DLogConfig
from dlog.dlsn import DLSN, InitialDLSN, InvalidDLSN, NonInclusiveLowerBound
from dlog.namespace import Namespace
from dlog.record import LogRecord
from dlog.segment_reader import RecordSpan
from tests.cli import Lines, dlog, error_line, ok, stop, tail_follow

pytestmark = pytest.mark.integration

Rows = list[tuple[DLSN, str]]


def rows_of(out: str) -> Rows:
    rows = []
    for line in out.splitlines():
        dlsn, payload = line.split("\t", 1)
        rows.append((DLSN.deserialize(dlsn), payload))
    return rows


def tail(uri: str, stream: str, *args: str) -> Rows:
    return rows_of(ok(dlog("tail", stream, *args, uri=uri)))


def short(d: DLSN) -> str:
    return f"{d.log_segment_sequence_no}/{d.entry_id}/{d.slot_id}"


async def write_segments(uri: str, stream: str, segments: list[list[list[str]]]) -> Rows:
    """One writer session (so one segment) per item of ``segments``, and in
    it one entry per list of payloads (write_bulk batches a call's records
    into one record set)."""
    out: Rows = []
    async with await Namespace.open(uri, DLogConfig(), bind=True) as ns:
        lm = await ns.open_log(stream)
        for segment in segments:
            writer = await lm.open_writer()
            try:
                for entry in segment:
                    txid = writer.last_txid + 1
                    records = [LogRecord(txid + i, p.encode()) for i, p in enumerate(entry)]
                    out += zip(await writer.write_bulk(records), entry, strict=True)
            finally:
                await writer.close()
    return out


def entries_of(rows: Rows) -> list[tuple[int, int]]:
    return sorted({(d.log_segment_sequence_no, d.entry_id) for d, _ in rows})


async def last_records(uri: str, stream: str, n: int) -> RecordSpan | None:
    async with await Namespace.open(uri, DLogConfig(), bind=True) as ns:
        return await positions.last_records((await ns.open_log(stream)).context, n)


async def delete_ledger_of_segment(uri: str, stream: str, index: int) -> None:
    """Delete the ledger of the stream's ``index``-th segment, leaving its
    metadata: any read of that segment now fails, which shows whether a
    command touched it."""
    async with await Namespace.open(uri, DLogConfig(), bind=True) as ns:
        lm = await ns.open_log(stream)
        segments = await lm.context.metadata.get_segments(stream)
        await ns.bk.delete_ledger(segments[index][0].ledger_id)


# ---------------------------------------------------------------------------


def test_n_is_the_last_records_and_limit_the_first(uri: str) -> None:
    # Segment 1: entries of 3, 3, 3 records; segment 2: entries of 3, 2.
    rows = asyncio.run(
        write_segments(
            uri,
            "roll",
            [
                [["a0", "a1", "a2"], ["a3", "a4", "a5"], ["a6", "a7", "a8"]],
                [["b0", "b1", "b2"], ["b3", "b4"]],
            ],
        )
    )
    assert len(entries_of(rows)) == 5 and len({d[0] for d, _ in rows}) == 2

    # -n N: the last N, cut inside an entry, across the roll, or everything.
    assert tail(uri, "roll", "-n", "1") == rows[-1:]
    assert tail(uri, "roll", "-n", "4") == rows[-4:]
    assert tail(uri, "roll", "--lines", "7") == rows[-7:]
    assert tail(uri, "roll", "-n", "14") == rows
    assert tail(uri, "roll", "-n", "100") == rows

    # --limit N: the first N, from --from (earliest by default).
    assert tail(uri, "roll", "--limit", "4") == rows[:4]
    assert tail(uri, "roll", "--from", short(rows[2][0]), "--limit", "2") == rows[2:4]
    assert tail(uri, "roll", "--from", short(rows[8][0]), "--limit", "3") == rows[8:11]
    # Without either: everything from --from.
    assert tail(uri, "roll", "--from", rows[10][0].serialize()) == rows[10:]

    # -n with --from: the last N of those at or after --from.
    assert tail(uri, "roll", "--from", short(rows[7][0]), "-n", "100") == rows[7:]
    assert tail(uri, "roll", "--from", short(rows[7][0]), "-n", "3") == rows[-3:]
    assert tail(uri, "roll", "--from", short(rows[-1][0].next()), "-n", "3") == []
    # A --from before every record (a negative one included) is the start.
    assert tail(uri, "roll", "--from", "-1/0/0", "--limit", "1") == rows[:1]
    assert tail(uri, "roll", "--from", short(NonInclusiveLowerBound), "-n", "100") == rows

    # -n 0, as tail -n 0: nothing (with --follow: only new ones, below).
    assert ok(dlog("tail", "roll", "-n", "0", uri=uri)) == ""
    # N must not be negative (--limit at least 1); -n and --limit, and -n
    # and --from latest, do not mix.
    assert "0 or more" in error_line(dlog("tail", "roll", "-n", "-2", uri=uri), 2)
    assert "at least 1" in error_line(dlog("tail", "roll", "--limit", "0", uri=uri), 2)
    r = dlog("tail", "roll", "-n", "2", "--limit", "2", uri=uri)
    assert "do not combine" in error_line(r, 2)
    r = dlog("tail", "roll", "-n", "2", "--from", "latest", uri=uri)
    assert "--from latest" in error_line(r, 2)

    # An empty stream: nothing, and no error.
    ok(dlog("stream", "create", "empty", uri=uri))
    assert tail(uri, "empty", "-n", "3") == []


def test_n_reads_back_from_the_end_only(uri: str) -> None:
    rows = asyncio.run(
        write_segments(uri, "gone", [[["a0", "a1"], ["a2"]], [["b0", "b1"], ["b2", "b3"]]])
    )
    asyncio.run(delete_ledger_of_segment(uri, "gone", 0))
    # The last 4 are all in segment 2: segment 1 is never read.
    assert tail(uri, "gone", "-n", "4") == rows[-4:]
    # The 5th last is in segment 1, whose ledger is gone: reading it fails.
    assert "ledger" in error_line(dlog("tail", "gone", "-n", "5", uri=uri))


def test_n_skips_truncated_records(uri: str) -> None:
    rows = asyncio.run(
        write_segments(
            uri,
            "trunc",
            [[["a0", "a1"]], [["b0", "b1", "b2"], ["b3", "b4", "b5"]], [["c0"]]],
        )
    )
    # Segment 1 truncated, segment 2 partially (from b1, inside its first entry).
    keep = rows[3][0]
    assert (keep.entry_id, keep.slot_id) == (0, 1)
    ok(dlog("stream", "truncate", "trunc", "--to", short(keep), "-f", uri=uri))
    # Retention would delete a truncated segment's ledger; -n must not read it.
    asyncio.run(delete_ledger_of_segment(uri, "trunc", 0))
    assert tail(uri, "trunc", "-n", "100") == rows[3:]
    assert tail(uri, "trunc", "-n", "6") == rows[3:]
    assert tail(uri, "trunc", "-n", "5") == rows[4:]
    assert tail(uri, "trunc") == rows[3:]
    # The reader would skip b0 anyway; what the walk reports must skip it too.
    assert asyncio.run(last_records(uri, "trunc", 7)) == RecordSpan(rows[3][0], rows[-1][0], 6)
    assert asyncio.run(last_records(uri, "trunc", 2)) == RecordSpan(rows[-2][0], rows[-1][0], 2)


async def test_n_reads_an_in_progress_segment_up_to_its_lac(uri: str) -> None:
    done = await write_segments(uri, "live", [[["a0", "a1"], ["a2"]]])
    async with await Namespace.open(uri, DLogConfig(), bind=True) as ns:
        lm = await ns.open_log("live")
        writer = await lm.open_writer()
        try:
            live: Rows = []
            for entry in (["b0", "b1"], ["b2", "b3", "b4"]):
                txid = writer.last_txid + 1
                records = [LogRecord(txid + i, p.encode()) for i, p in enumerate(entry)]
                live += zip(await writer.write_bulk(records), entry, strict=True)
            # Readers see the in-progress segment up to its LAC, published when idle.
            deadline = time.monotonic() + 20
            while await lm.get_last_dlsn() != live[-1][0]:
                assert time.monotonic() < deadline, "the LAC never reached the last entry"
                await asyncio.sleep(0.05)
            segments = await lm.context.metadata.get_segments("live")
            assert segments[-1][0].in_progress
            rows = done + live
            assert await asyncio.to_thread(tail, uri, "live", "-n", "4") == rows[-4:]
            assert await asyncio.to_thread(tail, uri, "live", "-n", "7") == rows[-7:]
            assert await asyncio.to_thread(tail, uri, "live", "-n", "50") == rows

            # Records written while it runs are not among the last N that
            # existed when it started: it prints N and stops.
            stop = asyncio.Event()

            async def keep_writing() -> list[DLSN]:
                written = []
                deadline = time.monotonic() + 10
                while not stop.is_set() and time.monotonic() < deadline:
                    txid = writer.last_txid + 1
                    written.append(await writer.write(LogRecord(txid, f"w{txid}".encode())))
                    await asyncio.sleep(0.02)
                return written

            task = asyncio.create_task(keep_writing())
            try:
                got = await asyncio.to_thread(tail, uri, "live", "-n", "3")
            finally:
                stop.set()
                written = await task
            assert len(written) > 3  # the writes overlapped the tail
            everything = [d for d, _ in rows] + written
            assert len(got) == 3, got
            i = everything.index(got[0][0])
            assert [d for d, _ in got] == everything[i : i + 3]
        finally:
            await writer.close()


def test_n_with_follow_prints_the_last_records_then_new_ones(uri: str) -> None:
    rows = asyncio.run(write_segments(uri, "follow", [[["a0", "a1", "a2"], ["a3", "a4"]]]))
    proc = tail_follow(uri, "follow", "-n", "2")
    try:
        lines = Lines(proc)
        assert [lines.next(), lines.next()] == [f"{d.serialize()}\t{p}\n" for d, p in rows[-2:]]
        [(new, _)] = asyncio.run(write_segments(uri, "follow", [[["fresh"]]]))
        assert lines.next() == f"{new.serialize()}\tfresh\n"
    finally:
        code, err = stop(proc)
    assert code == 0, err

    # On an empty stream, -n --follow waits for the first record.
    ok(dlog("stream", "create", "follow-empty", uri=uri))
    proc = tail_follow(uri, "follow-empty", "-n", "5")
    try:
        lines = Lines(proc)
        [(first, _)] = asyncio.run(write_segments(uri, "follow-empty", [[["first"]]]))
        assert lines.next() == f"{first.serialize()}\tfirst\n"
    finally:
        code, err = stop(proc)
    assert code == 0, err


def test_n_0_with_follow_prints_only_new_records(uri: str) -> None:
    """tail -n 0 -f: none of the records that exist, then every new one."""
    asyncio.run(write_segments(uri, "zero", [[["old0", "old1"]]]))
    proc = tail_follow(uri, "zero", "-n", "0")
    try:
        lines = Lines(proc)
        got = lines.first_new(lambda p: asyncio.run(write_segments(uri, "zero", [[[p]]])))
        assert got is not None and got.split("\t")[1].startswith("tick-"), got
    finally:
        code, err = stop(proc)
    assert code == 0, err


def test_dlsn_commands_take_every_form_from_takes() -> None:
    d = DLSN(1, 2, 3)
    forms = [d.serialize(), "1/2/3", "1:2:3", str(d), " 1/2/3 "]
    for form in forms:
        out = ok(dlog("dlsn", "deserialize", form)).splitlines()
        assert out == ["DLSN{logSegmentSequenceNo=1, entryId=2, slotId=3}", "1 2 3"], form
        assert ok(dlog("dlsn", "serialize", form)).strip() == d.serialize(), form
    # DistributedLog's toString unquoted: several words.
    assert ok(dlog("dlsn", "deserialize", *str(d).split())).splitlines()[1] == "1 2 3"
    assert ok(dlog("dlsn", "serialize", "1", "2", "3")).strip() == d.serialize()

    # Negative fields are numbers, not options, without `--`: -1/0/0 is no
    # special DLSN (DistributedLog's are InitialDLSN 1/0/0, NonInclusiveLowerBound
    # 1/0/-1 and InvalidDLSN 0/-1/-1), just one before every record.
    for special in (DLSN(-1, 0, 0), InitialDLSN, NonInclusiveLowerBound, InvalidDLSN):
        s, e, n = special
        for form in (short(special), f"{s}:{e}:{n}", str(special), special.serialize()):
            out = ok(dlog("dlsn", "deserialize", form)).splitlines()
            assert out == [str(special), f"{s} {e} {n}"], form
        assert ok(dlog("dlsn", "serialize", str(s), str(e), str(n))).strip() == special.serialize()
        assert ok(dlog("dlsn", "serialize", short(special))).strip() == special.serialize()

    # A bad one: exit 2, one line naming the forms.
    line = error_line(dlog("dlsn", "deserialize", "1/2"), 2)
    assert "S/E/N" in line and "base64" in line
    line = error_line(dlog("dlsn", "deserialize", "-x"), 2)
    assert "cannot parse '-x'" in line
    assert "int64" in error_line(dlog("dlsn", "serialize", "1", "2", str(2**63)), 2)
    assert "cannot parse" in error_line(dlog("dlsn", "serialize", "1", "x", "3"), 2)
