"""The heuristic proposer answers from the task and the parent alone: the fields written for a model's
brief (the device, the run's eager and torch.compile times, the inspiration kernels of other cells)
change none of its seeds or mutations, byte for byte."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pytest

from kernelfoundry.generators.base import MUTATIONS, GenerationRequest, Inspiration, ParentKernel
from kernelfoundry.generators.heuristic import HeuristicGenerator
from kernelfoundry.tasks.loading import load_task

ROOT = Path(__file__).resolve().parents[3]
TASKS = ("level1_relu", "level1_rms_norm", "level2_softmax_scale_residual")


@pytest.mark.parametrize("backend", ["cpu", "cuda"])
@pytest.mark.parametrize("name", TASKS)
def test_seeds_and_mutations_are_byte_identical_with_the_brief_s_fields(name: str, backend: str) -> None:
    generator = HeuristicGenerator()
    task = load_task(ROOT / "tasks" / f"{name}.py")
    plain_seed = GenerationRequest("r", task, backend, count=64)  # type: ignore[arg-type]
    seeds = generator.generate_sync(plain_seed).candidates
    assert seeds
    shown = tuple(Inspiration(c.source, c.strategy, 2.0, 0.1) for c in seeds[-2:])
    brief = {"inspirations": shown, "hardware": f"{backend}.dev0", "build_target": f"{backend}.arch0"}
    assert generator.generate_sync(replace(plain_seed, **brief)).candidates == seeds
    parent = ParentKernel(seeds[0].source, seeds[0].strategy, 1.0, 1.0)
    for mutation in MUTATIONS:
        plain = GenerationRequest("r", task, backend, parent=parent, mutation=mutation, count=2, seed=7)  # type: ignore[arg-type]
        timed_parent = replace(parent, eager_ms=3.0, compile_ms=2.0)
        with_brief = replace(plain, parent=timed_parent, **brief)
        assert generator.generate_sync(with_brief).candidates == generator.generate_sync(plain).candidates
