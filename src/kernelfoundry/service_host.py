"""Hosting a service process: logging, metrics endpoint, bus connection, signals, consumer loops.

Entry points call `run_service` with a function that wires handlers; nothing here knows any service's
domain. Public gRPC APIs are built by `public_grpc_server`, which puts every method behind the edge
interceptor (kernelfoundry.api). SIGINT/SIGTERM stop the loops cleanly: a message being handled
finishes (or is redelivered to a peer if the process is killed outright).
"""

from __future__ import annotations

import asyncio
import contextlib
import signal
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import grpc
import grpc.aio

from kernelfoundry.api.interceptor import Admission, EdgeInterceptor
from kernelfoundry.bus.consumer import Consumer, ConsumerSpec, Handler
from kernelfoundry.bus.jetstream import Bus
from kernelfoundry.config import Settings
from kernelfoundry.telemetry.endpoint import start_metrics_server
from kernelfoundry.telemetry.health import Health
from kernelfoundry.telemetry.logging import configure_logging, get_logger
from kernelfoundry.telemetry.metrics import Metrics, subject_kind
from kernelfoundry.telemetry.queue_lag import QueueLagMonitor, consumer_pending_probe

log = get_logger(__name__)


@dataclass
class ServiceParts:
    """What a service's wiring returns: consumer loops, extra coroutines (servers), and closers."""

    consumers: Sequence[Consumer[Any]] = ()
    tasks: Sequence[Callable[[asyncio.Event], Awaitable[None]]] = ()
    closers: list[Callable[[], Awaitable[None]]] = field(default_factory=list)


Wiring = Callable[[Settings, Bus, Metrics], Awaitable[ServiceParts]]


def metrics_callback(metrics: Metrics, service: str) -> Callable[[str, str, float], None]:
    def on_result(subject: str, outcome: str, seconds: float) -> None:
        kind = subject_kind(subject)
        metrics.messages_processed_total.labels(
            service=service, subject_kind=kind, outcome=outcome.split(":")[0]
        ).inc()
        metrics.message_duration_seconds.labels(service=service, subject_kind=kind).observe(seconds)
        if outcome.startswith("dead_letter:"):
            metrics.dead_letters_total.labels(service=service, reason=outcome.split(":", 1)[1]).inc()

    return on_result


def make_consumer(
    settings: Settings,
    bus: Bus,
    metrics: Metrics,
    service: str,
    *,
    stream: str,
    durable: str,
    filter_subjects: tuple[str, ...],
    decode: Callable[[str, bytes], Any],
    handler: Handler[Any],
    batch: int = 1,
    concurrency: int = 1,
) -> Consumer[Any]:
    """A consumer loop with the delivery settings of this deployment and this service's metrics."""
    spec = ConsumerSpec(
        stream=stream,
        durable=durable,
        filter_subjects=filter_subjects,
        ack_wait_s=settings.ack_wait_s,
        max_deliver=settings.max_deliver,
        max_ack_pending=settings.max_ack_pending,
        heartbeat_s=settings.heartbeat_s,
        batch=batch,
        concurrency=concurrency,
    )
    return Consumer(bus, spec, decode, handler, service=service, on_result=metrics_callback(metrics, service))


def public_grpc_server(
    service: str,
    admissions: Mapping[str, Admission] | None = None,
    *,
    max_receive_bytes: int,
    max_send_bytes: int | None = None,
) -> Any:
    """A gRPC server for a public API: every method behind the edge interceptor (decoding, the declared
    contract, `admissions` by method name, status codes), and requests above `max_receive_bytes` refused
    by gRPC itself with RESOURCE_EXHAUSTED before they are read."""
    options = [("grpc.max_receive_message_length", max_receive_bytes)]
    if max_send_bytes is not None:
        options.append(("grpc.max_send_message_length", max_send_bytes))
    return grpc.aio.server(interceptors=[EdgeInterceptor(service, admissions)], options=options)


@dataclass
class GrpcEndpoint:
    """A gRPC server a service runs beside its consumers: started as a task, stopped as a closer."""

    server: Any  # grpc.aio.Server
    address: str
    name: str

    async def run(self, stop: asyncio.Event) -> None:
        self.server.add_insecure_port(self.address)
        await self.server.start()
        log.info("gRPC API listening", api=self.name, address=self.address)
        await stop.wait()

    async def close(self) -> None:
        await self.server.stop(grace=2)


async def serve(service: str, settings: Settings, wiring: Wiring, stop: asyncio.Event | None = None) -> None:
    configure_logging(settings.log_level, settings.log_format, service)  # type: ignore[arg-type]
    stop = stop or asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        with contextlib.suppress(NotImplementedError, RuntimeError):  # not the main thread (tests)
            loop.add_signal_handler(sig, stop.set)
    metrics = Metrics()
    health = Health()
    port = start_metrics_server(settings.metrics_port, metrics.registry, health)
    bus = await Bus.connect(settings.nats_url, name=f"kf-{service}")
    health.add_check("nats_connected", lambda: bus.nc.is_connected)
    log.info("service started", service=service, nats=settings.nats_url, metrics_port=port)
    parts = await wiring(settings, bus, metrics)
    tasks = [asyncio.create_task(c.run(stop)) for c in parts.consumers]
    tasks += [asyncio.create_task(t(stop)) for t in parts.tasks]
    probes = {
        c.spec.durable: consumer_pending_probe(bus.js, c.spec.stream, c.spec.durable) for c in parts.consumers
    }
    if probes:
        tasks.append(asyncio.create_task(QueueLagMonitor(metrics, service, probes).run()))
    try:
        await stop.wait()
    finally:
        log.info("service stopping", service=service)
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        for close in parts.closers:
            await close()
        await bus.close()


def run_service(service: str, settings: Settings, wiring: Wiring) -> None:
    asyncio.run(serve(service, settings, wiring))
