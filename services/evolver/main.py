"""Evolver service entry point: the gRPC API plus the consumer of generation/compile/evaluation events."""

from __future__ import annotations

import asyncio

from kernelfoundry.api.serving import probe_for
from kernelfoundry.bus import subjects
from kernelfoundry.bus.events import decode_event
from kernelfoundry.bus.jetstream import Bus
from kernelfoundry.config import Settings
from kernelfoundry.service_host import (
    GrpcEndpoint,
    ServiceParts,
    make_consumer,
    public_grpc_server,
    run_service,
)
from kernelfoundry.services.evolver.api import KernelFoundryApi, admissions
from kernelfoundry.services.evolver.handlers import EVOLVER_EVENTS, EventHandler
from kernelfoundry.services.evolver.liveness import LivenessWatch, watch_runs
from kernelfoundry.services.evolver.resume import resume_runs
from kernelfoundry.services.evolver.runs import RunCoordinator
from kernelfoundry.telemetry.metrics import Metrics
from kernelfoundry.v1 import service_pb2_grpc

SERVICE = "evolver"


async def wire(settings: Settings, bus: Bus, metrics: Metrics) -> ServiceParts:
    runs = RunCoordinator(settings.state_dir, build_targets=settings.build_targets_map)
    probe = probe_for(settings, bus.js)
    # Resume before consuming: events for a run must find it restored. Runs that cannot be resumed fail.
    served = frozenset((await probe.served()).generators)
    await bus.publish_all(
        await resume_runs(runs, bus, settings.store_grpc_address, settings.resume_wait_s, served)
    )
    consumer = make_consumer(
        settings,
        bus,
        metrics,
        SERVICE,
        stream=subjects.EVENTS_STREAM,
        durable="evolver",
        filter_subjects=EVOLVER_EVENTS,
        decode=decode_event,
        handler=EventHandler(runs, metrics),
        batch=16,
    )
    server = public_grpc_server(
        SERVICE, admissions(settings, runs, probe), max_receive_bytes=settings.api_max_request_bytes
    )
    service_pb2_grpc.add_KernelFoundryServiceServicer_to_server(
        KernelFoundryApi(settings, bus, runs, metrics), server
    )
    api = GrpcEndpoint(server, settings.grpc_address, "KernelFoundryService")
    watch = LivenessWatch(
        settings.run_unserved_grace_s,
        settings.run_stall_timeout_s,
        configured_hardware=frozenset(settings.served_hardware_list),
    )

    async def liveness(stop: asyncio.Event) -> None:
        await watch_runs(stop, runs, bus, probe, watch)

    return ServiceParts(consumers=[consumer], tasks=[api.run, liveness], closers=[api.close])


def main(settings: Settings) -> None:
    run_service(SERVICE, settings, wire)
