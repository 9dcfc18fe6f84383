"""A namespace: a ZooKeeper path holding streams, bound to one set of bookies.

ns = await Namespace.open("distributedlog://127.0.0.1:2181/messaging")
log = await ns.open_log("events")
writer = await log.open_writer()
"""

from __future__ import annotations

import logging

from dlog.conf.bookkeeper import ClientConfig
from dlog.conf.dlog import DLogConfig
from dlog.errors import LogExistsError, LogNotFoundError, NoSuchLedgerError
from dlog.ledger.client import BookKeeper
from dlog.log import LogManager
from dlog.log_metadata import (
    LogMetadataStore,
    NamespaceBinding,
    bind_namespace,
    read_namespace_binding,
    validate_stream_name,
)
from dlog.uri import parse_metadata_service_uri, parse_namespace_uri
from dlog.zk import ZooKeeper

logger = logging.getLogger(__name__)


class Namespace:
    def __init__(self, uri: str, conf: DLogConfig) -> None:
        self.uri = uri
        parsed = parse_namespace_uri(uri)
        self.hosts = parsed.hosts
        self.path = parsed.path
        self.conf = conf
        self.zk = ZooKeeper(parsed.hosts, timeout=conf.zk_session_timeout_seconds)
        self.store = LogMetadataStore(self.zk, self.path)
        self.bk: BookKeeper = None  # type: ignore[assignment]
        self.binding: NamespaceBinding | None = None
        self._logs: dict[str, LogManager] = {}

    @classmethod
    async def open(
        cls, uri: str, config: DLogConfig | None = None, *, bind: bool = True
    ) -> Namespace:
        """Connect to a namespace, binding it to its bookies on first use.
        With ``bind=False`` (read-only tools) an unbound namespace is an
        error instead: a typo must not create a namespace."""
        ns = cls(uri, config or DLogConfig())
        await ns.zk.start(timeout=ns.conf.zk_session_timeout_seconds)
        try:
            if bind:
                default = ns.conf.bkc.metadata_service_uri
                if default == ClientConfig().metadata_service_uri:
                    default = f"zk+hierarchical://{ns.hosts}/ledgers"
                ns.binding = await bind_namespace(ns.zk, ns.path, default)
            else:
                ns.binding = await read_namespace_binding(ns.zk, ns.path)
                if ns.binding is None:
                    raise LogNotFoundError(
                        f"namespace {uri} does not exist (it has never been bound to bookies)"
                    )
            ledgers_uri = ns.binding.metadata_service_uri
            same_zk = parse_metadata_service_uri(ledgers_uri).hosts == ns.hosts
            bkc = ns.conf.bkc.with_overrides({"metadataServiceUri": ledgers_uri})
            ns.bk = await BookKeeper(conf=bkc, zk=ns.zk if same_zk else None).start()
        except BaseException:
            await ns.zk.stop()
            raise
        return ns

    async def close(self) -> None:
        for lm in list(self._logs.values()):
            await lm.close()
        self._logs.clear()
        if self.bk is not None:
            await self.bk.close()
        await self.zk.stop()

    async def __aenter__(self) -> Namespace:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    # -- streams ----------------------------------------------------------------
    async def create_log(self, name: str) -> None:
        validate_stream_name(name)
        await self.store.create_log(name)

    async def open_log(self, name: str) -> LogManager:
        """The stream ``name``; created first if ``createStreamIfNotExists``."""
        validate_stream_name(name)
        if not await self.store.log_exists(name):
            if not self.conf.create_stream_if_not_exists:
                raise LogNotFoundError(f"stream {name!r} does not exist in {self.uri}")
            try:
                await self.store.create_log(name)
            except LogExistsError:
                pass
        lm = self._logs.get(name)
        if lm is None:
            lm = self._logs[name] = self._log_manager(name)
        return lm

    def _log_manager(self, name: str) -> LogManager:
        return LogManager(
            name,
            conf=self.conf,
            zk=self.zk,
            bk=self.bk,
            metadata=self.store,
            namespace_uri=self.uri,
        )

    async def delete_log(self, name: str) -> None:
        """Delete a stream, its segments' ledgers and its subscriptions."""
        validate_stream_name(name)
        # Subscribers first: their owners are fenced and their segments
        # deleted; the stream's metadata would otherwise take the znodes
        # naming those ledgers with it.
        lm = self._logs.get(name) or self._log_manager(name)
        await lm.subscriptions.delete_all_subscribers()
        ledger_ids = await self.store.delete_log(name)
        for lid in ledger_ids:
            try:
                await self.bk.delete_ledger(lid)
            except NoSuchLedgerError:
                pass
        opened = self._logs.pop(name, None)
        if opened is not None:
            await opened.close()

    async def log_exists(self, name: str) -> bool:
        validate_stream_name(name)
        return await self.store.log_exists(name)

    async def get_logs(self, prefix: str | None = None) -> list[str]:
        return await self.store.get_logs(prefix)
