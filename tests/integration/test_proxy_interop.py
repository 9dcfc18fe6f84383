"""Interop: a plain thriftpy2 client, built from the project's IDL in
``proto/`` (upstream's names, ids and status codes) and using no dlog code,
writes through ``dlog proxy`` run as a user runs it. A dlog reader then
reads back exactly the records answered SUCCESS, at the DLSNs returned."""

from __future__ import annotations

import io
import re
import zlib
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import thriftpy2
from thriftpy2.protocol import TBinaryProtocolFactory
from thriftpy2.rpc import make_client
from thriftpy2.transport import TFramedTransportFactory

from dlog.dlsn import DLSN
from dlog.sandbox.cluster import Sandbox
from dlog.sync import Namespace
from tests.proxy_process import ProxyProcess

pytestmark = [pytest.mark.integration, pytest.mark.timeout(180)]

IDL = Path(__file__).resolve().parents[2] / "proto" / "distributedlog_service.thrift"


def load_idl() -> Any:
    """thriftpy2 will not parse a method named ``delete``: load it as
    ``delete_`` and send it under its wire name, as any thriftpy2 user must."""
    text = re.sub(r"(WriteResponse\s+)delete(\s*\()", r"\1delete_\2", IDL.read_text())
    module = thriftpy2.load_fp(io.StringIO(text), "plain_dl_thrift")
    svc = module.DistributedLogService
    svc.delete_args, svc.delete_result = svc.delete__args, svc.delete__result
    svc.thrift_services = [("delete" if n == "delete_" else n) for n in svc.thrift_services]
    return module


@pytest.fixture(scope="module")
def proxy(sandbox: Sandbox) -> Iterator[ProxyProcess]:
    p = ProxyProcess(sandbox.namespace_uri)
    yield p
    assert p.stop() == 0, "".join(p.stderr)


def test_a_plain_thrift_client_writes_through_dlog_proxy(
    sandbox: Sandbox, proxy: ProxyProcess
) -> None:
    dl = load_idl()
    codes = dl.StatusCode
    host, _, port = proxy.endpoint.rpartition(":")
    client = make_client(
        dl.DistributedLogService,
        host,
        int(port),
        trans_factory=TFramedTransportFactory(),
        proto_factory=TBinaryProtocolFactory(),
        timeout=30_000,
    )
    stream = "interop"
    sent: list[tuple[str, bytes]] = []  # (dlsn, payload) of each SUCCESS

    info = client.handshakeWithClientInfo(dl.ClientInfo(getOwnerships=True))
    assert info.serverStatus == dl.ServerStatus.WRITE_AND_ACCEPT

    for i in range(20):
        data = b"single-%d" % i
        crc = zlib.crc32(stream.encode() + data)
        r = client.writeWithContext(stream, data, dl.WriteContext(crc32=crc))
        assert r.header.code == codes.SUCCESS, r
        sent.append((r.dlsn, data))
    bulk = [b"bulk-%d" % i for i in range(200)]
    r = client.writeBulkWithContext(stream, bulk, dl.WriteContext())
    assert r.header.code == codes.SUCCESS, r
    for w, data in zip(r.writeResponses, bulk, strict=True):
        assert w.header.code == codes.SUCCESS
        sent.append((w.dlsn, data))
    r = client.write(stream, b"deprecated-write")
    assert r.header.code == codes.SUCCESS
    sent.append((r.dlsn, b"deprecated-write"))

    # Refused requests write nothing.
    r = client.writeWithContext(stream, b"corrupt", dl.WriteContext(crc32=12345))
    assert r.header.code == codes.CHECKSUM_FAILED
    r = client.writeWithContext(stream, b"x" * (1024 * 1024), dl.WriteContext())
    assert r.header.code == codes.TOO_LARGE_RECORD

    # The handshake now lists the stream; delete works under its wire name.
    owner = client.handshake().ownerships[stream]
    assert owner == proxy.address and owner.startswith("1;")
    r = client.write("to-delete", b"gone")
    assert r.header.code == codes.SUCCESS
    assert client.delete("to-delete", dl.WriteContext()).header.code == codes.SUCCESS
    client.close()

    with Namespace.open(sandbox.namespace_uri) as ns:
        assert not ns.log_exists("to-delete")
        log = ns.open_log(stream)
        with log.open_reader() as reader:
            got = []
            for record in reader:
                got.append((record.dlsn, record.payload))
                if len(got) == len(sent):
                    break
        assert log.get_last_dlsn() == got[-1][0]
    assert got == [(DLSN.deserialize(d), p) for d, p in sent]
