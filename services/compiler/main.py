"""Compiler service entry point: one worker pool per build target listed in KF_HARDWARE, each running up to
KF_COMPILE_CONCURRENCY builds at once (they run in threads; the toolchains are separate processes)."""

from __future__ import annotations

from kernelfoundry.bus import subjects
from kernelfoundry.bus.consumer import decoder_for
from kernelfoundry.bus.protocol import Bus
from kernelfoundry.config import Settings
from kernelfoundry.service_host import ServiceParts, make_consumer, run_service
from kernelfoundry.services.compiler.handlers import CompileHandler
from kernelfoundry.stack.quiet_host import QuietHost
from kernelfoundry.telemetry.metrics import Metrics
from kernelfoundry.v1 import build_pb2

SERVICE = "compiler"


async def wire(settings: Settings, bus: Bus, metrics: Metrics) -> ServiceParts:
    quiet = QuietHost(settings.timing_lock_dir)
    handler = CompileHandler(bus, settings.state_dir / "build-cache", metrics, quiet)
    consumers = []
    for target in settings.hardware_list:
        consumers.append(
            make_consumer(
                settings,
                bus,
                metrics,
                SERVICE,
                stream=subjects.WORK_STREAM,
                durable=f"compiler-{target.replace('.', '-')}",
                filter_subjects=(subjects.compile_(target),),
                decode=decoder_for(build_pb2.CompileCandidate),
                handler=handler,
                concurrency=settings.resolved_compile_concurrency,
            )
        )
    return ServiceParts(consumers=consumers)


def main(settings: Settings) -> None:
    run_service(SERVICE, settings, wire)
