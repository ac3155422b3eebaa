"""LLM service handler: GenerateCandidates -> a generator -> CandidatesGenerated event.

Provider-neutral: the generator (built-in heuristic proposer, an HTTP LLM provider or an ensemble of
them) sits behind the Generator interface. A generator failure becomes an event with an error reason, so
the evolver can account for it; only transport problems make the request come back. The event names
the generator that answered (an ensemble's member), so candidates, usage records and metrics are per
model. With an LLM meta-prompter the request's guidance sections are rewritten first (its tokens are
added to the request's usage). A run that finishes cancels its requests in flight (OutcomeHandler).
"""

from __future__ import annotations

import asyncio
import time
from collections import OrderedDict
from collections.abc import Sequence
from dataclasses import replace

from kernelfoundry.bus import subjects
from kernelfoundry.bus.consumer import Delivery, Reject
from kernelfoundry.bus.protocol import Outgoing
from kernelfoundry.codec import (
    descriptors_from_proto,
    descriptors_to_proto,
    kernel_from_proto,
    kernel_to_proto,
    task_from_proto,
)
from kernelfoundry.domain.metaprompt import Feedback
from kernelfoundry.generators.base import (
    MUTATIONS,
    GenerationRequest,
    Generator,
    Inspiration,
    MemberRecord,
    ParentKernel,
)
from kernelfoundry.generators.ensemble import Ensemble
from kernelfoundry.generators.metaprompter import LLMMetaPrompter
from kernelfoundry.services.llm.ensemble_metrics import EnsembleMetrics
from kernelfoundry.services.llm.isolation import GeneratorPool, WorkerFailure
from kernelfoundry.tasks.model import TaskError
from kernelfoundry.telemetry.logging import get_logger
from kernelfoundry.telemetry.metrics import Metrics
from kernelfoundry.v1 import evaluation_pb2, run_pb2, search_pb2

log = get_logger(__name__)


def request_from_proto(message: search_pb2.GenerateCandidates) -> GenerationRequest:
    parent = None
    if message.HasField("parent"):
        p = message.parent
        parent = ParentKernel(
            source=kernel_from_proto(p.source),
            descriptors=descriptors_from_proto(p.descriptors),
            speedup=p.speedup or None,
            runtime_ms=p.runtime_ms or None,
            feedback=p.feedback,
            eager_ms=p.eager_ms or None,
            compile_ms=p.compile_ms or None,
            roofline_fraction=p.roofline_fraction or None,
            bound=p.bound,
        )
    mutation = message.mutation or None
    if message.repair and mutation not in MUTATIONS:
        mutation = None  # a repair names the engine's repair operator: the fix is the only change asked
    return GenerationRequest(
        request_id=message.request_id,
        task=task_from_proto(message.task),
        backend=message.backend or "cpu",  # type: ignore[arg-type]
        parent=parent,
        mutation=mutation,
        hints=tuple(message.hints),
        guidance=dict(message.guidance),
        proposal_weights=dict(message.proposal_weights),
        count=message.count or 1,
        seed=message.seed,
        repair=message.repair,
        inspirations=tuple(
            Inspiration(
                source=kernel_from_proto(i.source),
                descriptors=descriptors_from_proto(i.descriptors),
                speedup=i.speedup or None,
                runtime_ms=i.runtime_ms or None,
            )
            for i in message.inspirations
        ),
        hardware=message.hardware,
        build_target=message.build_target,
        member_record={
            name: MemberRecord(r.evaluated, r.correct, r.improvements)
            for name, r in message.member_record.items()
        },
    )


async def produce_event(
    generator: Generator, message: search_pb2.GenerateCandidates, request: GenerationRequest
) -> search_pb2.CandidatesGenerated:
    """Ask `generator` and write its answer as the CandidatesGenerated event (in the service, or in the
    sandboxed worker of services/llm/isolation.py for generators that run the task's code)."""
    started = time.perf_counter()
    event = _event_for(message, generator.name)
    try:
        result = await generator.generate(request)
    except Exception as exc:  # a provider failure is an outcome the evolver accounts for
        log.warning("generation failed", request_id=message.request_id, error=repr(exc))
        event.error_reason = "generator_error"
        event.error_message = f"{type(exc).__name__}: {exc}"[:4000]
    else:
        event.generator = result.generator or generator.name
        for c in result.candidates[: request.count]:  # never more than asked: the run's budget counts on it
            event.candidates.append(
                search_pb2.GeneratedCandidate(
                    source=kernel_to_proto(c.source),
                    strategy=descriptors_to_proto(c.strategy),
                    mutation=c.mutation,
                    rationale=c.rationale,
                )
            )
        event.usage.prompt_tokens = result.usage.prompt_tokens
        event.usage.completion_tokens = result.usage.completion_tokens
        event.usage.cost_usd = result.usage.cost_usd
        if not result.candidates:
            event.error_reason = result.error or "no_candidates"
            event.error_message = (result.message or "the generator proposed nothing for this request")[:4000]
    event.duration_s = time.perf_counter() - started
    return event


