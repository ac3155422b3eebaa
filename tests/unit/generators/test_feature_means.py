"""feature_means.py: a linear map whose output only reaches a sum or mean over its features through
affine ops (scales constant along the features, shifts of any kind) is rewritten as a matrix-vector
product with the averaged weight; anything else is left alone; the generated candidates of rewritten
tasks match their references."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import pytest
import torch
from torch import nn

from kernelfoundry.generators.base import GenerationRequest
from kernelfoundry.generators.heuristic import HeuristicGenerator
from kernelfoundry.generators.heuristic.feature_means import lower_feature_means
from kernelfoundry.generators.heuristic.graph import capture
from kernelfoundry.tasks.model import ShapeVariant, Task
from kernelfoundry.tasks.reference import instantiate

sys.path.insert(0, str(Path(__file__).parents[2] / "integration" / "generators"))

TEMPLATE = """
import torch
import torch.nn as nn

class Model(nn.Module):
    def __init__(self):
        super().__init__()
        self.gemm = nn.Linear(24, 40, bias={bias})
        self.weight = nn.Parameter(torch.randn(40, 24))
        self.shift = nn.Parameter(torch.randn(40))
        self.scale = nn.Parameter(torch.randn(40))

    def forward(self, x):
        return {body}

def get_inputs():
    return [torch.randn({shape})]

def get_init_inputs():
    return []
"""

# body, bias, input shape: rewritten
REWRITTEN = {
    "linear_sum": ("torch.sum(self.gemm(x), dim=1)", True, "8, 24"),
    "linear_no_bias_mean": ("self.gemm(x).mean(-1, keepdim=True)", False, "8, 24"),
    "matmul_transposed_divide_sum_scale": (
        "torch.sum(torch.matmul(x, self.weight.T) / 2, dim=1, keepdim=True) * 1.5",
        True,
        "8, 24",
    ),
    "per_feature_shift_then_mean": (
        "torch.mean(self.gemm(x) - self.shift, dim=1, keepdim=True)",
        True,
        "8, 24",
    ),
    "scalar_shift_then_sum": ("torch.sum(3.0 - self.gemm(x) * 0.5, dim=-1)", True, "8, 24"),
    "batched_input": ("torch.sum(self.gemm(x) + self.shift, dim=2)", True, "2, 5, 24"),
}
# body, bias, input shape: left alone
NOT_REWRITTEN = {
    "per_feature_scale": ("torch.sum(self.gemm(x) * self.scale, dim=1)", True, "8, 24"),
    "activation_between": ("torch.sum(torch.sigmoid(self.gemm(x)), dim=1)", True, "8, 24"),
    "sum_over_the_batch": ("torch.sum(self.gemm(x), dim=0)", True, "8, 24"),
    "divided_by_the_map": ("torch.sum(1.0 / self.gemm(x), dim=1)", True, "8, 24"),
    "max_not_sum": ("torch.amax(self.gemm(x), dim=1)", True, "8, 24"),
}


def task_of(body: str, bias: bool, shape: str) -> Task:
    return Task("feature_mean", TEMPLATE.format(body=body, bias=bias, shape=shape), (ShapeVariant("s"),))


@pytest.mark.parametrize("name", sorted(REWRITTEN))
def test_a_linear_map_reaching_a_feature_sum_through_affine_ops_is_rewritten(name: str) -> None:
    graph = capture(task_of(*REWRITTEN[name]))
    lowered = lower_feature_means(graph)
    assert lowered is not graph
    rewritten = [n for n in lowered.nodes if n.op == "linear_feature_mean"]
    assert len(rewritten) == 1 and rewritten[0].shape[-1] == 1


@pytest.mark.parametrize("name", sorted(NOT_REWRITTEN))
def test_anything_else_is_left_alone(name: str) -> None:
    graph = capture(task_of(*NOT_REWRITTEN[name]))
    assert lower_feature_means(graph) is graph


@pytest.mark.parametrize("name", sorted(REWRITTEN))
def test_the_fused_candidate_of_a_rewritten_task_matches_the_reference(name: str, tmp_path: Path) -> None:
    from native import Launcher, Unit, build_unit

    task = task_of(*REWRITTEN[name])
    result = HeuristicGenerator().generate_sync(GenerationRequest("t", task, "cpu", count=4))
    sources = [c.source for c in result.candidates if "mean(" in (c.source.glue or "")]
    assert sources, [c.source.glue for c in result.candidates]
    source = sources[0]
    unit = Unit(build_unit(source, tmp_path))
    reference = instantiate(task, task.shapes[0], seed=1, device="cpu")
    namespace: dict[str, Any] = {"torch": torch, "nn": nn, "F": torch.nn.functional, "kf": Launcher(unit)}
    exec(compile(source.glue, "<glue>", "exec"), namespace)
    candidate = namespace["ModelNew"]()
    candidate.load_state_dict(reference.model.state_dict(), strict=False)  # as the evaluator: by name
    with torch.no_grad():
        got, expected = candidate(*reference.inputs), reference.model(*reference.inputs)
    torch.testing.assert_close(got, expected, rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("backend", ["cpu", "cuda"])
def test_the_second_seed_keeps_the_map_and_the_reduction_mutation_toggles_it(backend: str) -> None:
    from kernelfoundry.generators.base import ParentKernel
    from kernelfoundry.generators.heuristic.variant import parse_variant

    task = task_of(*REWRITTEN["linear_sum"])
    generator = HeuristicGenerator()
    seeds = generator.generate_sync(GenerationRequest("t", task, backend, count=2)).candidates
    first, second = (parse_variant(c.source.code) for c in seeds[:2])
    assert first is not None and second is not None
    assert not first.literal_means and "mean(0)" in seeds[0].source.glue
    assert second.literal_means and "mean(0)" not in (seeds[1].source.glue or "")
    parent = ParentKernel(seeds[0].source, seeds[0].strategy, speedup=1.0, runtime_ms=1.0)
    request = GenerationRequest("t", task, backend, parent=parent, mutation="reduction")
    child = generator.generate_sync(request).candidates[0]
    variant = parse_variant(child.source.code)
    assert variant is not None and variant.literal_means
