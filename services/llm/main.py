"""LLM service entry point: serves generation requests for the generator named by KF_GENERATOR.

Without KF_LLM_PROVIDERS it serves the built-in heuristic proposer from sandboxed workers. With
providers it serves them as one ensemble under KF_GENERATOR (kernelfoundry.generators.ensemble): HTTP
providers answer from this process (the only one with network), the heuristic (as a member or as the
fallback, KF_LLM_FALLBACK) still from sandboxed workers; a second consumer reads the archive outcomes
back for the ensemble's weights and the meta-prompter, and cancels the requests of runs that finish.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from kernelfoundry.bus import subjects
from kernelfoundry.bus.consumer import Consumer, Handler, decoder_for
from kernelfoundry.bus.events import decode_event
from kernelfoundry.bus.protocol import Bus
from kernelfoundry.config import Settings
from kernelfoundry.generators.accounting import PriceTable
from kernelfoundry.generators.base import Generator
from kernelfoundry.generators.ensemble import Ensemble, Member
from kernelfoundry.generators.metaprompter import LLMMetaPrompter
from kernelfoundry.generators.providers.base import ChatProvider
from kernelfoundry.generators.registry import ProviderSpec, build, parse_specs
from kernelfoundry.service_host import ServiceParts, make_consumer, run_service
from kernelfoundry.services.llm.handlers import GenerateHandler, OutcomeHandler
from kernelfoundry.services.llm.isolation import GeneratorPool
from kernelfoundry.services.llm.pooled import PooledGenerator
from kernelfoundry.telemetry.logging import get_logger
from kernelfoundry.telemetry.metrics import Metrics
from kernelfoundry.v1 import search_pb2

SERVICE = "llm"
# Generators that execute the task's reference source (the heuristic proposer traces it with torch.fx):
# they answer from sandboxed workers (services/llm/isolation.py), never in this process.
RUNS_TASK_CODE = frozenset({"heuristic"})
# The events an ensemble learns from (results on every pool's subject as well as the bare one).
OUTCOME_SUBJECTS = (
    subjects.ARCHIVE_UPDATED,
    subjects.RUN_FINISHED,
    subjects.EVALUATION_FINISHED,
    f"{subjects.EVALUATION_FINISHED}.>",
)

log = get_logger(__name__)


def make_generator(name: str) -> Generator:
    """The generator a sandboxed worker runs (services/llm/isolated_worker.py)."""
    if name == "heuristic":
        from kernelfoundry.generators.heuristic import HeuristicGenerator

        return HeuristicGenerator()
    raise ValueError(f"unknown generator {name!r}; available here: heuristic")


def outcomes_durable(generator: str) -> str:
    return f"llm-{generator}-outcomes"


def make_ensemble(
    settings: Settings, pool: GeneratorPool | None, environ: Mapping[str, str] | None = None, **options: Any
) -> tuple[Ensemble, LLMMetaPrompter | None]:
    """The ensemble KF_LLM_PROVIDERS describe, served as KF_GENERATOR, and the meta-prompter."""
    specs = parse_specs(settings.llm_providers)
    prices = PriceTable.from_json(settings.llm_prices)

    def pooled(spec: ProviderSpec, **_: Any) -> Generator:
        assert pool is not None
        return PooledGenerator(pool, spec.name)

    members = [
        Member(
            build(spec, prices=prices, environ=environ, overrides={"heuristic": pooled}, **options),
            spec.weight,
        )
        for spec in specs
    ]
    fallback: Generator | None = None
    if settings.llm_fallback:
        heuristic = next((m.generator for m in members if isinstance(m.generator, PooledGenerator)), None)
        fallback = heuristic or (PooledGenerator(pool, "heuristic") if pool is not None else None)
    ensemble = Ensemble(
        settings.generator,
        members,
        fallback,
        cooldown_s=settings.llm_cooldown_s,
        seeder=settings.llm_seeder,
    )
    metaprompter = None
    if settings.llm_meta_prompter:
        chosen = ensemble.members.get(settings.llm_meta_prompter)
        if chosen is None or not isinstance(chosen.generator, ChatProvider):
            raise ValueError(
                f"KF_LLM_META_PROMPTER={settings.llm_meta_prompter!r}: no chat provider of that name"
                " in KF_LLM_PROVIDERS"
            )
        metaprompter = LLMMetaPrompter(chosen.generator)
    return ensemble, metaprompter


async def wire(settings: Settings, bus: Bus, metrics: Metrics) -> ServiceParts:
    specs = parse_specs(settings.llm_providers)
    if not specs:
        return _wire_single(settings, bus, metrics)
    needs_pool = settings.llm_fallback or any(s.kind in RUNS_TASK_CODE for s in specs)
    pool = GeneratorPool("heuristic") if needs_pool else None
    ensemble, metaprompter = make_ensemble(settings, pool)
    handler = GenerateHandler(ensemble, metrics, metaprompter=metaprompter)
    log.info(
        "serving an ensemble",
        generator=settings.generator,
        members={n: m.weight for n, m in ensemble.members.items()},
        fallback=ensemble.fallback.name if ensemble.fallback else "",
        meta_prompter=settings.llm_meta_prompter,
    )
    generate = generate_consumer(settings, bus, metrics, handler, concurrency=settings.llm_concurrency)
    outcomes = make_consumer(
        settings,
        bus,
        metrics,
        SERVICE,
        stream=subjects.EVENTS_STREAM,
        durable=outcomes_durable(settings.generator),
        filter_subjects=OUTCOME_SUBJECTS,
        decode=decode_event,
        handler=OutcomeHandler(handler, ensemble, metaprompter),
        batch=64,
    )
    parts = ServiceParts(consumers=[generate, outcomes])

    async def close() -> None:
        await ensemble.close()
        if pool is not None:
            pool.close()

    parts.closers.append(close)
    return parts


def generate_consumer(
    settings: Settings, bus: Bus, metrics: Metrics, handler: Handler[Any], concurrency: int = 1
) -> Consumer[Any]:
    """The work consumer of this generator's requests (`kf.generate.<generator>`)."""
    return make_consumer(
        settings,
        bus,
        metrics,
        SERVICE,
        stream=subjects.WORK_STREAM,
        durable=f"llm-{settings.generator}",
        filter_subjects=(subjects.generate(settings.generator),),
        decode=decoder_for(search_pb2.GenerateCandidates),
        handler=handler,
        concurrency=concurrency,
    )


def _wire_single(settings: Settings, bus: Bus, metrics: Metrics) -> ServiceParts:
    generator = make_generator(settings.generator)
    isolation = GeneratorPool(settings.generator) if settings.generator in RUNS_TASK_CODE else None
    consumer = generate_consumer(settings, bus, metrics, GenerateHandler(generator, metrics, isolation))
    parts = ServiceParts(consumers=[consumer])
    if isolation is not None:

        async def stop_workers() -> None:
            isolation.close()

        parts.closers.append(stop_workers)
    return parts


def main(settings: Settings) -> None:
    run_service(SERVICE, settings, wire)
