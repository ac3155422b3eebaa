"""conv_means.py: the spatial mean of a convolution computed without it (per-tap input sums times the
weight) equals torch's conv then mean for every kind of conv and geometry; the rewrite takes a conv whose
value reaches a mean over all spatial dims through per-channel affine ops only, and leaves anything
else alone; a generated candidate of such a task matches the reference."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import pytest
import torch
from torch import nn

from kernelfoundry.generators.base import GenerationRequest
from kernelfoundry.generators.heuristic import HeuristicGenerator
from kernelfoundry.generators.heuristic.conv_means import SPATIAL_MEAN_HELPER, lower_conv_means
from kernelfoundry.generators.heuristic.graph import capture
from kernelfoundry.tasks.model import ShapeVariant, Task
from kernelfoundry.tasks.reference import instantiate

sys.path.insert(0, str(Path(__file__).parents[2] / "integration" / "generators"))

HELPER: dict[str, Any] = {"torch": torch, "F": torch.nn.functional}
exec(SPATIAL_MEAN_HELPER, HELPER)

# module, input shape
CONVS = {
    "conv1d_strided_dilated": (nn.Conv1d(3, 5, 4, stride=3, padding=2, dilation=2), (2, 3, 29)),
    "conv2d_plain": (nn.Conv2d(3, 4, 3), (2, 3, 9, 11)),
    "conv2d_asymmetric": (
        nn.Conv2d(3, 4, (2, 5), stride=(2, 1), padding=(1, 2), dilation=(3, 1)),
        (2, 3, 13, 10),
    ),
    "conv2d_no_bias": (nn.Conv2d(2, 3, 3, stride=2, padding=1, bias=False), (3, 2, 8, 7)),
    "conv3d": (nn.Conv3d(2, 3, 3, stride=(1, 2, 2), padding=1), (2, 2, 5, 6, 7)),
    "conv_transpose1d": (
        nn.ConvTranspose1d(3, 4, 5, stride=3, padding=2, output_padding=1, dilation=2),
        (2, 3, 11),
    ),
    "conv_transpose2d": (nn.ConvTranspose2d(4, 6, 3, stride=2, padding=1, output_padding=1), (2, 4, 9, 8)),
    "conv_transpose2d_large_padding": (
        nn.ConvTranspose2d(2, 3, (3, 4), stride=(1, 3), padding=(2, 3)),
        (2, 2, 7, 6),
    ),
    "conv_transpose3d": (
        nn.ConvTranspose3d(2, 3, 3, stride=2, padding=1, dilation=(1, 2, 1)),
        (2, 2, 4, 5, 3),
    ),
}


def reduced_dims(spatial: int) -> list[tuple[int, ...]]:
    """Every run of adjacent spatial dims (a mean's reduced range)."""
    return [tuple(range(a, b)) for a in range(spatial) for b in range(a + 1, spatial + 1)]


@pytest.mark.parametrize(
    ("name", "reduced"),
    [(name, r) for name in sorted(CONVS) for r in reduced_dims(len(CONVS[name][1]) - 2)],
)
def test_the_spatial_mean_without_the_conv_equals_the_conv_then_the_mean(
    name: str, reduced: tuple[int, ...]
) -> None:
    torch.manual_seed(0)
    module, shape = CONVS[name]
    x = torch.randn(shape, dtype=torch.float64)
    module = module.double()
    transposed = type(module).__name__.startswith("ConvTranspose")
    expected = module(x).mean(dim=tuple(2 + d for d in reduced), keepdim=True)
    got = HELPER["_conv_spatial_mean"](
        x,
        module.weight,
        module.bias,
        transposed,
        module.stride,
        module.padding,
        module.dilation,
        module.output_padding if transposed else None,
        reduced,
    )
    torch.testing.assert_close(got, expected)


TEMPLATE = """
import torch
import torch.nn as nn

class Model(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv = {conv}
        self.bn = nn.BatchNorm2d(6)
        self.bias = nn.Parameter(torch.randn(6, 1, 1))
        self.rows = nn.Parameter(torch.randn(9, 1))
        self.cols = nn.Parameter(torch.randn(1, 8))

    def forward(self, x):
        y = self.conv(x)
        return {body}

def get_inputs():
    return [torch.randn(2, 4, 9, 8)]

def get_init_inputs():
    return []
"""
TRANSPOSED = "nn.ConvTranspose2d(4, 6, 3, stride=2, padding=1, output_padding=1)"
PLAIN = "nn.Conv2d(4, 6, 3, padding=1)"

# conv, body: rewritten
REWRITTEN = {
    "scaled_means": (
        TRANSPOSED,
        "torch.mean(torch.mean(y * 0.5, dim=[2, 3], keepdim=True), dim=[2, 3], keepdim=True)",
    ),
    "mean_then_logsumexp": (
        TRANSPOSED,
        "torch.sum(torch.logsumexp(torch.mean(y, dim=(2, 3), keepdim=True) + self.bias, dim=1, keepdim=True),"
        " dim=(2, 3)) * 10.0",
    ),
    "batch_norm_then_pool": (PLAIN, "nn.functional.adaptive_avg_pool2d(self.bn(y * 2.0), 1)"),
    "bias_sub_div_mean": (PLAIN, "((y - self.bias) / 3.0).mean(dim=(-2, -1))"),
    "mean_over_the_width": (PLAIN, "torch.mean(y * self.rows, dim=3)"),
    "mean_over_the_height_transposed": (TRANSPOSED, "torch.softmax(torch.mean(y + self.bias, dim=2), dim=1)"),
}
# conv, body: left alone
NOT_REWRITTEN = {
    "gelu_between": (PLAIN, "torch.mean(torch.nn.functional.gelu(y), dim=(2, 3))"),
    "operand_along_the_reduced_dim": (PLAIN, "torch.mean(y * self.cols, dim=3)"),
    "mean_over_channels_too": (PLAIN, "torch.mean(y, dim=(1, 2, 3))"),
    "value_read_twice": (PLAIN, "torch.mean(y, dim=(2, 3)) + y[:, :, 0, 0]"),
    "divided_by_the_conv": (PLAIN, "torch.mean(1.0 / y, dim=(2, 3))"),
    "spatial_operand": (PLAIN, "torch.mean(y * y[:1], dim=(2, 3))"),
    "grouped": ("nn.Conv2d(4, 6, 3, groups=2)", "torch.mean(y, dim=(2, 3))"),
}


def task_of(conv: str, body: str) -> Task:
    return Task("conv_mean", TEMPLATE.format(conv=conv, body=body), (ShapeVariant("s"),))


@pytest.mark.parametrize("name", sorted(REWRITTEN))
def test_a_conv_reaching_a_spatial_mean_through_affine_ops_is_rewritten(name: str) -> None:
    graph = capture(task_of(*REWRITTEN[name]))
    lowered = lower_conv_means(graph)
    node = lowered.node("conv")
    assert node is not None and node.op == "conv_spatial_mean" and node.fx_node is None
    assert 1 in lowered.shapes["conv"][2:] and lowered.shapes["conv"][:2] == graph.shapes["conv"][:2]
    assert sum(lowered.shapes["conv"]) < sum(graph.shapes["conv"])


@pytest.mark.parametrize("name", sorted(NOT_REWRITTEN))
def test_anything_else_is_left_alone(name: str) -> None:
    graph = capture(task_of(*NOT_REWRITTEN[name]))
    assert lower_conv_means(graph) is graph


@pytest.mark.parametrize("backend", ["cpu"])
@pytest.mark.parametrize("name", sorted(REWRITTEN))
def test_the_fused_candidate_of_a_rewritten_task_matches_the_reference(
    name: str, backend: str, tmp_path: Path
) -> None:
    from native import Launcher, Unit, build_unit

    task = task_of(*REWRITTEN[name])
    result = HeuristicGenerator().generate_sync(GenerationRequest("t", task, backend, count=1))
    source = result.candidates[0].source
    assert "_conv_spatial_mean(" in source.glue
    unit = Unit(build_unit(source, tmp_path))
    reference = instantiate(task, task.shapes[0], seed=1, device="cpu")
    reference.model.eval()
    namespace: dict[str, Any] = {"torch": torch, "nn": nn, "F": torch.nn.functional, "kf": Launcher(unit)}
    exec(compile(source.glue, "<glue>", "exec"), namespace)
    candidate = namespace["ModelNew"]()
    candidate.load_state_dict(reference.model.state_dict(), strict=False)  # as the evaluator: by name
    candidate.eval()
    with torch.no_grad():
        torch.testing.assert_close(
            candidate(*reference.inputs), reference.model(*reference.inputs), rtol=1e-4, atol=1e-5
        )
