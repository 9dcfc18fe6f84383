"""BookKeeper's AutoRecovery: an elected auditor that finds under-replicated
and orphaned ledgers, and replication workers that restore their replicas.

It runs as ``dlog autorecovery`` or inside a bookie (``autoRecoveryDaemonEnabled``).
It stands above the ledger client, which it uses, and below the bookie
service, which may host it: the bookie core and the ledger client still
never import each other.
"""
