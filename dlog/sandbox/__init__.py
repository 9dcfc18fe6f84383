"""Real ZooKeeper and bookie processes on loopback, for ``dlog sandbox`` and tests."""
