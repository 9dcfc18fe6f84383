"""A namespace: a ZooKeeper path holding streams, bound to one set of bookies.

As in DistributedLog, a namespace exists once it is bound (its znode names
the bookies' metadata service) and opening one that is not is an error, so
a mistyped URI never creates a namespace. Binding is an explicit step:
``dlog namespace create URI``, or :meth:`Namespace.create`::

    ns = await Namespace.create("distributedlog://127.0.0.1:2181/messaging")  # once
    ns = await Namespace.open("distributedlog://127.0.0.1:2181/messaging")
    log = await ns.open_log("events")
    writer = await log.open_writer()
"""

from __future__ import annotations

import logging

from dlog.conf.bookkeeper import ClientConfig
from dlog.conf.dlog import DLogConfig
from dlog.errors import (
    LogExistsError,
    LogNotFoundError,
    NamespaceExistsError,
    NamespaceNotFoundError,
    NoSuchLedgerError,
)
from dlog.ledger.client import BookKeeper
from dlog.log import LogManager
from dlog.log_metadata import (
    LogMetadataStore,
    NamespaceBinding,
    bind_namespace,
    bound_ancestor,
    read_namespace_binding,
    validate_stream_name,
)
from dlog.uri import parse_metadata_service_uri, parse_namespace_uri
from dlog.zk import ZooKeeper

logger = logging.getLogger(__name__)


def default_ledgers_uri(uri: str, conf: DLogConfig) -> str:
    """The bookies a new namespace is bound to: ``bkc.metadataServiceUri``
    if it was set, else ``/ledgers`` on the namespace's own ZooKeeper (the
    client default, a ZooKeeper on localhost, is rarely the one meant)."""
    configured = conf.bkc.metadata_service_uri
    if configured != ClientConfig().metadata_service_uri:
        return str(parse_metadata_service_uri(configured))
    return f"zk+hierarchical://{parse_namespace_uri(uri).hosts.replace(',', ';')}/ledgers"


async def create_binding(
    zk: ZooKeeper, uri: str, ledgers_uri: str
) -> tuple[NamespaceBinding, bool]:
    """Bind the namespace ``uri`` to the bookies under ``ledgers_uri``:
    ``(binding, True)`` if this call bound it, ``(binding, False)`` if it
    was already bound to them. :class:`NamespaceExistsError` if it is bound
    to other bookies (rebinding would strand its streams' ledgers) or lies
    inside another namespace."""
    parsed = parse_namespace_uri(uri)
    wanted = str(parse_metadata_service_uri(ledgers_uri))
    before = await read_namespace_binding(zk, parsed.path)
    if before is None:
        outer = await bound_ancestor(zk, parsed.path)
        if outer is not None:
            raise NamespaceExistsError(
                f"cannot create namespace {uri}: it is inside namespace "
                f"distributedlog://{parsed.hosts}{outer}, where it would show up as a stream"
            )
    binding = before or await bind_namespace(zk, parsed.path, wanted)
    if binding.metadata_service_uri != wanted:
        raise NamespaceExistsError(
            f"namespace {uri} already exists, bound to {binding.metadata_service_uri} "
            f"(not {wanted})"
        )
    return binding, before is None


def namespace_not_found(uri: str) -> NamespaceNotFoundError:
    """The error for an unbound namespace, naming the step that creates it."""
    return NamespaceNotFoundError(
        f"namespace {uri} does not exist (it is not bound to bookies): "
        f"create it with `dlog namespace create {uri}`"
    )


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
        cls, uri: str, config: DLogConfig | None = None, *, bind: bool = False
    ) -> Namespace:
        """Connect to an existing namespace; :class:`NamespaceNotFoundError`
        if it was never bound to bookies (create it first). ``bind=True``
        binds an unbound one (as :meth:`create` would) and otherwise keeps
        its binding: for tools and tests that set up their own cluster."""
        ns = cls(uri, config or DLogConfig())
        await ns.zk.start(timeout=ns.conf.zk_connect_timeout, setting="zkConnectionTimeoutSeconds")
        try:
            if bind:
                ledgers_uri = default_ledgers_uri(uri, ns.conf)
                ns.binding = await bind_namespace(ns.zk, ns.path, ledgers_uri)
            else:
                ns.binding = await read_namespace_binding(ns.zk, ns.path)
                if ns.binding is None:
                    raise namespace_not_found(uri)
            await ns._start_bookkeeper(ns.binding)
        except BaseException:
            await ns.zk.stop()
            raise
        return ns

    @classmethod
    async def create(
        cls, uri: str, config: DLogConfig | None = None, *, ledgers_uri: str | None = None
    ) -> Namespace:
        """Create the namespace (bind it to the bookies under ``ledgers_uri``,
        default :func:`default_ledgers_uri`) and open it. Creating one that
        is already bound to those bookies just opens it;
        :class:`NamespaceExistsError` if it is bound to others."""
        ns = cls(uri, config or DLogConfig())
        await ns.zk.start(timeout=ns.conf.zk_connect_timeout, setting="zkConnectionTimeoutSeconds")
        try:
            wanted = ledgers_uri or default_ledgers_uri(uri, ns.conf)
            ns.binding, _ = await create_binding(ns.zk, uri, wanted)
            await ns._start_bookkeeper(ns.binding)
        except BaseException:
            await ns.zk.stop()
            raise
        return ns

    async def _start_bookkeeper(self, binding: NamespaceBinding) -> None:
        """The ledger client for the bound bookies (sharing the session when
        they register in the namespace's own ZooKeeper)."""
        ledgers_uri = binding.metadata_service_uri
        same_zk = parse_metadata_service_uri(ledgers_uri).hosts == self.hosts
        bkc = self.conf.bkc.with_overrides({"metadataServiceUri": ledgers_uri})
        self.bk = await BookKeeper(conf=bkc, zk=self.zk if same_zk else None).start()

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
