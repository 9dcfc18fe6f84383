"""The bookie's HTTP admin API: BookKeeper's garbage collection endpoints.

Served when ``httpServerEnabled`` (on ``httpServerPort``), with BookKeeper's
paths and bodies, so its tools and ``dlog shell triggergc`` both work:

* ``PUT /api/v1/bookie/gc``: start a forced collection; an optional JSON
  body ``{"forceMajor": bool, "forceMinor": bool}`` (each true when absent,
  as in BookKeeper) says which compactions it may run. It answers at once.
* ``GET /api/v1/bookie/gc``: ``{"is_in_force_gc": "true"|"false"}``, true
  until every forced collection asked for has finished.
* ``GET /api/v1/bookie/gc_details``: the collector's status, a one-item list.

A minimal HTTP/1.1 server on asyncio (one request per connection): the
bookie needs three tiny endpoints, not a web framework dependency.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import time
from collections.abc import Callable
from typing import Any

from dlog.bookie.garbage_collector import GarbageCollector, GcStats

log = logging.getLogger(__name__)

GC_PATH = "/api/v1/bookie/gc"
GC_DETAILS_PATH = "/api/v1/bookie/gc_details"

#: Largest request (head and body) accepted; the API's bodies are tiny.
MAX_REQUEST_BYTES = 64 * 1024
#: A client must send its whole request within this time.
REQUEST_TIMEOUT = 10.0

_REASONS = {
    200: "OK",
    400: "Bad Request",
    404: "Not Found",
    405: "Method Not Allowed",
    408: "Request Timeout",
    413: "Payload Too Large",
    503: "Service Unavailable",
}


class _BadRequest(Exception):
    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status


def parse_force_flags(body: bytes) -> tuple[bool, bool]:
    """(forceMajor, forceMinor) of a PUT body: both true when the body is
    blank or a flag is absent (BookKeeper's TriggerGCService). A flag is a
    JSON boolean or the string "true"/"false"; anything else is refused
    rather than read as false."""
    if not body.strip():
        return True, True
    try:
        doc = json.loads(body)
    except (ValueError, UnicodeDecodeError) as e:
        raise _BadRequest(400, f"body is not JSON: {e}") from None
    if not isinstance(doc, dict):
        raise _BadRequest(400, "body must be a JSON object")
    flags = []
    for key in ("forceMajor", "forceMinor"):
        value = doc.get(key, True)
        if isinstance(value, str) and value.lower() in ("true", "false"):
            value = value.lower() == "true"
        if not isinstance(value, bool):
            raise _BadRequest(400, f"{key} must be true or false, not {value!r}")
        flags.append(value)
    return flags[0], flags[1]


def gc_details(stats: GcStats, in_force_gc: bool, monotonic_now: float) -> dict[str, Any]:
    """BookKeeper's GarbageCollectionStatus fields dlog knows (times as
    wall-clock milliseconds), then dlog's own counters."""

    def wall_ms(t: float) -> int:
        return int((time.time() - (monotonic_now - t)) * 1000)

    return {
        "forceCompacting": in_force_gc,
        "lastMajorCompactionTime": wall_ms(stats.last_major),
        "lastMinorCompactionTime": wall_ms(stats.last_minor),
        "cycles": stats.cycles,
        "deletedLedgers": stats.deleted_ledgers,
        "overreplicatedLedgers": stats.overreplicated_ledgers,
        "removedLogs": stats.removed_logs,
        "removedBytes": stats.removed_bytes,
        "compactedLogs": stats.compacted_logs,
        "compactedFreedBytes": stats.compacted_freed_bytes,
        "rewrittenBytes": stats.rewritten_bytes,
        "rewrittenEntries": stats.rewritten_entries,
    }


