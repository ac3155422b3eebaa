"""Op kernels (matmul, convolutions, pooling, scans, arg-reductions, attention) built with g++ and run
through their glue match torch on awkward settings: strides, padding, dilation, groups, output padding,
broadcast batches, odd sizes."""

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
from native import Launcher, Unit, build_unit, cuda_ready

TEMPLATE = """
import torch
import torch.nn as nn
import torch.nn.functional as F

class Model(nn.Module):
    def __init__(self):
        super().__init__()
{init}
    def forward(self, {args}):
        return {body}

def get_inputs():
    return [{inputs}]

def get_init_inputs():
    return []
"""

CASES = {
    "conv_transpose3d_strided_padded_grouped_dilated": (
        "        self.op = nn.ConvTranspose3d(8, 12, (3, 2, 3), stride=(2, 1, 3), padding=(1, 0, 2),"
        " output_padding=(1, 0, 1), groups=4, dilation=(2, 1, 1))",
        "x",
        "self.op(x)",
        "torch.randn(2, 8, 3, 5, 4)",
    ),
    "conv_transpose2d_unit_stride_padded_dilated": (
        "        self.op = nn.ConvTranspose2d(4, 6, (3, 4), stride=1, padding=(1, 2), dilation=(1, 2))",
        "x",
        "self.op(x)",
        "torch.randn(2, 4, 7, 9)",
    ),
    "conv_transpose1d_strided_padded": (
        "        self.op = nn.ConvTranspose1d(3, 5, 4, stride=3, padding=2, output_padding=2)",
        "x",
        "self.op(x)",
        "torch.randn(2, 3, 17)",
    ),
    "conv2d_strided_padded_dilated_grouped_no_bias": (
        "        self.op = nn.Conv2d(6, 4, (3, 5), stride=(2, 3), padding=(1, 2), dilation=(2, 1),"
        " groups=2, bias=False)",
        "x",
        "self.op(x)",
        "torch.randn(2, 6, 11, 13)",
    ),
    "conv1d_depthwise_dilated": (
        "        self.op = nn.Conv1d(5, 5, 3, stride=3, dilation=4, groups=5)",
        "x",
        "self.op(x)",
        "torch.randn(3, 5, 41)",
    ),
    "max_pool1d_padded_dilated": (
        "        self.op = nn.MaxPool1d(4, stride=2, padding=2, dilation=3)",
        "x",
        "self.op(x)",
        "torch.randn(2, 3, 29)",
    ),
    "max_pool1d_unit_stride_padded": (
        "        self.op = nn.MaxPool1d(8, stride=1, padding=4, dilation=3)",
        "x",
        "self.op(x)",
        "torch.randn(2, 3, 61)",
    ),
    "max_pool3d_strided_padded": (
        "        self.op = nn.MaxPool3d((2, 3, 3), stride=(1, 2, 2), padding=(1, 1, 0))",
        "x",
        "self.op(x)",
        "torch.randn(2, 2, 5, 7, 9)",
    ),
    "avg_pool1d_strided_padded": (
        "        self.op = nn.AvgPool1d(4, stride=3, padding=2)",
        "x",
        "self.op(x)",
        "torch.randn(2, 3, 20)",
    ),
    "avg_pool2d_divisor_override": (
        "        self.op = nn.AvgPool2d((3, 2), stride=1, padding=(1, 1), divisor_override=5)",
        "x",
        "self.op(x)",
        "torch.randn(2, 3, 7, 8)",
    ),
    "avg_pool2d_padding_excluded": (
        "        self.op = nn.AvgPool2d(3, stride=2, padding=1, count_include_pad=False)",
        "x",
        "self.op(x)",
        "torch.randn(2, 3, 9, 8)",
    ),
    "avg_pool3d_padding_included": (
        "        self.op = nn.AvgPool3d(3, stride=2, padding=1)",
        "x",
        "self.op(x)",
        "torch.randn(2, 2, 5, 6, 7)",
    ),
    # rows of 150 outputs: the host's inside pass in chunks of 64, its 17 taps a row unrolled
    "max_pool2d_wide_window_long_rows": (
        "        self.op = nn.MaxPool2d(17, stride=1, padding=8)",
        "x",
        "self.op(x)",
        "torch.randn(1, 2, 20, 150)",
    ),
    # 17 x 17 = 289 (d, h) rows of a window: more than the inside pass holds, the sweeps alone
    "avg_pool3d_window_of_more_rows_than_held": (
        "        self.op = nn.AvgPool3d(17, stride=(1, 1, 2))",
        "x",
        "self.op(x)",
        "torch.randn(1, 2, 18, 18, 40)",
    ),
    # windows wider than the inside pass spells out (UNROLLED_TAPS): its tap loop
    "max_pool1d_window_of_40_taps": (
        "        self.op = nn.MaxPool1d(40, stride=1, padding=3)",
        "x",
        "self.op(x)",
        "torch.randn(2, 3, 150)",
    ),
    "conv1d_depthwise_35_taps": (
        "        self.op = nn.Conv1d(4, 4, 35, padding=2, groups=4)",
        "x",
        "self.op(x)",
        "torch.randn(2, 4, 120)",
    ),
    "adaptive_avg_pool2d": (
        "        self.op = nn.AdaptiveAvgPool2d((5, 3))",
        "x",
        "self.op(x)",
        "torch.randn(2, 3, 11, 7)",
    ),
    "matmul_broadcast_batches": (
        "        pass",
        "a, b",
        "torch.matmul(a, b)",
        "torch.randn(2, 1, 5, 7), torch.randn(3, 7, 4)",
    ),
    "matmul_transposed_operand": (
        "        pass",
        "a, b",
        "torch.matmul(a.T, b)",
        "torch.randn(7, 5), torch.randn(7, 3)",
    ),
    "einsum_tensor_matrix": (
        "        pass",
        "a, b",
        'torch.einsum("bijl,lk->bijk", a, b)',
        "torch.randn(2, 3, 4, 5), torch.randn(5, 6)",
    ),
    "cumprod_middle_dim": ("        pass", "x", "torch.cumprod(x, dim=1)", "torch.rand(3, 7, 5) + 0.5"),
    "argmin_keepdim": ("        pass", "x", "torch.argmin(x, dim=1, keepdim=True)", "torch.randn(3, 7, 5)"),
    "attention": (
        "        pass",
        "q, k, v",
        "F.scaled_dot_product_attention(q, k, v)",
        "torch.randn(2, 3, 6, 8), torch.randn(2, 3, 9, 8), torch.randn(2, 3, 9, 5)",
    ),
}


