"""LLM service entry point: serves generation requests for the generator named by KF_GENERATOR."""

from __future__ import annotations

from kernelfoundry.bus import subjects
from kernelfoundry.bus.consumer import decoder_for
from kernelfoundry.bus.jetstream import Bus
from kernelfoundry.config import Settings
from kernelfoundry.generators.base import Generator
from kernelfoundry.service_host import ServiceParts, make_consumer, run_service
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
    consumer = make_consumer(
        settings,
        bus,
        metrics,
        SERVICE,
        stream=subjects.WORK_STREAM,
        durable=f"llm-{settings.generator}",
        filter_subjects=(subjects.generate(settings.generator),),
        decode=decoder_for(search_pb2.GenerateCandidates),
        handler=GenerateHandler(generator, metrics),
    )
    return ServiceParts(consumers=[consumer])


def main(settings: Settings) -> None:
    run_service(SERVICE, settings, wire)
