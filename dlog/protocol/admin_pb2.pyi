from google.protobuf.internal import containers as _containers
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable, Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class GetBookieInfoRequest(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class DirectoryUsage(_message.Message):
    __slots__ = ("path", "total_bytes", "free_bytes", "used_fraction", "full")
    PATH_FIELD_NUMBER: _ClassVar[int]
    TOTAL_BYTES_FIELD_NUMBER: _ClassVar[int]
    FREE_BYTES_FIELD_NUMBER: _ClassVar[int]
    USED_FRACTION_FIELD_NUMBER: _ClassVar[int]
    FULL_FIELD_NUMBER: _ClassVar[int]
    path: str
    total_bytes: int
    free_bytes: int
    used_fraction: float
    full: bool
    def __init__(self, path: _Optional[str] = ..., total_bytes: _Optional[int] = ..., free_bytes: _Optional[int] = ..., used_fraction: _Optional[float] = ..., full: _Optional[bool] = ...) -> None: ...

class BookieInfo(_message.Message):
    __slots__ = ("bookie_id", "read_only", "read_only_reasons", "ledger_directories", "journal_directories", "journal_pending_records", "journal_queue_size", "write_cache_bytes", "write_cache_entries", "write_cache_max_bytes", "read_cache_bytes", "port")
    BOOKIE_ID_FIELD_NUMBER: _ClassVar[int]
    READ_ONLY_FIELD_NUMBER: _ClassVar[int]
    READ_ONLY_REASONS_FIELD_NUMBER: _ClassVar[int]
    LEDGER_DIRECTORIES_FIELD_NUMBER: _ClassVar[int]
    JOURNAL_DIRECTORIES_FIELD_NUMBER: _ClassVar[int]
    JOURNAL_PENDING_RECORDS_FIELD_NUMBER: _ClassVar[int]
    JOURNAL_QUEUE_SIZE_FIELD_NUMBER: _ClassVar[int]
    WRITE_CACHE_BYTES_FIELD_NUMBER: _ClassVar[int]
    WRITE_CACHE_ENTRIES_FIELD_NUMBER: _ClassVar[int]
    WRITE_CACHE_MAX_BYTES_FIELD_NUMBER: _ClassVar[int]
    READ_CACHE_BYTES_FIELD_NUMBER: _ClassVar[int]
    PORT_FIELD_NUMBER: _ClassVar[int]
    bookie_id: str
    read_only: bool
    read_only_reasons: _containers.RepeatedScalarFieldContainer[str]
    ledger_directories: _containers.RepeatedCompositeFieldContainer[DirectoryUsage]
    journal_directories: _containers.RepeatedCompositeFieldContainer[DirectoryUsage]
    journal_pending_records: int
    journal_queue_size: int
    write_cache_bytes: int
    write_cache_entries: int
    write_cache_max_bytes: int
    read_cache_bytes: int
    port: int
    def __init__(self, bookie_id: _Optional[str] = ..., read_only: _Optional[bool] = ..., read_only_reasons: _Optional[_Iterable[str]] = ..., ledger_directories: _Optional[_Iterable[_Union[DirectoryUsage, _Mapping]]] = ..., journal_directories: _Optional[_Iterable[_Union[DirectoryUsage, _Mapping]]] = ..., journal_pending_records: _Optional[int] = ..., journal_queue_size: _Optional[int] = ..., write_cache_bytes: _Optional[int] = ..., write_cache_entries: _Optional[int] = ..., write_cache_max_bytes: _Optional[int] = ..., read_cache_bytes: _Optional[int] = ..., port: _Optional[int] = ...) -> None: ...

class ListBookiesRequest(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class ListBookiesResponse(_message.Message):
    __slots__ = ("writable", "read_only")
    WRITABLE_FIELD_NUMBER: _ClassVar[int]
    READ_ONLY_FIELD_NUMBER: _ClassVar[int]
    writable: _containers.RepeatedScalarFieldContainer[str]
    read_only: _containers.RepeatedScalarFieldContainer[str]
    def __init__(self, writable: _Optional[_Iterable[str]] = ..., read_only: _Optional[_Iterable[str]] = ...) -> None: ...

class GetLedgerMetadataRequest(_message.Message):
    __slots__ = ("ledger_id",)
    LEDGER_ID_FIELD_NUMBER: _ClassVar[int]
    ledger_id: int
    def __init__(self, ledger_id: _Optional[int] = ...) -> None: ...

class Ensemble(_message.Message):
    __slots__ = ("first_entry_id", "bookies")
    FIRST_ENTRY_ID_FIELD_NUMBER: _ClassVar[int]
    BOOKIES_FIELD_NUMBER: _ClassVar[int]
    first_entry_id: int
    bookies: _containers.RepeatedScalarFieldContainer[str]
    def __init__(self, first_entry_id: _Optional[int] = ..., bookies: _Optional[_Iterable[str]] = ...) -> None: ...

class LedgerMetadata(_message.Message):
    __slots__ = ("ledger_id", "ensemble_size", "write_quorum_size", "ack_quorum_size", "state", "last_entry_id", "length", "digest_type", "ctime", "ensembles", "custom_metadata", "version")
    class CustomMetadataEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: bytes
        def __init__(self, key: _Optional[str] = ..., value: _Optional[bytes] = ...) -> None: ...
    LEDGER_ID_FIELD_NUMBER: _ClassVar[int]
    ENSEMBLE_SIZE_FIELD_NUMBER: _ClassVar[int]
    WRITE_QUORUM_SIZE_FIELD_NUMBER: _ClassVar[int]
    ACK_QUORUM_SIZE_FIELD_NUMBER: _ClassVar[int]
    STATE_FIELD_NUMBER: _ClassVar[int]
    LAST_ENTRY_ID_FIELD_NUMBER: _ClassVar[int]
    LENGTH_FIELD_NUMBER: _ClassVar[int]
    DIGEST_TYPE_FIELD_NUMBER: _ClassVar[int]
    CTIME_FIELD_NUMBER: _ClassVar[int]
    ENSEMBLES_FIELD_NUMBER: _ClassVar[int]
    CUSTOM_METADATA_FIELD_NUMBER: _ClassVar[int]
    VERSION_FIELD_NUMBER: _ClassVar[int]
    ledger_id: int
    ensemble_size: int
    write_quorum_size: int
    ack_quorum_size: int
    state: str
    last_entry_id: int
    length: int
    digest_type: str
    ctime: int
    ensembles: _containers.RepeatedCompositeFieldContainer[Ensemble]
    custom_metadata: _containers.ScalarMap[str, bytes]
    version: int
    def __init__(self, ledger_id: _Optional[int] = ..., ensemble_size: _Optional[int] = ..., write_quorum_size: _Optional[int] = ..., ack_quorum_size: _Optional[int] = ..., state: _Optional[str] = ..., last_entry_id: _Optional[int] = ..., length: _Optional[int] = ..., digest_type: _Optional[str] = ..., ctime: _Optional[int] = ..., ensembles: _Optional[_Iterable[_Union[Ensemble, _Mapping]]] = ..., custom_metadata: _Optional[_Mapping[str, bytes]] = ..., version: _Optional[int] = ...) -> None: ...

class TriggerGcRequest(_message.Message):
    __slots__ = ("force_major", "force_minor", "wait")
    FORCE_MAJOR_FIELD_NUMBER: _ClassVar[int]
    FORCE_MINOR_FIELD_NUMBER: _ClassVar[int]
    WAIT_FIELD_NUMBER: _ClassVar[int]
    force_major: bool
    force_minor: bool
    wait: bool
    def __init__(self, force_major: _Optional[bool] = ..., force_minor: _Optional[bool] = ..., wait: _Optional[bool] = ...) -> None: ...

class TriggerGcResponse(_message.Message):
    __slots__ = ("message", "completed", "cycles", "deleted_ledgers", "removed_logs", "removed_bytes", "compacted_logs", "compacted_freed_bytes")
    MESSAGE_FIELD_NUMBER: _ClassVar[int]
    COMPLETED_FIELD_NUMBER: _ClassVar[int]
    CYCLES_FIELD_NUMBER: _ClassVar[int]
    DELETED_LEDGERS_FIELD_NUMBER: _ClassVar[int]
    REMOVED_LOGS_FIELD_NUMBER: _ClassVar[int]
    REMOVED_BYTES_FIELD_NUMBER: _ClassVar[int]
    COMPACTED_LOGS_FIELD_NUMBER: _ClassVar[int]
    COMPACTED_FREED_BYTES_FIELD_NUMBER: _ClassVar[int]
    message: str
    completed: bool
    cycles: int
    deleted_ledgers: int
    removed_logs: int
    removed_bytes: int
    compacted_logs: int
    compacted_freed_bytes: int
    def __init__(self, message: _Optional[str] = ..., completed: _Optional[bool] = ..., cycles: _Optional[int] = ..., deleted_ledgers: _Optional[int] = ..., removed_logs: _Optional[int] = ..., removed_bytes: _Optional[int] = ..., compacted_logs: _Optional[int] = ..., compacted_freed_bytes: _Optional[int] = ...) -> None: ...

class GetAuditorStatusRequest(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class AuditorStatus(_message.Message):
    __slots__ = ("auditor", "candidate_id", "is_auditor", "replication_enabled", "lost_bookie_recovery_delay_seconds")
    AUDITOR_FIELD_NUMBER: _ClassVar[int]
    CANDIDATE_ID_FIELD_NUMBER: _ClassVar[int]
    IS_AUDITOR_FIELD_NUMBER: _ClassVar[int]
    REPLICATION_ENABLED_FIELD_NUMBER: _ClassVar[int]
    LOST_BOOKIE_RECOVERY_DELAY_SECONDS_FIELD_NUMBER: _ClassVar[int]
    auditor: str
    candidate_id: str
    is_auditor: bool
    replication_enabled: bool
    lost_bookie_recovery_delay_seconds: int
    def __init__(self, auditor: _Optional[str] = ..., candidate_id: _Optional[str] = ..., is_auditor: _Optional[bool] = ..., replication_enabled: _Optional[bool] = ..., lost_bookie_recovery_delay_seconds: _Optional[int] = ...) -> None: ...

class ListUnderreplicatedRequest(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class UnderreplicatedLedger(_message.Message):
    __slots__ = ("ledger_id", "missing_replicas", "ctime")
    LEDGER_ID_FIELD_NUMBER: _ClassVar[int]
    MISSING_REPLICAS_FIELD_NUMBER: _ClassVar[int]
    CTIME_FIELD_NUMBER: _ClassVar[int]
    ledger_id: int
    missing_replicas: _containers.RepeatedScalarFieldContainer[str]
    ctime: int
    def __init__(self, ledger_id: _Optional[int] = ..., missing_replicas: _Optional[_Iterable[str]] = ..., ctime: _Optional[int] = ...) -> None: ...

class ListUnderreplicatedResponse(_message.Message):
    __slots__ = ("ledgers",)
    LEDGERS_FIELD_NUMBER: _ClassVar[int]
    ledgers: _containers.RepeatedCompositeFieldContainer[UnderreplicatedLedger]
    def __init__(self, ledgers: _Optional[_Iterable[_Union[UnderreplicatedLedger, _Mapping]]] = ...) -> None: ...

class ListOwnedStreamsRequest(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class OwnedStream(_message.Message):
    __slots__ = ("name", "outstanding_writes")
    NAME_FIELD_NUMBER: _ClassVar[int]
    OUTSTANDING_WRITES_FIELD_NUMBER: _ClassVar[int]
    name: str
    outstanding_writes: int
    def __init__(self, name: _Optional[str] = ..., outstanding_writes: _Optional[int] = ...) -> None: ...

class ListOwnedStreamsResponse(_message.Message):
    __slots__ = ("owner", "streams")
    OWNER_FIELD_NUMBER: _ClassVar[int]
    STREAMS_FIELD_NUMBER: _ClassVar[int]
    owner: str
    streams: _containers.RepeatedCompositeFieldContainer[OwnedStream]
    def __init__(self, owner: _Optional[str] = ..., streams: _Optional[_Iterable[_Union[OwnedStream, _Mapping]]] = ...) -> None: ...
