"""Every CUDA seed of the graph emitter (cuda.py, cuda_rows.py, cuda_columns.py) for shapes that take
each of its paths runs under the CPU emulation of cuda_emulation.py and matches torch on the CPU (and,
gpu marker, built by nvcc on a GPU against torch there):
pointwise rows and reduced rows that start off 16 bytes (odd sizes: a scalar head, a float4 body, a
tail), reductions over rows (fused with a broadcast consumer or not) and over middle dims (tiled,
fused), row ops (rows in registers, a warp per row, rows re-read in float4 passes from their first
16-byte boundary, rows split over blocks), softmaxes over a middle dim (a column per thread, in
registers or in two passes), conv tails that read the conv's channels-last output and full reductions
split with atomics."""

from __future__ import annotations

import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pytest

sys.path.insert(0, str(Path(__file__).parent))
from cuda_emulation import build_emulated, emulation_ready
from native import Unit, build_unit
from test_cuda_op_kernels import TEMPLATE, Launcher

from kernelfoundry.generators.base import GenerationRequest
from kernelfoundry.generators.heuristic import HeuristicGenerator
from kernelfoundry.tasks.model import ShapeVariant, Task
from kernelfoundry.tasks.reference import instantiate


def cuda_ready() -> bool:
    import shutil

    import torch

    return shutil.which("nvcc") is not None and torch.cuda.is_available()


