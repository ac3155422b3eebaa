"""The CPU conv family's strided transposed conv, computed phase by phase (cpu_conv.py, conv_phases.py):
the unit compiles with g++ and matches torch on awkward geometries (grouped 3-D stride 2 with output
padding and a tail, mixed strides with dilation, a stride-5 conv where 16 of 25 phases have no tap and
produce the bias through the tail only, a 1-D kernel shorter than its stride), at odd sizes (phases of
unequal widths, ragged tiles, several tiles a phase) and at every register block the sweep may pick; and
a unit whose weight is not the filter the tables were baked for is refused."""

from __future__ import annotations

import shutil
import sys
from pathlib import Path

import pytest
import torch

from kernelfoundry.domain.kernel import KernelSource
from kernelfoundry.generators.base import GenerationRequest
from kernelfoundry.generators.heuristic import HeuristicGenerator
from kernelfoundry.tasks.model import Task
from kernelfoundry.tasks.reference import instantiate
from tests.fixtures.conv_tasks import conv_task

sys.path.insert(0, str(Path(__file__).parent))
from native import Unit, build_unit
from test_cpu_kernelbench_idioms import run

pytestmark = pytest.mark.skipif(shutil.which("g++") is None, reason="needs g++")

PHASED = {  # module, input shape, forward body
    "t3d_stride2_grouped_sigmoid": (
        "nn.ConvTranspose3d(4, 8, 3, stride=2, padding=1, output_padding=1, groups=2)",
        "2, 4, 3, 5, 19",
        "torch.sigmoid(self.conv(x))",
    ),
    "t2d_mixed_strides_dilated": (
        "nn.ConvTranspose2d(4, 6, (3, 5), stride=(2, 3), padding=(1, 2), output_padding=(1, 0),"
        " dilation=(2, 1))",
        "2, 4, 7, 23",
        "self.conv(x)",
    ),
    "t2d_stride5_untapped_phases_relu": (
        "nn.ConvTranspose2d(3, 10, 3, stride=5, padding=1, dilation=2)",
        "2, 3, 4, 40",
        "torch.relu(self.conv(x))",
    ),
    "t1d_kernel_below_stride": (
        "nn.ConvTranspose1d(6, 5, 2, stride=4, output_padding=3)",
        "3, 6, 45",
        "self.conv(x)",
    ),
}


def phased_seed(task: Task) -> KernelSource:
    """The conv family's implicit-GEMM seed of the task, checked to be the phased one."""
    result = HeuristicGenerator().generate_sync(GenerationRequest("t", task, "cpu", count=4))
    seeds = [c for c in result.candidates if "implicit GEMM" in c.rationale]
    assert seeds and not seeds[0].source.glue, result.message
    assert "kf_phase_tab" in seeds[0].source.code
    return seeds[0].source


@pytest.mark.parametrize("name", sorted(PHASED))
def test_a_phased_transposed_conv_matches_torch(name: str, tmp_path: Path) -> None:
    module, shape, body = PHASED[name]
    task = conv_task(f"conv_{name}", module, shape, body)
    source = phased_seed(task)
    for blocks in ({}, {"MR": 4, "NV": 1}, {"MR": 16, "NV": 4}):
        run(source, task, tmp_path, blocks)


def test_a_weight_other_than_the_baked_filter_is_refused(tmp_path: Path) -> None:
    task = conv_task("conv_t", "nn.ConvTranspose2d(3, 4, 3, stride=2)", "1, 3, 5, 6")
    source = phased_seed(task)
    unit = Unit(build_unit(source, tmp_path, {}))
    ref = instantiate(task, task.shapes[0], seed=1)
    x, _, bias = ref.inputs[0], *ref.model.parameters()
    weight = torch.randn(3, 4, 2, 2)  # a 2 x 2 filter: an output of its own size, but other phases
    got = torch.empty(1, 4, 10, 12)
    assert unit.call(source.entry_point, [x, weight, bias], [got]) != 0
