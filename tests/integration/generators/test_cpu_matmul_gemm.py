"""The CPU GEMM families serve KernelBench's level-1 forms. Matmuls of forward inputs: `A @ B` with either
operand transposed (`.T`, `.t()`, `transpose(0, 1)`; an einsum contracting A's last dim with a matrix), A
of any rank (its leading dims are the rows), alone, with a fused tail, or keeping one triangle
(`torch.triu` / `torch.tril`); and a conv (`nn.Conv1d` / `Conv2d` / `Conv3d`, any stride, padding and
dilation and groups, or their transposes; bare or with a per-channel pointwise tail) as an implicit
GEMM. Every
such seed compiles with g++ and matches torch at odd sizes (ragged register tiles and panels) and at
every register and cache block the sweep may pick; what the family does not serve (a matmul of a
parameter, a tail that is not row-wise, a 3-D right operand) gets no GEMM seed."""

from __future__ import annotations

import shutil
import sys
from pathlib import Path

import pytest

from kernelfoundry.generators.base import GenerationRequest
from kernelfoundry.generators.heuristic import HeuristicGenerator, capture
from kernelfoundry.generators.heuristic.cpu_gemm import gemm_plan
from kernelfoundry.tasks.model import ShapeVariant, Task
from tests.fixtures.conv_tasks import conv_task

sys.path.insert(0, str(Path(__file__).parent))
from test_cpu_kernelbench_idioms import run

pytestmark = pytest.mark.skipif(shutil.which("g++") is None, reason="needs g++")

TEMPLATE = """
import torch
import torch.nn as nn

class Model(nn.Module):
    def __init__(self):
        super().__init__()
{init}

    def forward(self, A, B):
        return {body}

M, K, N = 37, 29, 45

def get_inputs():
    return [torch.randn({a_shape}), torch.randn({b_shape})]

def get_init_inputs():
    return []
"""

# body, A's shape, B's shape, (A transposed, B given as (N, K))
SERVED = {
    "plain": ("torch.matmul(A, B)", "M, K", "K, N", (False, False)),
    "at_operator": ("A @ B", "M, K", "K, N", (False, False)),
    "transposed_a": ("torch.matmul(A.T, B)", "K, M", "K, N", (True, False)),
    "transposed_b": ("torch.matmul(A, B.T)", "M, K", "N, K", (False, True)),
    "transposed_both": ("torch.matmul(A.T, B.T)", "K, M", "N, K", (True, True)),
    "t_and_transpose": ("torch.mm(A.t(), B.transpose(0, 1))", "K, M", "N, K", (True, True)),
    "three_dim_a": ("torch.matmul(A, B)", "3, M, K", "K, N", (False, False)),
    "einsum": ('torch.einsum("bil,lk->bik", A, B)', "3, M, K", "K, N", (False, False)),
    "pointwise_tail": ("torch.relu(torch.matmul(A, B) * 2.0 + 1.0)", "M, K", "K, N", (False, False)),
    "softmax_tail": ("torch.softmax(torch.matmul(A.T, B), dim=-1)", "K, M", "K, N", (True, False)),
    "row_sum_tail": ("torch.matmul(A, B.T).sum(dim=1)", "M, K", "N, K", (False, True)),
    "upper_triangle": ("torch.triu(torch.matmul(A, B))", "M, K", "K, N", (False, False)),
    "lower_triangle_from_a_diagonal": ("torch.tril(A.T @ B, diagonal=-2)", "K, M", "K, N", (True, False)),
    "upper_triangle_above_the_diagonal": (
        "torch.triu(torch.matmul(A, B), 3)",
        "M, K",
        "K, N",
        (False, False),
    ),
}
NOT_SERVED = {
    "triangular_tail_after_a_pointwise_one": ("torch.triu(torch.matmul(A, B) * 2.0)", "M, K", "K, N"),
    "batched_b": ("torch.matmul(A, B)", "3, M, K", "3, K, N"),
    "batched_einsum": ('torch.einsum("bij,bjk->bik", A, B)', "3, M, K", "3, K, N"),
    "parameter_operand": ("torch.matmul(A, self.w) + B", "M, K", "M, N"),
}