@pytest.mark.parametrize(
    "backend",
    ["cpu", pytest.param("cuda", marks=pytest.mark.gpu)],
)
@pytest.mark.parametrize("case", sorted(CASES))
def test_op_kernel_matches_torch(case: str, backend: str, tmp_path: Path) -> None:
    import torch
    from torch import nn

    if backend == "cuda" and not cuda_ready():
        pytest.skip("needs nvcc and a CUDA device")

    init, args, body, inputs = CASES[case]
    source = TEMPLATE.format(init=init, args=args, body=body, inputs=inputs)
    task = Task(case, source, shapes=(ShapeVariant("small"),))
    result = HeuristicGenerator().generate_sync(GenerationRequest("op", task, backend, count=16))
    assert result.candidates, result.message
    # the op-kernel unit (a generated GEMM seed may come first for a matmul)
    kernel = next(c.source for c in result.candidates if "kf_op0" in c.source.code)
    assert "kf_op0" in kernel.code and "kf.launch('kf_op0'" in kernel.glue
    unit = Unit(build_unit(kernel, tmp_path))
    glue: dict[str, Any] = {"torch": torch, "nn": nn, "F": torch.nn.functional, "kf": Launcher(unit)}
    exec(compile(kernel.glue, "<glue>", "exec"), glue)
    reference = instantiate(task, task.shapes[0], seed=1, device="cuda" if backend == "cuda" else "cpu")
    candidate = glue["ModelNew"]().to(reference.inputs[0].device)
    candidate.load_state_dict(reference.model.state_dict())
    with torch.no_grad():
        expected = reference.model(*reference.inputs)
        got = candidate(*reference.inputs)
        if backend == "cuda":
            torch.cuda.synchronize()
    assert got.dtype == expected.dtype and got.shape == expected.shape
    torch.testing.assert_close(got, expected, rtol=1e-4, atol=1e-4)