# name: (module set-up, forward args, forward body, inputs)
CASES: dict[str, tuple[str, str, str, str]] = {
    "pointwise_odd_rows_broadcast": (
        "        pass",
        "x, y",
        "torch.relu(x) * y + 1.0",
        "torch.randn(7, 1001), torch.randn(7, 1)",
    ),
    "pointwise_odd_flat": ("        pass", "x", "torch.sigmoid(x) * 2.0", "torch.randn(3, 5, 333)"),
    "l1_norm_odd_rows": (
        "        pass",
        "x",
        "x / torch.mean(torch.abs(x), dim=1, keepdim=True)",
        "torch.randn(6, 999)",
    ),
    # rows long enough to be held on chip while they are reduced (cuda_onchip_rows.py): 16,384 elements
    # in registers, the rest in shared memory; an odd row, and the longest row held
    "l2_norm_rows_held_on_chip": (
        "        pass",
        "x",
        "x / torch.norm(x, p=2, dim=1, keepdim=True)",
        "torch.randn(3, 20001)",
    ),
    "l1_norm_longest_rows_held_on_chip": (
        "        pass",
        "x",
        "x / torch.mean(torch.abs(x), dim=1, keepdim=True)",
        "torch.randn(2, 16384 + 50176)",
    ),
    # row ops over rows too long for one SM: a thread block cluster holds a row (2 and 4 blocks here),
    # its statistics reduced through distributed shared memory
    "log_softmax_rows_held_by_a_cluster": (
        "        pass",
        "x",
        "torch.log_softmax(x, dim=1)",
        "torch.randn(3, 80001)",
    ),
    "softmax_rows_held_by_a_cluster": (
        "        pass",
        "x",
        "torch.softmax(x, dim=1)",
        "torch.randn(2, 80001)",
    ),
    "instance_norm_rows_held_by_a_cluster": (
        "        self.norm = nn.InstanceNorm2d(2)",
        "x",
        "self.norm(x)",
        "torch.randn(2, 2, 300, 500) * 3.0 + 1.0",
    ),
    # a reduction over rows and its broadcast consumer fused: block rows, warp rows, float4 or not
    "l1_norm_float4_long_rows": (
        "        pass",
        "x",
        "x / torch.mean(torch.abs(x), dim=1, keepdim=True)",
        "torch.randn(3, 4100 * 2)",
    ),
    "subtract_row_max_times_operand": (
        "        pass",
        "x, y",
        "(x - torch.amax(x, dim=-1, keepdim=True)) * y + 0.5",
        "torch.randn(3, 10, 256), torch.randn(3, 10, 256)",
    ),
    "divide_by_row_sum_short_odd_rows": (
        "        pass",
        "x",
        "x / (torch.sum(x, dim=-1, keepdim=True) + 100.0)",
        "torch.rand(9, 37)",
    ),
    # reductions over rows of any length: float4 from each row's first 16-byte boundary
    "sum_odd_short_rows": ("        pass", "x", "torch.sum(x, dim=-1)", "torch.randn(6, 1001)"),
    # a full reduction reading a per-column operand by position (a hinge loss): split rows of float4
    # (each component's position through kf_divider), and a row of any length (peeled float4)
    "hinge_loss_split_float4": (
        "        pass",
        "x, t",
        "torch.mean(torch.clamp(1 - x * t, min=0))",
        "torch.randn(67, 4100), torch.randn(4100)",
    ),
    # rows of a multiple of 4 (float4 from the row's start): the per-column operand read four positions at
    # a time where it is 16-byte aligned
    "hinge_loss_rows_float4": (
        "        pass",
        "x, t",
        "torch.sum(torch.clamp(1 - x * t, min=0), dim=-1)",
        "torch.randn(5, 3, 1028), torch.randn(1028)",
    ),
    "hinge_loss_odd_rows": (
        "        pass",
        "x, t",
        "torch.sum(torch.clamp(1 - x * t, min=0), dim=-1)",
        "torch.randn(5, 7, 1001), torch.randn(1001)",
    ),
    # middle-dim reductions over rows of no multiple of 4 floats: wide tiles of realigned float4s
    "sum_middle_dim_odd_rows": (
        "        pass",
        "x",
        "torch.sum(x, dim=1, keepdim=True)",
        "torch.randn(2, 33, 1030)",
    ),
    "mean_middle_dim_of_a_map_odd_rows": (
        "        pass",
        "x",
        "torch.mean(x * 2.0 + 1.0, dim=1)",
        "torch.randn(3, 40, 301)",
    ),
    "amin_middle_dim_odd_rows": ("        pass", "x", "torch.amin(x, dim=1)", "torch.randn(2, 7, 1027)"),
    # enough rows for row chunks (KF_WCOLS 2): 300 rows in chunks of 96, the last of 12
    "sum_long_middle_dim_odd_rows": (
        "        pass",
        "x",
        "torch.sum(x, dim=1, keepdim=True)",
        "torch.randn(2, 300, 261)",
    ),
    "amax_long_middle_dim_odd_rows": (
        "        pass",
        "x",
        "torch.amax(x, dim=1)",
        "torch.randn(3, 200, 130)",
    ),
    "mean_long_middle_dim_of_a_map_odd_rows": (
        "        pass",
        "x",
        "torch.mean(x * 2.0 + 1.0, dim=1)",
        "torch.randn(2, 257, 1133)",
    ),
    "amax_odd_long_rows": ("        pass", "x", "torch.amax(x, dim=1)", "torch.randn(3, 5001)"),
    "logsumexp_odd_rows": ("        pass", "x", "torch.logsumexp(x, dim=1)", "torch.randn(4, 1003)"),
    "sum_middle_dim": ("        pass", "x", "torch.sum(x, dim=1, keepdim=True)", "torch.randn(3, 40, 70)"),
    "max_middle_dim_wide": ("        pass", "x", "torch.amax(x, dim=1)", "torch.randn(2, 33, 128)"),
    "scale_by_middle_dim_mean": (
        "        pass",
        "x",
        "x - torch.mean(x, dim=1, keepdim=True)",
        "torch.randn(2, 9, 64)",
    ),
    "log_softmax_rows": ("        pass", "x", "torch.log_softmax(x, dim=1)", "torch.randn(5, 2500)"),
    "softmax_short_rows": ("        pass", "x", "torch.softmax(x * 0.5, dim=-1)", "torch.randn(4, 3, 300)"),
    "softmax_odd_rows": ("        pass", "x", "torch.softmax(x, dim=1) * 3.0", "torch.randn(7, 3001)"),
    # softmaxes over a middle dim (the channels): short columns in registers, long ones in two passes
    "softmax_channels_short": ("        pass", "x", "torch.softmax(x, dim=1)", "torch.randn(2, 5, 3, 4)"),
    "log_softmax_channels_long": (
        "        pass",
        "x",
        "torch.log_softmax(x * 0.5, dim=1)",
        "torch.randn(2, 70, 6)",
    ),
    "softmax_middle_of_four": (
        "        pass",
        "x",
        "torch.softmax(x, dim=2) * 3.0",
        "torch.randn(2, 3, 9, 5)",
    ),
    "conv_softmax_channels_tail": (
        "        self.conv = nn.Conv2d(3, 6, 3)",
        "x",
        "torch.sigmoid(torch.softmax(self.conv(x), dim=1) * 2.0)",
        "torch.randn(2, 3, 7, 6)",
    ),
    "conv3d_min_softmax_channels": (
        "        self.conv = nn.Conv3d(2, 4, 2)",
        "x",
        "torch.softmax(torch.min(self.conv(x), dim=2)[0], dim=1)",
        "torch.randn(1, 2, 4, 5, 3)",
    ),
    # conv tails read in channels-last (layout.py): channel tiles of 32 and a partial one, positions not
    # a multiple of 32, a per-channel parameter and the conv's own bias; a 3-D transposed conv
    "conv_nhwc_tail_67_wide": (
        "        self.conv = nn.Conv2d(3, 67, 3)\n        self.s = nn.Parameter(torch.randn(67, 1, 1))",
        "x",
        "torch.tanh(self.conv(x) * self.s + 0.5)",
        "torch.randn(2, 3, 9, 11)",
    ),
    "conv_transpose3d_nhwc_tail": (
        "        self.conv = nn.ConvTranspose3d(4, 5, 3, stride=2)",
        "x",
        "torch.relu(self.conv(x)) * 2.0",
        "torch.randn(1, 4, 3, 4, 3)",
    ),
    # reduced over the channels: each position's channels one contiguous row of the NHWC output
    "conv_nhwc_channel_min_tail": (
        "        self.conv = nn.Conv2d(3, 40, 3)\n        self.s = nn.Parameter(torch.randn(40, 1, 1))",
        "x",
        "torch.tanh(torch.min(self.conv(x) * self.s, dim=1, keepdim=True)[0])",
        "torch.randn(2, 3, 9, 10)",
    ),
    "conv3d_nhwc_channel_mean_tail": (
        "        self.conv = nn.Conv3d(2, 5, 2)",
        "x",
        "torch.mean(torch.relu(self.conv(x)), dim=1) * 2.0",
        "torch.randn(1, 2, 4, 5, 6)",
    ),
    "conv_transpose_nhwc_channel_sum": (
        "        self.conv = nn.ConvTranspose2d(4, 6, 3, stride=2)",
        "x",
        "torch.sum(self.conv(x), dim=1, keepdim=True)",
        "torch.randn(2, 4, 5, 4)",
    ),
    "group_norm_affine_odd_rows": (
        "        self.op = nn.GroupNorm(2, 4)\n"
        "        nn.init.normal_(self.op.weight)\n"
        "        nn.init.normal_(self.op.bias)",
        "x",
        "self.op(x)",
        "torch.randn(2, 4, 9, 13)",
    ),
    "layer_norm_short_rows": (
        "        self.op = nn.LayerNorm(65)\n        nn.init.normal_(self.op.weight)",
        "x",
        "self.op(x)",
        "torch.randn(4, 3, 65)",
    ),
    "instance_norm_split_rows": (
        "        self.op = nn.InstanceNorm2d(2)",
        "x",
        "self.op(x)",
        "torch.rand(2, 2, 128, 130)",
    ),
    # one value per row read inside the step (plan.row_constant_axis): a conv's bias (after unbias) or a
    # per-channel operand before a norm or a reduction over each channel's positions
    "conv_bias_instance_norm": (
        "        self.conv = nn.Conv2d(3, 5, 3)\n        self.norm = nn.InstanceNorm2d(5)",
        "x",
        "self.norm(self.conv(x))",
        "torch.randn(2, 3, 9, 11)",
    ),
    "conv_bias_instance_norm_long_rows": (
        "        self.conv = nn.Conv2d(3, 4, 3)\n        self.norm = nn.InstanceNorm2d(4)",
        "x",
        "self.norm(self.conv(x)) * 2.0",
        "torch.randn(1, 3, 70, 72)",
    ),
    "channel_scaled_global_mean": (
        "        self.conv = nn.Conv2d(3, 6, 3)\n        self.s = nn.Parameter(torch.randn(6, 1, 1))",
        "x",
        "(self.conv(x) * self.s).mean(dim=(2, 3), keepdim=True)",
        "torch.randn(2, 3, 9, 10)",
    ),
    "conv3d_bias_layer_norm": (
        "        self.conv = nn.Conv3d(2, 4, 2)",
        "x",
        "F.layer_norm(self.conv(x), (3, 4))",
        "torch.randn(1, 2, 4, 4, 5)",
    ),
    "channel_shifted_middle_mean": (
        "        self.conv = nn.Conv3d(2, 4, 2)\n        self.s = nn.Parameter(torch.randn(4, 1, 1, 1))",
        "x",
        "(self.conv(x) + self.s).mean(dim=2)",
        "torch.randn(2, 2, 5, 4, 6)",
    ),
    "channel_scaled_softmax_rows": (
        "        self.conv = nn.Conv2d(3, 6, 3)\n        self.s = nn.Parameter(torch.randn(6, 1, 1))",
        "x",
        "torch.softmax(self.conv(x) * self.s, dim=-1)",
        "torch.randn(2, 3, 7, 40)",
    ),
    # ... or read by the position within the reduced range: a min, a softmax or a logsumexp over the
    # channels, a sum or mean over each row of a linear's output with a per-column operand
    "conv_bias_channel_min": (
        "        self.conv = nn.Conv2d(3, 6, 3)",
        "x",
        "torch.min(self.conv(x) * 2.0, dim=1, keepdim=True)[0]",
        "torch.randn(2, 3, 9, 10)",
    ),
    "channel_scaled_softmax_channels": (
        "        self.conv = nn.Conv2d(3, 6, 3)\n        self.s = nn.Parameter(torch.randn(6, 1, 1))",
        "x",
        "torch.softmax(self.conv(x) * self.s, dim=1)",
        "torch.randn(2, 3, 9, 10)",
    ),
    "channel_shifted_logsumexp_channels": (
        "        self.conv = nn.Conv3d(2, 5, 2)\n        self.s = nn.Parameter(torch.randn(5, 1, 1, 1))",
        "x",
        "torch.logsumexp(self.conv(x) + self.s, dim=1, keepdim=True)",
        "torch.randn(1, 2, 4, 5, 6)",
    ),
    "channel_centred_by_channel_mean": (
        "        self.conv = nn.Conv2d(3, 6, 3)\n        self.s = nn.Parameter(torch.randn(6, 1, 1))",
        "x",
        "self.conv(x) * self.s - torch.mean(self.conv(x) * self.s, dim=1, keepdim=True)",
        "torch.randn(2, 3, 11, 12)",
    ),
    "column_shifted_row_mean": (
        "        self.fc = nn.Linear(16, 12)\n        self.s = nn.Parameter(torch.randn(12))",
        "x",
        "(self.fc(x) - self.s).mean(dim=1)",
        "torch.randn(5, 16)",
    ),
    "column_shifted_long_row_sum": (
        "        self.fc = nn.Linear(8, 4104)\n        self.s = nn.Parameter(torch.randn(4104))",
        "x",
        "(self.fc(x) * self.s).sum(dim=1, keepdim=True)",
        "torch.randn(3, 8)",
    ),
    # ... by the position in a layer norm's or a row softmax's row, by its channel in a group norm of
    # several channels a group (long rows: split over blocks, float4), which reads a prologue that is
    # not affine written out first
    "conv_bias_group_norm_long_rows": (
        "        self.conv = nn.Conv2d(3, 8, 3)",
        "x",
        "F.group_norm(self.conv(x), 2) * 2.0",
        "torch.randn(2, 3, 66, 70)",
    ),
    "column_shifted_layer_norm": (
        "        self.fc = nn.Linear(8, 64)\n        self.s = nn.Parameter(torch.randn(64))",
        "x",
        "F.layer_norm(self.fc(x) + self.s, (64,))",
        "torch.randn(5, 8)",
    ),
    "column_scaled_row_softmax": (
        "        self.fc = nn.Linear(8, 1030)\n        self.s = nn.Parameter(torch.randn(1030))",
        "x",
        "torch.softmax(self.fc(x) * self.s, dim=1)",
        "torch.randn(3, 8)",
    ),
    "conv_bias_sigmoid_group_norm": (
        "        self.conv = nn.Conv2d(3, 8, 3)",
        "x",
        "F.group_norm(torch.sigmoid(self.conv(x)), 2)",
        "torch.randn(2, 3, 8, 9)",
    ),
    "conv_bias_group_norm_two_groups": (
        "        self.conv = nn.Conv2d(3, 4, 3)",
        "x",
        "F.group_norm(self.conv(x), 2)",
        "torch.randn(2, 3, 8, 9)",
    ),
    # pooling windows with their pointwise producers and consumers in one pool step (pools.py): the
    # conv's bias and a per-channel scale read once a row, max and average windows of 1-3 dims with
    # padding, dilation, ragged edges and PyTorch's average divisors, a pool of a pool, a row op before
    "conv_bias_hardswish_maxpool_mish": (
        "        self.conv = nn.Conv2d(3, 5, 3)\n        self.pool = nn.MaxPool2d(2)",
        "x",
        "F.mish(self.pool(F.hardswish(self.conv(x) - 0.5)))",
        "torch.randn(2, 3, 11, 12)",
    ),
    "conv_scaled_maxpool_padded_dilated": (
        "        self.conv = nn.Conv2d(3, 4, 3)\n        self.s = nn.Parameter(torch.randn(4, 1, 1))\n"
        "        self.pool = nn.MaxPool2d(3, stride=2, padding=1, dilation=2)",
        "x",
        "torch.tanh(self.pool(self.conv(x) * self.s)) + self.s",
        "torch.randn(2, 3, 12, 13)",
    ),
    "conv3d_avgpool_bias_scaled": (
        "        self.conv = nn.ConvTranspose3d(2, 3, 3, stride=2)\n        self.pool = nn.AvgPool3d(2)\n"
        "        self.b = nn.Parameter(torch.randn(3, 1, 1, 1))",
        "x",
        "(self.pool(self.conv(x) * 0.5) + self.b) * 2.0",
        "torch.randn(2, 2, 3, 4, 3)",
    ),
    "avgpool_padded_divisors": (
        "        self.p1 = nn.AvgPool2d(3, stride=2, padding=1)\n"
        "        self.p2 = nn.AvgPool2d(3, stride=2, padding=1, count_include_pad=False)\n"
        "        self.p3 = nn.AvgPool2d(2, divisor_override=3)",
        "x",
        "self.p1(torch.relu(x)) + self.p2(torch.sigmoid(x)) * self.p3(x - 1.0)",
        "torch.randn(2, 3, 10, 10)",
    ),
    "maxpool1d_between_views_of_a_linear": (
        "        self.fc = nn.Linear(8, 20)\n        self.pool = nn.MaxPool1d(3, stride=2)",
        "x",
        "self.pool(torch.sigmoid(self.fc(x)).unsqueeze(1)).squeeze(1) * 2.0",
        "torch.randn(4, 8)",
    ),
    "softmax_maxpool_maxpool_3d": (
        "        self.conv = nn.Conv3d(2, 4, 2)\n"
        "        self.p1 = nn.MaxPool3d(2)\n        self.p2 = nn.MaxPool3d(2)",
        "x",
        "self.p2(self.p1(torch.softmax(self.conv(x), dim=1)))",
        "torch.randn(2, 2, 9, 10, 11)",
    ),
    "mse_full_reduction": (
        "        pass",
        "a, b",
        "torch.mean((a - b) ** 2)",
        "torch.rand(64, 257), torch.rand(64, 257)",
    ),
}


