"""Upstream BookKeeper protobuf schemas, written out as data.

Source: apache/bookkeeper commit 9590a97f67c81a2964c79a92c7c58976894588f3
(2026-08-21), files bookkeeper-proto/src/main/proto/BookkeeperProtocol.proto
and bookkeeper-proto/src/main/proto/DataFormats.proto (both ``proto2``, no
``package``).  The tables were produced once by compiling those two files
with protoc and listing their descriptors; they are plain data here and
are checked against dlog's compiled modules by ``test_proto_schemas.py``.

Messages are keyed by their name within the file (nested messages and enums
as ``Outer.Inner``).  Each field is ``(name, number, label, type)`` where
``type`` is the protobuf scalar type name, or ``message:<Name>`` /
``enum:<Name>`` for a message or enum field (the map field
``BookieServiceInfoFormat.properties`` appears as its synthesized
``PropertiesEntry`` message, as protoc defines it).
"""

from typing import Final

Field = tuple[str, int, str, str]

BOOKKEEPER_PROTOCOL_MESSAGES: Final[dict[str, list[Field]]] = {
    "BKPacketHeader": [
        ("version", 1, "required", "enum:ProtocolVersion"),
        ("operation", 2, "required", "enum:OperationType"),
        ("txnId", 3, "required", "uint64"),
        ("priority", 4, "optional", "uint32"),
    ],
    "ContextPair": [("key", 1, "required", "string"), ("value", 2, "required", "string")],
    "Request": [
        ("header", 1, "required", "message:BKPacketHeader"),
        ("readRequest", 100, "optional", "message:ReadRequest"),
        ("addRequest", 101, "optional", "message:AddRequest"),
        ("authRequest", 102, "optional", "message:AuthMessage"),
        ("writeLacRequest", 103, "optional", "message:WriteLacRequest"),
        ("readLacRequest", 104, "optional", "message:ReadLacRequest"),
        ("getBookieInfoRequest", 105, "optional", "message:GetBookieInfoRequest"),
        ("startTLSRequest", 106, "optional", "message:StartTLSRequest"),
        ("forceLedgerRequest", 107, "optional", "message:ForceLedgerRequest"),
        (
            "getListOfEntriesOfLedgerRequest",
            108,
            "optional",
            "message:GetListOfEntriesOfLedgerRequest",
        ),
        ("requestContext", 200, "repeated", "message:ContextPair"),
    ],
    "ReadRequest": [
        ("flag", 100, "optional", "enum:ReadRequest.Flag"),
        ("ledgerId", 1, "required", "int64"),
        ("entryId", 2, "required", "int64"),
        ("masterKey", 3, "optional", "bytes"),
        ("previousLAC", 4, "optional", "int64"),
        ("timeOut", 5, "optional", "int64"),
    ],
    "AddRequest": [
        ("flag", 100, "optional", "enum:AddRequest.Flag"),
        ("ledgerId", 1, "required", "int64"),
        ("entryId", 2, "required", "int64"),
        ("masterKey", 3, "required", "bytes"),
        ("body", 4, "required", "bytes"),
        ("writeFlags", 5, "optional", "int32"),
    ],
    "StartTLSRequest": [],
    "WriteLacRequest": [
        ("ledgerId", 1, "required", "int64"),
        ("lac", 2, "required", "int64"),
        ("masterKey", 3, "required", "bytes"),
        ("body", 4, "required", "bytes"),
    ],
    "ForceLedgerRequest": [("ledgerId", 1, "required", "int64")],
    "ReadLacRequest": [("ledgerId", 1, "required", "int64")],
    "GetBookieInfoRequest": [("requested", 1, "optional", "int64")],
    "GetListOfEntriesOfLedgerRequest": [("ledgerId", 1, "required", "int64")],
    "Response": [
        ("header", 1, "required", "message:BKPacketHeader"),
        ("status", 2, "required", "enum:StatusCode"),
        ("readResponse", 100, "optional", "message:ReadResponse"),
        ("addResponse", 101, "optional", "message:AddResponse"),
        ("authResponse", 102, "optional", "message:AuthMessage"),
        ("writeLacResponse", 103, "optional", "message:WriteLacResponse"),
        ("readLacResponse", 104, "optional", "message:ReadLacResponse"),
        ("getBookieInfoResponse", 105, "optional", "message:GetBookieInfoResponse"),
        ("startTLSResponse", 106, "optional", "message:StartTLSResponse"),
        ("forceLedgerResponse", 107, "optional", "message:ForceLedgerResponse"),
        (
            "getListOfEntriesOfLedgerResponse",
            108,
            "optional",
            "message:GetListOfEntriesOfLedgerResponse",
        ),
    ],
    "ReadResponse": [
        ("status", 1, "required", "enum:StatusCode"),
        ("ledgerId", 2, "required", "int64"),
        ("entryId", 3, "required", "int64"),
        ("body", 4, "optional", "bytes"),
        ("maxLAC", 5, "optional", "int64"),
        ("lacUpdateTimestamp", 6, "optional", "int64"),
    ],
    "AddResponse": [
        ("status", 1, "required", "enum:StatusCode"),
        ("ledgerId", 2, "required", "int64"),
        ("entryId", 3, "required", "int64"),
    ],
    "AuthMessage": [
        ("authPluginName", 1, "required", "string"),
        ("payload", 2, "required", "bytes"),
    ],
    "WriteLacResponse": [
        ("status", 1, "required", "enum:StatusCode"),
        ("ledgerId", 2, "required", "int64"),
    ],
    "ForceLedgerResponse": [
        ("status", 1, "required", "enum:StatusCode"),
        ("ledgerId", 2, "required", "int64"),
    ],
    "ReadLacResponse": [
        ("status", 1, "required", "enum:StatusCode"),
        ("ledgerId", 2, "required", "int64"),
        ("lacBody", 3, "optional", "bytes"),
        ("lastEntryBody", 4, "optional", "bytes"),
    ],
    "GetBookieInfoResponse": [
        ("status", 1, "required", "enum:StatusCode"),
        ("totalDiskCapacity", 2, "optional", "int64"),
        ("freeDiskSpace", 3, "optional", "int64"),
    ],
    "GetListOfEntriesOfLedgerResponse": [
        ("status", 1, "required", "enum:StatusCode"),
        ("ledgerId", 2, "required", "int64"),
        ("availabilityOfEntriesOfLedger", 3, "optional", "bytes"),
    ],
    "StartTLSResponse": [],
}