def _event_for(message: search_pb2.GenerateCandidates, generator: str) -> search_pb2.CandidatesGenerated:
    return search_pb2.CandidatesGenerated(
        request_id=message.request_id,
        run_id=message.run_id,
        generator=generator,
        parent_id=message.parent.candidate_id,
        mutation=message.mutation,
        island=message.island,
        prompt_variant_id=message.prompt_variant_id,
        repair=message.repair,
        iteration=message.iteration,
    )


REMEMBERED = 10_000
# A run ended for good: its requests are not worth answering (a stopped run may be resumed later).
TERMINAL = frozenset({run_pb2.RUN_STATUS_COMPLETED, run_pb2.RUN_STATUS_CANCELLED, run_pb2.RUN_STATUS_FAILED})


class GenerateHandler:
    """`isolation`: the sandboxed workers that answer instead of `generator` in this process, for
    generators that execute the task's reference source (services/llm/isolation.py). `metaprompter`:
    rewrites each prompt variant's guidance with a model before the generator sees it."""

    def __init__(
        self,
        generator: Generator,
        metrics: Metrics | None = None,
        isolation: GeneratorPool | None = None,
        metaprompter: LLMMetaPrompter | None = None,
    ) -> None:
        self.generator = generator
        self.metrics = metrics
        self.isolation = isolation
        self.metaprompter = metaprompter
        self.ensemble_metrics = (
            EnsembleMetrics(generator, metrics)
            if isinstance(generator, Ensemble) and metrics is not None
            else None
        )
        self._inflight: dict[str, set[asyncio.Task[search_pb2.CandidatesGenerated]]] = {}
        self._finished_runs: OrderedDict[str, None] = OrderedDict()
        # request id -> (mutation, parent speedup): what an outcome is measured against
        self.asked: OrderedDict[str, tuple[str, float]] = OrderedDict()

    async def __call__(
        self, message: search_pb2.GenerateCandidates, delivery: Delivery
    ) -> Sequence[Outgoing]:
        try:
            request = request_from_proto(message)
        except (TaskError, ValueError) as exc:
            raise Reject("bad_request", f"generation request {message.request_id}: {exc}") from exc
        if message.run_id and message.run_id in self._finished_runs:
            event = self._cancelled(message, "the run had finished before this request was answered")
        else:
            event = await self._answer(message, request)
        self._remember(message)
        self._count(event)
        return [Outgoing(subjects.CANDIDATES_GENERATED, event, f"generated-{message.request_id}")]

    async def _answer(
        self, message: search_pb2.GenerateCandidates, request: GenerationRequest
    ) -> search_pb2.CandidatesGenerated:
        task = asyncio.ensure_future(self._produce(message, request))
        tasks = self._inflight.setdefault(message.run_id, set())
        tasks.add(task)
        try:
            return await task
        except asyncio.CancelledError:
            current = asyncio.current_task()
            if message.run_id in self._finished_runs and current is not None and not current.cancelling():
                return self._cancelled(message, "the run finished while this request was in flight")
            task.cancel()
            raise
        finally:
            tasks.discard(task)
            if not tasks:
                self._inflight.pop(message.run_id, None)

    async def _produce(
        self, message: search_pb2.GenerateCandidates, request: GenerationRequest
    ) -> search_pb2.CandidatesGenerated:
        if self.isolation is not None:
            return await self._isolated(message)
        rewrite = None
        if self.metaprompter is not None and message.prompt_variant_id and request.guidance:
            rewrite = await self.metaprompter.guidance(
                message.run_id, message.prompt_variant_id, request.guidance, request.backend
            )
            if rewrite.error:
                log.warning(
                    "guidance not rewritten",
                    run_id=message.run_id,
                    prompt_variant_id=message.prompt_variant_id,
                    error=rewrite.error[:500],
                )
            request = replace(request, guidance=rewrite.sections)
        event = await produce_event(self.generator, message, request)
        if rewrite is not None and self.metaprompter is not None:  # booked apart from the member's answer
            event.meta_generator = self.metaprompter.name
            event.meta_usage.prompt_tokens = rewrite.usage.prompt_tokens
            event.meta_usage.completion_tokens = rewrite.usage.completion_tokens
            event.meta_usage.cost_usd = rewrite.usage.cost_usd
        return event

    def cancel_run(self, run_id: str) -> int:
        """The run finished: its requests in flight are answered `cancelled` and later ones at once."""
        self._finished_runs[run_id] = None
        while len(self._finished_runs) > REMEMBERED:
            self._finished_runs.popitem(last=False)
        tasks = list(self._inflight.get(run_id, ()))
        for task in tasks:
            task.cancel()
        return len(tasks)

    def _cancelled(self, message: search_pb2.GenerateCandidates, why: str) -> search_pb2.CandidatesGenerated:
        event = _event_for(message, self.generator.name)
        event.error_reason = "cancelled"
        event.error_message = why
        return event

    def _remember(self, message: search_pb2.GenerateCandidates) -> None:
        self.asked[message.request_id] = (message.mutation or "seed", message.parent.speedup)
        while len(self.asked) > REMEMBERED:
            self.asked.popitem(last=False)

    async def _isolated(self, message: search_pb2.GenerateCandidates) -> search_pb2.CandidatesGenerated:
        assert self.isolation is not None
        started = time.perf_counter()
        try:
            event = await self.isolation.generate(message)
        except WorkerFailure as exc:
            event = _event_for(message, self.generator.name)
            event.error_reason = "generator_error"
            event.error_message = f"the generator's sandboxed worker failed: {exc}"[:4000]
            event.duration_s = time.perf_counter() - started
        event.generator = self.generator.name  # the service says who answered, not the worker
        return event

    def _count(self, event: search_pb2.CandidatesGenerated) -> None:
        if self.metrics is None:
            return
        outcome = (
            "error" if event.error_reason == "generator_error" else ("ok" if event.candidates else "empty")
        )
        name = event.generator or self.generator.name
        self.metrics.generations_total.labels(generator=name, outcome=outcome).inc()
        self._count_usage(name, event.usage)
        if event.meta_generator:
            self._count_usage(event.meta_generator, event.meta_usage)
        if self.ensemble_metrics is not None:
            self.ensemble_metrics.refresh()

    def _count_usage(self, name: str, usage: search_pb2.GenerationUsage) -> None:
        assert self.metrics is not None
        self.metrics.generation_tokens_total.labels(generator=name, kind="prompt").inc(usage.prompt_tokens)
        self.metrics.generation_tokens_total.labels(generator=name, kind="completion").inc(
            usage.completion_tokens
        )
        self.metrics.generation_cost_usd_total.labels(generator=name).inc(usage.cost_usd)


