"""AutoRecovery: an auditor candidate and a replication worker, as
``dlog autorecovery`` runs them and as a bookie with
``autoRecoveryDaemonEnabled`` hosts them (upstream's AutoRecoveryMain).

It has a ledger client of its own, built from the bookie configuration
(``metadataServiceUri``, ``zkTimeout``). The replication worker runs all
the time; the candidate runs for auditor in the background and, once
elected, starts the :class:`~dlog.autorecovery.auditor.Auditor`. When the
ZooKeeper session is lost (the vote was ephemeral) the auditor stops and
the candidate runs again.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from typing import TYPE_CHECKING

from prometheus_client import CollectorRegistry

from dlog.autorecovery.auditor import Auditor, AuditorMetrics
from dlog.conf.bookie import BookieConfig
from dlog.conf.bookkeeper import ClientConfig
from dlog.loop_metrics import LoopMetrics
from dlog.protocol import admin_pb2 as pb

if TYPE_CHECKING:
    from dlog.control import AdminProviders

log = logging.getLogger(__name__)

__all__ = ["AutoRecovery"]


class AutoRecovery:
    def __init__(
        self,
        conf: BookieConfig,
        *,
        candidate_id: str | None = None,
        registry: CollectorRegistry | None = None,
    ) -> None:
        self.conf = conf
        self.candidate_id = candidate_id or conf.resolved_bookie_id()
        self._registry = registry
        self.metrics = LoopMetrics(registry)
        self.auditor_metrics = AuditorMetrics(self.metrics)
        self.is_auditor = False
        self.auditor: Auditor | None = None
        self._elected = asyncio.Event()
        self._session_lost = asyncio.Event()
        self._election_task: asyncio.Task[None] | None = None
        self._started = False
        self._stopped = False

    async def start(self) -> None:
        if self._started:
            return
        self._started = True
        from dlog.autorecovery.worker import ReplicationWorker
        from dlog.ledger.client import BookKeeper
        from dlog.ledger.underreplication import UnderreplicationManager

        client_conf = ClientConfig.load(
            metadataServiceUri=self.conf.metadata_service_uri, zkTimeout=self.conf.zk_timeout
        )
        self.bk = BookKeeper(conf=client_conf)
        try:
            await self.bk.start()
            if self._registry is not None:
                # The client's own (write close, ensemble changes) and the
                # replication worker's metrics, which live on the client.
                self.bk.metrics.attach(self._registry)
            self.urm = UnderreplicationManager(
                self.bk.zk, self.bk.uri.ledgers_root, owner=self.candidate_id
            )
            await self.urm.initialize()
            self.worker = ReplicationWorker(self.bk, self.urm, self.conf)
            await self.worker.start()
        except BaseException:
            # Undone: stop() has nothing to stop, and the start's own error
            # (ZooKeeper unreachable, say) is what the caller sees.
            self._started = False
            self.bk.metrics.detach()
            with contextlib.suppress(Exception):
                await self.bk.close()
            raise
        self.bk.zk.add_state_listener(self._on_zk_state)
        self._election_task = asyncio.get_running_loop().create_task(self._run_elections())
        log.info("AutoRecovery started as %s", self.candidate_id)

    def _on_zk_state(self, state: str) -> None:
        if str(state).upper().endswith("LOST"):
            self._session_lost.set()

    async def wait_elected(self, timeout: float | None = None) -> None:
        """Until this candidate is the auditor."""
        async with asyncio.timeout(timeout):
            await self._elected.wait()

    async def _run_elections(self) -> None:
        from dlog.autorecovery.election import AuditorElection

        while True:
            election = AuditorElection(self.bk.zk, self.bk.uri.ledgers_root, self.candidate_id)
            auditor: Auditor | None = None
            try:
                self._session_lost.clear()
                await election.run_for_auditor()
                log.info("%s is the auditor", self.candidate_id)
                auditor = Auditor(self.bk, self.urm, self.conf, metrics=self.auditor_metrics)
                self.auditor = auditor
                await auditor.start()
                self.is_auditor = True
                self._elected.set()
                lost = asyncio.ensure_future(election.wait_lost())
                session = asyncio.ensure_future(self._session_lost.wait())
                try:
                    await asyncio.wait({lost, session}, return_when=asyncio.FIRST_COMPLETED)
                finally:
                    lost.cancel()
                    session.cancel()
                log.warning("%s lost the auditor election: it stops auditing", self.candidate_id)
            except asyncio.CancelledError:
                raise
            except Exception:
                log.exception("auditor election or start failed; running again")
                await asyncio.sleep(1.0)
            finally:
                self.is_auditor = False
                self._elected.clear()
                self.auditor = None
                if auditor is not None:
                    await auditor.stop()
                with contextlib.suppress(Exception):
                    await election.resign()

    # -- the gRPC admin API (dlog.control) ---------------------------------
    def admin_providers(self, into: AdminProviders | None = None) -> AdminProviders:
        """Its admin RPCs (auditor status, under-replicated ledgers), set on
        ``into`` when given: a bookie hosting AutoRecovery adds them to its own."""
        from dlog.control import AdminProviders  # grpcio: the `server` extra

        providers = into or AdminProviders()
        providers.auditor_status = self.auditor_status
        providers.underreplicated = self.underreplicated
        return providers

    async def auditor_status(self) -> pb.AuditorStatus:
        from dlog.autorecovery.election import current_auditor

        root = self.bk.uri.ledgers_root
        return pb.AuditorStatus(
            auditor=await current_auditor(self.bk.zk, root) or "",
            candidate_id=self.candidate_id,
            is_auditor=self.is_auditor,
            replication_enabled=await self.urm.is_replication_enabled(),
            lost_bookie_recovery_delay_seconds=await self.urm.get_lost_bookie_recovery_delay(),
        )

    async def underreplicated(self) -> pb.ListUnderreplicatedResponse:
        return pb.ListUnderreplicatedResponse(
            ledgers=[
                pb.UnderreplicatedLedger(
                    ledger_id=lid, missing_replicas=list(info.replicas), ctime=info.ctime
                )
                for lid, info in await self.urm.list()
            ]
        )

    async def stop(self) -> None:
        if self._stopped or not self._started:
            self._stopped = True
            return
        self._stopped = True
        with contextlib.suppress(Exception):
            self.bk.zk.remove_state_listener(self._on_zk_state)
        if self._election_task is not None:
            self._election_task.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await self._election_task
        try:
            await self.worker.stop()
        except Exception:
            log.exception("stopping the replication worker failed")
        self.urm.close()
        await self.bk.close()
        # Its names freed: a new AutoRecovery in this process exports its own.
        self.bk.metrics.detach()
        self.metrics.detach()
        log.info("AutoRecovery stopped (%s)", self.candidate_id)
