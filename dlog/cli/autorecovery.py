"""``dlog autorecovery``: run an auditor candidate and a replication worker."""

from __future__ import annotations

import asyncio
import logging
import signal
from pathlib import Path

import typer

from dlog.cli.common import (
    ConfOption,
    GrpcPortOption,
    LogLevelOption,
    SetOption,
    fail,
    load_config,
    setup_logging,
    with_grpc_port,
)
from dlog.conf.bookie import BookieConfig
from dlog.errors import DLogError

log = logging.getLogger(__name__)


async def serve(conf: BookieConfig, candidate_id: str | None = None) -> int:
    """Run until a signal; with grpcServerEnabled, health and admin beside it
    (SERVING once AutoRecovery has started, NOT_SERVING from the signal on)."""
    from dlog.autorecovery.service import AutoRecovery

    loop = asyncio.get_running_loop()
    stop = asyncio.Event()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    registry = None
    if conf.enable_statistics:
        from prometheus_client import CollectorRegistry, start_http_server

        registry = CollectorRegistry()
        start_http_server(
            conf.prometheus_stats_http_port,
            addr=conf.prometheus_stats_http_address,
            registry=registry,
        )
        log.info(
            "metrics on http://%s:%d/metrics",
            conf.prometheus_stats_http_address,
            conf.prometheus_stats_http_port,
        )
    service = AutoRecovery(conf, candidate_id=candidate_id, registry=registry)
    control = None
    if conf.grpc_server_enabled:
        from dlog.control import AUTORECOVERY, OVERALL, ControlServer

        control = ControlServer(
            conf.grpc_server_address, conf.grpc_server_port, services=[AUTORECOVERY]
        )
        await control.start()
    try:
        await service.start()
        if control is not None:
            service.admin_providers(into=control.providers)
            for name in (OVERALL, AUTORECOVERY):
                await control.set_serving(name, True)
        await stop.wait()
        log.info("shutting down (signal)")
    finally:
        if control is not None:
            await control.shutting_down()
        await service.stop()
        if control is not None:
            await control.stop(grace=0.5)
    return 0


def autorecovery(
    conf: Path | None = ConfOption,
    set_: list[str] | None = SetOption,
    candidate_id: str | None = typer.Option(
        None,
        "--id",
        help="Auditor candidate and lock owner id (default: the bookie id the configuration gives).",
    ),
    grpc_port: int | None = GrpcPortOption,
    log_level: str | None = LogLevelOption,
) -> None:
    """Run AutoRecovery (auditor candidate and replication worker) until SIGTERM or Ctrl-C.

    Reads a bookie configuration (metadataServiceUri, the auditor and
    replication settings); a bookie with autoRecoveryDaemonEnabled runs the same
    inside its own process."""
    setup_logging(log_level)
    try:
        config = with_grpc_port(load_config(BookieConfig, conf, set_), grpc_port)
    except DLogError as e:
        raise fail(str(e), 2) from None
    try:
        code = asyncio.run(serve(config, candidate_id))
    except DLogError as e:
        raise fail(str(e)) from None
    except OSError as e:
        raise fail(f"cannot start AutoRecovery: {e}") from None
    raise typer.Exit(code)