class OutcomeHandler:
    """What became of the candidates: archive outcomes credit the ensemble member that wrote them and
    feed the meta-prompter's record (with the evaluator's message for failures); a finished run cancels
    its generation requests in flight."""

    LOG_EVERY = 25

    def __init__(
        self,
        generate: GenerateHandler,
        ensemble: Ensemble | None = None,
        metaprompter: LLMMetaPrompter | None = None,
    ) -> None:
        self.generate = generate
        self.ensemble = ensemble
        self.metaprompter = metaprompter
        self._evaluations: OrderedDict[str, tuple[str, float]] = OrderedDict()  # message, speedup
        self.observed = 0

    async def __call__(self, message: object, delivery: Delivery) -> Sequence[Outgoing]:
        if isinstance(message, evaluation_pb2.EvaluationFinished):
            self._evaluations[message.candidate_id] = (message.message, message.speedup)
            while len(self._evaluations) > REMEMBERED:
                self._evaluations.popitem(last=False)
        elif isinstance(message, run_pb2.ArchiveUpdated):
            self._outcome(message)
        elif isinstance(message, run_pb2.RunFinished) and message.status in TERMINAL:
            cancelled = self.generate.cancel_run(message.run_id)
            if cancelled:
                log.info("requests of a finished run cancelled", run_id=message.run_id, requests=cancelled)
            if self.metaprompter is not None:
                self.metaprompter.forget(message.run_id)
        return []

    def _outcome(self, message: run_pb2.ArchiveUpdated) -> None:
        label = message.outcome
        if not label or not message.candidate_id:
            return
        member = None
        if self.ensemble is not None and (not message.pool or message.pool == self.ensemble.name):
            # the event names the candidate's writer, so whichever replica receives it credits it
            writer = message.generator if message.pool else None  # older events: this process's memory
            member = self.ensemble.observe(message.candidate_id, label, writer)
        if self.ensemble is not None and member is not None:
            if self.generate.ensemble_metrics is not None:
                self.generate.ensemble_metrics.outcome(member, label)
                self.generate.ensemble_metrics.refresh()  # the record moved the weights
            self.observed += 1
            if self.observed % self.LOG_EVERY == 0:
                log.info("ensemble record", generator=self.ensemble.name, members=self.ensemble.snapshot())
        if self.metaprompter is None:
            return
        request_id = message.candidate_id.rpartition("-c")[0]
        mutation, parent_speedup = self.generate.asked.get(request_id, ("", 0.0))
        if not mutation:
            return
        text, speedup = self._evaluations.pop(message.candidate_id, ("", 0.0))
        failed = label.startswith("failed")
        base = parent_speedup if parent_speedup > 0 else 1.0  # a seed is measured against the reference
        improvement = -1.0 if failed else (speedup / base - 1.0 if speedup > 0 else 0.0)
        self.metaprompter.record(
            message.run_id, Feedback(message.iteration, mutation, label, improvement, text if failed else "")
        )
