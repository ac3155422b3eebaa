"""Hosting a service process: logging, metrics endpoint, bus connection, signals, consumer loops.

Entry points call `run_service` with a function that wires handlers to a Bus (the protocol: `serve` connects
the JetStream one; tests wire the same functions to the in-memory one); nothing here knows any service's
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

from kernelfoundry.api.auth import PLAINTEXT_SERVER, ServerSecurity
from kernelfoundry.api.interceptor import Admission, EdgeInterceptor
from kernelfoundry.api.standard import StandardServices
from kernelfoundry.api.transport import server_options
from kernelfoundry.bus.consumer import Consumer, ConsumerSpec, Handler
from kernelfoundry.bus.jetstream import JetStreamBus
from kernelfoundry.bus.protocol import Bus
from kernelfoundry.bus.topology import Topology
from kernelfoundry.config import Settings
from kernelfoundry.telemetry.endpoint import start_metrics_server
from kernelfoundry.telemetry.health import Health
from kernelfoundry.telemetry.logging import configure_logging, get_logger
from kernelfoundry.telemetry.metrics import Metrics, subject_kind
from kernelfoundry.telemetry.queue_lag import PendingProbe, QueueLagMonitor

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


def pending_probe(bus: Bus, stream: str, durable: str) -> PendingProbe:
    """A queue-lag probe: the durable consumer's messages not delivered yet (LookupError while it does
    not exist, so the gauge keeps its last value)."""

    async def probe() -> int:
        state = await bus.consumer_state(stream, durable)
        if state is None:
            raise LookupError(f"no consumer {durable!r} on {stream}")
        return state.pending

    return probe


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
    security: ServerSecurity = PLAINTEXT_SERVER,
) -> Any:
    """A gRPC server for a public API: with a token in `security`, UNAUTHENTICATED for any call without
    it (kernelfoundry.api.auth) before anything else; every method behind the edge interceptor
    (decoding, the declared contract, `admissions` by method name, status codes), requests above
    `max_receive_bytes` refused by gRPC itself with RESOURCE_EXHAUSTED before they are read, responses
    above `max_send_bytes` (by default the same bound) not sent, and keepalive for long streams
    (kernelfoundry.api.transport)."""
    options = server_options(
        max_receive_bytes=max_receive_bytes,
        max_send_bytes=max_receive_bytes if max_send_bytes is None else max_send_bytes,
    )
    interceptors = [*security.interceptors(), EdgeInterceptor(service, admissions)]
    return grpc.aio.server(interceptors=interceptors, options=options)


@dataclass
class GrpcEndpoint:
    """A gRPC server a service runs beside its consumers: started as a task, stopped as a closer. With
    `standard` (health and reflection), health says SERVING once it listens and NOT_SERVING from the
    moment it starts stopping. It listens with TLS when `security` has a certificate."""

    server: Any  # grpc.aio.Server
    address: str
    name: str
    standard: StandardServices | None = None
    security: ServerSecurity = PLAINTEXT_SERVER

    async def run(self, stop: asyncio.Event) -> None:
        self.security.add_port(self.server, self.address)
        await self.server.start()
        if self.standard is not None:
            await self.standard.serving()
        if self.security.authenticates and not self.security.tls:
            log.warning("gRPC API token travels in plaintext: configure TLS", api=self.name)
        log.info(
            "gRPC API listening",
            api=self.name,
            address=self.address,
            tls=self.security.tls,
            token=self.security.authenticates,
        )
        await stop.wait()

    async def close(self) -> None:
        if self.standard is not None:
            await self.standard.shutting_down()
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
    bus = await JetStreamBus.connect(
        settings.nats_url,
        name=f"kf-{service}",
        user=settings.nats_user,
        password=settings.nats_password.get_secret_value(),
        topology=Topology.from_settings(settings),
    )
    health.add_check("nats_connected", bus.connected)
    log.info(
        "service started",
        service=service,
        nats=settings.nats_url,
        nats_user=settings.nats_user,
        metrics_port=port,
    )
    parts = await wiring(settings, bus, metrics)
    tasks = [asyncio.create_task(c.run(stop)) for c in parts.consumers]
    tasks += [asyncio.create_task(t(stop)) for t in parts.tasks]
    probes = {c.spec.durable: pending_probe(bus, c.spec.stream, c.spec.durable) for c in parts.consumers}
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
