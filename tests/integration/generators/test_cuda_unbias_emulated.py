"""A CUDA candidate's glue calls a conv module without its bias and the generated part after it adds
the bias (unbias.py): under the CPU emulation of cuda_emulation.py, the first CUDA seeds of convs with
tails (a channel reduction, a transposed conv's pointwise tail, a 3-D conv whose output a torch op also
reads) match torch."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import pytest

sys.path.insert(0, str(Path(__file__).parent))
from cuda_emulation import build_emulated, emulation_ready
from native import Unit
from test_cuda_op_kernels import Launcher

from kernelfoundry.generators.base import GenerationRequest
from kernelfoundry.generators.heuristic import HeuristicGenerator, parse_variant
from kernelfoundry.tasks.reference import instantiate
from tests.fixtures.conv_tasks import conv_task

pytestmark = pytest.mark.skipif(not emulation_ready(), reason="needs g++ with C++20 <barrier>")

CASES = {  # name: (module, forward expression, input shape, the glue's conv call is unbiased)
    "min_over_channels": (
        "nn.Conv2d(3, 6, 3)",
        "torch.tanh(torch.tanh(torch.min(self.conv(x), dim=1, keepdim=True)[0]))",
        "2, 3, 7, 6",
        True,
    ),
    "transposed_tail": (
        "nn.ConvTranspose2d(4, 5, 3, stride=2, padding=1, output_padding=1)",
        "torch.tanh(self.conv(x))",
        "2, 4, 3, 4",
        True,
    ),
    "3d_grouped_tail": (
        "nn.Conv3d(4, 6, 2, groups=2)",
        "torch.sigmoid(self.conv(x)) * 2.0",
        "1, 4, 3, 4, 3",
        True,
    ),
    "scalar_tail": (
        "nn.Conv2d(3, 4, 3, padding=1)",
        "torch.relu(self.conv(x) * 2.0 - 0.5)",
        "1, 3, 6, 5",
        True,
    ),
    # a torch op (the pool) reads the conv: cuDNN keeps its bias
    "pool_reads_the_conv": (
        "nn.Conv2d(3, 4, 3)",
        "torch.relu(torch.max_pool2d(self.conv(x), 2))",
        "1, 3, 8, 8",
        False,
    ),
}


def seeds(name: str) -> tuple[Any, list[Any]]:
    module, body, shape, _ = CASES[name]
    t = conv_task(name, module, shape, body)
    result = HeuristicGenerator().generate_sync(GenerationRequest("g", t, "cuda", count=16))
    assert result.candidates, result.message
    # a folded seed moves the bias (and the affine tail) into the conv's own weights instead
    unfolded = [c for c in result.candidates if not (v := parse_variant(c.source.code)) or not v.fold]
    return t, [c.source for c in unfolded if c.source.glue]


@pytest.mark.parametrize("name", sorted(CASES))
def test_the_glue_leaves_the_bias_to_the_part_only_where_generated_ops_read_the_conv(name: str) -> None:
    _, glued = seeds(name)
    assert glued
    unbiased = ["self.conv.weight, None," in s.glue for s in glued]
    assert all(unbiased) if CASES[name][3] else not any(unbiased)
    if CASES[name][3]:
        assert all("self.conv.bias" in s.glue for s in glued)  # handed to the part


@pytest.mark.parametrize("name", sorted(CASES))
def test_unbiased_candidates_match_torch_under_emulation(name: str, tmp_path: Path) -> None:
    import torch
    from torch import nn

    t, glued = seeds(name)
    source = glued[0]
    unit = Unit(build_emulated(source.code, tmp_path))
    reference = instantiate(t, t.shapes[0], seed=1, device="cpu")
    with torch.no_grad():
        expected = reference.model(*reference.inputs)
        glue: dict[str, Any] = {"torch": torch, "nn": nn, "F": torch.nn.functional, "kf": Launcher(unit)}
        exec(compile(source.glue, "<glue>", "exec"), glue)
        candidate = glue["ModelNew"]()
        candidate.load_state_dict(reference.model.state_dict())
        got = candidate(*reference.inputs)
    assert got.shape == expected.shape
    torch.testing.assert_close(got, expected, rtol=1e-4, atol=1e-4)
