from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from typing import ClassVar as _ClassVar, Optional as _Optional

DESCRIPTOR: _descriptor.FileDescriptor

class Subscription(_message.Message):
    __slots__ = ("name", "segment_id", "last_commit_dlsn", "next_segment_id", "previous_segment_id")
    NAME_FIELD_NUMBER: _ClassVar[int]
    SEGMENT_ID_FIELD_NUMBER: _ClassVar[int]
    LAST_COMMIT_DLSN_FIELD_NUMBER: _ClassVar[int]
    NEXT_SEGMENT_ID_FIELD_NUMBER: _ClassVar[int]
    PREVIOUS_SEGMENT_ID_FIELD_NUMBER: _ClassVar[int]
    name: str
    segment_id: int
    last_commit_dlsn: bytes
    next_segment_id: int
    previous_segment_id: int
    def __init__(self, name: _Optional[str] = ..., segment_id: _Optional[int] = ..., last_commit_dlsn: _Optional[bytes] = ..., next_segment_id: _Optional[int] = ..., previous_segment_id: _Optional[int] = ...) -> None: ...

class AdvanceLastCommitDLSN(_message.Message):
    __slots__ = ("commit_dlsn",)
    COMMIT_DLSN_FIELD_NUMBER: _ClassVar[int]
    commit_dlsn: bytes
    def __init__(self, commit_dlsn: _Optional[bytes] = ...) -> None: ...
