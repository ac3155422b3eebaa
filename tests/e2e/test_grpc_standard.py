"""End to end: the standard health and reflection services and the transport limits of the stack's servers.

One stack for the module, its processes started as in production (`kernelfoundry serve ...`). Health
answers SERVING for the whole server and for each public service of the evolver and the store; reflection
lists them with the standard services; requests above the servers' receive limits (KF_API_MAX_REQUEST_BYTES,
KF_API_MAX_ARCHIVE_BYTES plus the envelope) are refused by gRPC with RESOURCE_EXHAUSTED; and a store told to
stop says NOT_SERVING to a watcher before it goes.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator

import grpc
import pytest
from grpc_health.v1 import health_pb2, health_pb2_grpc
from grpc_reflection.v1alpha import reflection_pb2, reflection_pb2_grpc

from kernelfoundry.api.standard import HEALTH_SERVICE, REFLECTION_SERVICE
from kernelfoundry.stack.hardware import cpu_target
from kernelfoundry.stack.supervisor import Stack
from kernelfoundry.v1 import lineage_pb2, lineage_pb2_grpc, service_pb2, service_pb2_grpc

from .test_stack import FAST_ENV

pytestmark = [pytest.mark.slow, pytest.mark.timeout(600)]

MAX_REQUEST_BYTES = 256 * 1024
MAX_ARCHIVE_BYTES = 512 * 1024
ENVELOPE_BYTES = 64 * 1024  # the store receives an archive plus its request message (services/store/main.py)
EVOLVER = service_pb2.DESCRIPTOR.services_by_name["KernelFoundryService"].full_name
STORE = lineage_pb2.DESCRIPTOR.services_by_name["LineageService"].full_name
SERVING = health_pb2.HealthCheckResponse.SERVING
NOT_SERVING = health_pb2.HealthCheckResponse.NOT_SERVING


@pytest.fixture(scope="module")
def stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Stack]:
    env = {
        **FAST_ENV,
        "KF_API_MAX_REQUEST_BYTES": str(MAX_REQUEST_BYTES),
        "KF_API_MAX_ARCHIVE_BYTES": str(MAX_ARCHIVE_BYTES),
    }
    stack = Stack(state_dir=tmp_path_factory.mktemp("stack"), hardware=[cpu_target()], extra_env=env)
    stack.start()
    try:
        yield stack
    finally:
        stack.stop()


@pytest.fixture(scope="module")
def servers(stack: Stack) -> Iterator[dict[str, grpc.Channel]]:
    # the client may send more than the servers accept: the servers' limits are what is tested
    options = [("grpc.max_send_message_length", 16 * 1024 * 1024)]
    channels = {
        EVOLVER: grpc.insecure_channel(stack.grpc_address, options=options),
        STORE: grpc.insecure_channel(stack.store_grpc_address, options=options),
    }
    try:
        yield channels
    finally:
        for channel in channels.values():
            channel.close()


def status(channel: grpc.Channel, service: str) -> int:
    request = health_pb2.HealthCheckRequest(service=service)
    return health_pb2_grpc.HealthStub(channel).Check(request, timeout=10).status


def wait_serving(channel: grpc.Channel, service: str, timeout_s: float = 60.0) -> int:
    """The service's status once it is SERVING, or the last status (or error) seen when time runs out."""
    deadline = time.monotonic() + timeout_s
    last: object = None
    while time.monotonic() < deadline:
        try:
            last = status(channel, service)
            if last == SERVING:
                return SERVING
        except grpc.RpcError as exc:  # not listening yet
            last = exc.code()
        time.sleep(0.2)
    raise AssertionError(f"{service or 'the server'} never became SERVING (last: {last})")


@pytest.mark.parametrize("public", [EVOLVER, STORE])
def test_health_serves_the_server_and_its_public_service(
    servers: dict[str, grpc.Channel], public: str
) -> None:
    channel = servers[public]
    assert wait_serving(channel, "") == SERVING
    assert status(channel, public) == SERVING
    other = STORE if public == EVOLVER else EVOLVER
    with pytest.raises(grpc.RpcError) as unknown:  # each server reports on its own services only
        status(channel, other)
    assert unknown.value.code() == grpc.StatusCode.NOT_FOUND


@pytest.mark.parametrize("public", [EVOLVER, STORE])
def test_reflection_lists_the_public_and_standard_services(
    servers: dict[str, grpc.Channel], public: str
) -> None:
    channel = servers[public]
    wait_serving(channel, "")
    stub = reflection_pb2_grpc.ServerReflectionStub(channel)
    (answer,) = stub.ServerReflectionInfo(iter([reflection_pb2.ServerReflectionRequest(list_services="")]))
    names = {service.name for service in answer.list_services_response.service}
    assert names == {public, HEALTH_SERVICE, REFLECTION_SERVICE}
    request = reflection_pb2.ServerReflectionRequest(file_containing_symbol=public)
    (described,) = stub.ServerReflectionInfo(iter([request]))
    assert described.file_descriptor_response.file_descriptor_proto, described.error_response


def test_requests_over_the_receive_limits_are_resource_exhausted(servers: dict[str, grpc.Channel]) -> None:
    wait_serving(servers[EVOLVER], "")
    wait_serving(servers[STORE], "")
    evolver = service_pb2_grpc.KernelFoundryServiceStub(servers[EVOLVER])
    with pytest.raises(grpc.RpcError) as refused:
        evolver.GetRun(service_pb2.GetRunRequest(run_id="r" * (MAX_REQUEST_BYTES + 1)), timeout=30)
    assert refused.value.code() == grpc.StatusCode.RESOURCE_EXHAUSTED
    store = lineage_pb2_grpc.LineageServiceStub(servers[STORE])
    archive = b"\x1f" * (MAX_ARCHIVE_BYTES + ENVELOPE_BYTES + 1)
    with pytest.raises(grpc.RpcError) as refused:
        store.ImportRun(lineage_pb2.ImportRunRequest(archive=archive), timeout=30)
    assert refused.value.code() == grpc.StatusCode.RESOURCE_EXHAUSTED
    # refused by gRPC before the request is read, not by the archive check behind it
    assert "KF_API_MAX_ARCHIVE_BYTES" not in (refused.value.details() or "")
    # both still serve
    assert status(servers[EVOLVER], EVOLVER) == SERVING
    assert status(servers[STORE], STORE) == SERVING


def test_a_stopping_store_says_not_serving_before_it_goes(
    stack: Stack, servers: dict[str, grpc.Channel]
) -> None:
    """Last in the module: it stops the store."""
    channel = servers[STORE]
    wait_serving(channel, STORE)
    seen: list[int] = []
    watching = threading.Event()

    def watch() -> None:
        stream = health_pb2_grpc.HealthStub(channel).Watch(
            health_pb2.HealthCheckRequest(service=STORE), timeout=60
        )
        try:
            for response in stream:
                seen.append(response.status)
                watching.set()
        except grpc.RpcError:  # the server went away: the stream ends
            pass

    watcher = threading.Thread(target=watch, daemon=True)
    watcher.start()
    assert watching.wait(30)
    stack.service("store").stop()
    watcher.join(60)
    assert not watcher.is_alive()
    assert seen[0] == SERVING
    assert NOT_SERVING in seen, seen
