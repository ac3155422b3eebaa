"""Planted kernels built with the real g++ toolchain: paths, tasks, requests (shared by the tests here)."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

from kernelfoundry.domain.kernel import KernelSource
from kernelfoundry.evaluation import EvaluationRequest, EvaluationSettings
from kernelfoundry.tasks.model import ShapeVariant, Task
from kernelfoundry.toolchains import BuildCache, BuildTarget, build

FIXTURES = Path(__file__).resolve().parents[2] / "fixtures" / "kernels"
CPU_UNITS = FIXTURES / "cpu"
FAST = EvaluationSettings(warmup_runs=1, timed_runs=5, deadline_s=60.0, cpu_threads=2)


def expected_reason(path: Path) -> str:
    """The reason a planted unit announces on its first line (`// expect: <reason>`)."""
    first = path.read_text().splitlines()[0]
    return first.split("expect:", 1)[1].split()[0]


def accepted_reasons(path: Path) -> set[str]:
    """The reasons that count as the planted unit's catch. A stale answer is named cached_result only
    when the answer for the old values is known (the previous call on that set was checked, which the
    drawn schedule decides); otherwise the same catch reads timed_run_wrong, and stale_output where the
    trials already share a set refreshed in place (few sets held: set_plan.py)."""
    expected = expected_reason(path)
    if expected == "cached_result":
        return {expected, "timed_run_wrong", "stale_output"}
    return {expected}


def task(name: str, *shapes: ShapeVariant) -> Task:
    source = (FIXTURES / "tasks" / f"{name}.py").read_text()
    return Task(name=name, reference_source=source, shapes=shapes or (ShapeVariant("default"),))


FMA_TWO_SHAPES = task(
    "fused_mul_add", ShapeVariant("n4096", {"N": 4096}), ShapeVariant("n10000", {"N": 10000})
)
FMA = task("fused_mul_add")


class Units:
    """Builds a planted CPU unit on first use (cached across the session)."""

    def __init__(self, cache: BuildCache) -> None:
        self.cache = cache

    def source(self, name: str, glue: str = "") -> KernelSource:
        return KernelSource("cpp", (CPU_UNITS / f"{name}.cpp").read_text(), glue=glue)

    def artifact(self, name: str) -> Path:
        result = build(self.source(name), BuildTarget("cpu", "x86_64"), self.cache)
        assert result.ok and result.artifact is not None, result.log
        return result.artifact

    def request(
        self, name: str, the_task: Task = FMA, glue: str = "", settings: EvaluationSettings = FAST
    ) -> EvaluationRequest:
        return EvaluationRequest(the_task, self.source(name, glue), self.artifact(name), "cpu", settings)


def with_deadline(seconds: float) -> EvaluationSettings:
    return replace(FAST, deadline_s=seconds)
