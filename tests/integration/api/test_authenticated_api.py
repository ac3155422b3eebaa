"""Token authentication and TLS of the public gRPC servers, through real in-process servers and clients.

The servers are built as the services build theirs (`public_grpc_server` with a `ServerSecurity`,
`add_standard_services`, `GrpcEndpoint`) with servicers that answer for real, and reached through the
project's own clients (`KernelFoundryClient`, `LineageClient`) and plain channels. The TLS certificates
come from a CA made here with the openssl command line: nothing is read from the machine's trust store.
"""

from __future__ import annotations

import asyncio
import shutil
import subprocess
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path

import grpc
import grpc.aio
import pytest
from grpc_health.v1 import health_pb2, health_pb2_grpc
from grpc_reflection.v1alpha import reflection_pb2, reflection_pb2_grpc

from kernelfoundry.api.auth import PLAINTEXT_CLIENT, ClientSecurity, ServerSecurity
from kernelfoundry.api.standard import add_standard_services
from kernelfoundry.client import KernelFoundryClient, LineageClient
from kernelfoundry.service_host import GrpcEndpoint, public_grpc_server
from kernelfoundry.v1 import lineage_pb2, lineage_pb2_grpc, run_pb2, service_pb2, service_pb2_grpc

PUBLIC = service_pb2.DESCRIPTOR.services_by_name["KernelFoundryService"].full_name
LINEAGE = lineage_pb2.DESCRIPTOR.services_by_name["LineageService"].full_name
TOKEN = "s3cret-token-for-this-test"
RUN_ID = "run-000000000001"

pytestmark = pytest.mark.skipif(shutil.which("openssl") is None, reason="needs the openssl command line")


@dataclass(frozen=True)
class Pki:
    ca: bytes
    cert: bytes
    key: bytes
    other_ca: bytes  # a CA that did not sign the server's certificate


def _openssl(*args: str, cwd: Path) -> None:
    subprocess.run(["openssl", *args], cwd=cwd, check=True, capture_output=True)


def _ca(folder: Path, name: str) -> None:
    _openssl(
        "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "2", "-subj", f"/CN={name}",
        "-keyout", f"{name}.key", "-out", f"{name}.pem", cwd=folder,
    )  # fmt: skip


@pytest.fixture(scope="module")
def pki(tmp_path_factory: pytest.TempPathFactory) -> Pki:
    folder = tmp_path_factory.mktemp("pki")
    _ca(folder, "test-ca")
    _ca(folder, "other-ca")
    _openssl(
        "req", "-newkey", "rsa:2048", "-nodes", "-subj", "/CN=kf-evolver",
        "-keyout", "server.key", "-out", "server.csr", cwd=folder,
    )  # fmt: skip
    (folder / "san.ext").write_text("subjectAltName=DNS:kf-evolver,DNS:localhost,IP:127.0.0.1\n")
    _openssl(
        "x509", "-req", "-in", "server.csr", "-CA", "test-ca.pem", "-CAkey", "test-ca.key",
        "-CAcreateserial", "-days", "2", "-extfile", "san.ext", "-out", "server.pem", cwd=folder,
    )  # fmt: skip
    return Pki(
        ca=(folder / "test-ca.pem").read_bytes(),
        cert=(folder / "server.pem").read_bytes(),
        key=(folder / "server.key").read_bytes(),
        other_ca=(folder / "other-ca.pem").read_bytes(),
    )


class Runs(service_pb2_grpc.KernelFoundryServiceServicer):
    """Answers GetRun and streams one progress update for the one run it knows."""

    async def GetRun(self, request, context):  # type: ignore[no-untyped-def]
        return service_pb2.GetRunResponse(progress=run_pb2.RunProgress(run_id=request.run_id))

    async def StreamRunProgress(self, request, context):  # type: ignore[no-untyped-def]
        yield service_pb2.StreamRunProgressResponse(progress=run_pb2.RunProgress(run_id=request.run_id))


