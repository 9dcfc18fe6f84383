"""Pacing of a background write-cache flush, so a checkpoint neither halves
the event loop's capacity nor adds milliseconds to every add while it runs.

The flush thread and the event loop share one interpreter lock. A flush
takes about 1.5 us of CPU per entry, much of it holding the lock (framing,
locations, index keys and RocksDB's writes); run flat out, a checkpoint's hundreds of thousands of entries take
about half of the lock for a second or more, and a loop that was half busy
serving adds then falls behind: every add in that second waits. Paced, the
flush's share of the lock stays under ``dbStorage_flushMaxCpuPercent``, so
the same work is spread over a few seconds of a checkpoint interval.

By default the flush sleeps after each slice in proportion to the CPU it
used. While it runs Python, the loop waiting for the lock waits up to a
switch interval (1 ms, set by dlog.bookie.main); a slice is short (a
thousand entries framed, a 512-location index write).

Measured and changed: the loop lending the flush the lock in *turns*
(:class:`LoopTurns`, ``dbStorage_flushLendTurns``): the loop stops for at
most :data:`TURN` and waits, without the lock, while a slice runs; between
turns the flush waits without the lock. When a slice took several
microseconds of Python per entry, that kept the loop from waiting on
switch intervals (lateness p99 during a flush 1.6-1.7 ms against 2.5-2.7
ms sleeping). Once the flush's Python per entry fell (about 1.5 us of CPU
per 1 KiB entry now, most of it RocksDB's and the kernel's), the turns cost
more than they saved: ``bench/flush_loop_lag.py``, four runs each of turns
and sleeping, alternating, lateness p99 1.83-1.93 against 1.33-1.64 ms.
``bench/bookie_add.py``, 5 alternating pairs at half load, add p99 with
turns / sleeping: one disk 11.0/10.7, 13.8/10.7, 9.1/8.6, 16.8/10.5,
13.1/8.1 ms (p999 17.1/18.1, 21.0/17.7, 15.4/14.8, 28.3/15.2,
30.4/12.1 ms); ledgers on tmpfs 10.3/13.1, 9.1/8.1, 24.1/8.2, 11.2/11.8,
11.9/7.8 ms. A slept flush lasts longer (40-50% of adds sent during one
against 30-40%), and its adds still did better. ``bench/dlog_write.py`` at
1,000 in flight (three bookies on the two cores), 3 alternating pairs,
end-to-end p99 sleeping / turns: 12.7/11.3, 9.7/9.2, 9.9/9.6 ms, within
the noise, if anything for turns; the bookie's own tail decided it.

Pacing yields to urgency: it stops while the active half of the write
cache is over half full (adds would soon have to wait for this flush), and
for the flush at shutdown.

Measured and not kept: a byte schedule as well ("incremental writeback at a
bounded rate"): a flush's entry-log bytes no faster than spread them over
half of ``flushInterval``, at least 32 MiB/s and 1.5 times as fast as the
half filled, ended only by adds waiting. ``bench/dlog_write.py``'s
1,000-in-flight phase (three bookies, one disk), pairs against no schedule:
write p99 8.3/7.0 and 6.7/7.0 ms, end to end 13.0/13.3 and 13.8/13.1 ms,
at 240-250k records/s against 280-289k (longer flushes overlap more adds).
A variant ended by a half-full active half: 2 pairs of 4 better. A fixed
30 MB/s without urgency won 4 pairs of 4 in a noisier hour (write p99
7.9-10.3 against 10.4-12.5 ms), which the kept-variant runs did not repeat.

Measured and not changed: no pacing (``dbStorage_flushMaxCpuPercent=100``)
against the default 25, now that a flush costs about 1.7 us of CPU per
1 KiB entry. ``bench/bookie_add.py`` at 27,000 adds/s, alternating pairs:
a checkpoint took 0.8-1.5 s instead of 2.3-3.5 s. Ledgers on tmpfs, p99
10.0, 7.8, 8.8, 11.9, 102 ms unpaced against 21.4, 16.9, 6.3, 20.5, 27.0 ms
(the 102: a disk stall outside any flush, 118 ms p99 for those adds; 16.7
against 32.3 during flushes); one disk, 12.8, 16.3, 12.0, 8.7, 17.4, 16.4
against 18.7, 10.5, 12.1, 12.7, 20.6, 20.8 ms. ``bench/dlog_write.py`` at
1,000 in flight, end-to-end p99 18.4 and 15.4 unpaced against 16.6 and
19.9 ms. Unpaced won seven pairs of eleven (one tie) and no end-to-end
difference showed. Four more pairs later: tmpfs 12.1, 10.0, 51.0, 250
unpaced against 14.1, 21.3, 8.7, 28.0 ms (the last two pairs with stalls
outside flushes); one disk 15.4, 17.8, 24.3, 29.7 against 13.2, 16.0,
13.5, 14.5 ms, and during flushes 21.0, 26.8, 31.0, 30.2 against 17.1,
19.3, 17.5, 21.0 ms: on the journal's disk an unpaced flush's writeback
comes in bursts the journal's fsyncs wait behind. One disk now stands at
five pairs each, so the default stays.
"""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Callable

