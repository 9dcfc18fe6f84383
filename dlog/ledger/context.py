"""What a ledger handle needs of its client, handed down to it.

A :class:`~dlog.ledger.write_handle.WriteHandle` or
:class:`~dlog.ledger.read_handle.ReadHandle` talks to bookies through its
client's connection pool, reads and writes its metadata through the
client's store, and asks the placement policy and bookie watcher for
replacements. The client (:class:`dlog.ledger.client.BookKeeper`) hands
itself down as this narrow face, as kazoo hands its client to a recipe:
the handles never import the client.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Protocol

if TYPE_CHECKING:
    from dlog.conf.bookkeeper import ClientConfig
    from dlog.ledger.bookie_client import BookieClientPool
    from dlog.ledger.bookie_watcher import BookieWatcher
    from dlog.ledger.metadata_store import LedgerMetadataStore
    from dlog.ledger.placement import EnsemblePlacementPolicy
    from dlog.loop_metrics import LoopCounter

__all__ = ["LedgerContext"]


class LedgerContext(Protocol):
    """The client as its ledger handles see it."""

    conf: ClientConfig
    metadata_store: LedgerMetadataStore
    pool: BookieClientPool
    placement: EnsemblePlacementPolicy
    watcher: BookieWatcher
    closed: bool
    #: Counts bookies that failed with no writable bookie to replace them.
    ensemble_change_unavailable: LoopCounter

    def send_write_close(self, ledger_id: int, master_key: bytes, ensemble: list[str]) -> None:
        """Tell the ensemble's bookies the ledger is closed (BP-32, advisory)."""
