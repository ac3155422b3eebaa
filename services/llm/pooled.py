"""A Generator that answers from the sandboxed workers of services/llm/isolation.py.

An ensemble in the llm service asks its members through the Generator interface; the heuristic
proposer, which runs the task's reference code, must still answer from a sandboxed worker. This adapter
writes the request back into the bus's GenerateCandidates message, has a worker answer it and reads the
candidates back, so the ensemble treats it like any other member.
"""

from __future__ import annotations

from kernelfoundry.codec import (
    descriptors_from_proto,
    descriptors_to_proto,
    kernel_from_proto,
    kernel_to_proto,
    task_to_proto,
)
from kernelfoundry.generators.base import (
    GeneratedCandidate,
    GenerationRequest,
    GenerationResult,
    GenerationUsage,
)
from kernelfoundry.services.llm.isolation import GeneratorPool, WorkerFailure
from kernelfoundry.v1 import search_pb2


def request_to_proto(request: GenerationRequest, generator: str) -> search_pb2.GenerateCandidates:
    message = search_pb2.GenerateCandidates(
        request_id=request.request_id,
        task=task_to_proto(request.task),
        backend=request.backend,
        mutation=request.mutation or "",
        hints=list(request.hints),
        guidance=dict(request.guidance),
        proposal_weights=dict(request.proposal_weights),
        count=request.count,
        seed=request.seed,
        repair=request.repair,
        generator=generator,
    )
    parent = request.parent
    if parent is not None:
        message.parent.CopyFrom(
            search_pb2.ParentKernel(
                source=kernel_to_proto(parent.source),
                descriptors=descriptors_to_proto(parent.descriptors),
                speedup=parent.speedup or 0.0,
                runtime_ms=parent.runtime_ms or 0.0,
                feedback=parent.feedback,
            )
        )
    return message


class PooledGenerator:
    """The pool's generator (e.g. the heuristic proposer) as an ensemble member named `name`."""

    def __init__(self, pool: GeneratorPool, name: str) -> None:
        self.pool = pool
        self.name = name

    def __repr__(self) -> str:
        return f"PooledGenerator({self.pool.generator!r}, name={self.name!r})"

    async def generate(self, request: GenerationRequest) -> GenerationResult:
        try:
            event = await self.pool.generate(request_to_proto(request, self.pool.generator))
        except WorkerFailure as exc:
            return GenerationResult(
                (),
                GenerationUsage(),
                self.name,
                "generator_error",
                f"the sandboxed worker failed: {exc}"[:4000],
            )
        candidates = []
        for generated in event.candidates:
            try:
                source = kernel_from_proto(generated.source)
            except ValueError:
                continue
            candidates.append(
                GeneratedCandidate(
                    source,
                    descriptors_from_proto(generated.strategy),
                    generated.mutation,
                    generated.rationale,
                )
            )
        usage = GenerationUsage(
            event.usage.prompt_tokens, event.usage.completion_tokens, event.usage.cost_usd
        )
        return GenerationResult(tuple(candidates), usage, self.name, event.error_reason, event.error_message)

    async def close(self) -> None:
        self.pool.close()
