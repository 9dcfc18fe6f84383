/*
 * DistributedLog's write proxy service (DistributedLogService), as published
 * by Apache DistributedLog in distributedlog-proxy-protocol's service.thrift:
 * the same method names, struct field ids, enum values and argument order.
 * Argument ids are left implicit, as upstream's are: Thrift compilers number
 * implicit fields -1, -2, ... in declaration order, and that is what goes on
 * the wire. A client generated from upstream's IDL talks to `dlog proxy`
 * unchanged (framed transport, binary protocol).
 *
 * thriftpy2 refuses the method name `delete` (a reserved word in some target
 * languages); dlog.proxy.protocol loads this file under another name and
 * serves the method under its wire name, "delete".
 */
namespace java org.apache.distributedlog.thrift.service

/* Response status codes: 2xx success, 3xx the client must act, 4xx the
   client erred, 5xx the server failed, 6xx unexpected, 10xx reader errors. */
enum StatusCode {
    SUCCESS = 200,

    CLIENT_CLOSED = 301,
    /* The stream is owned by another proxy: ResponseHeader.location names it. */
    FOUND = 302,

    REQUEST_DENIED = 403,
    TOO_LARGE_RECORD = 413,

    INTERNAL_SERVER_ERROR = 500,
    NOT_IMPLEMENTED = 501,
    ALREADY_CLOSED = 502,
    SERVICE_UNAVAILABLE = 503,
    LOCKING_EXCEPTION = 504,
    ZOOKEEPER_ERROR = 505,
    METADATA_EXCEPTION = 506,
    BK_TRANSMIT_ERROR = 507,
    FLUSH_TIMEOUT = 508,
    LOG_EMPTY = 509,
    LOG_NOT_FOUND = 510,
    TRUNCATED_TRANSACTION = 511,
    END_OF_STREAM = 512,
    TRANSACTION_OUT_OF_ORDER = 513,
    WRITE_EXCEPTION = 514,
    /* No longer owned here: the client should look for the owner. */
    STREAM_UNAVAILABLE = 515,
    WRITE_CANCELLED_EXCEPTION = 516,
    /* Back-pressure: too many outstanding writes. */
    OVER_CAPACITY = 517,
    /* Owned here but not ready for writes yet (recovering). */
    STREAM_NOT_READY = 518,
    REGION_UNAVAILABLE = 519,
    INVALID_ENVELOPED_ENTRY = 520,
    UNSUPPORTED_METADATA_VERSION = 521,
    LOG_EXISTS = 522,
    /* WriteContext.crc32 does not match the data. */
    CHECKSUM_FAILED = 523,
    /* The proxy owns as many streams as it may. */
    TOO_MANY_STREAMS = 524,
    LOG_SEGMENT_NOT_FOUND = 525,
    END_OF_LOG_SEGMENT = 526,
    LOG_SEGMENT_IS_TRUNCATED = 527,

    UNEXPECTED = 600,
    INTERRUPTED = 601,
    INVALID_STREAM_NAME = 602,
    ILLEGAL_STATE = 603,

    RETRYABLE_READ = 1000,
    LOG_READ_ERROR = 1001,
    READ_CANCELLED_EXCEPTION = 1002,
}

struct ResponseHeader {
    1: required StatusCode code;
    2: optional string errMsg;
    /* With FOUND: the owner, as DistributedLog's DLSocketAddress ("1;<shard>;<host>:<port>"). */
    3: optional string location;
}

struct WriteResponse {
    1: required ResponseHeader header;
    /* With SUCCESS: the record's DLSN, serialized (base64 of its version-1 bytes). */
    2: optional string dlsn;
}

struct BulkWriteResponse {
    1: required ResponseHeader header;
    /* One per record, in order. */
    2: optional list<WriteResponse> writeResponses;
}

struct WriteContext {
    /* Proxies the client already tried for this request. */
    1: optional set<string> triedHosts;
    /* CRC32 of the data (or of the stream name, for requests without data). */
    2: optional i64 crc32;
    3: optional bool isRecordSet;
}

struct HeartbeatOptions {
    1: optional bool sendHeartBeatToReader;
}

enum ServerStatus {
    /* writing, and accepting new streams */
    WRITE_AND_ACCEPT    = 100,
    /* writing to the streams it owns, accepting no new ones */
    WRITE_ONLY          = 200,
    /* shutting down */
    DOWN                = 300,
}

struct ServerInfo {
    /* stream name -> owner (DLSocketAddress) */
    1: optional map<string, string> ownerships;
    2: optional ServerStatus serverStatus;
}

struct ClientInfo {
    1: optional string streamNameRegex;
    2: optional bool getOwnerships;
}

service DistributedLogService {

    /* Deprecated: handshakeWithClientInfo. */
    ServerInfo handshake();

    ServerInfo handshakeWithClientInfo(ClientInfo clientInfo);

    /* Deprecated: heartbeatWithOptions. */
    WriteResponse heartbeat(string stream, WriteContext ctx);

    WriteResponse heartbeatWithOptions(string stream, WriteContext ctx, HeartbeatOptions options);

    /* Deprecated: writeWithContext. */
    WriteResponse write(string stream, binary data);

    WriteResponse writeWithContext(string stream, binary data, WriteContext ctx);

    BulkWriteResponse writeBulkWithContext(string stream, list<binary> data, WriteContext ctx);

    WriteResponse truncate(string stream, string dlsn, WriteContext ctx);

    WriteResponse release(string stream, WriteContext ctx);

    WriteResponse create(string stream, WriteContext ctx);

    WriteResponse delete(string stream, WriteContext ctx);

    WriteResponse getOwner(string stream, WriteContext ctx);

    void setAcceptNewStream(bool enabled);
}
