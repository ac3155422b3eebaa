"""End to end under the production security settings: the API needs a token over TLS, and every service
connects to NATS as its own least-privilege user (the stack's `nats_users`, the users Kubernetes gets).

One stack for the module. A run goes through all five services and completes, with the evolver reaching
the store's TLS API with the token; the NATS server logs no permission violation for any of it (every
service did its whole work within its rights); health answers without the token and a call without it
is UNAUTHENTICATED; the settled candidates' units leave the artifact store.
"""

from __future__ import annotations

import asyncio
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import grpc
import pytest
from grpc_health.v1 import health_pb2, health_pb2_grpc

from kernelfoundry.api.auth import ClientSecurity
from kernelfoundry.bus.jetstream import JetStreamBus
from kernelfoundry.client import KernelFoundryClient, LineageClient
from kernelfoundry.stack.hardware import cpu_target
from kernelfoundry.stack.supervisor import Stack
from kernelfoundry.v1 import run_pb2

from .test_stack import FAST_ENV, chain_task, config

pytestmark = [pytest.mark.slow, pytest.mark.timeout(900)]

TOKEN = "e2e-token-0123456789abcdef"


def _openssl(*args: str, cwd: Path) -> None:
    subprocess.run(["openssl", *args], cwd=cwd, check=True, capture_output=True)


def _pki(folder: Path) -> None:
    """ca.pem, server.pem (for 127.0.0.1) and server.key in `folder`."""
    _openssl(
        "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "2", "-subj", "/CN=e2e-ca",
        "-keyout", "ca.key", "-out", "ca.pem", cwd=folder,
    )  # fmt: skip
    _openssl(
        "req", "-newkey", "rsa:2048", "-nodes", "-subj", "/CN=kf-evolver",
        "-keyout", "server.key", "-out", "server.csr", cwd=folder,
    )  # fmt: skip
    (folder / "san.ext").write_text("subjectAltName=DNS:localhost,IP:127.0.0.1\n")
    _openssl(
        "x509", "-req", "-in", "server.csr", "-CA", "ca.pem", "-CAkey", "ca.key", "-CAcreateserial",
        "-days", "2", "-extfile", "san.ext", "-out", "server.pem", cwd=folder,
    )  # fmt: skip


@pytest.fixture(scope="module")
def stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Stack]:
    pki = tmp_path_factory.mktemp("pki")
    _pki(pki)
    env = {
        **FAST_ENV,
        "KF_API_TOKEN": TOKEN,
        "KF_API_TLS_CERT": str(pki / "server.pem"),
        "KF_API_TLS_KEY": str(pki / "server.key"),
        "KF_API_TLS_CA": str(pki / "ca.pem"),  # the evolver calls the store
    }
    stack = Stack(
        state_dir=tmp_path_factory.mktemp("stack"), hardware=[cpu_target()], extra_env=env, nats_users=True
    )
    stack.start()
    try:
        yield stack
    finally:
        stack.stop()


@pytest.fixture(scope="module")
def security(stack: Stack) -> ClientSecurity:
    ca = Path(stack.extra_env["KF_API_TLS_CA"]).read_bytes()
    return ClientSecurity(token=TOKEN, tls=True, root_certificates=ca)


def _violations(stack: Stack) -> list[str]:
    return [
        line
        for line in (stack.state_dir / "logs" / "nats.log").read_text().splitlines()
        if "Violation" in line
    ]


def test_a_run_completes_with_every_service_on_its_own_nats_user(
    stack: Stack, security: ClientSecurity
) -> None:
    client = KernelFoundryClient(stack.grpc_address, security)
    try:
        assert client.ready(30.0)
        run_id = client.submit(chain_task(), config(iterations=2))
        final = list(client.progress(run_id))[-1]
        assert final.status == run_pb2.RUN_STATUS_COMPLETED, final.message
        assert final.candidates_correct >= 1
    finally:
        client.close()

    async def stored() -> list[str]:
        lineage = LineageClient(stack.store_grpc_address, security)
        try:
            return [r.run_id for r in await lineage.list_runs()]
        finally:
            await lineage.close()

    assert run_id in asyncio.run(stored())
    assert _violations(stack) == []


def test_health_needs_no_token_and_everything_else_does(stack: Stack, security: ClientSecurity) -> None:
    channel = ClientSecurity(tls=True, root_certificates=security.root_certificates).channel(
        stack.grpc_address
    )
    try:
        answer = health_pb2_grpc.HealthStub(channel).Check(health_pb2.HealthCheckRequest(), timeout=10)
        assert answer.status == health_pb2.HealthCheckResponse.SERVING
    finally:
        channel.close()
    anonymous = KernelFoundryClient(
        stack.grpc_address, ClientSecurity(tls=True, root_certificates=security.root_certificates)
    )
    try:
        with pytest.raises(grpc.RpcError) as caught:
            anonymous.get_run("run-0123456789ab")
        assert caught.value.code() == grpc.StatusCode.UNAUTHENTICATED
    finally:
        anonymous.close()


def test_the_settled_candidates_units_leave_the_artifact_store(stack: Stack) -> None:
    # grace: KF_ACK_WAIT_S (6) x (KF_MAX_DELIVER + 2) = 42 s after each result
    async def units() -> int:
        user, password = stack._nats_credentials["store"]
        bus = await JetStreamBus.connect(stack.nats_url, name="probe", user=user, password=password)
        try:
            store = await bus.artifacts()
            return len([o for o in await store.list(ignore_deletes=True)])
        except Exception as exc:  # nats raises NotFoundError for an empty bucket
            if "nothing found" in str(exc).lower() or "notfound" in type(exc).__name__.lower():
                return 0
            raise
        finally:
            await bus.close()

    deadline = time.monotonic() + 120
    left = asyncio.run(units())
    while left and time.monotonic() < deadline:
        time.sleep(5)
        left = asyncio.run(units())
    assert left == 0
