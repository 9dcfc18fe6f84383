"""What a subscriber's znode and a subscription segment hold.

Two znode formats coexist, and both stores read both:

* DistributedLog's ZooKeeper store: the position itself, as the base64 of
  the 25-byte DLSN (ASCII letters, digits, ``+/=`` only).
* The log-segment store: ``HEADER`` (its first byte, 0x01, is never
  base64) followed by a protobuf ``Subscription`` naming the segment (a
  ledger) that holds the position updates, and the position as of the
  segment's last switch.

A subscription segment holds one ``AdvanceLastCommitDLSN`` per entry.
"""

from __future__ import annotations

import dataclasses

from google.protobuf.message import DecodeError

from dlog.dlsn import DLSN, NonInclusiveLowerBound
from dlog.errors import InvalidDLSNError, MetadataError
from dlog.protocol.subscription_pb2 import AdvanceLastCommitDLSN, Subscription

HEADER = b"\x01DLSUB\x01"

ZK_FORMAT = "zookeeper"
SEGMENT_FORMAT = "log-segment"


@dataclasses.dataclass(frozen=True)
class ZkPosition:
    """A znode in the ZooKeeper store's format."""

    position: DLSN


@dataclasses.dataclass(frozen=True)
class SegmentSubscription:
    """A znode in the log-segment store's format."""

    name: str
    segment_id: int | None
    last_commit: DLSN
    next_segment_id: int | None = None
    previous_segment_id: int | None = None

    def replace(self, **changes: object) -> SegmentSubscription:
        return dataclasses.replace(self, **changes)  # type: ignore[arg-type]


SubscriberZnode = ZkPosition | SegmentSubscription


def validate_subscriber_id(subscriber_id: str) -> str:
    """A subscriber id is a znode name: refuse what would escape or break it."""
    from dlog.errors import InvalidStreamNameError

    if not isinstance(subscriber_id, str) or not subscriber_id:
        raise InvalidStreamNameError("subscriber id must be a non-empty string")
    if len(subscriber_id.encode()) > 255:
        raise InvalidStreamNameError(
            f"subscriber id {subscriber_id[:32]!r}... is longer than 255 bytes"
        )
    if "/" in subscriber_id or subscriber_id in (".", "..", "zookeeper"):
        raise InvalidStreamNameError(f"subscriber id {subscriber_id!r} is not a valid znode name")
    if any(
        ord(c) < 0x20 or 0x7F <= ord(c) <= 0x9F or 0xD800 <= ord(c) <= 0xF8FF for c in subscriber_id
    ):
        raise InvalidStreamNameError(f"subscriber id {subscriber_id!r} contains control characters")
    return subscriber_id


def decode_znode(data: bytes, where: str) -> SubscriberZnode:
    """Parse a subscriber znode of either format; bad bytes raise MetadataError."""
    if data.startswith(HEADER):
        msg = Subscription()
        try:
            msg.ParseFromString(data[len(HEADER) :])
        except DecodeError as e:
            raise MetadataError(f"{where}: unreadable subscription: {e}") from None
        try:
            last = (
                DLSN.deserialize_bytes(msg.last_commit_dlsn)
                if msg.last_commit_dlsn
                else NonInclusiveLowerBound
            )
        except InvalidDLSNError as e:
            raise MetadataError(f"{where}: bad last_commit_dlsn: {e}") from None
        return SegmentSubscription(
            name=msg.name,
            segment_id=msg.segment_id if msg.HasField("segment_id") else None,
            last_commit=last,
            next_segment_id=msg.next_segment_id if msg.HasField("next_segment_id") else None,
            previous_segment_id=msg.previous_segment_id
            if msg.HasField("previous_segment_id")
            else None,
        )
    if not data:
        return ZkPosition(NonInclusiveLowerBound)
    try:
        return ZkPosition(DLSN.deserialize(data.decode("ascii")))
    except (UnicodeDecodeError, InvalidDLSNError) as e:
        raise MetadataError(
            f"{where}: neither a base64 DLSN nor a dlog subscription: {e}"
        ) from None


def encode_zk_position(dlsn: DLSN) -> bytes:
    return dlsn.serialize().encode("ascii")


def encode_segment_subscription(sub: SegmentSubscription) -> bytes:
    msg = Subscription(name=sub.name, last_commit_dlsn=sub.last_commit.serialize_bytes())
    if sub.segment_id is not None:
        msg.segment_id = sub.segment_id
    if sub.next_segment_id is not None:
        msg.next_segment_id = sub.next_segment_id
    if sub.previous_segment_id is not None:
        msg.previous_segment_id = sub.previous_segment_id
    return HEADER + msg.SerializeToString()


def encode_commit(dlsn: DLSN) -> bytes:
    return AdvanceLastCommitDLSN(commit_dlsn=dlsn.serialize_bytes()).SerializeToString()


def decode_commit(data: bytes, where: str) -> DLSN:
    msg = AdvanceLastCommitDLSN()
    try:
        msg.ParseFromString(data)
        return DLSN.deserialize_bytes(msg.commit_dlsn)
    except (DecodeError, InvalidDLSNError) as e:
        raise MetadataError(f"{where}: unreadable commit record: {e}") from None
