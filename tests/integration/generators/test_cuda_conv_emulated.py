"""The CUDA implicit-GEMM conv family's units (cuda_conv.py, its phased transposes and chains) run under
the CPU emulation of cuda_emulation.py, `cp.async` stages and `mma.sync` included, and match torch on
the CPU on the awkward geometry test_cuda_conv.py judges on a GPU, at the tilings it judges there: one
TF32 product a term at TF32's tolerance, 3xTF32 at KernelBench's float32 tolerance, through the NCHW
input and, where a group's channels run in fours, its NHWC copy."""

from __future__ import annotations

import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parent))
from cuda_emulation import emulated_output, emulation_ready
from test_cuda_conv import CONVS, GPU_COMBOS, conv_source, conv_task, layouts, suite_task

from tests.integration.generators.cuda_judge import with_params

pytestmark = pytest.mark.skipif(not emulation_ready(), reason="needs g++ with C++20 <barrier>")


@pytest.mark.parametrize("tf32", [True, False], ids=["tf32", "3xtf32"])
@pytest.mark.parametrize("name", [*CONVS, "batchnorm_relu"])
def test_conv_units_match_torch_under_emulation(name: str, tf32: bool, tmp_path: Path) -> None:
    import torch

    t = suite_task(tf32) if name == "batchnorm_relu" else conv_task(name, tf32)
    tolerance = 1e-2 if tf32 else 1e-4
    units = [(nhwc, combo) for nhwc in layouts(t) for combo in GPU_COMBOS]
    sources = [with_params(conv_source(t, tf32, nhwc), combo) for nhwc, combo in units]
    with ThreadPoolExecutor(2) as pool:  # g++ takes most of the time
        results = list(pool.map(lambda s: emulated_output(t, s, tmp_path), sources))
    for (nhwc, combo), (got, expected) in zip(units, results, strict=True):
        label = f"{combo}, channels-last {nhwc}"
        torch.testing.assert_close(
            got, expected, rtol=tolerance, atol=tolerance, msg=lambda m, x=label: f"{x}: {m}"
        )
