"""``dlog shell``: operator commands, mirroring ``bookkeeper shell``."""

from __future__ import annotations

import asyncio
import os
from pathlib import Path

import typer

from dlog.cli.common import ConfOption, console, fail
from dlog.errors import DLogError

app = typer.Typer(
    help="Cluster and ledger administration (like `bookkeeper shell`).", no_args_is_help=True
)

ServiceUriOption = typer.Option(
    None,
    "--service-uri",
    "-u",
    help="Metadata service URI, e.g. zk+hierarchical://127.0.0.1:2181/ledgers (default: $DLOG_SERVICE_URI).",
)


def resolve_service_uri(service_uri: str | None, conf: Path | None) -> str:
    if service_uri:
        return service_uri
    if conf is not None:
        from dlog.conf.base import parse_properties

        props = parse_properties(conf.read_text(), str(conf))
        for key in ("metadataServiceUri", "bkc.metadataServiceUri"):
            if props.get(key):
                return props[key]
    env = os.environ.get("DLOG_SERVICE_URI")
    if env:
        return env
    raise fail("no metadata service URI: pass --service-uri, --conf, or set DLOG_SERVICE_URI", 2)


@app.command("initnewcluster")
def init_new_cluster(
    service_uri: str | None = ServiceUriOption, conf: Path | None = ConfOption
) -> None:
    """Create the ledgers layout (available, cookies, LAYOUT, INSTANCEID...) if absent."""
    uri = resolve_service_uri(service_uri, conf)

    async def go() -> str:
        from dlog.bookie.registration import init_cluster
        from dlog.uri import parse_metadata_service_uri
        from dlog.zk import ZooKeeper

        parsed = parse_metadata_service_uri(uri)
        zk = ZooKeeper(parsed.hosts)
        await zk.start()
        try:
            return await init_cluster(zk, parsed.ledgers_root)
        finally:
            await zk.stop()

    try:
        instance = asyncio.run(go())
    except (DLogError, ValueError) as e:
        raise fail(str(e)) from None
    console.print(f"cluster ready at [bold]{uri}[/] (instance id {instance})")
