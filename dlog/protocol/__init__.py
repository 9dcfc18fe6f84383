"""Wire and file formats, kept apart from the logic that uses them.

The ``*_pb2`` modules are generated from ``proto/`` by ``make proto``; do not
edit them by hand.
"""
