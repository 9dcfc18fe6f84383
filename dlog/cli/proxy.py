"""``dlog proxy``: run a DistributedLog write proxy for one namespace."""

from __future__ import annotations

import asyncio
import logging
import signal
from pathlib import Path
from typing import TYPE_CHECKING

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
from dlog.conf.dlog import DLogConfig
from dlog.errors import DLogError

if TYPE_CHECKING:
    from wsgiref.simple_server import WSGIServer

log = logging.getLogger(__name__)


async def serve(
    uri: str,
    conf: DLogConfig,
    *,
    host: str,
    port: int | None,
    advertised_host: str | None,
    stats_port: int | None = None,
    ready: asyncio.Event | None = None,
) -> int:
    """Serve until SIGTERM/SIGINT: thrift on ``port``; with ``stats_port``
    Prometheus metrics (the proxy's and its ledger client's) on
    ``host:stats_port``; and with grpcServerEnabled the control plane
    (health: SERVING while accepting new streams)."""
    from dlog.control import OVERALL, PROXY, AdminProviders, ControlServer
    from dlog.namespace import Namespace
    from dlog.protocol import admin_pb2 as pb
    from dlog.proxy import protocol as wire
    from dlog.proxy.server import ProxyServer
    from dlog.proxy.streams import ProxyMetrics

    loop = asyncio.get_running_loop()
    stop = asyncio.Event()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    namespace = await Namespace.open(uri, conf)
    metrics = ProxyMetrics()
    server = ProxyServer(
        namespace, host=host, port=port, advertised_host=advertised_host, metrics=metrics
    )
    control: ControlServer | None = None
    stats: WSGIServer | None = None
    try:
        if stats_port is not None:
            # Before the thrift port: once it answers, so does the endpoint.
            from prometheus_client import start_http_server

            namespace.bk.metrics.attach(metrics.registry)
            stats, _ = start_http_server(stats_port, addr=host, registry=metrics.registry)
            log.info("metrics on http://%s:%d/metrics", host, stats.server_port)
        await server.start()

        async def owned_streams() -> pb.ListOwnedStreamsResponse:
            streams = server.streams
            owned = [] if streams is None else sorted(streams.outstanding_by_stream().items())
            return pb.ListOwnedStreamsResponse(
                owner=server.address,
                streams=[pb.OwnedStream(name=n, outstanding_writes=o) for n, o in owned],
            )

        if conf.grpc_server_enabled:
            control = ControlServer(
                conf.grpc_server_address,
                conf.grpc_server_port,
                services=[PROXY],
                providers=AdminProviders(owned_streams=owned_streams),
            )
            await control.start()
            await control.set_serving(OVERALL, True)
            await control.set_serving(PROXY, True)
            health = control

            def on_status(status: int) -> None:
                accepting = status == wire.thrift.ServerStatus.WRITE_AND_ACCEPT
                loop.create_task(health.set_serving(PROXY, accepting))
                if status == wire.thrift.ServerStatus.DOWN:
                    loop.create_task(health.shutting_down())

            server.on_status(on_status)
        grpc = f" grpc={control.port}" if control is not None else ""
        at = f" stats={stats.server_port}" if stats is not None else ""
        # One line for scripts (the sandbox reads it): where clients connect.
        print(f"proxy serving {server.endpoint} as {server.address}{grpc}{at}", flush=True)
        if ready is not None:
            ready.set()
        await stop.wait()
        log.info("shutting down (signal)")
    finally:
        if control is not None:
            await control.shutting_down()
        await server.stop()
        if control is not None:
            await control.stop(grace=0.5)
        if stats is not None:
            stats.shutdown()
            stats.server_close()
        namespace.bk.metrics.detach()
        await namespace.close()
    return 0


def proxy(
    uri: str = typer.Option(
        ..., "--uri", "-u", help="Namespace URI, distributedlog://ZK_HOSTS/PATH."
    ),
    conf: Path | None = ConfOption,
    set_: list[str] | None = SetOption,
    host: str = typer.Option("127.0.0.1", "--host", help="Address to listen on."),
    port: int | None = typer.Option(
        None, "--port", "-p", help="Thrift port (default: server_port; 0 = any free port)."
    ),
    advertised_host: str | None = typer.Option(
        None,
        "--advertised-host",
        help="The host clients and other proxies reach this one at (default: --host, or "
        "this machine's address when listening on 0.0.0.0).",
    ),
    grpc_port: int | None = GrpcPortOption,
    stats_port: int | None = typer.Option(
        None,
        "--stats-port",
        "-sp",
        help="Serve Prometheus metrics on this port at /metrics (0 = any free port), "
        "as DistributedLog's proxy's --stats-port. Default: no metrics endpoint.",
    ),
    log_level: str | None = LogLevelOption,
) -> None:
    """Run a write proxy (DistributedLog's DistributedLogService over thrift)
    until SIGTERM or Ctrl-C.

    Producers in any language write to streams through it; each stream is
    owned by one proxy at a time (it holds the stream's writer lock), and a
    proxy asked for a stream owned by another answers FOUND with the owner."""
    setup_logging(log_level)
    try:
        config = with_grpc_port(load_config(DLogConfig, conf, set_), grpc_port)
        for option, value in (("--port", port), ("--stats-port", stats_port)):
            if value is not None and not 0 <= value <= 65535:
                raise DLogError(f"{option} {value} is not a TCP port")
    except DLogError as e:
        raise fail(str(e), 2) from None
    try:
        code = asyncio.run(
            serve(
                uri,
                config,
                host=host,
                port=port,
                advertised_host=advertised_host,
                stats_port=stats_port,
            )
        )
    except DLogError as e:
        raise fail(str(e)) from None
    except OSError as e:
        raise fail(f"cannot start the write proxy: {e}") from None
    raise typer.Exit(code)
