"""The op-kernel families with CUDA kernels of their own (opkernels_cuda.py: block scans, baked
pooling windows (a thread per output numbered across the grid; large windows separable),
shared-memory depthwise tiles, direct and transposed convolutions, arg-reductions (chunked column
tiles, narrow columns, warp rows with or without float4), ties and NaN as in torch), LayerNorm /
GroupNorm rows split over blocks (cuda_rows.py) and the float4 split rows of full reductions: they
compile for sm_90 without spills (needs nvcc), and on a GPU their output matches torch on the shapes
that take each path (gpu marker: skipped without a GPU)."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pytest

from kernelfoundry.abi import include_dir
from kernelfoundry.generators.base import GenerationRequest
from kernelfoundry.generators.heuristic import HeuristicGenerator, parse_variant
from kernelfoundry.tasks.model import ShapeVariant, Task
from kernelfoundry.tasks.reference import instantiate
from kernelfoundry.toolchains.nvcc import arch_flag

sys.path.insert(0, str(Path(__file__).parent))
from native import Unit, build_unit
from test_loss_kernels import CASES as LOSS_CASES
from test_loss_kernels import TEMPLATE as LOSS_TEMPLATE

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

# name: (module set-up, forward args, forward body, inputs, kernel the unit must define)
CASES: dict[str, tuple[str, str, str, str, str]] = {
    # scans along a contiguous row: float4 rows of several chunks and rows per block, odd rows, short rows
    "cumsum_rows_float4": (
        "        pass",
        "x",
        "torch.cumsum(x, dim=1)",
        "torch.rand(300, 4100 * 4)",
        "_rows<",
    ),
    "cumsum_rows_odd": ("        pass", "x", "torch.cumsum(x, dim=-1)", "torch.randn(5, 3, 2049)", "_rows<"),
    "cumsum_rows_short": ("        pass", "x", "torch.cumsum(x, dim=1)", "torch.randn(7, 5)", "_rows<"),
    "cumprod_rows": (
        "        pass",
        "x",
        "torch.cumprod(x, dim=1)",
        "torch.rand(33, 3000) * 0.2 + 0.9",
        "_rows<",
    ),
    "cumsum_reverse": (
        "        pass",
        "x",
        "torch.cumsum(x.flip(1), dim=1).flip(1)",
        "torch.rand(9, 1028)",
        "_rows<",
    ),
    "cumsum_strided_dim": ("        pass", "x", "torch.cumsum(x, dim=1)", "torch.randn(3, 37, 70)", "_cols("),
    # the scan idioms as one scan (scans.py): reverse, exclusive and masked, along rows (float4 and odd)
    # and along a strided dim
    "cumsum_reverse_odd_rows": (
        "        pass",
        "x",
        "torch.cumsum(x.flip(-1), dim=-1).flip(-1)",
        "torch.randn(5, 3, 2049)",
        "_rows<",
    ),
    "cumprod_reverse_strided": (
        "        pass",
        "x",
        "torch.flip(torch.cumprod(torch.flip(x, dims=[1]), dim=1), dims=(1,))",
        "torch.rand(3, 37, 70) * 0.2 + 0.9",
        "_cols(",
    ),
    "cumsum_exclusive_rows": (
        "        pass",
        "x",
        "torch.cat((torch.zeros_like(x.select(1, 0).unsqueeze(1)),"
        " torch.cumsum(x.narrow(dim=1, start=0, length=x.size(1) - 1), dim=1)), dim=1)",
        "torch.rand(9, 4100)",
        "_rows<",
    ),
    "cumsum_exclusive_odd_rows": (
        "        pass",
        "x",
        "torch.cat((torch.zeros_like(x.select(1, 0).unsqueeze(1)),"
        " torch.cumsum(x.narrow(dim=1, start=0, length=x.size(1) - 1), dim=1)), dim=1)",
        "torch.randn(7, 1031)",
        "_rows<",
    ),
    "cumsum_exclusive_strided": (
        "        pass",
        "x",
        "torch.cat((torch.zeros_like(x.select(1, 0).unsqueeze(1)),"
        " torch.cumsum(x.narrow(1, 0, x.size(1) - 1), dim=1)), dim=1)",
        "torch.randn(3, 37, 70)",
        "_cols(",
    ),
    "cumsum_masked_rows": (
        "        pass",
        "x, mask",
        "torch.cumsum(x * mask, dim=1)",
        "torch.rand(9, 4100), torch.rand(9, 4100) > 0.5",
        "_rows<",
    ),
    "cumsum_masked_reverse_odd_rows": (
        "        pass",
        "x, mask",
        "torch.cumsum((mask * x).flip(1), dim=1).flip(1)",
        "torch.randn(4, 1027), torch.rand(4, 1027) > 0.3",
        "_rows<",
    ),
    "cumsum_masked_strided": (
        "        pass",
        "x, mask",
        "torch.cumsum(x * mask, dim=0)",
        "torch.randn(37, 70), torch.rand(37, 70) > 0.5",
        "_cols(",
    ),
    # pooling with baked windows
    "max_pool1d_dilated": (
        "        self.op = nn.MaxPool1d(8, stride=1, padding=4, dilation=3)",
        "x",
        "self.op(x)",
        "torch.randn(3, 5, 700)",
        "_pool(",
    ),
    "max_pool3d_strided": (
        "        self.op = nn.MaxPool3d(3, stride=2, padding=1, dilation=2)",
        "x",
        "self.op(x)",
        "torch.randn(2, 3, 13, 12, 11)",
        "_pool(",
    ),
    "avg_pool1d_padded": (
        "        self.op = nn.AvgPool1d(8, stride=1, padding=4)",
        "x",
        "self.op(x)",
        "torch.randn(2, 4, 301)",
        "_pool(",
    ),
    "avg_pool2d_window_stride": (
        "        self.op = nn.AvgPool2d(11)",
        "x",
        "self.op(x)",
        "torch.randn(2, 3, 100, 67)",
        "_pool(",
    ),
    "avg_pool3d_exclude_pad": (
        "        self.op = nn.AvgPool3d(3, stride=2, padding=1, count_include_pad=False)",
        "x",
        "self.op(x)",
        "torch.randn(2, 2, 9, 10, 33)",
        "_pool(",
    ),
    "avg_pool2d_divisor": (
        "        self.op = nn.AvgPool2d(3, stride=2, padding=1, divisor_override=5)",
        "x",
        "self.op(x)",
        "torch.randn(2, 3, 17, 40)",
        "_pool(",
    ),
    # pooling over short output rows: outputs numbered across the grid (every lane busy)
    "max_pool3d_short_rows": (
        "        self.op = nn.MaxPool3d(3, stride=2, padding=1, dilation=3)",
        "x",
        "self.op(x)",
        "torch.randn(3, 5, 16, 17, 18)",
        "_pool<",
    ),
    # rows of a multiple of four columns: four outputs a thread from whole float4 window rows (_vpool)
    "max_pool3d_dilated_rows_vectorised": (
        "        self.op = nn.MaxPool3d(3, stride=2, padding=1, dilation=3)",
        "x",
        "self.op(x)",
        "torch.randn(2, 3, 13, 14, 40)",
        "_vpool<int><<<",
    ),
    "avg_pool3d_exclude_pad_vectorised": (
        "        self.op = nn.AvgPool3d(3, stride=2, padding=1, count_include_pad=False)",
        "x",
        "self.op(x)",
        "torch.randn(2, 2, 9, 10, 36)",
        "_vpool<",
    ),
    "avg_pool2d_padded_stride1_vectorised": (
        "        self.op = nn.AvgPool2d(3, stride=1, padding=1)",
        "x",
        "self.op(x)",
        "torch.randn(2, 3, 17, 44)",
        "_vpool<",
    ),
    "max_pool2d_stride3_ragged_vectorised": (
        "        self.op = nn.MaxPool2d((2, 3), stride=3, padding=1)",
        "x",
        "self.op(x)",
        "torch.randn(2, 3, 20, 64)",
        "_vpool<",
    ),
    # large windows pooled separably: columns over the (d, h) taps in shared memory, then the row
    "avg_pool2d_large_window_short_rows": (
        "        self.op = nn.AvgPool2d(11)",
        "x",
        "self.op(x)",
        "torch.randn(3, 4, 40, 37)",
        "_spool(",
    ),
    "avg_pool2d_separable_tiles_exclude_pad": (
        "        self.op = nn.AvgPool2d((3, 11), stride=(2, 3), padding=(1, 5), count_include_pad=False)",
        "x",
        "self.op(x)",
        "torch.randn(2, 3, 9, 800)",
        "_spool(",
    ),
    # rows of 2048 columns under a two-row window: the column pass loads four columns a thread at once
    "avg_pool2d_separable_wide_rows": (
        "        self.op = nn.AvgPool2d((2, 16))",
        "x",
        "self.op(x)",
        "torch.randn(2, 2, 5, 2048)",
        "4 columns a thread a pass",
    ),
    "max_pool2d_separable_dilated_tiles": (
        "        self.op = nn.MaxPool2d((5, 7), stride=(2, 3), padding=(2, 3), dilation=(2, 1))",
        "x",
        "self.op(x)",
        "torch.randn(2, 3, 30, 1000)",
        "_spool(",
    ),
    "avg_pool3d_separable_exclude_pad": (
        "        self.op = nn.AvgPool3d(4, stride=3, padding=2, count_include_pad=False)",
        "x",
        "self.op(x)",
        "torch.randn(2, 2, 11, 12, 50)",
        "_spool(",
    ),
    "avg_pool3d_separable_divisor": (
        "        self.op = nn.AvgPool3d((2, 4, 5), stride=(1, 2, 5), padding=(1, 2, 2), divisor_override=7)",
        "x",
        "self.op(x)",
        "torch.randn(2, 3, 5, 13, 64)",
        "_spool(",
    ),
    # 1-D pooling: every window tiled (the span read once into shared memory, one division a block)
    "max_pool1d_dilated_padded_tiles": (
        "        self.op = nn.MaxPool1d(8, stride=1, padding=4, dilation=3)",
        "x",
        "self.op(x)",
        "torch.rand(2, 3, 700)",
        "_spool(",
    ),
    "avg_pool1d_strided_padded_tiles": (
        "        self.op = nn.AvgPool1d(5, stride=2, padding=2)",
        "x",
        "self.op(x)",
        "torch.randn(3, 2, 1500)",
        "_spool(",
    ),
    "avg_pool1d_exclude_pad_tiles": (
        "        self.op = nn.AvgPool1d(4, stride=3, padding=2, count_include_pad=False)",
        "x",
        "self.op(x)",
        "torch.randn(2, 2, 801)",
        "_spool(",
    ),
    # rows of several tiles (about 4,070 outputs each): the float4 column pass (9,000 columns) and the
    # scalar one (9,001), each tile's span read from the aligned group before it
    "max_pool1d_dilated_rows_of_several_tiles": (
        "        self.op = nn.MaxPool1d(8, stride=1, padding=4, dilation=3)",
        "x",
        "self.op(x)",
        "torch.rand(1, 2, 9000)",
        "_spool(",
    ),
    "avg_pool1d_rows_of_several_tiles": (
        "        self.op = nn.AvgPool1d(8, stride=1, padding=4)",
        "x",
        "self.op(x)",
        "torch.randn(1, 2, 9001)",
        "_spool(",
    ),
    # depthwise convolutions: tiles with halos, strides, dilation, padding, a channel multiplier, bias
    "depthwise2d_3x3": (
        "        self.op = nn.Conv2d(8, 8, 3, groups=8, bias=False)",
        "x",
        "self.op(x)",
        "torch.randn(2, 8, 70, 45)",
        "_dw(",
    ),
    "depthwise2d_asymmetric_strided_dilated_padded": (
        "        self.op = nn.Conv2d(6, 6, (3, 7), stride=(2, 1), padding=(1, 3), dilation=(2, 1), groups=6)",
        "x",
        "self.op(x)",
        "torch.randn(2, 6, 41, 77)",
        "_dw(",
    ),
    # a row stride of 1 with dilated rows: a thread's four consecutive outputs share tile rows 2 apart
    "depthwise2d_dilated_rows": (
        "        self.op = nn.Conv2d(4, 4, 3, padding=(2, 1), dilation=(2, 1), groups=4)",
        "x",
        "self.op(x)",
        "torch.randn(2, 4, 37, 40)",
        "_dw(",
    ),
    "depthwise2d_multiplier": (
        "        self.op = nn.Conv2d(4, 12, (5, 1), stride=(1, 2), padding=(2, 0), groups=4)",
        "x",
        "self.op(x)",
        "torch.randn(3, 4, 33, 40)",
        "_dw(",
    ),
    # strides 1 (`_dww`, a 4 x 4 output patch a thread): rows of a multiple of four read as float4s into
    # the tile and written as float4s (a (3, 1) filter keeps the width); a padding of 4 columns keeps the
    # tile's float4s on the row's, stores in float2 pairs (an even width); a 3x7 filter reads three
    # float4s a tile row; two tiles across a row, the second partial
    "depthwise2d_float4_rows": (
        "        self.op = nn.Conv2d(4, 4, (3, 1), groups=4)",
        "x",
        "self.op(x)",
        "torch.randn(2, 4, 37, 136)",
        "_dww(",
    ),
    "depthwise2d_padded_float2_stores": (
        "        self.op = nn.Conv2d(3, 3, 3, padding=(1, 4), groups=3)",
        "x",
        "self.op(x)",
        "torch.randn(2, 3, 35, 132)",
        "_dww(",
    ),
    "depthwise2d_3x7_wide": (
        "        self.op = nn.Conv2d(4, 4, (3, 7), groups=4, bias=False)",
        "x",
        "self.op(x)",
        "torch.randn(2, 4, 40, 140)",
        "_dww(",
    ),
    "depthwise1d": (
        "        self.op = nn.Conv1d(5, 5, 3, stride=3, dilation=4, groups=5)",
        "x",
        "self.op(x)",
        "torch.randn(3, 5, 1000)",
        "_dw(",
    ),
    # other convolutions: one thread per output, the sum in a register
    "conv2d_grouped_strided_dilated": (
        "        self.op = nn.Conv2d(6, 4, (3, 5), stride=(2, 3), padding=(1, 2), dilation=(2, 1), groups=2)",
        "x",
        "self.op(x)",
        "torch.randn(2, 6, 31, 45)",
        "_direct(",
    ),
    "conv2d_pointwise": (
        "        self.op = nn.Conv2d(16, 24, 1, bias=False)",
        "x",
        "self.op(x)",
        "torch.randn(2, 16, 19, 37)",
        "_direct(",
    ),
    "conv3d_padded": (
        "        self.op = nn.Conv3d(3, 5, (3, 2, 3), padding=(1, 0, 2))",
        "x",
        "self.op(x)",
        "torch.randn(2, 3, 7, 6, 9)",
        "_direct(",
    ),
    "conv1d_large_filter": (
        "        self.op = nn.Conv1d(4, 6, 81, padding=3)",
        "x",
        "self.op(x)",
        "torch.randn(2, 4, 300)",
        "_direct(",
    ),
    # transposed convolutions as a gather
    "conv_transpose3d_strided_padded_grouped_dilated": (
        "        self.op = nn.ConvTranspose3d(8, 12, (3, 2, 3), stride=(2, 1, 3), padding=(1, 0, 2),"
        " output_padding=(1, 0, 1), groups=4, dilation=(2, 1, 1))",
        "x",
        "self.op(x)",
        "torch.randn(2, 8, 3, 5, 4)",
        "_gather(",
    ),
    "conv_transpose2d_strided": (
        "        self.op = nn.ConvTranspose2d(5, 3, 4, stride=2, padding=1, bias=False)",
        "x",
        "self.op(x)",
        "torch.randn(2, 5, 17, 23)",
        "_gather(",
    ),
    "conv_transpose1d_dilated": (
        "        self.op = nn.ConvTranspose1d(4, 6, 5, stride=3, padding=2, dilation=2, output_padding=1)",
        "x",
        "self.op(x)",
        "torch.randn(3, 4, 50)",
        "_gather(",
    ),
    # arg-reductions: wide strided columns (8 chunks a column), narrow ones, warp rows (float4 or not)
    "argmax_columns": ("        pass", "x", "torch.argmax(x, dim=1)", "torch.randn(4, 300, 257)", "_tcols("),
    "argmax_columns_ties_across_chunks": (
        "        pass",
        "x",
        "torch.argmax(x, dim=1)",
        # rows 0-16 lowered: the first best falls in later chunks, with ties in the chunks after it
        "torch.randint(0, 3, (3, 40, 70)).float() - 5.0 * (torch.arange(40) < 17).float().view(1, 40, 1)",
        "_tcols(",
    ),
    "argmin_columns_nan": (
        "        pass",
        "x",
        "torch.argmin(x, dim=1)",
        "torch.where(torch.rand(4, 50, 64) < 0.03, float('nan'), torch.randn(4, 50, 64))",
        "_tcols(",
    ),
    "argmax_narrow_columns": (
        "        pass",
        "x",
        "torch.argmax(x, dim=1)",
        "torch.randn(5, 300, 7)",
        "_cols(",
    ),
    "argmax_rows_float4_ties": (
        "        pass",
        "x",
        "torch.argmax(x, dim=-1)",
        "torch.randint(0, 5, (40, 1032)).float()",
        "_wrows<",
    ),
    "argmin_rows_float4_nan": (
        "        pass",
        "x",
        "torch.argmin(x, dim=-1)",
        "torch.where(torch.rand(24, 520) < 0.01, float('nan'), torch.randn(24, 520))",
        "_wrows<",
    ),
    "argmin_rows": ("        pass", "x", "torch.argmin(x, dim=-1)", "torch.randn(6, 5, 1001)", "_wrows<"),
    "argmax_rows_ties": (
        "        pass",
        "x",
        "torch.argmax(x, dim=1)",
        "torch.randint(0, 4, (64, 999)).float()",
        "_wrows<",
    ),
    "argmin_columns_ties": (
        "        pass",
        "x",
        "torch.argmin(x, dim=0)",
        "torch.randint(0, 3, (77, 130)).float()",
        "_tcols(",
    ),
}

# Norms over rows of 16384+ elements: rows split over blocks (statistics, then normalisation)
NORMS = {
    "layer_norm_few_long_rows_affine": (
        "        self.op = nn.LayerNorm((16, 64, 64))\n"
        "        nn.init.normal_(self.op.weight)\n"
        "        nn.init.normal_(self.op.bias)",
        "x",
        "torch.relu(self.op(x * 2.0 + 1.0))",
        "torch.rand(3, 16, 64, 64) * 4.0 + 10.0",
        "_sstats(",
    ),
    "layer_norm_odd_row": (
        "        self.op = nn.LayerNorm(16385)",
        "x",
        "self.op(x)",
        "torch.randn(5, 16385)",
        "_sstats(",
    ),
    "group_norm_affine": (
        "        self.op = nn.GroupNorm(4, 8)\n"
        "        nn.init.normal_(self.op.weight)\n"
        "        nn.init.normal_(self.op.bias)",
        "x",
        "self.op(x)",
        "torch.randn(2, 8, 96, 100)",
        "_sstats(",
    ),
    "instance_norm": (
        "        self.op = nn.InstanceNorm2d(6)",
        "x",
        "self.op(x)",
        "torch.rand(2, 6, 128, 130)",
        "_sstats(",
    ),
}

# Full reductions to a scalar (the atomic split rows stream float4 per split)
LOSSES = {
    "mse": (
        "        pass",
        "a, b",
        "torch.mean((a - b) ** 2)",
        "torch.rand(1024, 2048), torch.rand(1024, 2048)",
    ),
    "huber": (
        "        pass",
        "a, b",
        "F.smooth_l1_loss(a, b)",
        "torch.randn(2048, 1024) * 2, torch.randn(2048, 1024)",
    ),
}


def cuda_ready() -> bool:
    import torch

    return shutil.which("nvcc") is not None and torch.cuda.is_available()


def first_candidate(name: str, case: tuple[str, ...]) -> Any:
    if len(case) == 3:  # test_loss_kernels.py's form: module set-up, body, inputs of forward(a, b)
        init, body, inputs = case
        source = LOSS_TEMPLATE.format(init=init, body=body, inputs=inputs)
    else:
        init, args, body, inputs = case[:4]
        source = TEMPLATE.format(init=init, args=args, body=body, inputs=inputs)
    task = Task(name, source, (ShapeVariant("s"),))
    result = HeuristicGenerator().generate_sync(GenerationRequest("op", task, "cuda", count=8))
    # the op-kernel unit: a bare conv's first seeds (up to four) are the implicit-GEMM conv family's
    # (cuda_conv.py)
    ops = [c for c in result.candidates if not ((v := parse_variant(c.source.code)) is not None and v.gemm)]
    assert ops, result.message
    return task, ops[0].source


class Launcher:
    def __init__(self, unit: Unit) -> None:
        self.unit = unit

    def launch(self, entry: str, inputs: list[Any], outputs: list[Any]) -> None:
        assert self.unit.call(entry, inputs, outputs) == 0


@pytest.mark.parametrize("case", sorted({**CASES, **NORMS}))
def test_each_family_emits_its_own_cuda_kernel(case: str) -> None:
    spec = {**CASES, **NORMS}[case]
    _, kernel = first_candidate(case, spec)
    assert spec[4] in kernel.code
    assert "kf_op0_item" not in kernel.code  # not the generic one-thread-per-item kernel


@pytest.mark.parametrize(
    ("case", "tile_rows", "shared"),
    [
        ("depthwise2d_3x3", 6, True),
        ("depthwise2d_dilated_rows", 8, True),
        ("depthwise2d_multiplier", 8, True),
        ("depthwise2d_asymmetric_strided_dilated_padded", 0, False),
    ],
)
def test_a_depthwise_thread_reads_the_tile_rows_its_outputs_share_once(
    case: str, tile_rows: int, shared: bool
) -> None:
    """At a row stride of 1 a thread's four outputs are consecutive rows and each tile row they read
    is loaded from shared memory once (4 + (kh - 1) * dh rows of kw values); at a larger stride each
    output reads its own window (rows 8 apart)."""
    _, kernel = first_candidate(case, CASES[case])
    code = kernel.code
    assert (f"for (int i = 0; i < {tile_rows}; ++i) {{" in code) == shared
    assert ("const int ty = threadIdx.y + 8 * r, oh = oh0 + ty;" in code) != shared


@pytest.mark.parametrize(
    ("case", "rows", "batch", "loads"),
    [("avg_pool3d_exclude_pad_vectorised", 9, 5, 3), ("max_pool3d_dilated_rows_vectorised", 9, 3, 4)],
)
def test_the_row_vector_pool_issues_a_batch_of_window_rows_loads_before_their_math(
    case: str, rows: int, batch: int, loads: int
) -> None:
    """`_vpool` loads the float4s of up to VPOOL_LOADS_IN_FLIGHT // loads window rows (batches as even as
    they can be) before combining any: a row skipped by a branch, its math before the next row's loads,
    kept one row's loads in flight a thread."""
    _, kernel = first_candidate(case, CASES[case])
    code = kernel.code
    assert f"for (int r0 = 0; r0 < {rows}; r0 += {batch}) {{" in code
    assert f"float4 q[{batch}][{loads}];" in code
    assert code.index("q[i][g] = (row_in && w >= 0") < code.index(f"float r[{4 * loads}];")
    assert "if (d < 0 || d >= ID) continue;" not in code.split("_vpool(", 1)[1].split("KF_EXPORT", 1)[0]