# Row ops over rows longer than a cluster holds: co-resident blocks of the grid hold a row
# (cuda_onchip_rows.py's `_grows`, KF_GRID_ROWS). GRID_PARAMS make them reachable at test sizes: no
# cluster path, shares of 30,000 elements (16,384 in registers, the rest in shared memory), so these
# rows take 2, 3 and 4 blocks on the emulation's 4 SMs. The last case, a level1/35_GroupNorm_-like group
# of 2,097,152 floats, is the GPU's (on the emulation's 4 SMs it needs more blocks than run at once).
GRID_CASES: dict[str, tuple[str, str, str, str]] = {
    "group_norm_rows_held_across_the_grid": (
        "        self.norm = nn.GroupNorm(2, 4)",
        "x",
        "self.norm(x)",
        "torch.randn(3, 4, 250, 100) * 2.0 + 0.5",
    ),
    "log_softmax_rows_held_across_the_grid": (
        "        pass",
        "x",
        "torch.log_softmax(x * 4.0, dim=1)",
        "torch.randn(3, 70001)",
    ),
    "softmax_rows_held_across_the_grid": (
        "        pass",
        "x",
        "torch.softmax(x, dim=1)",
        "torch.randn(2, 100001)",
    ),
    "group_norm_long_groups_held_across_the_grid": (
        "        self.norm = nn.GroupNorm(2, 16)",
        "x",
        "self.norm(x)",
        "torch.rand(2, 16, 512, 512)",
    ),
}
GRID_PARAMS = {"KF_GRID_ROWS": 1, "KF_CLUSTER_MOST": 0, "KF_GRID_SHARE": 30000}


