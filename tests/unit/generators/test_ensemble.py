"""The ensemble: weighted draws, weights that follow improvements, providers taken out and the fallback."""

from __future__ import annotations

from collections import Counter
from dataclasses import replace

import pytest

from kernelfoundry.domain.descriptors import Descriptors
from kernelfoundry.domain.kernel import KernelSource
from kernelfoundry.generators.base import (
    GeneratedCandidate,
    GenerationRequest,
    GenerationResult,
    GenerationUsage,
    MemberRecord,
)
from kernelfoundry.generators.ensemble import Ensemble, Member
from kernelfoundry.generators.providers.transport import GenerationFailure
from kernelfoundry.tasks.model import Task

TASK = Task("t", "import torch\n")


class Fake:
    """A member answering with one kernel, or failing with `reason` while `failing` is set."""

    def __init__(self, name: str, reason: str = "", tokens: int = 10) -> None:
        self.name = name
        self.reason = reason
        self.failing = bool(reason)
        self.tokens = tokens
        self.asked = 0

    async def generate(self, request: GenerationRequest) -> GenerationResult:
        self.asked += 1
        if self.failing:
            if self.reason == "raise":
                raise GenerationFailure("provider_unavailable", "connection refused")
            return GenerationResult((), GenerationUsage(), self.name, self.reason, "it failed")
        source = KernelSource("cpp", f"// {self.name} {request.request_id}\n")
        candidate = GeneratedCandidate(source, Descriptors(), request.mutation or "seed", "")
        return GenerationResult((candidate,), GenerationUsage(self.tokens, self.tokens, 0.01), self.name)


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def req(i: int) -> GenerationRequest:
    return GenerationRequest(request_id=f"run-1-g0-r{i}", task=TASK, backend="cpu", seed=i)


async def test_draws_follow_the_configured_weights() -> None:
    a, b = Fake("a"), Fake("b")
    ensemble = Ensemble("mix", [Member(a, 3.0), Member(b, 1.0)])
    answered = Counter([(await ensemble.generate(req(i))).generator for i in range(400)])
    assert 0.65 < answered["a"] / 400 < 0.85
    assert answered["a"] + answered["b"] == 400


async def test_the_same_request_goes_to_the_same_member() -> None:
    ensemble = Ensemble("mix", [Member(Fake("a")), Member(Fake("b"))])
    first = [(await ensemble.generate(req(i))).generator for i in range(20)]
    again = [(await ensemble.generate(req(i))).generator for i in range(20)]
    assert first == again


async def test_weights_move_towards_the_member_whose_kernels_improve() -> None:
    a, b = Fake("a"), Fake("b")
    ensemble = Ensemble("mix", [Member(a), Member(b)])
    for i in range(60):
        result = await ensemble.generate(req(i))
        good = result.generator == "a"
        label = "improvement" if good else "failed:wrong_result"
        assert ensemble.observe(f"run-1-g0-r{i}-c0", label) == result.generator
    weights = ensemble.weights()
    assert weights["a"] > 3 * weights["b"]
    stats = {n: m.stats for n, m in ensemble.members.items()}
    assert stats["a"].evaluated + stats["b"].evaluated == 60
    assert stats["b"].correct == 0 and stats["a"].improvements == stats["a"].evaluated
    assert ensemble.observe("sweep-xyz-c0", "improvement") is None  # not this ensemble's request
    assert ensemble.observe("run-1-g0-r999-c0", "improvement") is None


async def test_a_request_carrying_its_run_s_record_is_drawn_by_it_in_every_replica() -> None:
    # two replicas of the llm service: one has seen "b" fail everywhere, the other nothing
    learned, fresh = (Ensemble("mix", [Member(Fake("a")), Member(Fake("b"))]) for _ in range(2))
    for i in range(40):
        learned._remember(f"run-9-g0-r{i}", "b")
        learned.observe(f"run-9-g0-r{i}-c0", "failed:wrong_result")
    assert learned.weights() != fresh.weights()
    record = {"a": MemberRecord(20, 18, 9), "b": MemberRecord(20, 2, 0)}
    assert learned.weights(record) == fresh.weights(record)
    assert fresh.weights(record)["a"] > 5 * fresh.weights(record)["b"]
    asked = [replace(req(i), member_record=record) for i in range(200)]
    drawn = [[(await e.generate(r)).generator for r in asked] for e in (learned, fresh)]
    assert drawn[0] == drawn[1] and Counter(drawn[0])["a"] > 150
    # a member the run has no record of yet weighs as an untried one
    only_a = {"a": MemberRecord(4, 4, 4)}
    assert fresh.weights(only_a) == fresh.weights({**only_a, "b": MemberRecord()})
    with pytest.raises(ValueError, match="at most its evaluations"):
        MemberRecord(evaluated=1, correct=2)