def task_for(body: str, a_shape: str, b_shape: str) -> Task:
    init = "        self.w = nn.Parameter(torch.randn(K, N))" if "self.w" in body else "        pass"
    source = TEMPLATE.format(body=body, a_shape=a_shape, b_shape=b_shape, init=init)
    return Task("matmul", source, shapes=(ShapeVariant("odd", {}),))


def gemm_seed(task: Task):  # type: ignore[no-untyped-def]
    result = HeuristicGenerator().generate_sync(GenerationRequest("t", task, "cpu", count=4))
    seeds = [c for c in result.candidates if "register-blocked GEMM" in c.rationale]
    return seeds[0] if seeds else None


@pytest.mark.parametrize("name", sorted(SERVED))
def test_the_gemm_seed_of_a_matmul_matches_torch(name: str, tmp_path: Path) -> None:
    body, a_shape, b_shape, layout = SERVED[name]
    task = task_for(body, a_shape, b_shape)
    plan = gemm_plan(capture(task))
    assert plan is not None and plan.matmul and (plan.x_transposed, plan.weight_nk) == layout
    seed = gemm_seed(task)
    assert seed is not None and seed.rationale.startswith("matmul") and not seed.source.glue
    run(seed.source, task, tmp_path, {})


@pytest.mark.parametrize(
    "blocks",
    [{"MR": 4, "NV": 1, "KC": 64, "MC": 16}, {"MR": 12, "NV": 4, "KC": 512, "MC": 256}],
    ids=["small", "large"],
)
def test_every_block_setting_is_correct(blocks: dict[str, int], tmp_path: Path) -> None:
    for name in ("transposed_a", "three_dim_a"):
        body, a_shape, b_shape, _ = SERVED[name]
        task = task_for(body, a_shape, b_shape)
        seed = gemm_seed(task)
        assert seed is not None
        run(seed.source, task, tmp_path, blocks)


@pytest.mark.parametrize("name", sorted(NOT_SERVED))
def test_what_the_family_does_not_serve_gets_no_gemm_seed(name: str) -> None:
    task = task_for(*NOT_SERVED[name])
    assert gemm_plan(capture(task)) is None
    assert gemm_seed(task) is None


CONV = """
import torch
import torch.nn as nn

class Model(nn.Module):
    def __init__(self, cin, cout, kernel, bias):
        super().__init__()
        self.conv = nn.Conv2d(cin, cout, kernel, bias=bias)

    def forward(self, x):
        return self.conv(x)

def get_inputs():
    return [torch.randn(2, 5, 9, 11)]

def get_init_inputs():
    return [5, 19, {kernel}, {bias}]
"""


@pytest.mark.parametrize(
    ("kernel", "bias"), [("1", "False"), ("3", "True"), ("(2, 3)", "False")], ids=["pointwise", "3x3", "2x3"]
)
def test_a_bare_conv_gets_the_implicit_gemm_seed_and_matches_torch(
    kernel: str, bias: str, tmp_path: Path
) -> None:
    task = Task("conv", CONV.format(kernel=kernel, bias=bias), shapes=(ShapeVariant("odd", {}),))
    result = HeuristicGenerator().generate_sync(GenerationRequest("t", task, "cpu", count=4))
    seeds = [c for c in result.candidates if "implicit GEMM" in c.rationale]
    assert seeds and not seeds[0].source.glue
    for blocks in ({}, {"MR": 4, "NV": 1}):
        run(seeds[0].source, task, tmp_path, blocks)


