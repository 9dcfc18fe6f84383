"""How Java DistributedLog reads a subscriber znode, written out as rules.

Facts from upstream's ``ZKSubscriptionStateStore.getLastCommitPositionFromZK``
and ``DLSN.deserialize``/``deserializeBytes`` (apache/bookkeeper,
stream/distributedlog/core/.../impl/subscription/ZKSubscriptionStateStore.java
and stream/distributedlog/protocol/.../DLSN.java):

* NONODE: ``DLSN.NonInclusiveLowerBound`` (never committed).
* Otherwise the data is decoded as a UTF-8 string and then as commons-codec
  base64 (which skips bytes outside the alphabet); the bytes must start with
  version 1 and be 25 long (or version 0 and 200 long): the segment number,
  entry id and slot id as big-endian signed longs.
* Anything else ("Invalid last commit position found") also yields
  ``DLSN.NonInclusiveLowerBound``: the consumer silently starts over.

``ZKSubscriptionsStore.getLastCommitPositions`` lists the children of the
stream's ``subscribers`` znode and reads each child this way.
"""

from __future__ import annotations

import base64
import binascii
import re
import struct

from dlog.dlsn import DLSN, NonInclusiveLowerBound

_NOT_BASE64 = re.compile(rb"[^A-Za-z0-9+/=]")


def java_position(data: bytes | None) -> DLSN:
    """The position Java's ZooKeeper subscription store reads from ``data``."""
    if data is None:
        return NonInclusiveLowerBound
    text = data.decode("utf-8", errors="replace").encode("utf-8")
    try:
        raw = base64.b64decode(_NOT_BASE64.sub(b"", text) + b"==")
    except (binascii.Error, ValueError):
        return NonInclusiveLowerBound
    if len(raw) == 25 and raw[0] == 1:
        return DLSN(*struct.unpack(">qqq", raw[1:]))
    if len(raw) == 200 and raw[0] == 0:
        return DLSN(*struct.unpack(">qqq", raw[1:25]))
    return NonInclusiveLowerBound


def java_is_valid(data: bytes) -> bool:
    """Whether Java reads ``data`` as a position rather than falling back."""
    try:
        raw = base64.b64decode(data, validate=True)
    except (binascii.Error, ValueError):
        return False
    return len(raw) == 25 and raw[0] == 1
