"""Ledgers: the client side of BookKeeper (metadata, digests, handles)."""