BOOKKEEPER_PROTOCOL_ENUMS: Final[dict[str, dict[str, int]]] = {
    "ProtocolVersion": {"VERSION_ONE": 1, "VERSION_TWO": 2, "VERSION_THREE": 3},
    "StatusCode": {
        "EOK": 0,
        "ENOLEDGER": 402,
        "ENOENTRY": 403,
        "EBADREQ": 404,
        "EIO": 501,
        "EUA": 502,
        "EBADVERSION": 503,
        "EFENCED": 504,
        "EREADONLY": 505,
        "ETOOMANYREQUESTS": 506,
        "EUNKNOWNLEDGERSTATE": 507,
    },
    "OperationType": {
        "READ_ENTRY": 1,
        "ADD_ENTRY": 2,
        "RANGE_READ_ENTRY": 3,
        "RANGE_ADD_ENTRY": 4,
        "AUTH": 5,
        "WRITE_LAC": 6,
        "READ_LAC": 7,
        "GET_BOOKIE_INFO": 8,
        "START_TLS": 9,
        "FORCE_LEDGER": 10,
        "GET_LIST_OF_ENTRIES_OF_LEDGER": 11,
        "BATCH_READ_ENTRY": 12,
    },
    "ReadRequest.Flag": {"FENCE_LEDGER": 1, "ENTRY_PIGGYBACK": 2},
    "AddRequest.Flag": {"RECOVERY_ADD": 1},
    "GetBookieInfoRequest.Flags": {"TOTAL_DISK_CAPACITY": 1, "FREE_DISK_SPACE": 2},
}

DATA_FORMATS_MESSAGES: Final[dict[str, list[Field]]] = {
    "LedgerMetadataFormat": [
        ("quorumSize", 1, "required", "int32"),
        ("ensembleSize", 2, "required", "int32"),
        ("length", 3, "required", "int64"),
        ("lastEntryId", 4, "optional", "int64"),
        ("state", 5, "required", "enum:LedgerMetadataFormat.State"),
        ("segment", 6, "repeated", "message:LedgerMetadataFormat.Segment"),
        ("digestType", 7, "optional", "enum:LedgerMetadataFormat.DigestType"),
        ("password", 8, "optional", "bytes"),
        ("ackQuorumSize", 9, "optional", "int32"),
        ("ctime", 10, "optional", "int64"),
        ("customMetadata", 11, "repeated", "message:LedgerMetadataFormat.cMetadataMapEntry"),
        ("cToken", 12, "optional", "int64"),
    ],
    "LedgerMetadataFormat.Segment": [
        ("ensembleMember", 1, "repeated", "string"),
        ("firstEntryId", 2, "required", "int64"),
    ],
    "LedgerMetadataFormat.cMetadataMapEntry": [
        ("key", 1, "optional", "string"),
        ("value", 2, "optional", "bytes"),
    ],
    "LedgerRereplicationLayoutFormat": [
        ("type", 1, "required", "string"),
        ("version", 2, "required", "int32"),
    ],
    "UnderreplicatedLedgerFormat": [
        ("replica", 1, "repeated", "string"),
        ("ctime", 2, "optional", "int64"),
    ],
    "CookieFormat": [
        ("bookieHost", 1, "required", "string"),
        ("journalDir", 2, "required", "string"),
        ("ledgerDirs", 3, "required", "string"),
        ("instanceId", 4, "optional", "string"),
        ("indexDirs", 5, "optional", "string"),
    ],
    "LockDataFormat": [("bookieId", 1, "optional", "string")],
    "AuditorVoteFormat": [("bookieId", 1, "optional", "string")],
    "CheckAllLedgersFormat": [("checkAllLedgersCTime", 1, "optional", "int64")],
    "PlacementPolicyCheckFormat": [("placementPolicyCheckCTime", 1, "optional", "int64")],
    "ReplicasCheckFormat": [("replicasCheckCTime", 1, "optional", "int64")],
    "BookieServiceInfoFormat": [
        ("endpoints", 6, "repeated", "message:BookieServiceInfoFormat.Endpoint"),
        ("properties", 7, "repeated", "message:BookieServiceInfoFormat.PropertiesEntry"),
    ],
    "BookieServiceInfoFormat.Endpoint": [
        ("id", 1, "required", "string"),
        ("port", 2, "required", "int32"),
        ("host", 3, "required", "string"),
        ("protocol", 4, "required", "string"),
        ("auth", 5, "repeated", "string"),
        ("extensions", 6, "repeated", "string"),
    ],
    "BookieServiceInfoFormat.PropertiesEntry": [
        ("key", 1, "optional", "string"),
        ("value", 2, "optional", "string"),
    ],
}

DATA_FORMATS_ENUMS: Final[dict[str, dict[str, int]]] = {
    "LedgerMetadataFormat.State": {"OPEN": 1, "IN_RECOVERY": 2, "CLOSED": 3},
    "LedgerMetadataFormat.DigestType": {"CRC32": 1, "HMAC": 2, "CRC32C": 3, "DUMMY": 4},
}