def seeds(name: str) -> tuple[Task, list[Any]]:
    init, args, body, inputs = CASES[name] if name in CASES else GRID_CASES[name]
    task = Task(name, TEMPLATE.format(init=init, args=args, body=body, inputs=inputs), (ShapeVariant("s"),))
    result = HeuristicGenerator().generate_sync(GenerationRequest("emu", task, "cuda", count=8))
    assert result.candidates, result.message
    unique = {c.source.code: c.source for c in result.candidates}
    return task, list(unique.values())


def run(task: Task, kernel: Any, lib: Path, device: str = "cpu") -> tuple[Any, Any]:
    import torch
    from torch import nn

    unit = Unit(lib)
    reference = instantiate(task, task.shapes[0], seed=1, device=device)
    with torch.no_grad():
        expected = reference.model(*reference.inputs)
        if kernel.glue:
            glue: dict[str, Any] = {"torch": torch, "nn": nn, "F": torch.nn.functional, "kf": Launcher(unit)}
            exec(compile(kernel.glue, "<glue>", "exec"), glue)
            candidate = glue["ModelNew"]().to(device)
            candidate.load_state_dict(reference.model.state_dict())
            got = candidate(*reference.inputs)
        else:
            state = [*reference.model.parameters(), *reference.model.buffers()]
            got = torch.empty_like(expected)
            assert unit.call(kernel.entry_point, [*reference.inputs, *state], [got]) == 0
    return got, expected


