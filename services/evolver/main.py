"""Evolver service entry point: the gRPC API plus the consumer of generation/compile/evaluation events."""

from __future__ import annotations

import asyncio
from functools import partial

from kernelfoundry.api.auth import ServerSecurity
from kernelfoundry.api.serving import probe_for
from kernelfoundry.api.standard import add_standard_services
from kernelfoundry.bus import subjects
from kernelfoundry.bus.events import decode_event
from kernelfoundry.bus.protocol import Bus
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
from kernelfoundry.services.evolver.run_metrics import (
    record_evaluation_duration,
    record_run_finished,
    restore_best_speedups,
)
from kernelfoundry.services.evolver.runs import RunCoordinator
from kernelfoundry.telemetry.metrics import Metrics
from kernelfoundry.v1 import service_pb2, service_pb2_grpc

SERVICE = "evolver"
STORE_RECHECK_S = 5.0
PUBLIC_SERVICE = service_pb2.DESCRIPTOR.services_by_name["KernelFoundryService"].full_name


async def wire(settings: Settings, bus: Bus, metrics: Metrics) -> ServiceParts:
    runs = RunCoordinator(
        settings.state_dir,
        build_targets=settings.build_targets_map,
        on_finished=partial(record_run_finished, metrics),
        on_evaluation=partial(record_evaluation_duration, metrics),
        screening=settings.screening,
    )
    metrics.runs_active.set_function(runs.active_count)  # counted, never incremented: cannot drift
    probe = probe_for(settings, bus)
    # Resume before consuming: events for a run must find it restored. Runs that cannot be resumed fail.
    served = frozenset((await probe.served()).generators)
    await bus.publish_all(
        await resume_runs(runs, bus, settings.store_grpc_address, settings.resume_wait_s, served)
    )
    # kf_kernel_speedup is the best figure of every ended run, not only of those since this start
    # (the store answered resume already, or resume waited its time for it: no second long wait here)
    await restore_best_speedups(metrics, settings.store_grpc_address, STORE_RECHECK_S)
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
    security = ServerSecurity.from_settings(settings)
    # Requests and responses (run state, progress, a kernel's source) under the same bound.
    server = public_grpc_server(
        SERVICE,
        admissions(settings, runs, probe),
        max_receive_bytes=settings.api_max_request_bytes,
        max_send_bytes=settings.api_max_request_bytes,
        security=security,
    )
    servicer = KernelFoundryApi(settings, bus, runs, probe)
    service_pb2_grpc.add_KernelFoundryServiceServicer_to_server(servicer, server)
    standard = await add_standard_services(server, [PUBLIC_SERVICE])
    api = GrpcEndpoint(server, settings.grpc_address, "KernelFoundryService", standard, security)
    watch = LivenessWatch(
        settings.run_unserved_grace_s,
        settings.run_stall_timeout_s,
        configured_hardware=frozenset(settings.served_hardware_list),
    )

    async def liveness(stop: asyncio.Event) -> None:
        await watch_runs(stop, runs, bus, probe, watch)

    return ServiceParts(consumers=[consumer], tasks=[api.run, liveness], closers=[api.close, servicer.close])


def main(settings: Settings) -> None:
    run_service(SERVICE, settings, wire)
