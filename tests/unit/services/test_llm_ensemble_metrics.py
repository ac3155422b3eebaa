"""The llm service's ensemble metrics: each member's draw weight (0 while taken out) and counts of its
outcomes, from its answers, its provider's failures and the archive outcomes of its candidates."""

from __future__ import annotations

from kernelfoundry.domain.descriptors import Descriptors
from kernelfoundry.domain.kernel import KernelSource
from kernelfoundry.generators.base import (
    GeneratedCandidate,
    GenerationRequest,
    GenerationResult,
    GenerationUsage,
)
from kernelfoundry.generators.ensemble import Ensemble, Member
from kernelfoundry.generators.providers.transport import GenerationFailure
from kernelfoundry.services.llm.handlers import GenerateHandler, OutcomeHandler
from kernelfoundry.telemetry.metrics import Metrics
from kernelfoundry.v1 import run_pb2

from .test_llm_handler import DELIVERY, generate_request


class Scripted:
    """Answers with one kernel; or, as set, without a usable kernel, or with its provider failing."""

    def __init__(self, name: str) -> None:
        self.name = name
        self.mode = "kernel"

    async def generate(self, request: GenerationRequest) -> GenerationResult:
        if self.mode == "down":
            raise GenerationFailure("provider_unavailable", "connection refused")
        if self.mode == "no_kernel":
            return GenerationResult((), GenerationUsage(50, 20, 0.0), self.name, "no_kernel", "no code block")
        source = KernelSource("cpp", f"// {self.name} {request.request_id}\n")
        return GenerationResult(
            (GeneratedCandidate(source, Descriptors(), "tiling", ""),), GenerationUsage(), self.name
        )


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def weight(metrics: Metrics, member: str) -> float | None:
    return metrics.registry.get_sample_value(
        "kf_ensemble_member_weight", {"generator": "mix", "member": member}
    )


def outcomes(metrics: Metrics, member: str, outcome: str) -> float:
    value = metrics.registry.get_sample_value(
        "kf_ensemble_member_outcomes_total", {"generator": "mix", "member": member, "outcome": outcome}
    )
    return value or 0.0


def archive_update(candidate_id: str, outcome: str) -> run_pb2.ArchiveUpdated:
    return run_pb2.ArchiveUpdated(run_id="run-000000000001", candidate_id=candidate_id, outcome=outcome)


async def test_weights_are_exposed_from_the_start_and_follow_the_outcomes() -> None:
    a, b = Scripted("a"), Scripted("b")
    ensemble = Ensemble("mix", [Member(a, 2.0), Member(b, 1.0)], clock=Clock())
    metrics = Metrics(process_collectors=False)
    generate = GenerateHandler(ensemble, metrics)  # type: ignore[arg-type]
    outcome = OutcomeHandler(generate, ensemble)
    assert (weight(metrics, "a"), weight(metrics, "b")) == (2.0, 1.0)

    answered: dict[str, list[str]] = {"a": [], "b": []}
    for i in range(40):
        request_id = f"run-000000000001-g1-r{i}"
        [out] = await generate(generate_request(request_id), DELIVERY)
        answered[out.message.generator].append(f"{request_id}-c0")
    for candidate_id in answered["a"]:
        await outcome(archive_update(candidate_id, "failed:wrong_result"), DELIVERY)
    for candidate_id in answered["b"][:-1]:
        await outcome(archive_update(candidate_id, "improvement"), DELIVERY)
    await outcome(archive_update(answered["b"][-1], "neutral"), DELIVERY)

    assert outcomes(metrics, "a", "failed") == len(answered["a"]) > 0
    assert outcomes(metrics, "b", "improvement") == len(answered["b"]) - 1
    assert outcomes(metrics, "b", "neutral") == 1
    assert weight(metrics, "a") == ensemble.weights()["a"] and weight(metrics, "b") == ensemble.weights()["b"]
    assert weight(metrics, "b") > weight(metrics, "a")  # type: ignore[operator]


async def test_provider_failures_and_answers_without_a_kernel_are_counted_and_an_out_member_weighs_zero() -> (
    None
):
    a, b = Scripted("a"), Scripted("b")
    clock = Clock()
    ensemble = Ensemble(
        "mix", [Member(a, 1.0), Member(b, 1.0)], failure_threshold=3, cooldown_s=60, clock=clock
    )
    metrics = Metrics(process_collectors=False)
    generate = GenerateHandler(ensemble, metrics)  # type: ignore[arg-type]
    a.mode = "down"
    for i in range(100):  # a is asked whenever the draw picks it first; b answers for it
        await generate(generate_request(f"run-000000000001-g1-r{i}"), DELIVERY)
        if a.name not in {m.name for m in ensemble.available()}:
            break
    assert outcomes(metrics, "a", "provider_failure") == 3  # taken out after its third failure in a row
    assert weight(metrics, "a") == 0.0 and weight(metrics, "b") == 1.0
    b.mode = "no_kernel"
    await generate(generate_request("run-000000000001-g2-r0"), DELIVERY)
    assert outcomes(metrics, "b", "no_kernel") == 1
    clock.now += 61  # the cooldown is over: a is drawn again
    a.mode = "kernel"
    await generate(generate_request("run-000000000001-g3-r0"), DELIVERY)
    assert weight(metrics, "a") == 1.0
    assert outcomes(metrics, "a", "provider_failure") == 3  # counted once each, however often it is read


async def test_an_outcome_naming_its_writer_is_credited_by_whichever_replica_receives_it() -> None:
    # two replicas share the outcomes consumer: each outcome reaches one of them, whoever answered
    replicas = [
        Ensemble("mix", [Member(Scripted("a")), Member(Scripted("b"))], clock=Clock()) for _ in range(2)
    ]
    metrics = [Metrics(process_collectors=False) for _ in replicas]
    handlers = [
        OutcomeHandler(GenerateHandler(e, m), e)  # type: ignore[arg-type]
        for e, m in zip(replicas, metrics, strict=True)
    ]
    for i in range(10):  # neither replica answered these requests
        update = archive_update(f"run-000000000001-g1-r{i}-c0", "improvement")
        update.generator, update.pool = ("a" if i < 6 else "b"), "mix"
        await handlers[i % 2](update, DELIVERY)
    total = {m: sum(outcomes(x, m, "improvement") for x in metrics) for m in ("a", "b")}
    assert total == {"a": 6.0, "b": 4.0}  # summed over the replicas: every outcome counted once
    other = archive_update("run-000000000002-g1-r0-c0", "improvement")
    other.generator, other.pool = "a", "heuristic"  # another pool's run: not this ensemble's member
    await handlers[0](other, DELIVERY)
    sweep = archive_update("run-000000000001-g1-s0-c0", "improvement")
    sweep.pool = "mix"  # a sweep point: no writer
    await handlers[0](sweep, DELIVERY)
    assert sum(outcomes(x, "a", "improvement") for x in metrics) == 6.0