class Lineage(lineage_pb2_grpc.LineageServiceServicer):
    async def ListRuns(self, request, context):  # type: ignore[no-untyped-def]
        return lineage_pb2.ListRunsResponse(runs=[lineage_pb2.RunRecord(run_id=RUN_ID)])


@dataclass
class Served:
    address: str
    security: ServerSecurity


async def _serve(security: ServerSecurity, port: int) -> AsyncIterator[Served]:
    server = public_grpc_server("evolver", max_receive_bytes=1024 * 1024, security=security)
    service_pb2_grpc.add_KernelFoundryServiceServicer_to_server(Runs(), server)
    lineage_pb2_grpc.add_LineageServiceServicer_to_server(Lineage(), server)
    standard = await add_standard_services(server, [PUBLIC, LINEAGE])
    address = f"127.0.0.1:{port}"
    endpoint = GrpcEndpoint(server, address, "KernelFoundryService", standard, security)
    stop = asyncio.Event()
    task = asyncio.create_task(endpoint.run(stop))
    await asyncio.sleep(0)
    try:
        yield Served(address, security)
    finally:
        stop.set()
        await endpoint.close()
        await task


@pytest.fixture
async def token_server(unused_tcp_port: int) -> AsyncIterator[Served]:
    async for served in _serve(ServerSecurity(token=TOKEN), unused_tcp_port):
        yield served


@pytest.fixture
async def tls_server(pki: Pki, unused_tcp_port: int) -> AsyncIterator[Served]:
    security = ServerSecurity(token=TOKEN, certificate_chain=pki.cert, private_key=pki.key)
    async for served in _serve(security, unused_tcp_port):
        yield served


def _get_run(address: str, security: ClientSecurity) -> str:
    client = KernelFoundryClient(address, security)
    try:
        return client.get_run(RUN_ID).run_id
    finally:
        client.close()


async def _in_thread(address: str, security: ClientSecurity) -> str:
    return await asyncio.to_thread(_get_run, address, security)


async def _refusal(address: str, security: ClientSecurity) -> grpc.RpcError:
    with pytest.raises(grpc.RpcError) as caught:
        await _in_thread(address, security)
    return caught.value


async def test_a_call_without_a_token_is_unauthenticated(token_server: Served) -> None:
    error = await _refusal(token_server.address, PLAINTEXT_CLIENT)
    assert error.code() == grpc.StatusCode.UNAUTHENTICATED
    assert "Bearer" in (error.details() or "")


async def test_a_call_with_a_wrong_token_is_unauthenticated(token_server: Served) -> None:
    error = await _refusal(token_server.address, ClientSecurity(token=TOKEN + "x"))
    assert error.code() == grpc.StatusCode.UNAUTHENTICATED


async def test_a_call_with_the_token_is_served(token_server: Served) -> None:
    assert await _in_thread(token_server.address, ClientSecurity(token=TOKEN)) == RUN_ID


async def test_a_stream_without_the_token_is_unauthenticated_and_with_it_is_served(
    token_server: Served,
) -> None:
    def first_update(security: ClientSecurity) -> str:
        client = KernelFoundryClient(token_server.address, security)
        try:
            return next(iter(client.progress(RUN_ID))).run_id
        finally:
            client.close()

    with pytest.raises(grpc.RpcError) as caught:
        await asyncio.to_thread(first_update, PLAINTEXT_CLIENT)
    assert caught.value.code() == grpc.StatusCode.UNAUTHENTICATED
    assert await asyncio.to_thread(first_update, ClientSecurity(token=TOKEN)) == RUN_ID


async def test_the_async_lineage_client_carries_the_token(token_server: Served) -> None:
    refused = LineageClient(token_server.address, PLAINTEXT_CLIENT)
    served = LineageClient(token_server.address, ClientSecurity(token=TOKEN))
    try:
        with pytest.raises(grpc.aio.AioRpcError) as caught:
            await refused.list_runs()
        assert caught.value.code() == grpc.StatusCode.UNAUTHENTICATED
        assert [r.run_id for r in await served.list_runs()] == [RUN_ID]
    finally:
        await refused.close()
        await served.close()


