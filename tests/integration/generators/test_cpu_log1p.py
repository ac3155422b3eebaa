"""softplus and mish on the CPU use the prelude's vectorisable log1p (kf_log1p) instead of libm's log1pf:
across the whole range the generated units meet, from exp underflow to the threshold, they stay within
a few float32 ulps of float64 torch, with KF_FAST_MATH on and off."""

from __future__ import annotations

import shutil
import sys
from pathlib import Path

import pytest
import torch

from kernelfoundry.generators.base import GenerationRequest
from kernelfoundry.generators.heuristic import HeuristicGenerator
from kernelfoundry.tasks.model import ShapeVariant, Task

sys.path.insert(0, str(Path(__file__).parent))
from native import Unit, build_unit

pytestmark = pytest.mark.skipif(shutil.which("g++") is None, reason="needs g++")

TEMPLATE = """
import torch
import torch.nn.functional as F

class Model(torch.nn.Module):
    def forward(self, x):
        return {body}

def get_inputs():
    return [torch.randn(4, 1000)]

def get_init_inputs():
    return []
"""
BODIES = {"softplus": "F.softplus(x)", "softplus_beta": "F.softplus(x, beta=2.0)", "mish": "F.mish(x)"}


@pytest.mark.parametrize("fast_math", [1, 0])
@pytest.mark.parametrize("name", sorted(BODIES))
def test_generated_softplus_and_mish_are_accurate_everywhere(
    name: str, fast_math: int, tmp_path: Path
) -> None:
    task = Task(name, TEMPLATE.format(body=BODIES[name]), shapes=(ShapeVariant("s", {}),))
    candidate = HeuristicGenerator().generate_sync(GenerationRequest("t", task, "cpu")).candidates[0]
    assert "kf_log1p(kf_exp(" in candidate.source.code
    unit = Unit(build_unit(candidate.source, tmp_path, {"KF_FAST_MATH": fast_math}))
    x = torch.cat([torch.linspace(-100.0, 30.0, 3000), torch.tensor([0.0, 1e-30, -1e-30, 1e-7])])
    x = torch.cat([x, torch.randn(1000 - x.numel() % 1000) * 5]).reshape(-1, 1000).contiguous()
    got = torch.full_like(x, float("nan"))
    if candidate.source.glue:
        pytest.skip("a glue-launched unit")  # the proposer's first pointwise seed is a bare entry point
    assert unit.call(candidate.source.entry_point, [x], [got]) == 0
    namespace: dict = {}
    exec(TEMPLATE.format(body=BODIES[name]), namespace)
    module = namespace["Model"]()
    expected = module(x.double())
    scale = expected.abs().clamp_min(1e-30)
    relative = ((got.double() - expected).abs() / scale).max().item()
    assert relative < 5e-6, relative
