"""Attention written as matmul, softmax, matmul (attention.py): every fused seed of a plain
`F.scaled_dot_product_attention`, built (g++, or nvcc on a GPU) and run through its glue, matches torch,
with the default scale and a given one, a value width other than the key's, and leading batch dims;
the direct translation keeps the op kernel."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import pytest

from kernelfoundry.generators.base import GenerationRequest
from kernelfoundry.generators.heuristic import HeuristicGenerator, parse_variant
from kernelfoundry.tasks.model import ShapeVariant, Task
from kernelfoundry.tasks.reference import instantiate

sys.path.insert(0, str(Path(__file__).parent))
from native import Launcher, Unit, build_unit, cuda_ready

TEMPLATE = """
import torch
import torch.nn as nn
import torch.nn.functional as F

class Model(nn.Module):
    def forward(self, q, k, v):
        return {body}

def get_inputs():
    return [torch.randn({q}), torch.randn({k}), torch.randn({v})]

def get_init_inputs():
    return []
"""

CASES = {
    "default_scale": ("F.scaled_dot_product_attention(q, k, v)", "2, 3, 6, 8", "2, 3, 9, 8", "2, 3, 9, 5"),
    "given_scale": (
        "F.scaled_dot_product_attention(q, k, v, scale=0.3)",
        "4, 7, 16",
        "4, 33, 16",
        "4, 33, 3",
    ),
}


@pytest.mark.parametrize("backend", ["cpu", pytest.param("cuda", marks=pytest.mark.gpu)])
@pytest.mark.parametrize("case", sorted(CASES))
def test_every_fused_seed_of_attention_matches_torch(case: str, backend: str, tmp_path: Path) -> None:
    import torch
    from torch import nn

    if backend == "cuda" and not cuda_ready():
        pytest.skip("needs nvcc and a CUDA device")
    body, q, k, v = CASES[case]
    task = Task(case, TEMPLATE.format(body=body, q=q, k=k, v=v), shapes=(ShapeVariant("small"),))
    result = HeuristicGenerator().generate_sync(GenerationRequest("a", task, backend, count=16))
    assert result.candidates, result.message
    fused = [c for c in result.candidates if (vr := parse_variant(c.source.code)) is not None and vr.fuse]
    direct = [c for c in result.candidates if c not in fused]
    assert fused and all("kf_op0" in c.source.code for c in direct)  # the op kernel stays a candidate
    device = "cuda" if backend == "cuda" else "cpu"
    reference = instantiate(task, task.shapes[0], seed=1, device=device)
    with torch.no_grad():
        expected = reference.model(*reference.inputs)
    for i, candidate in enumerate(fused):
        source = candidate.source
        assert "torch.matmul(q, k.transpose(-2, -1))" in source.glue and "kf_op0" not in source.code
        (tmp_path / str(i)).mkdir()
        unit = Unit(build_unit(source, tmp_path / str(i)))
        glue: dict[str, Any] = {"torch": torch, "nn": nn, "F": torch.nn.functional, "kf": Launcher(unit)}
        exec(compile(source.glue, "<glue>", "exec"), glue)
        model = glue["ModelNew"]().to(device)
        with torch.no_grad():
            got = model(*reference.inputs)
        if backend == "cuda":
            torch.cuda.synchronize()
        torch.testing.assert_close(got, expected, rtol=1e-4, atol=1e-5, msg=candidate.rationale)
