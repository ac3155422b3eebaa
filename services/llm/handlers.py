"""LLM service handler: GenerateCandidates -> a generator -> CandidatesGenerated event.

Provider-neutral: the generator (built-in heuristic proposer, or an HTTP LLM adapter) sits behind the
Generator interface. A generator failure becomes an event with an error reason, so the evolver can
account for it; only transport problems make the request come back.
"""

from __future__ import annotations

import time
from collections.abc import Sequence

from kernelfoundry.bus import subjects
from kernelfoundry.bus.consumer import Delivery, Reject
from kernelfoundry.bus.jetstream import Outgoing
from kernelfoundry.codec import (
    descriptors_from_proto,
    descriptors_to_proto,
    kernel_from_proto,
    kernel_to_proto,
    task_from_proto,
)
from kernelfoundry.generators.base import GenerationRequest, Generator, ParentKernel
from kernelfoundry.tasks.model import TaskError
from kernelfoundry.telemetry.logging import get_logger
from kernelfoundry.telemetry.metrics import Metrics
from kernelfoundry.v1 import search_pb2

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
        )
    return GenerationRequest(
        request_id=message.request_id,
        task=task_from_proto(message.task),
        backend=message.backend or "cpu",  # type: ignore[arg-type]
        parent=parent,
        mutation=message.mutation or None,
        hints=tuple(message.hints),
        guidance=dict(message.guidance),
        proposal_weights=dict(message.proposal_weights),
        count=message.count or 1,
        seed=message.seed,
        repair=message.repair,
    )


class GenerateHandler:
    def __init__(self, generator: Generator, metrics: Metrics | None = None) -> None:
        self.generator = generator
        self.metrics = metrics

    async def __call__(
        self, message: search_pb2.GenerateCandidates, delivery: Delivery
    ) -> Sequence[Outgoing]:
        try:
            request = request_from_proto(message)
        except (TaskError, ValueError) as exc:
            raise Reject("bad_request", f"generation request {message.request_id}: {exc}") from exc
        started = time.perf_counter()
        event = search_pb2.CandidatesGenerated(
            request_id=message.request_id,
            run_id=message.run_id,
            generator=self.generator.name,
            parent_id=message.parent.candidate_id,
            mutation=message.mutation,
            island=message.island,
            prompt_variant_id=message.prompt_variant_id,
            repair=message.repair,
            iteration=message.iteration,
        )
        try:
            result = await self.generator.generate(request)
        except Exception as exc:  # a provider failure is an outcome the evolver accounts for
            log.warning("generation failed", request_id=message.request_id, error=repr(exc))
            event.error_reason = "generator_error"
            event.error_message = f"{type(exc).__name__}: {exc}"[:4000]
            outcome = "error"
        else:
            for c in result.candidates:
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
            outcome = "ok" if result.candidates else "empty"
            if not result.candidates:
                event.error_reason = "no_candidates"
                event.error_message = "the generator proposed nothing for this request"
        event.duration_s = time.perf_counter() - started
        if self.metrics is not None:
            self.metrics.generations_total.labels(generator=self.generator.name, outcome=outcome).inc()
            self.metrics.generation_tokens_total.labels(generator=self.generator.name, kind="prompt").inc(
                event.usage.prompt_tokens
            )
            self.metrics.generation_tokens_total.labels(generator=self.generator.name, kind="completion").inc(
                event.usage.completion_tokens
            )
            self.metrics.generation_cost_usd_total.labels(generator=self.generator.name).inc(
                event.usage.cost_usd
            )
        return [Outgoing(subjects.CANDIDATES_GENERATED, event, f"generated-{message.request_id}")]
