"""LLM service entry point: serves generation requests for the generator named by KF_GENERATOR."""

from __future__ import annotations

from kernelfoundry.bus import subjects
from kernelfoundry.bus.consumer import Consumer, ConsumerSpec, decoder_for
from kernelfoundry.bus.jetstream import Bus
from kernelfoundry.config import Settings
from kernelfoundry.generators.base import Generator
from kernelfoundry.service_host import ServiceParts, metrics_callback, run_service
from kernelfoundry.services.llm.handlers import GenerateHandler
from kernelfoundry.telemetry.metrics import Metrics
from kernelfoundry.v1 import search_pb2

SERVICE = "llm"


def make_generator(name: str) -> Generator:
    if name == "heuristic":
        from kernelfoundry.generators.heuristic import HeuristicGenerator

        return HeuristicGenerator()
    raise ValueError(f"unknown generator {name!r}; available here: heuristic")


async def wire(settings: Settings, bus: Bus, metrics: Metrics) -> ServiceParts:
    generator = make_generator(settings.generator)
    spec = ConsumerSpec(
        stream=subjects.WORK_STREAM,
        durable=f"llm-{settings.generator}",
        filter_subjects=(subjects.generate(settings.generator),),
        ack_wait_s=settings.ack_wait_s,
        max_deliver=settings.max_deliver,
        max_ack_pending=settings.max_ack_pending,
        heartbeat_s=settings.heartbeat_s,
    )
    consumer = Consumer(
        bus,
        spec,
        decoder_for(search_pb2.GenerateCandidates),
        GenerateHandler(generator, metrics),
        service=SERVICE,
        on_result=metrics_callback(metrics, SERVICE),
    )
    return ServiceParts(consumers=[consumer])


def main(settings: Settings) -> None:
    run_service(SERVICE, settings, wire)