def tolerance_of(variant_line: str) -> float:
    """KernelBench's float32 tolerance, or TF32's for a seed of one TF32 product a term (the precision
    cuDNN runs a float32 conv at by default)."""
    return 1e-2 if '"tf32": true' in variant_line else 1e-4


MIDDLE_SOFTMAX = [c for c in CASES if "softmax" in c and ("channels" in c or "middle_of" in c)]


@pytest.mark.parametrize("case", [c for c in CASES if "nhwc" in c])
def test_a_conv_tail_has_a_seed_that_reads_the_conv_in_channels_last(case: str) -> None:
    _, kernels = seeds(case)
    # (the conv family's own channels-last seeds, which read the input through an NHWC copy, aside)
    nhwc = [k for k in kernels if '"channels_last": true' in k.code and '"gemm": true' not in k.code]
    assert len(nhwc) == 1  # the second seed, and `tiling` reaches it
    # the conv's input copied to channels-last by the unit's own entry point, the tail reading NHWC
    assert "kf.launch('kf_part0_to_nhwc'" in nhwc[0].glue
    assert "_nhwc<<<" in nhwc[0].code or "_nhwc_red<<<" in nhwc[0].code  # a reduced tail: its own kernel
    assert "memory_format" not in nhwc[0].glue


@pytest.mark.parametrize("case", [c for c in CASES if c.startswith("conv") and "pool" in c])
def test_a_conv_pool_tail_is_one_pool_step_in_either_layout(case: str) -> None:
    _, kernels = seeds(case)
    fused = [k for k in kernels if '"fuse": true' in k.code]
    # no pooling left to torch: the fused NCHW seed leads, the channels-last one comes second
    assert all(".pool(" not in k.glue for k in fused)
    assert "Pool step" in fused[0].code
    assert '"channels_last": true' in kernels[1].code and "_nhwc_pool<<<" in kernels[1].code
    assert "kf.launch('kf_part0_to_nhwc'" in kernels[1].glue


