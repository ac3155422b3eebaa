"""The llm service's handler on the in-memory bus: a generation request becomes one CandidatesGenerated
event carrying the request's bookkeeping; a generator's failure or empty answer is an outcome the
evolver accounts for; a request no generator can serve is dead-lettered and ends its request's work."""

from __future__ import annotations

import pytest

from kernelfoundry.bus import subjects
from kernelfoundry.bus.consumer import Delivery, Reject, decoder_for
from kernelfoundry.bus.memory import InMemoryBus
from kernelfoundry.codec import (
    descriptors_from_proto,
    descriptors_to_proto,
    kernel_from_proto,
    kernel_to_proto,
    task_to_proto,
)
from kernelfoundry.domain.descriptors import Descriptors
from kernelfoundry.generators.base import (
    GeneratedCandidate,
    GenerationRequest,
    GenerationResult,
    GenerationUsage,
    MemberRecord,
)
from kernelfoundry.services.llm.handlers import GenerateHandler
from kernelfoundry.telemetry.metrics import Metrics
from kernelfoundry.v1 import run_pb2, search_pb2

from .bus_support import consume_until, published, work_spec
from .test_evolver_runs import TASK, kernel

SUBJECT = subjects.generate("scripted")
DELIVERY = Delivery(subject=SUBJECT, deliveries=1, stream_sequence=1)


class ScriptedGenerator:
    """Answers with `count` variants of a kernel, or raises `error`; remembers the requests."""

    name = "scripted"

    def __init__(self, count: int = 2, error: Exception | None = None) -> None:
        self.count = count
        self.error = error
        self.requests: list[GenerationRequest] = []

    async def generate(self, request: GenerationRequest) -> GenerationResult:
        self.requests.append(request)
        if self.error is not None:
            raise self.error
        candidates = tuple(
            GeneratedCandidate(kernel(i), Descriptors(memory=1, parallelism=i), "tiling", f"variant {i}")
            for i in range(self.count)
        )
        return GenerationResult(candidates, GenerationUsage(120, 80, 0.25), self.name)


def generate_request(request_id: str = "run-000000000001-g2-r0") -> search_pb2.GenerateCandidates:
    return search_pb2.GenerateCandidates(
        request_id=request_id,
        run_id="run-000000000001",
        generator="scripted",
        task=task_to_proto(TASK),
        backend="cpu",
        parent=search_pb2.ParentKernel(
            candidate_id="parent-1", source=kernel_to_proto(kernel(9)), speedup=1.5
        ),
        mutation="tiling",
        island=3,
        prompt_variant_id="p7",
        iteration=2,
        count=2,
        seed=11,
    )


async def test_a_request_becomes_one_event_with_its_candidates_and_bookkeeping() -> None:
    bus = InMemoryBus()
    generator = ScriptedGenerator(count=2)
    metrics = Metrics(process_collectors=False)
    await bus.publish(SUBJECT, generate_request(), "generate-1")
    await consume_until(
        bus,
        work_spec("llm-scripted", SUBJECT),
        decoder_for(search_pb2.GenerateCandidates),
        GenerateHandler(generator, metrics),  # type: ignore[arg-type]
        lambda c: c.stats.handled == 1,
    )
    [event] = await published(
        bus, subjects.EVENTS_STREAM, subjects.CANDIDATES_GENERATED, search_pb2.CandidatesGenerated
    )
    assert (event.request_id, event.run_id, event.generator) == (
        "run-000000000001-g2-r0",
        "run-000000000001",
        "scripted",
    )
    assert (event.parent_id, event.mutation, event.island, event.prompt_variant_id, event.iteration) == (
        "parent-1",
        "tiling",
        3,
        "p7",
        2,
    )
    assert [kernel_from_proto(c.source) for c in event.candidates] == [kernel(0), kernel(1)]
    assert [descriptors_from_proto(c.strategy) for c in event.candidates] == [
        Descriptors(memory=1, parallelism=0),
        Descriptors(memory=1, parallelism=1),
    ]
    assert (event.usage.prompt_tokens, event.usage.completion_tokens, event.usage.cost_usd) == (120, 80, 0.25)
    assert event.error_reason == ""
    [asked] = generator.requests
    assert (asked.task.name, asked.mutation, asked.count, asked.seed) == (TASK.name, "tiling", 2, 11)
    assert asked.parent is not None and asked.parent.source == kernel(9) and asked.parent.speedup == 1.5
    assert (
        metrics.registry.get_sample_value("kf_generations_total", {"generator": "scripted", "outcome": "ok"})
        == 1.0
    )
    assert await bus.stream_messages(subjects.WORK_STREAM) == 0


