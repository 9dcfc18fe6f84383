"""What a subscriber's znodes and a subscription segment hold.

The subscriber znode ``<stream>/<default>/subscribers/<id>`` always holds
a position in DistributedLog's format, the base64 of the 25-byte DLSN
(ASCII letters, digits, ``+/=`` only), which is what Java's
``ZKSubscriptionStateStore`` reads. The two stores differ in what else
there is:

* DistributedLog's ZooKeeper store: nothing else; the znode holds the
  position itself.
* The log-segment store: a child znode ``<id>/segment`` (:data:`RECORD`)
  holds ``HEADER`` followed by a protobuf ``Subscription`` naming the
  segment (a ledger) with the position updates, and the position as of the
  segment's last switch. Both znodes are written in one transaction, the
  subscriber znode getting that same position, so a Java reader sees a
  valid position no older than the last segment switch (never the start).

Older dlog releases kept the ``Subscription`` record in the subscriber
znode itself ("inline"); it is still read, and the next write of the
log-segment store (or ``dlog namespace upgrade``) moves it to the child.
The header's first byte, 0x01, is never base64, so the formats cannot be
mistaken for each other.

A subscription segment holds one ``AdvanceLastCommitDLSN`` per entry.
"""

from __future__ import annotations

import dataclasses

from google.protobuf.message import DecodeError

from dlog.dlsn import DLSN, NonInclusiveLowerBound
from dlog.errors import InvalidDLSNError, MetadataError
from dlog.protocol.subscription_pb2 import AdvanceLastCommitDLSN, Subscription

HEADER = b"\x01DLSUB\x01"

#: The child znode of a log-segment subscription holding its record.
RECORD = "segment"

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
    #: Read from the subscriber znode itself (an older dlog's layout): the
    #: next write moves the record to the :data:`RECORD` child.
    inline: bool = dataclasses.field(default=False, compare=False)

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


def decode_record(data: bytes, where: str, *, inline: bool = False) -> SegmentSubscription:
    """Parse a log-segment subscription record (``HEADER`` + ``Subscription``)."""
    if not data.startswith(HEADER):
        raise MetadataError(f"{where}: not a dlog subscription record")
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
        inline=inline,
    )


def decode_position(data: bytes, where: str) -> DLSN:
    """Parse DistributedLog's subscriber znode: a base64 DLSN (empty: none yet)."""
    if not data:
        return NonInclusiveLowerBound
    try:
        return DLSN.deserialize(data.decode("ascii"))
    except (UnicodeDecodeError, InvalidDLSNError) as e:
        raise MetadataError(
            f"{where}: neither a base64 DLSN nor a dlog subscription: {e}"
        ) from None


def decode_subscriber(data: bytes, record: bytes | None, where: str) -> SubscriberZnode:
    """A subscriber from its znode's bytes and its :data:`RECORD` child's
    (None: no child). Bad bytes raise MetadataError naming ``where``.

    With a record, the position is the later of the record's and the
    znode's: they are equal when dlog wrote both (one transaction), and the
    znode is later when a DistributedLog (Java) consumer committed to it
    since, which must not be lost either."""
    if data.startswith(HEADER):
        if record is not None:
            raise MetadataError(f"{where}: a subscription record both inline and in {RECORD}")
        return decode_record(data, where, inline=True)
    position = decode_position(data, where)
    if record is None:
        return ZkPosition(position)
    sub = decode_record(record, f"{where}/{RECORD}")
    return sub.replace(last_commit=position) if position > sub.last_commit else sub


def encode_zk_position(dlsn: DLSN) -> bytes:
    return dlsn.serialize().encode("ascii")


def encode_subscriber(sub: SegmentSubscription) -> tuple[bytes, bytes]:
    """The subscriber znode's bytes (the position as of the last switch, in
    DistributedLog's format) and its :data:`RECORD` child's."""
    return encode_zk_position(sub.last_commit), encode_segment_subscription(sub)


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