@pytest.mark.parametrize("case", [c for c in CASES if "held_on_chip" in c])
def test_a_long_row_and_its_consumer_are_read_once_where_the_row_fits_on_chip(case: str) -> None:
    _, kernels = seeds(case)
    # every seed that fuses the consumer into the reduction (not the atomic split rows)
    fused = [k for k in kernels if "_frows<<<" in k.code]
    assert len(fused) >= 3 and all("_fcrows<<<" in k.code for k in fused)
    for k in fused:
        # held while FUSED_ROWS_IN_REGISTERS (swept) and the row fits: else the kernel that re-reads it
        assert "if (FUSED_ROWS_IN_REGISTERS && R >= 16384 && R <= 66560) {" in k.code
        assert "kf_row[j - 16384] = kf_c;" in k.code


@pytest.mark.parametrize("case", [c for c in CASES if "held_by_a_cluster" in c])
def test_a_row_op_whose_row_outgrows_an_sm_has_a_seed_that_holds_it_in_a_cluster(case: str) -> None:
    _, kernels = seeds(case)
    held = [k for k in kernels if '"cache_rows": true' in k.code]
    assert held and all("_crows, " in k.code and "cudaLaunchKernelEx(&kf_config" in k.code for k in held)
    for k in held:
        assert "kf_attr[0].id = cudaLaunchAttributeClusterDimension;" in k.code
        assert "kf_cluster_reduce<" in k.code and "#include <cooperative_groups.h>" in k.code


def held_across_the_grid(case: str) -> tuple[Task, list[Any]]:
    """The case's seeds that hold rows (the `cache_rows` variant), checked to carry the grid path."""
    task, kernels = seeds(case)
    held = [k for k in kernels if '"cache_rows": true' in k.code]
    assert held
    for k in held:
        assert "// @kf.tunable KF_GRID_ROWS in [0, 1] default 0" in k.code
        assert "_grows, " in k.code and "kf_attr[0].id = cudaLaunchAttributeCooperative;" in k.code
        assert "kf_grid_reduce<" in k.code and "kf_grid_rows_plan(" in k.code
    return task, held


@pytest.mark.skipif(not emulation_ready(), reason="needs g++ with C++20 <barrier>")
@pytest.mark.parametrize("case", [c for c in GRID_CASES if "long_groups" not in c])
def test_a_row_op_whose_row_outgrows_a_cluster_is_held_across_the_grid_under_emulation(
    case: str, tmp_path: Path
) -> None:
    import ctypes

    import torch

    task, held = held_across_the_grid(case)
    for kernel in held:
        lib = build_emulated(kernel.code, tmp_path, GRID_PARAMS)
        got, expected = run(task, kernel, lib)
        torch.testing.assert_close(got, expected, rtol=1e-4, atol=1e-4)
        # the rows went through the cooperative launch, not the split kernels
        assert ctypes.CDLL(str(lib)).emu_cooperative_launches() >= 1