async def test_a_generator_answering_more_than_asked_is_cut_to_the_count() -> None:
    [out] = await GenerateHandler(ScriptedGenerator(count=4))(generate_request(), DELIVERY)  # type: ignore[arg-type]
    assert [kernel_from_proto(c.source) for c in out.message.candidates] == [kernel(0), kernel(1)]


async def test_the_run_s_member_record_reaches_the_generator_and_a_forged_one_is_refused() -> None:
    generator = ScriptedGenerator()
    message = generate_request()
    message.member_record["model-a"].CopyFrom(search_pb2.MemberRecord(evaluated=5, correct=4, improvements=2))
    await GenerateHandler(generator)(message, DELIVERY)  # type: ignore[arg-type]
    [asked] = generator.requests
    assert asked.member_record == {"model-a": MemberRecord(5, 4, 2)}
    message.member_record["model-b"].CopyFrom(search_pb2.MemberRecord(evaluated=1, correct=3))
    with pytest.raises(Reject) as refused:
        await GenerateHandler(generator)(message, DELIVERY)  # type: ignore[arg-type]
    assert refused.value.reason == "bad_request" and "at most its evaluations" in str(refused.value)


async def test_a_generator_failure_and_an_empty_answer_are_events_with_a_reason() -> None:
    failing = GenerateHandler(ScriptedGenerator(error=TimeoutError("provider timed out")))  # type: ignore[arg-type]
    [out] = await failing(generate_request(), DELIVERY)
    assert out.msg_id == "generated-run-000000000001-g2-r0"
    assert (out.message.error_reason, list(out.message.candidates)) == ("generator_error", [])
    assert "provider timed out" in out.message.error_message
    [empty] = await GenerateHandler(ScriptedGenerator(count=0))(generate_request(), DELIVERY)  # type: ignore[arg-type]
    assert empty.message.error_reason == "no_candidates"


async def test_a_request_no_generator_can_serve_is_rejected() -> None:
    handler = GenerateHandler(ScriptedGenerator())  # type: ignore[arg-type]
    unknown = generate_request()
    unknown.mutation = "teleport"
    with pytest.raises(Reject) as refused:
        await handler(unknown, DELIVERY)
    assert refused.value.reason == "bad_request"


async def test_on_the_bus_a_rejected_request_is_dead_lettered_and_its_request_ends() -> None:
    bus = InMemoryBus()
    bad = generate_request("run-000000000001-g2-r1")
    bad.count = -1
    await bus.publish(SUBJECT, bad, "generate-bad")
    await consume_until(
        bus,
        work_spec("llm-scripted", SUBJECT),
        decoder_for(search_pb2.GenerateCandidates),
        GenerateHandler(ScriptedGenerator()),  # type: ignore[arg-type]
        lambda c: c.stats.dead_lettered == 1,
    )
    [letter] = await published(
        bus, subjects.DEADLETTER_STREAM, subjects.deadletter(SUBJECT), run_pb2.DeadLetter
    )
    assert letter.reason == "bad_request"
    [ending] = await published(
        bus, subjects.EVENTS_STREAM, subjects.CANDIDATES_GENERATED, search_pb2.CandidatesGenerated
    )
    assert (ending.request_id, ending.error_reason, ending.island) == (
        "run-000000000001-g2-r1",
        "bad_request",
        3,
    )


async def test_the_generator_is_handed_the_device_the_baselines_and_the_inspirations() -> None:
    message = generate_request()
    message.hardware, message.build_target = "cuda.h200", "cuda.sm90"
    message.parent.eager_ms, message.parent.compile_ms = 0.31, 0.22
    message.inspirations.add(
        candidate_id="other-1",
        source=kernel_to_proto(kernel(4)),
        descriptors=descriptors_to_proto(Descriptors(memory=2, parallelism=1)),
        speedup=2.5,
        runtime_ms=0.124,
    )
    generator = ScriptedGenerator(count=1)
    await GenerateHandler(generator)(message, DELIVERY)  # type: ignore[arg-type]
    [asked] = generator.requests
    assert (asked.hardware, asked.build_target) == ("cuda.h200", "cuda.sm90")
    assert asked.parent is not None and (asked.parent.eager_ms, asked.parent.compile_ms) == (0.31, 0.22)
    [inspiration] = asked.inspirations
    assert inspiration.source == kernel(4) and inspiration.descriptors == Descriptors(memory=2, parallelism=1)
    assert (inspiration.speedup, inspiration.runtime_ms) == (2.5, 0.124)