GENERAL_CONV = """
import torch
import torch.nn as nn

class Model(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv = nn.{cls}(
            5, 11, {kernel}, stride={stride}, padding={padding}, dilation={dilation}, bias={bias}
        )

    def forward(self, x):
        return {body}

def get_inputs():
    return [torch.randn({shape})]

def get_init_inputs():
    return []
"""
GENERAL_FIELDS = ("cls", "kernel", "stride", "padding", "dilation", "bias", "shape", "body")
GENERAL = {  # GENERAL_FIELDS: conv class, kernel, stride, padding, dilation, bias, input shape, forward body
    "1d": ("Conv1d", "3", "1", "0", "1", "True", "2, 5, 29", "self.conv(x)"),
    "1d_dilated_strided": ("Conv1d", "3", "3", "0", "4", "False", "2, 5, 41", "self.conv(x)"),
    "2d_strided_padded": (
        "Conv2d",
        "(5, 3)",
        "(4, 2)",
        "(2, 1)",
        "1",
        "True",
        "2, 5, 19, 23",
        "self.conv(x)",
    ),
    "2d_dilated_padded": (
        "Conv2d",
        "(3, 5)",
        "1",
        "(2, 4)",
        "(2, 3)",
        "False",
        "1, 5, 17, 40",
        "self.conv(x)",
    ),
    "3d": ("Conv3d", "3", "1", "0", "1", "False", "2, 5, 6, 7, 9", "self.conv(x)"),
    "3d_asymmetric_padded": (
        "Conv3d",
        "(3, 2, 5)",
        "(1, 2, 1)",
        "(1, 0, 2)",
        "1",
        "True",
        "1, 5, 5, 9, 8",
        "self.conv(x)",
    ),
    "2d_padded_relu_tail": (
        "Conv2d",
        "3",
        "1",
        "1",
        "1",
        "True",
        "2, 5, 9, 11",
        "torch.relu(self.conv(x)) * 2.0",
    ),
}


@pytest.mark.parametrize("name", sorted(GENERAL))
def test_convs_of_any_dims_stride_padding_and_dilation_get_the_implicit_gemm_and_match_torch(
    name: str, tmp_path: Path
) -> None:
    fields = dict(zip(GENERAL_FIELDS, GENERAL[name], strict=True))
    source = GENERAL_CONV.format(**fields)
    task = Task(f"conv_{name}", source, shapes=(ShapeVariant("odd", {}),))
    result = HeuristicGenerator().generate_sync(GenerationRequest("t", task, "cpu", count=4))
    seeds = [c for c in result.candidates if "implicit GEMM" in c.rationale]
    assert seeds and not seeds[0].source.glue
    if fields["body"] == "self.conv(x)":
        assert result.candidates[0] is seeds[0]  # a bare conv leads with it
    for blocks in ({}, {"MR": 4, "NV": 1}):
        run(seeds[0].source, task, tmp_path, blocks)


GROUPED_AND_TRANSPOSED = {  # module, input shape, forward body
    "2d_grouped": ("nn.Conv2d(6, 9, 3, padding=1, groups=3)", "2, 6, 10, 12", "self.conv(x)"),
    "t1d": ("nn.ConvTranspose1d(5, 7, 3)", "2, 5, 33", "self.conv(x)"),
    "t2d_strided_dilated": (
        "nn.ConvTranspose2d(4, 6, (3, 5), stride=(2, 3), padding=(1, 2), output_padding=(1, 0),"
        " dilation=(2, 1))",
        "2, 4, 7, 9",
        "self.conv(x)",
    ),
    "t3d_grouped_tail": (
        "nn.ConvTranspose3d(4, 8, 3, stride=2, padding=1, output_padding=1, groups=2, bias=False)",
        "1, 4, 4, 5, 6",
        "torch.sigmoid(self.conv(x))",
    ),
}


@pytest.mark.parametrize("name", sorted(GROUPED_AND_TRANSPOSED))
def test_grouped_and_transposed_convs_get_the_implicit_gemm_and_match_torch(
    name: str, tmp_path: Path
) -> None:
    module, shape, body = GROUPED_AND_TRANSPOSED[name]
    task = conv_task(f"conv_{name}", module, shape, body)
    result = HeuristicGenerator().generate_sync(GenerationRequest("t", task, "cpu", count=4))
    seeds = [c for c in result.candidates if "implicit GEMM" in c.rationale]
    assert seeds and not seeds[0].source.glue
    if body == "self.conv(x)":
        assert result.candidates[0] is seeds[0]  # a bare conv leads with it
    for blocks in ({}, {"MR": 4, "NV": 1}):
        run(seeds[0].source, task, tmp_path, blocks)
