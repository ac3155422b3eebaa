"""pools.py and the planner's pool steps: fixed max / average windows beside generated ops become
`pool` nodes with their geometry (adaptive windows, ceil mode, indices and pools between two library
ops stay in torch); the planner fuses the pointwise producers into the window's taps and the
consumers into the write when their operands are full or constant along the pooled dims; the glue
rebuilds pooling modules with every setting (test_module_constructor.py)."""

from __future__ import annotations

import pytest

from kernelfoundry.generators.heuristic.graph import capture
from kernelfoundry.generators.heuristic.plan import partition
from kernelfoundry.generators.heuristic.pools import PoolWindow, fuse_pools, pool_window
from kernelfoundry.generators.heuristic.unbias import unbias_convs
from kernelfoundry.tasks.model import ShapeVariant, Task

TEMPLATE = """
import torch
import torch.nn as nn
import torch.nn.functional as F

class Model(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv = nn.Conv2d(3, 4, 3)
        self.pool = {pool}
        self.s = nn.Parameter(torch.randn(4, 1, 1))
        self.row = nn.Parameter(torch.randn({row}))

    def forward(self, x):
        return {body}

def get_inputs():
    return [torch.randn(2, 3, 12, 14)]

def get_init_inputs():
    return []
"""


def graph_of(body: str, pool: str = "nn.MaxPool2d(2)", row: str = "4, 1, 1") -> object:
    source = TEMPLATE.format(body=body, pool=pool, row=row)
    return fuse_pools(unbias_convs(capture(Task("pools", source, (ShapeVariant("s"),)))))


def pools_of(graph: object) -> list[PoolWindow]:
    return [w for n in graph.nodes if (w := pool_window(n)) is not None]  # type: ignore[attr-defined]


def test_a_max_pool_between_generated_ops_becomes_a_pool_node_with_its_geometry() -> None:
    graph = graph_of("torch.tanh(self.pool(torch.relu(self.conv(x))))", "nn.MaxPool2d(3, 2, 1, dilation=2)")
    (window,) = pools_of(graph)
    assert window == PoolWindow(2, True, (1, 3, 3), (1, 2, 2), (0, 1, 1), (1, 2, 2))
    node = next(n for n in graph.nodes if n.kind == "pool")
    assert window.out_shape(graph.shapes[node.args[0].name]) == node.shape == (2, 4, 4, 5)


def test_average_settings_are_kept() -> None:
    graph = graph_of(
        "self.pool(self.conv(x) * 2.0)", "nn.AvgPool2d(3, 2, 1, count_include_pad=False, divisor_override=5)"
    )
    (window,) = pools_of(graph)
    assert not window.is_max and not window.include_pad and window.divisor == 5


@pytest.mark.parametrize(
    "pool",
    [
        "nn.AdaptiveAvgPool2d((3, 4))",
        "nn.MaxPool2d(2, ceil_mode=True)",
        "nn.MaxPool2d(2, return_indices=True)",
    ],
)
def test_windows_the_pool_step_does_not_take_stay_in_torch(pool: str) -> None:
    body = (
        "torch.relu(self.pool(self.conv(x) * 2.0)[0])"
        if "indices" in pool
        else "torch.relu(self.pool(self.conv(x) * 2.0))"
    )
    assert pools_of(graph_of(body, pool)) == []


def test_a_pool_between_two_library_ops_stays_in_torch() -> None:
    # conv -> pool -> conv: nothing to fuse; the op kernels serve a lone pool
    source = TEMPLATE.format(
        body="self.conv2(self.pool(self.conv(x)))", pool="nn.MaxPool2d(2)", row="4, 1, 1"
    )
    source = source.replace("self.s = ", "self.conv2 = nn.Conv2d(4, 4, 1)\n        self.s = ")
    assert pools_of(fuse_pools(capture(Task("pools", source, (ShapeVariant("s"),))))) == []


def test_producers_and_consumers_fuse_into_one_pool_step() -> None:
    graph = graph_of("torch.tanh(self.pool(torch.relu(self.conv(x) * self.s)) + self.s)")
    (part,) = partition(graph, fuse=True, axis_leaves=True)
    (step,) = part.steps
    assert step.kind == "pool" and step.epilogue
    # the conv's output, its bias and the scale read by the taps; the scale again by the write
    assert {leaf.name for leaf in step.prologue_leaves(graph)} == {"conv", "p_conv_bias", "p_s"}
    assert {leaf.name for leaf in step.epilogue_leaves(graph)} == {"p_s"}


def test_an_operand_that_varies_along_a_pooled_dim_only_is_written_out_first() -> None:
    # a per-column scale (varies along W only) is neither full nor constant along the pooled dims
    graph = graph_of("self.pool(self.conv(x) * self.row)", row="12")
    steps = [s.kind for part in partition(graph, fuse=True, axis_leaves=True) for s in part.steps]
    assert steps == ["pointwise", "pool"]


@pytest.mark.parametrize(
    ("window", "stride", "dilation"),
    [(8, 1, 3), (8, 1, 1), (4, 3, 1), (2, 1, 1), (64, 1, 1), (3, 2, 7)],
)
def test_a_separable_tile_fills_one_float4_column_pass(window: int, stride: int, dilation: int) -> None:
    """The float4 column pass reads from the aligned group before the span (up to 3 columns ahead): the
    span and that shift take at most one pass of the thread's groups, never a second pass for the one
    group over (which stalls the whole block at its barrier for a load latency)."""
    from kernelfoundry.generators.heuristic.opkernels import OpKernel
    from kernelfoundry.generators.heuristic.opkernels_cuda import _pool_groups, _pool_tile

    kernel = OpKernel(
        "pool",
        "pool",
        ("x",),
        {
            "window": (1, 1, window),
            "stride": (1, 1, stride),
            "padding": (0, 0, 0),
            "dilation": (1, 1, dilation),
        },
    )
    outputs, span = _pool_tile(kernel)
    assert span == (outputs - 1) * stride + (window - 1) * dilation + 1
    groups = (3 + span + 3) >> 2  # the most a tile takes: its span shifted by 3 columns
    assert groups <= _pool_groups(kernel, span) * 256