#: Longest single pause: a slice that took long (a slow disk) is not
#: followed by an equally long sleep, and a flush waits no longer than this
#: for a turn (a loop that lends none slows the flush, never stops it).
MAX_PAUSE = 0.05
#: Longest time the event loop stops for one turn of the flush: a slice
#: (``SLICE`` entries, an index chunk) takes less than this, and one that
#: takes longer (a disk stall in its write) goes on beside the loop.
TURN = 0.0005


class LoopTurns:
    """An event loop lends a flush thread the interpreter lock in turns.

    The thread calls :meth:`wait` between slices; from :meth:`lend` on,
    every ``gap`` the loop offers a turn to a waiting thread and
    blocks (without the lock) until the thread's next :meth:`wait` or
    :meth:`end` closes the turn, for at most ``turn`` seconds. ``gap`` is
    ``turn`` times (100 - share) / share: turns take at most ``share``
    percent of the loop's time.

    Invariants: no wait is unbounded. The loop blocks at most ``turn`` per
    offer; a slice still running then goes on beside the loop, as it would
    without turns. The thread waits at most ``max_wait`` for an offer, so a
    busy, blocked or stopped loop slows a flush and never stops it. Each
    offer has its own event, so a turn taken late or ended late leaves
    nothing behind for the next one.
    """

    def __init__(
        self, share_percent: int, *, turn: float = TURN, max_wait: float = MAX_PAUSE
    ) -> None:
        if not 1 <= share_percent <= 100:
            raise ValueError(f"share_percent must be 1..100, not {share_percent}")
        self.turn = turn
        self.gap = turn * (100 - share_percent) / share_percent
        self.max_wait = max_wait
        self._cond = threading.Condition(threading.Lock())
        self._lending = False
        self._waiting = False
        #: The turn offered and not yet taken, and the one the thread is in.
        self._offered: threading.Event | None = None
        self._current: threading.Event | None = None
        #: Turns given; offers whose turn outlasted ``turn`` (or was not
        #: taken in time); waits of the thread that got no turn.
        self.granted = 0
        self.overruns = 0
        self.missed = 0
        self._taken: dict[str, int] = {}

    # -- the flush thread ---------------------------------------------------
    def wait(self) -> bool:
        """End the current turn and wait for the next one (at most
        ``max_wait``). False at once when no loop lends turns: the caller
        paces itself."""
        with self._cond:
            self._end()
            if not self._lending:
                return False
            self._waiting = True
            self._cond.wait_for(
                lambda: self._offered is not None or not self._lending, self.max_wait
            )
            self._waiting = False
            if self._offered is not None:
                self._current, self._offered = self._offered, None
            else:
                self.missed += 1
            return True

    def end(self) -> None:
        """The flush stops being paced (urgent, or done): give the loop back
        the turn it may be waiting out."""
        with self._cond:
            self._end()

    def take_counts(self) -> dict[str, int]:
        """Counts since the last call, by outcome (for metrics)."""
        now = {"granted": self.granted, "overrun": self.overruns, "missed": self.missed}
        taken = {k: v - self._taken.get(k, 0) for k, v in now.items()}
        self._taken = now
        return taken

    def _end(self) -> None:
        if self._current is not None:
            self._current.set()
            self._current = None

    # -- the event loop -----------------------------------------------------
    def lend(self, loop: asyncio.AbstractEventLoop) -> asyncio.Task[None]:
        """Lend turns from now on (the flush may reach its first pause before
        the task first runs) until the returned task is cancelled."""
        with self._cond:
            self._lending = True
        task = loop.create_task(self._offer())
        # Runs even when the task is cancelled before it ever started.
        task.add_done_callback(lambda _: self._stop())
        return task

    async def _offer(self) -> None:
        while True:
            await asyncio.sleep(self.gap)
            with self._cond:
                if not self._waiting or self._offered is not None:
                    continue
                done = self._offered = threading.Event()
                self._cond.notify()
            self.granted += 1
            if not done.wait(self.turn):
                self.overruns += 1
                with self._cond:
                    if self._offered is done:  # not taken in time: withdrawn
                        self._offered = None

    def _stop(self) -> None:
        with self._cond:
            self._lending = False
            self._offered = None
            self._cond.notify_all()


