"""Store service entry point: its own durable consumer of the whole event history, plus the lineage API."""

from __future__ import annotations

from kernelfoundry.api.admission import ImportRunAdmission
from kernelfoundry.api.auth import ServerSecurity
from kernelfoundry.api.limits import ApiLimits
from kernelfoundry.api.standard import add_standard_services
from kernelfoundry.bus import artifact_cleanup, subjects
from kernelfoundry.bus.artifact_cleanup import SettledArtifacts, grace_for
from kernelfoundry.bus.events import decode_event
from kernelfoundry.bus.protocol import Bus
from kernelfoundry.config import Settings
from kernelfoundry.lineage.connection import open_repository
from kernelfoundry.service_host import (
    GrpcEndpoint,
    ServiceParts,
    make_consumer,
    public_grpc_server,
    run_service,
)
from kernelfoundry.services.store.api import LineageApi
from kernelfoundry.services.store.handlers import StoreHandler
from kernelfoundry.telemetry.metrics import Metrics
from kernelfoundry.v1 import lineage_pb2, lineage_pb2_grpc

SERVICE = "store"
PUBLIC_SERVICE = lineage_pb2.DESCRIPTOR.services_by_name["LineageService"].full_name


async def wire(settings: Settings, bus: Bus, metrics: Metrics) -> ServiceParts:
    settings.state_dir.mkdir(parents=True, exist_ok=True)
    repository = await open_repository(settings.resolved_store_uri)
    consumer = make_consumer(
        settings,
        bus,
        metrics,
        SERVICE,
        stream=subjects.EVENTS_STREAM,
        durable="store",
        filter_subjects=(f"{subjects.EVENTS_PREFIX}.>",),
        decode=decode_event,
        handler=StoreHandler(repository, metrics),
        batch=64,
    )
    # the built units of candidates whose result is recorded, deleted after the redeliveries' grace
    cleanup = SettledArtifacts(bus, grace_for(settings.ack_wait_s, settings.max_deliver))
    settled = make_consumer(
        settings,
        bus,
        metrics,
        SERVICE,
        stream=subjects.EVENTS_STREAM,
        durable=artifact_cleanup.DURABLE,
        filter_subjects=artifact_cleanup.FILTER_SUBJECTS,
        decode=decode_event,
        handler=cleanup,
        batch=64,
    )
    limits = ApiLimits.from_settings(settings)
    security = ServerSecurity.from_settings(settings)
    # run archives travel whole through ExportRun/ImportRun: the request limit is the archive limit
    server = public_grpc_server(
        SERVICE,
        {"ImportRun": ImportRunAdmission(limits)},
        max_receive_bytes=limits.max_archive_bytes + 64 * 1024,
        max_send_bytes=256 * 1024 * 1024,
        security=security,
    )
    lineage_pb2_grpc.add_LineageServiceServicer_to_server(LineageApi(repository, limits), server)
    standard = await add_standard_services(server, [PUBLIC_SERVICE])
    api = GrpcEndpoint(server, settings.store_grpc_address, "LineageService", standard, security)
    return ServiceParts(
        consumers=[consumer, settled], tasks=[api.run, cleanup.run], closers=[api.close, repository.close]
    )


def main(settings: Settings) -> None:
    run_service(SERVICE, settings, wire)