@pytest.mark.parametrize(
    ("case", "tile", "loads"),
    [("depthwise2d_3x3", 34 * 34, 5), ("depthwise2d_asymmetric_strided_dilated_padded", 67 * 38, 10)],
)
def test_the_depthwise_tile_loads_are_all_in_flight_before_the_first_store(
    case: str, tile: int, loads: int
) -> None:
    """Each thread issues its share of the input tile's loads (ceil(tile / 256), at most
    DEPTHWISE_LOADS_IN_FLIGHT) into registers before storing any to shared memory: a store after each
    load kept one load in flight a thread (level1/84 at 34% of the bandwidth floor on the H200)."""
    _, kernel = first_candidate(case, CASES[case])
    code = kernel.code
    assert f"for (int t0 = tid; t0 < {tile}; t0 += {loads * 256}) {{" in code
    assert f"float lv[{loads}];" in code
    loading = code.index("lv[u] = (t < ")
    storing = code.index(f"if (t < {tile}) tile[t / ")
    assert loading < storing


@pytest.mark.parametrize("case", sorted(LOSSES))
def test_full_reductions_of_millions_of_elements_split_rows_and_stream_float4(case: str) -> None:
    _, kernel = first_candidate(case, LOSSES[case])
    assert "atomicAdd" in kernel.code and "if (vec) {" in kernel.code
    assert "int64_t j4 = lo4 + threadIdx.x;" in kernel.code  # each split's float4 share of the row