async def test_a_failing_provider_is_taken_out_for_a_while_and_the_request_still_answered() -> None:
    clock = Clock()
    down, up = Fake("down", "provider_unavailable"), Fake("up")
    ensemble = Ensemble("mix", [Member(down, 100.0), Member(up, 0.001)], clock=clock, cooldown_s=60)
    results = [await ensemble.generate(req(i)) for i in range(10)]
    assert all(r.generator == "up" and r.candidates for r in results)
    assert down.asked == 3  # three faults in a row, then out
    assert [m.name for m in ensemble.available()] == ["up"]
    clock.now += 61
    down.failing = False
    result = await ensemble.generate(req(100))
    assert result.generator == "down" and down.asked == 4


async def test_the_fallback_answers_when_every_member_is_out() -> None:
    heuristic = Fake("heuristic")
    broken = Fake("llm", "raise")
    ensemble = Ensemble("mix", [Member(broken)], heuristic, failure_threshold=1)
    result = await ensemble.generate(req(1))
    assert result.generator == "heuristic" and result.candidates
    assert ensemble.members["llm"].stats.provider_failures == 1
    result = await ensemble.generate(req(2))
    assert result.generator == "heuristic" and broken.asked == 1  # taken out: not asked again
    assert ensemble.observe("run-1-g0-r2-c0", "new_cell") == "heuristic"
    assert ensemble.fallback_stats.improvements == 1


async def test_without_fallback_every_member_down_is_a_reasoned_failure() -> None:
    ensemble = Ensemble("mix", [Member(Fake("a", "provider_timeout"))], failure_threshold=1)
    result = await ensemble.generate(req(1))
    assert result.candidates == () and result.error == "provider_unavailable" and "a" in result.message
    result = await ensemble.generate(req(2))
    assert result.error == "provider_unavailable" and "taken out" in result.message


async def test_an_answer_without_a_kernel_is_the_members_failure_not_a_provider_fault() -> None:
    llm = Fake("llm", "no_kernel")
    heuristic = Fake("heuristic")
    ensemble = Ensemble("mix", [Member(llm)], heuristic, failure_threshold=1)
    for i in range(3):
        result = await ensemble.generate(req(i))
        assert result.generator == "llm" and result.error == "no_kernel"
    assert heuristic.asked == 0 and ensemble.available()
    assert ensemble.members["llm"].stats.generation_failures == 3


async def test_seeds_go_to_the_seeder() -> None:
    seeder, other = Fake("heuristic"), Fake("llm")
    ensemble = Ensemble("mix", [Member(seeder, 0.01), Member(other, 100.0)], seeder="heuristic")
    answered = [(await ensemble.generate(req(i))).generator for i in range(5)]
    assert answered == ["heuristic"] * 5


async def test_usage_is_summed_per_member() -> None:
    a, b = Fake("a", tokens=7), Fake("b", tokens=11)
    ensemble = Ensemble("mix", [Member(a), Member(b)])
    results = [await ensemble.generate(req(i)) for i in range(30)]
    for name in ("a", "b"):
        mine = [r for r in results if r.generator == name]
        assert ensemble.members[name].stats.prompt_tokens == sum(r.usage.prompt_tokens for r in mine)
    snapshot = ensemble.snapshot()
    assert set(snapshot) == {"a", "b"} and snapshot["a"]["requests"] + snapshot["b"]["requests"] == 30


async def test_a_member_that_raises_is_a_fault_and_the_fallback_answers() -> None:
    class Broken:
        name = "broken"

        async def generate(self, request: GenerationRequest) -> GenerationResult:
            raise RuntimeError("unexpected")

    heuristic = Fake("heuristic")
    ensemble = Ensemble("mix", [Member(Broken())], heuristic)
    result = await ensemble.generate(req(1))
    assert result.generator == "heuristic" and result.candidates
    assert ensemble.members["broken"].stats.provider_failures == 1
