"""Health, reflection and the transport options of a public gRPC server, in process through real servers.

The server is built as the services build theirs (`public_grpc_server`, the edge interceptor in front of
every method, `add_standard_services`, `GrpcEndpoint`), with a KernelFoundryService whose handlers are
never reached unless a call passes the edge: health answers NOT_SERVING before the endpoint runs,
SERVING while it runs, and a watcher sees NOT_SERVING as soon as the endpoint starts stopping; reflection
lists the public service and the standard ones; a request above the receive limit is RESOURCE_EXHAUSTED.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

import grpc
import grpc.aio
import pytest
from google.protobuf.descriptor_pb2 import FileDescriptorProto
from grpc_health.v1 import health_pb2, health_pb2_grpc
from grpc_reflection.v1alpha import reflection_pb2, reflection_pb2_grpc

from kernelfoundry.api.errors import ApiError
from kernelfoundry.api.standard import HEALTH_SERVICE, REFLECTION_SERVICE, add_standard_services
from kernelfoundry.service_host import GrpcEndpoint, public_grpc_server
from kernelfoundry.v1 import service_pb2, service_pb2_grpc

PUBLIC = service_pb2.DESCRIPTOR.services_by_name["KernelFoundryService"].full_name
MAX_RECEIVE = 64 * 1024
SERVING = health_pb2.HealthCheckResponse.SERVING
NOT_SERVING = health_pb2.HealthCheckResponse.NOT_SERVING


class Endpoint:
    def __init__(self, endpoint: GrpcEndpoint, stop: asyncio.Event, channel: grpc.aio.Channel) -> None:
        self.endpoint = endpoint
        self.stop = stop
        self.channel = channel
        self.health = health_pb2_grpc.HealthStub(channel)
        self.task: asyncio.Task[None] | None = None

    async def start(self) -> None:
        self.task = asyncio.create_task(self.endpoint.run(self.stop))
        for _ in range(200):  # run() marks SERVING right after the server starts
            if await self.status("") == SERVING:
                return
            await asyncio.sleep(0.01)
        raise AssertionError("the endpoint never reported SERVING")

    async def status(self, service: str) -> int:
        response = await self.health.Check(health_pb2.HealthCheckRequest(service=service), timeout=5)
        return response.status


@pytest.fixture
async def endpoint(unused_tcp_port: int) -> AsyncIterator[Endpoint]:
    server = public_grpc_server("evolver", max_receive_bytes=MAX_RECEIVE)
    # The base servicer answers UNIMPLEMENTED: reaching it means the edge let the call through.
    service_pb2_grpc.add_KernelFoundryServiceServicer_to_server(
        service_pb2_grpc.KernelFoundryServiceServicer(), server
    )
    standard = await add_standard_services(server, [PUBLIC])
    address = f"127.0.0.1:{unused_tcp_port}"
    stop = asyncio.Event()
    channel = grpc.aio.insecure_channel(address)
    ep = Endpoint(GrpcEndpoint(server, address, "KernelFoundryService", standard), stop, channel)
    try:
        yield ep
    finally:
        stop.set()
        await ep.endpoint.close()
        if ep.task is not None:
            await ep.task
        await channel.close()


async def test_health_is_not_serving_until_the_endpoint_runs(endpoint: Endpoint) -> None:
    endpoint.endpoint.server.add_insecure_port(endpoint.endpoint.address)
    await endpoint.endpoint.server.start()  # listening, but the endpoint's run() has not marked it served
    assert await endpoint.status("") == NOT_SERVING
    assert await endpoint.status(PUBLIC) == NOT_SERVING


async def test_health_serves_the_server_and_each_public_service(endpoint: Endpoint) -> None:
    await endpoint.start()
    assert await endpoint.status("") == SERVING
    assert await endpoint.status(PUBLIC) == SERVING
    with pytest.raises(grpc.aio.AioRpcError) as unknown:
        await endpoint.status("kernelfoundry.v1.NoSuchService")
    assert unknown.value.code() == grpc.StatusCode.NOT_FOUND


async def test_a_watcher_sees_not_serving_when_the_endpoint_starts_stopping(endpoint: Endpoint) -> None:
    await endpoint.start()
    watch = endpoint.health.Watch(health_pb2.HealthCheckRequest(service=PUBLIC))
    assert (await watch.read()).status == SERVING
    closing = asyncio.create_task(endpoint.endpoint.close())
    assert (await asyncio.wait_for(watch.read(), timeout=5)).status == NOT_SERVING
    watch.cancel()
    await closing


async def test_reflection_lists_the_public_and_the_standard_services(endpoint: Endpoint) -> None:
    await endpoint.start()
    stub = reflection_pb2_grpc.ServerReflectionStub(endpoint.channel)
    call = stub.ServerReflectionInfo(iter([reflection_pb2.ServerReflectionRequest(list_services="")]))
    responses = [response async for response in call]
    assert len(responses) == 1
    names = {service.name for service in responses[0].list_services_response.service}
    assert names == {PUBLIC, HEALTH_SERVICE, REFLECTION_SERVICE}
    # The public service's descriptor is served too, so grpcurl can build requests without the protos.
    call = stub.ServerReflectionInfo(
        iter([reflection_pb2.ServerReflectionRequest(file_containing_symbol=PUBLIC)])
    )
    (answer,) = [response async for response in call]
    files = [
        FileDescriptorProto.FromString(raw) for raw in answer.file_descriptor_response.file_descriptor_proto
    ]
    described = {f"{file.package}.{service.name}" for file in files for service in file.service}
    assert PUBLIC in described


async def test_public_methods_still_pass_the_edge(endpoint: Endpoint) -> None:
    await endpoint.start()
    stub = service_pb2_grpc.KernelFoundryServiceStub(endpoint.channel)
    with pytest.raises(grpc.aio.AioRpcError) as refused:  # the contract: run_id is required
        await stub.GetRun(service_pb2.GetRunRequest(), timeout=5)
    assert refused.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    with pytest.raises(grpc.aio.AioRpcError) as undecodable:  # the edge's safe deserializer
        await endpoint.channel.unary_unary(f"/{PUBLIC}/GetRun")(b"\xff\xff\xff\xff", timeout=5)
    assert undecodable.value.code() == grpc.StatusCode.INVALID_ARGUMENT


async def test_a_request_over_the_receive_limit_is_resource_exhausted(endpoint: Endpoint) -> None:
    await endpoint.start()
    stub = service_pb2_grpc.KernelFoundryServiceStub(endpoint.channel)
    with pytest.raises(grpc.aio.AioRpcError) as refused:
        await stub.GetRun(service_pb2.GetRunRequest(run_id="r" * (MAX_RECEIVE + 1)), timeout=5)
    assert refused.value.code() == grpc.StatusCode.RESOURCE_EXHAUSTED


async def test_the_edge_lets_the_standard_services_through_and_nothing_else(unused_tcp_port: int) -> None:
    """Admissions are keyed by method name: one for `Check` must not catch health's Check or Watch."""
    refused: list[str] = []

    async def refuse(request: object) -> None:
        refused.append(type(request).__name__)
        raise ApiError(grpc.StatusCode.FAILED_PRECONDITION, "refused", "refused by admission")

    server = public_grpc_server(
        "evolver", {"Check": refuse, "Watch": refuse, "GetRun": refuse}, max_receive_bytes=MAX_RECEIVE
    )
    service_pb2_grpc.add_KernelFoundryServiceServicer_to_server(
        service_pb2_grpc.KernelFoundryServiceServicer(), server
    )
    standard = await add_standard_services(server, [PUBLIC])
    address = f"127.0.0.1:{unused_tcp_port}"
    stop = asyncio.Event()
    async with grpc.aio.insecure_channel(address) as channel:
        endpoint = Endpoint(GrpcEndpoint(server, address, "KernelFoundryService", standard), stop, channel)
        try:
            await endpoint.start()
            assert await endpoint.status(PUBLIC) == SERVING
            watch = endpoint.health.Watch(health_pb2.HealthCheckRequest(service=PUBLIC))
            assert (await watch.read()).status == SERVING
            watch.cancel()
            assert refused == []
            stub = service_pb2_grpc.KernelFoundryServiceStub(channel)
            with pytest.raises(grpc.aio.AioRpcError) as public:  # a public method still meets its admission
                await stub.GetRun(service_pb2.GetRunRequest(run_id="run-0123456789ab"), timeout=5)
            assert public.value.code() == grpc.StatusCode.FAILED_PRECONDITION
            assert refused == ["GetRunRequest"]
        finally:
            stop.set()
            await endpoint.endpoint.close()
            if endpoint.task is not None:
                await endpoint.task
