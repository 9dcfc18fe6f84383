"""Subscriptions stores: where each consumer keeps its position in a stream."""