class AdminHttpServer:
    """Serves the GC endpoints of one bookie. ``gc`` returns the bookie's
    collector (None while it is not running: 503)."""

    def __init__(
        self,
        bookie_id: str,
        gc: Callable[[], GarbageCollector | None],
        *,
        host: str = "0.0.0.0",
        port: int = 8080,
    ) -> None:
        self.bookie_id = bookie_id
        self._gc = gc
        self.host = host
        self._port = port
        self._server: asyncio.Server | None = None
        self._forced: set[asyncio.Future[GcStats]] = set()

    @property
    def port(self) -> int:
        """The port actually bound (httpServerPort=0 picks a free one)."""
        if self._server is None or not self._server.sockets:
            return self._port
        return int(self._server.sockets[0].getsockname()[1])

    @property
    def in_force_gc(self) -> bool:
        return bool(self._forced)

    async def start(self) -> None:
        self._server = await asyncio.start_server(self._serve, self.host, self._port)
        log.info("HTTP admin API on http://%s:%d%s", self.host, self.port, GC_PATH)

    async def stop(self) -> None:
        if self._server is not None:
            self._server.close()
            await self._server.wait_closed()
            self._server = None

    # ------------------------------------------------------------------
    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            try:
                async with asyncio.timeout(REQUEST_TIMEOUT):
                    method, path, body = await _read_request(reader)
                status, doc = self._handle(method, path, body)
            except _BadRequest as e:
                status, doc = e.status, str(e)
            except TimeoutError:
                status, doc = 408, "request not received in time"
            payload = json.dumps(doc, indent=2).encode()
            head = (
                f"HTTP/1.1 {status} {_REASONS.get(status, '')}\r\n"
                "Content-Type: application/json\r\n"
                f"Content-Length: {len(payload)}\r\n"
                "Connection: close\r\n\r\n"
            ).encode()
            writer.write(head + payload)
            await writer.drain()
        except (ConnectionError, asyncio.IncompleteReadError):
            pass
        finally:
            writer.close()
            with contextlib.suppress(ConnectionError):
                await writer.wait_closed()

    def _handle(self, method: str, path: str, body: bytes) -> tuple[int, Any]:
        path = path.split("?", 1)[0].rstrip("/") or "/"
        if path == GC_PATH:
            if method == "PUT":
                return self._trigger(body)
            if method == "GET":
                return 200, {"is_in_force_gc": str(self.in_force_gc).lower()}
            return 405, "Not allowed method. Should be PUT to trigger GC, or GET to get its state."
        if path == GC_DETAILS_PATH:
            if method != "GET":
                return 404, "Only GET retrieves GC details; PUT to the gc endpoint triggers GC."
            gc = self._gc()
            if gc is None:
                return 503, "the garbage collector is not running"
            return 200, [gc_details(gc.stats, self.in_force_gc, gc.clock())]
        return 404, f"no such endpoint: {path}"

    def _trigger(self, body: bytes) -> tuple[int, Any]:
        force_major, force_minor = parse_force_flags(body)
        gc = self._gc()
        if gc is None:
            return 503, "the garbage collector is not running"
        fut = gc.trigger(force_major=force_major, force_minor=force_minor)
        self._forced.add(fut)
        fut.add_done_callback(self._forced_done)
        log.info(
            "forced garbage collection requested over HTTP (forceMajor=%s, forceMinor=%s)",
            force_major,
            force_minor,
        )
        return 200, f"Triggered GC on BookieServer: {self.bookie_id}"

    def _forced_done(self, fut: asyncio.Future[GcStats]) -> None:
        self._forced.discard(fut)
        if not fut.cancelled() and fut.exception() is not None:
            log.warning("forced garbage collection failed: %s", fut.exception())


async def _read_request(reader: asyncio.StreamReader) -> tuple[str, str, bytes]:
    try:
        head = await reader.readuntil(b"\r\n\r\n")
    except asyncio.LimitOverrunError:
        raise _BadRequest(413, "request head too large") from None
    lines = head.decode("latin-1").split("\r\n")
    parts = lines[0].split()
    if len(parts) != 3 or not parts[2].startswith("HTTP/"):
        raise _BadRequest(400, "malformed request line")
    length = 0
    for line in lines[1:]:
        name, _, value = line.partition(":")
        if name.strip().lower() == "content-length":
            try:
                length = int(value.strip())
            except ValueError:
                raise _BadRequest(400, "bad Content-Length") from None
        elif name.strip().lower() == "transfer-encoding":
            raise _BadRequest(400, "chunked bodies are not supported: send Content-Length")
    if not 0 <= length <= MAX_REQUEST_BYTES:
        raise _BadRequest(413, f"body larger than {MAX_REQUEST_BYTES} bytes")
    body = await reader.readexactly(length) if length else b""
    return parts[0].upper(), parts[1], body