@pytest.mark.skipif(shutil.which("nvcc") is None, reason="needs nvcc")
def test_family_kernels_compile_for_sm90_without_spills(tmp_path: Path) -> None:
    # one unit per family; ptxas reports registers and spills per kernel
    chosen = [
        "cumsum_rows_odd",
        "max_pool3d_strided",
        "max_pool3d_dilated_rows_vectorised",
        "max_pool1d_dilated_padded_tiles",  # level1/41's window: a long row's column pass, both paths
        "avg_pool3d_separable_exclude_pad",
        "avg_pool2d_separable_wide_rows",
        "argmax_columns",
        "depthwise2d_asymmetric_strided_dilated_padded",
        "depthwise2d_3x7_wide",  # the 4 x 4 patch kernel of strides 1 beside the one-column one
        "argmin_rows",
        "layer_norm_few_long_rows_affine",
        "conv_transpose3d_strided_padded_grouped_dilated",
        "conv2d_grouped_strided_dilated",
    ]
    specs = {**CASES, **NORMS}
    for i, name in enumerate(chosen):
        _, kernel = first_candidate(name, specs[name])
        src = tmp_path / f"u{i}.cu"
        src.write_text(kernel.code)
        proc = subprocess.run(
            ["nvcc", "-O3", arch_flag("sm90"), "-c", "-std=c++17", "--ptxas-options=-v", f"-I{include_dir()}",
             str(src), "-o", str(src.with_suffix(".o"))],
            capture_output=True, text=True,
        )  # fmt: skip
        assert proc.returncode == 0, proc.stderr[-3000:]
        spills = [int(n) for n in re.findall(r"(\d+) bytes spill stores", proc.stderr)]
        assert spills and max(spills) == 0, proc.stderr[-3000:]


