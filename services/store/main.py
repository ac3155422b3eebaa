"""Store service entry point: its own durable consumer of the whole event history, into the lineage store."""

from __future__ import annotations

from kernelfoundry.services.store.handlers import StoreHandler

from kernelfoundry.bus import subjects
from kernelfoundry.bus.consumer import Consumer, ConsumerSpec
from kernelfoundry.bus.events import decode_event
from kernelfoundry.bus.jetstream import Bus
from kernelfoundry.config import Settings
from kernelfoundry.lineage.connection import open_repository
from kernelfoundry.service_host import ServiceParts, metrics_callback, run_service
from kernelfoundry.telemetry.metrics import Metrics

SERVICE = "store"


async def wire(settings: Settings, bus: Bus, metrics: Metrics) -> ServiceParts:
    settings.state_dir.mkdir(parents=True, exist_ok=True)
    repository = await open_repository(settings.resolved_store_uri)
    spec = ConsumerSpec(
        stream=subjects.EVENTS_STREAM,
        durable="store",
        filter_subjects=(f"{subjects.EVENTS_PREFIX}.>",),
        ack_wait_s=settings.ack_wait_s,
        max_deliver=settings.max_deliver,
        max_ack_pending=settings.max_ack_pending,
        heartbeat_s=settings.heartbeat_s,
        batch=64,
    )
    consumer = Consumer(
        bus,
        spec,
        decode_event,
        StoreHandler(repository, metrics),
        service=SERVICE,
        on_result=metrics_callback(metrics, SERVICE),
    )
    return ServiceParts(consumers=[consumer], closers=[repository.close])


def main(settings: Settings) -> None:
    run_service(SERVICE, settings, wire)
