"""Ledger client settings, with BookKeeper's ClientConfiguration key names."""

from __future__ import annotations

import dataclasses

from dlog.conf.base import Config, setting
from dlog.uri import check_metadata_service_uri


@dataclasses.dataclass(frozen=True)
class ClientConfig(Config):
    title = "dlog ledger client configuration (BookKeeper ClientConfiguration key names)"

    metadata_service_uri: str = setting(
        "metadataServiceUri",
        "zk+hierarchical://localhost:2181/ledgers",
        "Where ledger metadata and bookie registrations live.",
        check=check_metadata_service_uri,
    )
    zk_timeout: int = setting("zkTimeout", 10000, "ZooKeeper session timeout.", min=1000, unit="ms")
    add_entry_timeout_sec: int = setting(
        "addEntryTimeoutSec",
        5,
        "A bookie that does not answer an add within this time is treated as failed "
        "(the writer replaces it with an ensemble change).",
        min=1,
        unit="s",
    )
    read_entry_timeout_sec: int = setting(
        "readEntryTimeoutSec",
        5,
        "A bookie that does not answer a read within this time is treated as failed "
        "(the reader tries the next replica).",
        min=1,
        unit="s",
    )
    client_connect_timeout_millis: int = setting(
        "clientConnectTimeoutMillis",
        10000,
        "Timeout to open a connection to a bookie.",
        min=100,
        unit="ms",
    )
    bookie_failure_history_expiration_msec: int = setting(
        "bookieFailureHistoryExpirationMSec",
        60000,
        "A bookie that failed within this time is not chosen for a new ensemble "
        "while enough other bookies are available.",
        min=0,
        unit="ms",
    )
    store_systemtime_as_ledger_creation_time: bool = setting(
        "storeSystemtimeAsLedgerCreationTime",
        False,
        "Store the creation time (ctime) in ledger metadata. A ledger created with a BP-44 "
        "create context always stores it (lifespan prediction needs it).",
    )
    ledger_metadata_version: int = setting(
        "ledgerMetadataVersion",
        -1,
        "Ledger metadata format to write. 3 is BookKeeper's format, readable by every "
        "release since 4.9, without the BP-44 create/close contexts and seal time (hints "
        "dlog works without; the shell then shows no data set), on every write: rewriting "
        "a format 4 ledger (a close, an ensemble change, a re-replication) drops them too. -1 (the default, as in "
        "BookKeeper) and 4 keep them, which makes such ledgers format 4, which no "
        "BookKeeper release reads. dlog does not write the text formats 1 and 2.",
        choices=(-1, 3, 4),
    )
    advisory_write_close_enabled: bool = setting(
        "advisoryWriteCloseEnabled",
        True,
        "Send BP-32 WRITE_CLOSE hints to the ensemble when a ledger is closed or recovered (dlog extension).",
    )
    delay_ensemble_change: bool = setting(
        "delayEnsembleChange",
        False,
        "When a bookie of a ledger's ensemble fails and no other writable bookie can "
        "replace it: false (BookKeeper's default) fails the ledger's writes, true goes on "
        "writing while the ack quorum holds, leaving the auditor to restore full "
        "replication. Either way a warning names the ledger and the bookie, and "
        "ledger_client_ensemble_change_unavailable counts it.",
    )
    max_outstanding_reads: int = setting(
        "maxOutstandingReads",
        256,
        "Entries a range read keeps in flight at once.",
        min=1,
    )