@pytest.fixture(scope="module")
def built(tmp_path_factory: pytest.TempPathFactory) -> dict[str, tuple[Task, Any, Path]]:
    """Every case's first candidate, built by nvcc in parallel (one build per test would take minutes)."""
    if not cuda_ready():
        pytest.skip("needs nvcc and a CUDA device")
    out = tmp_path_factory.mktemp("units")
    cases = {**CASES, **NORMS, **LOSSES, **LOSS_CASES}

    def one(name: str) -> tuple[Task, Any, Path]:
        task, kernel = first_candidate(name, cases[name])
        return task, kernel, build_unit(kernel, out)

    with ThreadPoolExecutor(max(1, min(16, (os.cpu_count() or 2) - 1))) as pool:
        return dict(zip(cases, pool.map(one, cases), strict=True))


def run_candidate(task: Task, kernel: Any, lib: Path) -> tuple[Any, Any]:
    import torch
    from torch import nn

    unit = Unit(lib)
    reference = instantiate(task, task.shapes[0], seed=1, device="cuda")
    with torch.no_grad():
        expected = reference.model(*reference.inputs)
        if kernel.glue:
            glue: dict[str, Any] = {"torch": torch, "nn": nn, "F": torch.nn.functional, "kf": Launcher(unit)}
            exec(compile(kernel.glue, "<glue>", "exec"), glue)
            candidate = glue["ModelNew"]().cuda()
            candidate.load_state_dict(reference.model.state_dict())
            got = candidate(*reference.inputs)
        else:
            got = torch.empty_like(expected)
            assert unit.call(kernel.entry_point, list(reference.inputs), [got]) == 0
        torch.cuda.synchronize()
    return got, expected