async def test_an_unknown_method_without_a_token_is_unauthenticated_not_unimplemented(
    token_server: Served,
) -> None:
    async with grpc.aio.insecure_channel(token_server.address) as channel:
        call = channel.unary_unary("/kernelfoundry.v1.Hidden/Probe")
        with pytest.raises(grpc.aio.AioRpcError) as caught:
            await call(b"", timeout=5)
    assert caught.value.code() == grpc.StatusCode.UNAUTHENTICATED


async def test_health_answers_without_a_token_and_reflection_needs_one(token_server: Served) -> None:
    async with grpc.aio.insecure_channel(token_server.address) as channel:
        health = health_pb2_grpc.HealthStub(channel)
        answer = await health.Check(health_pb2.HealthCheckRequest(service=PUBLIC), timeout=5)
        assert answer.status == health_pb2.HealthCheckResponse.SERVING
        reflection = reflection_pb2_grpc.ServerReflectionStub(channel)
        listing = reflection_pb2.ServerReflectionRequest(list_services="")
        with pytest.raises(grpc.aio.AioRpcError) as caught:
            async for _ in reflection.ServerReflectionInfo(iter([listing]), timeout=5):
                pass
        assert caught.value.code() == grpc.StatusCode.UNAUTHENTICATED
    async with ClientSecurity(token=TOKEN).aio_channel(token_server.address) as channel:
        reflection = reflection_pb2_grpc.ServerReflectionStub(channel)
        answers = [a async for a in reflection.ServerReflectionInfo(iter([listing]), timeout=5)]
    names = {s.name for s in answers[0].list_services_response.service}
    assert PUBLIC in names


async def test_tls_with_the_test_ca_and_the_token_is_served(tls_server: Served, pki: Pki) -> None:
    security = ClientSecurity(token=TOKEN, tls=True, root_certificates=pki.ca)
    assert await _in_thread(tls_server.address, security) == RUN_ID


async def test_tls_names_the_server_as_its_certificate_does(tls_server: Served, pki: Pki) -> None:
    port = tls_server.address.rsplit(":", 1)[1]
    security = ClientSecurity(token=TOKEN, tls=True, root_certificates=pki.ca, server_name="kf-evolver")
    assert await _in_thread(f"localhost:{port}", security) == RUN_ID


async def test_tls_without_the_token_is_unauthenticated(tls_server: Served, pki: Pki) -> None:
    error = await _refusal(tls_server.address, ClientSecurity(tls=True, root_certificates=pki.ca))
    assert error.code() == grpc.StatusCode.UNAUTHENTICATED


async def test_a_plaintext_client_cannot_talk_to_a_tls_server(tls_server: Served) -> None:
    def ready() -> bool:
        client = KernelFoundryClient(tls_server.address, ClientSecurity(token=TOKEN))
        try:
            return client.ready(1.0)
        finally:
            client.close()

    assert await asyncio.to_thread(ready) is False


async def test_a_certificate_from_another_ca_is_not_trusted(tls_server: Served, pki: Pki) -> None:
    error = await _refusal(
        tls_server.address, ClientSecurity(token=TOKEN, tls=True, root_certificates=pki.other_ca)
    )
    assert error.code() == grpc.StatusCode.UNAVAILABLE


async def test_settings_configure_both_sides(pki: Pki, tmp_path: Path, unused_tcp_port: int) -> None:
    from kernelfoundry.config import load_settings

    for name, data in (("tls.crt", pki.cert), ("tls.key", pki.key), ("ca.crt", pki.ca)):
        (tmp_path / name).write_bytes(data)
    settings = load_settings(
        api_token=TOKEN,
        api_tls_cert=str(tmp_path / "tls.crt"),
        api_tls_key=str(tmp_path / "tls.key"),
        api_tls_ca=str(tmp_path / "ca.crt"),
    )
    server, client = ServerSecurity.from_settings(settings), ClientSecurity.from_settings(settings)
    assert server.tls and server.authenticates and client.tls and client.token == TOKEN
    async for served in _serve(server, unused_tcp_port):
        assert await _in_thread(served.address, client) == RUN_ID
