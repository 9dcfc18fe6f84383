"""``dlog proxy``: run a DistributedLog write proxy for one namespace."""

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
from dlog.conf.dlog import DLogConfig
from dlog.errors import DLogError

log = logging.getLogger(__name__)


async def serve(
    uri: str,
    conf: DLogConfig,
    *,
    host: str,
    port: int | None,
    advertised_host: str | None,
    ready: asyncio.Event | None = None,
) -> int:
    """Serve until SIGTERM/SIGINT: thrift on ``port``, and with
    grpcServerEnabled the control plane (health: SERVING while accepting
    new streams)."""
    from dlog.control import OVERALL, PROXY, AdminProviders, ControlServer
    from dlog.namespace import Namespace
    from dlog.protocol import admin_pb2 as pb
    from dlog.proxy import protocol as wire
    from dlog.proxy.server import ProxyServer

    loop = asyncio.get_running_loop()
    stop = asyncio.Event()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    namespace = await Namespace.open(uri, conf)
    server = ProxyServer(namespace, host=host, port=port, advertised_host=advertised_host)
    control: ControlServer | None = None
    try:
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
        # One line for scripts (the sandbox reads it): where clients connect.
        print(f"proxy serving {server.endpoint} as {server.address}{grpc}", flush=True)
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
        if port is not None and not 0 <= port <= 65535:
            raise DLogError(f"--port {port} is not a TCP port")
    except DLogError as e:
        raise fail(str(e), 2) from None
    try:
        code = asyncio.run(
            serve(uri, config, host=host, port=port, advertised_host=advertised_host)
        )
    except DLogError as e:
        raise fail(str(e)) from None
    except OSError as e:
        raise fail(f"cannot start the write proxy: {e}") from None
    raise typer.Exit(code)