@pytest.mark.gpu
@pytest.mark.skipif(not cuda_ready(), reason="needs nvcc and a CUDA device")
@pytest.mark.parametrize("case", sorted(GRID_CASES))
def test_a_row_op_whose_row_outgrows_a_cluster_is_held_across_the_grid_on_the_gpu(
    case: str, tmp_path: Path
) -> None:
    import torch

    task, held = held_across_the_grid(case)
    params = {"KF_GRID_ROWS": 1} if "long_groups" in case else GRID_PARAMS
    for kernel in held:
        got, expected = run(task, kernel, build_unit(kernel, tmp_path, params), device="cuda")
        torch.cuda.synchronize()
        torch.testing.assert_close(got, expected, rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("case", MIDDLE_SOFTMAX)
def test_a_softmax_over_a_middle_dim_runs_in_a_generated_kernel(case: str) -> None:
    _, kernels = seeds(case)
    assert all("_mid(" in k.code for k in kernels)
    assert not any("torch.softmax" in k.glue or "torch.log_softmax" in k.glue for k in kernels)
    paths = {"regs" if "_midregs<" in k.code else "two-pass" for k in kernels}
    assert paths == {"regs", "two-pass"}  # Variant.cache_rows on and off among the seeds


ALIGNED_ROWS = "(((uintptr_t)L_t) % 16 == 0) && (R % 4 == 0)"


@pytest.mark.parametrize(
    ("case", "read", "allowed"),
    [
        # a full reduction: the position wraps at the operand's size (kf_divider)
        (
            "hinge_loss_split_float4",
            "L_t[kf_mod(a1n, j)]",
            f"{ALIGNED_ROWS} && (a1n.d % 4 == 0)",
        ),
        # rows of the operand's size: the position is the element
        ("hinge_loss_rows_float4", "L_t[j]", ALIGNED_ROWS),
    ],
)
def test_an_operand_read_by_its_position_along_the_row_is_read_four_positions_at_a_time(
    case: str, read: str, allowed: str
) -> None:
    """A per-column operand of a reduction (a hinge loss's target) is one 16-byte load for the four
    components of a float4 element where its size is a multiple of 4 and it is aligned (checked in the
    kernel), and a read a component otherwise."""
    _, kernels = seeds(case)
    swept = [k.code for k in kernels if "float4 w0[PER_THREAD];" in k.code]
    assert swept
    for code in swept:
        assert f"if ({allowed}) {{" in code
        assert f"q0 = *reinterpret_cast<const float4*>(&{read});" in code
        assert "q0.x" in code and "q0.w" in code
        assert read in code.split(f"if ({allowed}) {{", 1)[1].split("} else {", 1)[1]  # one by one


@pytest.mark.skipif(not emulation_ready(), reason="needs g++ with C++20 <barrier>")
@pytest.mark.parametrize("width", [32, 128, 256])  # 64 is the default
@pytest.mark.parametrize("case", ["sum_middle_dim", "max_middle_dim_wide"])
def test_a_tiled_middle_dim_reduction_matches_torch_at_every_tile_width(
    case: str, width: int, tmp_path: Path
) -> None:
    """TCOLS_WIDTH columns a block (fewer row groups): a tile wider than the row (70 and 128 columns
    here), partial tiles and row groups of one row all reduce every column once."""
    import torch

    task, kernels = seeds(case)
    tiled = [k for k in kernels if "_tcols<<<" in k.code]
    assert tiled and all("@kf.tunable TCOLS_WIDTH" in k.code for k in tiled)
    for kernel in tiled:
        got, expected = run(task, kernel, build_emulated(kernel.code, tmp_path, {"TCOLS_WIDTH": width}))
        torch.testing.assert_close(got, expected, rtol=1e-4, atol=1e-4)


WIDE_COLUMNS = [c for c in CASES if c.endswith("middle_dim_odd_rows") or c.endswith("map_odd_rows")]
WIDE_COLUMN_BLOCKS = [1, 5, 8, 1000]  # KF_WCOLS_MIN_BLOCKS: row groups of 1, 2, 4; the narrow tiles


def wide_column_seeds(case: str) -> tuple[Task, list[Any]]:
    task, kernels = seeds(case)
    wide = [k for k in kernels if "_wcols<1><<<" in k.code]
    assert wide and all("@kf.tunable KF_WCOLS" in k.code and "kf_realign4(" in k.code for k in wide)
    return task, wide


@pytest.mark.skipif(not emulation_ready(), reason="needs g++ with C++20 <barrier>")
@pytest.mark.parametrize("min_blocks", WIDE_COLUMN_BLOCKS)
@pytest.mark.parametrize("case", WIDE_COLUMNS)
def test_a_middle_dim_reduction_over_unaligned_rows_reads_realigned_float4s_in_wide_tiles(
    case: str, min_blocks: int, tmp_path: Path
) -> None:
    """Rows of no multiple of 4 floats start at every offset modulo 16 bytes: the wide tiles read each
    warp's 128 columns as aligned float4s and realign them by shuffles (kf_realign4), lanes past the row's
    end reading the next row (or zeros after the last) into columns they never write. A launch that
    would run too few blocks takes the narrow tiles instead; every choice reduces every column once."""
    import torch

    task, wide = wide_column_seeds(case)
    for kernel in wide:
        lib = build_emulated(kernel.code, tmp_path, {"KF_WCOLS": 1, "KF_WCOLS_MIN_BLOCKS": min_blocks})
        got, expected = run(task, kernel, lib)
        torch.testing.assert_close(got, expected, rtol=1e-4, atol=1e-4)


SPLIT_COLUMNS = [c for c in WIDE_COLUMNS if "_long_" in c]
SPLIT_BLOCKS = [1, 6, 1 << 20]  # KF_WCOLS_SPLIT_BLOCKS: one chunk, a few, as many as 64-row chunks allow


@pytest.mark.skipif(not emulation_ready(), reason="needs g++ with C++20 <barrier>")
@pytest.mark.parametrize("split_blocks", SPLIT_BLOCKS)
@pytest.mark.parametrize("case", SPLIT_COLUMNS)
def test_a_middle_dim_reduction_in_wide_tiles_split_over_row_chunks_matches_torch(
    case: str, split_blocks: int, tmp_path: Path
) -> None:
    """KF_WCOLS 2: the wide tiles' rows split over blocks in chunks of a multiple of 32 rows (the last
    shorter), each chunk's partials combined by a second kernel that applies the mean's scale once."""
    import torch

    task, wide = wide_column_seeds(case)
    for kernel in wide:
        assert "_wfin<<<" in kernel.code and "@kf.tunable KF_WCOLS in [0, 1, 2]" in kernel.code
        lib = build_emulated(kernel.code, tmp_path, {"KF_WCOLS": 2, "KF_WCOLS_SPLIT_BLOCKS": split_blocks})
        got, expected = run(task, kernel, lib)
        torch.testing.assert_close(got, expected, rtol=1e-4, atol=1e-4)


# The wide tiles on a GPU: one chunk at every row-group choice (KF_WCOLS 1), and rows split over chunks
# (KF_WCOLS 2) where the rows are long enough
WIDE_GPU_BUILDS = [
    pytest.param(case, {"KF_WCOLS": 1, "KF_WCOLS_MIN_BLOCKS": blocks}, id=f"{case}-min{blocks}")
    for case in WIDE_COLUMNS
    for blocks in WIDE_COLUMN_BLOCKS
] + [
    pytest.param(case, {"KF_WCOLS": 2, "KF_WCOLS_SPLIT_BLOCKS": blocks}, id=f"{case}-split{blocks}")
    for case in SPLIT_COLUMNS
    for blocks in SPLIT_BLOCKS
]


@pytest.mark.gpu
@pytest.mark.skipif(not cuda_ready(), reason="needs nvcc and a CUDA device")
@pytest.mark.parametrize(("case", "params"), WIDE_GPU_BUILDS)
def test_a_middle_dim_reduction_over_unaligned_rows_in_wide_tiles_on_the_gpu(
    case: str, params: dict[str, int], tmp_path: Path
) -> None:
    import torch

    task, wide = wide_column_seeds(case)
    for kernel in wide:
        lib = build_unit(kernel, tmp_path, params)
        got, expected = run(task, kernel, lib, device="cuda")
        torch.cuda.synchronize()
        torch.testing.assert_close(got, expected, rtol=1e-4, atol=1e-4)


@pytest.mark.skipif(not emulation_ready(), reason="needs g++ with C++20 <barrier>")
@pytest.mark.parametrize("case", sorted(CASES))
def test_every_seed_matches_torch_under_emulation(case: str, tmp_path: Path) -> None:
    import torch

    task, kernels = seeds(case)
    with ThreadPoolExecutor(2) as pool:  # g++ takes most of the time
        libs = list(pool.map(lambda k: build_emulated(k.code, tmp_path), kernels))
    for kernel, lib in zip(kernels, libs, strict=True):
        got, expected = run(task, kernel, lib)
        variant = kernel.code.splitlines()[1]
        tolerance = tolerance_of(variant)
        torch.testing.assert_close(
            got, expected, rtol=tolerance, atol=tolerance, msg=lambda m, v=variant: f"{v}: {m}"
        )


@pytest.mark.gpu
@pytest.mark.skipif(not cuda_ready(), reason="needs nvcc and a CUDA device")
@pytest.mark.parametrize("case", sorted(CASES))
def test_every_seed_matches_torch_on_the_gpu(case: str, tmp_path: Path) -> None:
    import torch

    task, kernels = seeds(case)
    with ThreadPoolExecutor(4) as pool:  # nvcc takes most of the time
        libs = list(pool.map(lambda k: build_unit(k, tmp_path), kernels))
    for kernel, lib in zip(kernels, libs, strict=True):
        got, expected = run(task, kernel, lib, device="cuda")
        torch.cuda.synchronize()
        variant = kernel.code.splitlines()[1]
        tolerance = tolerance_of(variant)
        torch.testing.assert_close(
            got, expected, rtol=tolerance, atol=tolerance, msg=lambda m, v=variant: f"{v}: {m}"
        )