class FlushPacer:
    """Called between slices of a flush: waits for a turn of the loop's, or
    sleeps to keep its CPU share."""

    def __init__(
        self,
        max_cpu_percent: int,
        *,
        urgent: Callable[[], bool] = lambda: False,
        cpu_clock: Callable[[], float] = time.thread_time,
        sleep: Callable[[float], None] = time.sleep,
        turn: float = TURN,
        lend_turns: bool = False,
    ) -> None:
        if not 1 <= max_cpu_percent <= 100:
            raise ValueError(f"max_cpu_percent must be 1..100, not {max_cpu_percent}")
        self.max_cpu_percent = max_cpu_percent
        self._urgent = urgent
        self._cpu = cpu_clock
        self._sleep = sleep
        self._mark = 0.0
        #: Seconds slept so far (by every flush), for metrics and tests.
        self.slept = 0.0
        #: What an event loop lends (``turns.lend(loop)`` beside a flush).
        self.turns = LoopTurns(max_cpu_percent, turn=turn)
        #: Whether the loop lends turns during a flush
        #: (``dbStorage_flushLendTurns``; paced flushes only).
        self.lend_turns = lend_turns and self.paced

    @property
    def paced(self) -> bool:
        """Whether flushes are paced at all (a share under 100%)."""
        return self.max_cpu_percent < 100

    def start(self) -> None:
        """A flush begins: its CPU time counts from here (call on its thread)."""
        self._mark = self._cpu()

    def pause(self) -> None:
        """Between two slices: wait for the loop's next turn; without a
        lender, sleep in proportion to the CPU the last slice used; when
        pacing is off, just offer the lock to the loop."""
        urgent = not self.paced or self._urgent()
        if not urgent and self.turns.wait():
            self._mark = self._cpu()
            return
        self.turns.end()
        used = self._cpu() - self._mark
        if not urgent and used > 0:
            delay = min(MAX_PAUSE, used * (100 - self.max_cpu_percent) / self.max_cpu_percent)
            self._sleep(delay)
            self.slept += delay
        else:
            self._sleep(0)
        self._mark = self._cpu()

    def finish(self) -> None:
        """The flush is over (or failed): end its turn."""
        self.turns.end()
