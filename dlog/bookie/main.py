"""Running a bookie as a process: signals, metrics endpoint, logging."""

from __future__ import annotations

import asyncio
import logging
import signal

from dlog.bookie.bookie import Bookie
from dlog.conf.bookie import BookieConfig

log = logging.getLogger(__name__)


def install_event_loop_policy() -> None:
    """Use uvloop when it is installed: it roughly halves per-request overhead."""
    try:
        import uvloop
    except ImportError:
        return
    asyncio.set_event_loop_policy(uvloop.EventLoopPolicy())


async def serve(conf: BookieConfig) -> int:
    bookie = Bookie(conf)
    loop = asyncio.get_running_loop()
    stop = asyncio.Event()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    await bookie.start()
    if conf.enable_statistics:
        from prometheus_client import start_http_server

        start_http_server(
            conf.prometheus_stats_http_port,
            addr=conf.prometheus_stats_http_address,
            registry=bookie.metrics.registry,
        )
        log.info(
            "metrics on http://%s:%d/metrics",
            conf.prometheus_stats_http_address,
            conf.prometheus_stats_http_port,
        )

    async def gauges() -> None:
        while True:
            bookie.refresh_gauges()
            await asyncio.sleep(1.0)

    gauge_task = loop.create_task(gauges())
    stopped = loop.create_task(bookie.wait_stopped())
    waiter = loop.create_task(stop.wait())
    await asyncio.wait({stopped, waiter}, return_when=asyncio.FIRST_COMPLETED)
    gauge_task.cancel()
    if not bookie._stopped.is_set():
        log.info("shutting down (signal)")
        await bookie.stop()
    waiter.cancel()
    return 0


def run(conf: BookieConfig) -> int:
    install_event_loop_policy()
    return asyncio.run(serve(conf))
