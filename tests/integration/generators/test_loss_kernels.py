"""Losses the proposer writes as pointwise ops and a mean (losses.py) match torch when built and run:
the KL divergence (mean, batchmean, sum, log-probability targets, targets with zeros) beside the
others, on the CPU (g++); test_cuda_op_kernels.py runs the same cases on a GPU."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import pytest

from kernelfoundry.generators.base import GenerationRequest
from kernelfoundry.generators.heuristic import HeuristicGenerator
from kernelfoundry.tasks.model import ShapeVariant, Task
from kernelfoundry.tasks.reference import instantiate

sys.path.insert(0, str(Path(__file__).parent))
from native import Launcher, Unit, build_unit

TEMPLATE = """
import torch
import torch.nn as nn
import torch.nn.functional as F

class Model(nn.Module):
    def __init__(self):
        super().__init__()
{init}
    def forward(self, a, b):
        return {body}

def get_inputs():
    return [{inputs}]

def get_init_inputs():
    return []
"""

PROBABILITIES = "torch.rand(64, 300).softmax(-1).log(), torch.rand(64, 300).softmax(-1)"
CASES = {
    "kl_div_batchmean": ("        pass", "F.kl_div(a, b, reduction='batchmean')", PROBABILITIES),
    "kl_div_mean": ("        pass", "F.kl_div(a, b)", PROBABILITIES),
    "kl_div_of_a_log": (
        "        pass",
        "torch.nn.functional.kl_div(torch.log(a), b, reduction='batchmean')",
        "torch.rand(32, 3, 50).softmax(-1), torch.rand(32, 3, 50).softmax(-1)",
    ),
    "kl_div_log_target_module": (
        "        self.loss = nn.KLDivLoss(reduction='batchmean', log_target=True)",
        "self.loss(a, b)",
        "torch.randn(16, 100).log_softmax(-1), torch.randn(16, 100).log_softmax(-1)",
    ),
    "kl_div_sum_targets_with_zeros": (
        "        pass",
        "F.kl_div(a, b, reduction='sum')",
        "torch.rand(64, 300).softmax(-1).log(), torch.relu(torch.rand(64, 300) - 0.3)",
    ),
    "huber_delta": (
        "        pass",
        "F.huber_loss(a, b, delta=0.5)",
        "torch.randn(40, 77), torch.randn(40, 77)",
    ),
}


def test_kl_div_becomes_pointwise_ops_and_a_mean_with_no_torch_left() -> None:
    from kernelfoundry.generators.heuristic import capture

    for name in ("kl_div_batchmean", "kl_div_of_a_log", "kl_div_log_target_module"):
        init, body, inputs = CASES[name]
        graph = capture(Task(name, TEMPLATE.format(init=init, body=body, inputs=inputs)))
        assert all(n.kind in ("pointwise", "reduction") for n in graph.nodes), name
        assert graph.nodes[-1].op == "mean"


def test_kl_div_without_reduction_stays_in_torch_and_is_named() -> None:
    body = "F.kl_div(a, b, reduction='none')"
    source = TEMPLATE.format(init="        pass", body=body, inputs=PROBABILITIES)
    result = HeuristicGenerator().generate_sync(GenerationRequest("l", Task("n", source), "cpu", count=1))
    assert not result.candidates
    assert "operator `kl_div`" in result.message


@pytest.mark.parametrize("case", sorted(CASES))
def test_loss_matches_torch_on_the_cpu(case: str, tmp_path: Path) -> None:
    import torch
    from torch import nn

    backend = "cpu"
    init, body, inputs = CASES[case]
    task = Task(case, TEMPLATE.format(init=init, body=body, inputs=inputs), shapes=(ShapeVariant("s"),))
    result = HeuristicGenerator().generate_sync(GenerationRequest("l", task, backend, count=1))
    assert result.candidates, result.message
    kernel = result.candidates[0].source
    unit = Unit(build_unit(kernel, tmp_path))
    reference = instantiate(task, task.shapes[0], seed=1, device=backend)
    with torch.no_grad():
        expected = reference.model(*reference.inputs)
        if kernel.glue:
            glue: dict[str, Any] = {"torch": torch, "nn": nn, "F": torch.nn.functional, "kf": Launcher(unit)}
            exec(compile(kernel.glue, "<glue>", "exec"), glue)
            got = glue["ModelNew"]().to(expected.device)(*reference.inputs)
        else:
            got = torch.empty_like(expected)
            assert unit.call(kernel.entry_point, list(reference.inputs), [got]) == 0
    assert got.shape == expected.shape
    torch.testing.assert_close(got, expected, rtol=1e-4, atol=1e-6)