@pytest.mark.gpu
@pytest.mark.parametrize("case", sorted(CASES))
def test_family_kernel_matches_torch_on_the_gpu(case: str, built: dict) -> None:
    import torch

    got, expected = run_candidate(*built[case])
    assert got.dtype == expected.dtype and got.shape == expected.shape
    if expected.dtype == torch.int64:
        assert torch.equal(got, expected)
    else:
        # long scans: the block scan adds in another order than torch's
        torch.testing.assert_close(got, expected, rtol=1e-4, atol=1e-3)


@pytest.mark.gpu
@pytest.mark.parametrize("case", sorted(LOSSES))
def test_full_reductions_split_over_blocks_match_torch_on_the_gpu(case: str, built: dict) -> None:
    import torch

    task, kernel, lib = built[case]
    assert "atomicAdd" in kernel.code and "lo4" in kernel.code  # split rows, float4 per split
    got, expected = run_candidate(task, kernel, lib)
    torch.testing.assert_close(got, expected, rtol=1e-4, atol=1e-6)


@pytest.mark.gpu
@pytest.mark.parametrize("case", sorted(LOSS_CASES))
def test_losses_of_test_loss_kernels_match_torch_on_the_gpu(case: str, built: dict) -> None:
    import torch

    got, expected = run_candidate(*built[case])
    torch.testing.assert_close(got, expected, rtol=1e-4, atol=1e-6)


@pytest.mark.gpu
@pytest.mark.parametrize("case", sorted(NORMS))
def test_norms_over_split_rows_match_torch_on_the_gpu(case: str, built: dict) -> None:
    import torch

    got, expected = run_candidate(*built[case])
    torch.testing.assert_close(got, expected, rtol=1e-4, atol=1e-4)
