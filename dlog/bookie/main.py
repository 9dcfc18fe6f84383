"""Running a bookie as a process: signals, metrics endpoint, logging.

The bookie itself, its server and its registration are composed, in order,
by :class:`~dlog.bookie.service.BookieService`.
"""

from __future__ import annotations

import asyncio
import ctypes
import gc
import logging
import signal
import sys

from dlog.bookie.metrics import observe_gc_pauses
from dlog.bookie.service import BookieService
from dlog.conf.bookie import BookieConfig
from dlog.failpoints import failpoint

log = logging.getLogger(__name__)


def install_event_loop_policy() -> None:
    """Use uvloop when it is installed: it roughly halves per-request overhead."""
    try:
        import uvloop
    except ImportError:
        return
    asyncio.set_event_loop_policy(uvloop.EventLoopPolicy())


#: glibc's mallopt parameter for how much free memory at the top of the heap
#: makes free() give it back to the kernel (128 KiB by default).
M_TRIM_THRESHOLD = -1
#: glibc's mallopt parameter for the size from which malloc maps memory of
#: its own for a block (and unmaps it on free) instead of using the heap.
M_MMAP_THRESHOLD = -3
#: Blocks up to this size come from the heap (glibc's largest allowed value).
MMAP_THRESHOLD = 32 * 1024 * 1024


def keep_freed_memory() -> bool:
    """Stop glibc from handing freed heap memory back to the kernel.

    A write-cache half is hundreds of MB of small objects, freed at once
    after its flush. By default the free() that empties the top of the heap
    trims it, unmapping hundreds of MB while holding the interpreter lock
    (13-43 ms measured on this project's VM, every add on the loop waiting),
    and the next half faults it all back in. A bookie's memory is bounded by
    its caches anyway; keeping what it reached costs nothing more.

    Blocks of 128 KiB and more (a socket read of a large entry, a journal
    group) come from the heap too: setting the trim threshold turns off
    glibc's own raising of the mapping threshold, and every such block was
    mapped afresh and faulted in page by page (a 120 KB entry about 30
    faults, each a few microseconds here). False where the C library has
    no mallopt (not glibc)."""
    try:
        mallopt = ctypes.CDLL(None).mallopt
    except (OSError, AttributeError):
        return False
    mallopt.argtypes = (ctypes.c_int, ctypes.c_int)
    return bool(mallopt(M_TRIM_THRESHOLD, 2**31 - 1)) and bool(
        mallopt(M_MMAP_THRESHOLD, MMAP_THRESHOLD)
    )


def tune_runtime() -> None:
    """Keep the event loop responsive under load.

    * The storage flush thread (and the read pool) share the GIL with the
      loop; a shorter switch interval bounds how long the loop waits to get
      it back. (The journal's writes and syncs are in a process of their
      own, :mod:`dlog.bookie.journal_writer`, for the same reason.)
    * The bookie allocates many short-lived objects per request; default GC
      thresholds run full collections (which free nothing) several times a
      second. Objects alive after start-up are frozen out of collection.
    * Freed memory stays with the process (:func:`keep_freed_memory`).
    """
    keep_freed_memory()
    sys.setswitchinterval(0.001)
    gc.collect()
    gc.freeze()
    gc.set_threshold(20_000, 50, 100)


async def serve(conf: BookieConfig) -> int:
    service = BookieService(conf)
    bookie = service.core
    loop = asyncio.get_running_loop()
    stop = asyncio.Event()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    # Before the endpoint exists: a scrape must never find this metric missing.
    observe_gc_pauses(service.metrics.gc_pause)
    # Metrics first: once the bookie port answers, so does the endpoint.
    if conf.enable_statistics:
        from prometheus_client import start_http_server

        start_http_server(
            conf.prometheus_stats_http_port,
            addr=conf.prometheus_stats_http_address,
            registry=service.metrics.registry,
        )
        log.info(
            "metrics on http://%s:%d/metrics",
            conf.prometheus_stats_http_address,
            conf.prometheus_stats_http_port,
        )
    waiter = loop.create_task(stop.wait())
    starting = loop.create_task(service.start())
    await asyncio.wait({starting, waiter}, return_when=asyncio.FIRST_COMPLETED)
    if not starting.done():
        # A signal during start-up (a long journal replay, ZooKeeper out of
        # reach, a killed predecessor's registration not yet expired): stop
        # now, not once start-up ends, which may be never.
        log.info("shutting down (signal) during start-up")
        starting.cancel()
        try:
            await starting
        except asyncio.CancelledError:
            pass
        except Exception as e:
            log.warning("start-up ended with an error as it was stopped: %s", e)
        await service.stop()
        return 0
    starting.result()  # start-up errors end the process
    recovery = None
    if conf.auto_recovery_daemon_enabled:
        from dlog.autorecovery.service import AutoRecovery

        # after the bookie serves; its id as the auditor candidate and lock owner
        recovery = AutoRecovery(conf, registry=service.metrics.registry)
        try:
            await recovery.start()
        except BaseException:
            await service.stop()
            raise
        if service.control is not None:
            from dlog.control import AUTORECOVERY

            recovery.admin_providers(into=service.control.providers)
            await service.control.set_serving(AUTORECOVERY, True)
    tune_runtime()  # after start-up, so that gc.freeze() covers what it built

    async def gauges() -> None:
        tick = 0.1
        last_refresh = 0.0
        while True:
            t0 = loop.time()
            await asyncio.sleep(tick)
            lag = loop.time() - t0 - tick
            bookie.metrics.loop_lag.observe(max(0.0, lag))
            if lag > 0.2:
                log.warning("event loop was blocked for %.0f ms", lag * 1000)
            if t0 - last_refresh >= 1.0:
                failpoint("bookie.gauges")
                bookie.refresh_gauges()
                last_refresh = t0

    gauge_task = loop.create_task(gauges())
    watchdog = None
    if conf.event_loop_stall_dump_threshold_ms:
        from dlog.stall_watchdog import StallWatchdog

        threshold = conf.event_loop_stall_dump_threshold_ms / 1000
        watchdog = loop.create_task(StallWatchdog(threshold).run())
    stopped = loop.create_task(service.wait_stopped())
    await asyncio.wait({stopped, waiter}, return_when=asyncio.FIRST_COMPLETED)
    gauge_task.cancel()
    if watchdog is not None:
        # Off before the stop: a shutdown's last flush is no stall to report.
        watchdog.cancel()
        await asyncio.gather(watchdog, return_exceptions=True)
    if recovery is not None:
        await recovery.stop()  # before the bookie goes
    if not service.stopped:
        log.info("shutting down (signal)")
        await service.stop()
    waiter.cancel()
    return 0


def run(conf: BookieConfig) -> int:
    install_event_loop_policy()
    return asyncio.run(serve(conf))
