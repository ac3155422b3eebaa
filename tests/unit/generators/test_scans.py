"""scans.py: the reverse, exclusive and masked scan idioms become one scan node (and their other nodes
go), anything that only looks like one is left alone, and the call the glue writes for the node
computes what the idiom did."""

from __future__ import annotations

import pytest
import torch

from kernelfoundry.generators.heuristic.graph import Graph, capture
from kernelfoundry.generators.heuristic.opkernels import op_kernel
from kernelfoundry.generators.heuristic.scans import lower_scans
from kernelfoundry.tasks.model import ShapeVariant, Task

TEMPLATE = """
import torch
import torch.nn as nn

class Model(nn.Module):
    def forward(self, {args}):
        {lines}
        return {body}

def get_inputs():
    return [{inputs}]

def get_init_inputs():
    return []
"""

EXCLUSIVE = (
    "torch.cat((torch.zeros_like(x.select(1, 0).unsqueeze(1)),"
    " torch.cumsum(x.narrow(dim=1, start=0, length=x.size(1) - 1), dim=1)), dim=1)"
)

# name: (forward args, body, inputs, the scan node's flags (reverse, exclusive, masked) and op)
IDIOMS = {
    "reverse": ("x", "torch.cumsum(x.flip(1), dim=1).flip(1)", "torch.randn(4, 9)", (1, 0, 0), "cumsum"),
    "reverse_function_form": (
        "x",
        "torch.flip(torch.cumsum(torch.flip(x, dims=[-1]), -1), dims=(2,))",
        "torch.randn(2, 3, 9)",
        (1, 0, 0),
        "cumsum",
    ),
    "reverse_cumprod": ("x", "torch.cumprod(x.flip(0), 0).flip(0)", "torch.rand(5, 3)", (1, 0, 0), "cumprod"),
    "exclusive": ("x", EXCLUSIVE, "torch.randn(4, 9)", (0, 1, 0), "cumsum"),
    "masked": (
        "x, mask",
        "torch.cumsum(x * mask, dim=1)",
        "torch.randn(4, 9), torch.rand(4, 9) > 0.5",
        (0, 0, 1),
        "cumsum",
    ),
    "masked_mask_first": (
        "x, mask",
        "torch.cumsum(mask * x, dim=0)",
        "torch.randn(4, 9), torch.rand(4, 9) > 0.5",
        (0, 0, 1),
        "cumsum",
    ),
    "masked_reverse": (
        "x, mask",
        "torch.cumsum((x * mask).flip(1), 1).flip(1)",
        "torch.randn(4, 9), torch.rand(4, 9) > 0.5",
        (1, 0, 1),
        "cumsum",
    ),
}

# forward args, body, inputs (and lines before the body): no scan idiom, or one whose pieces are read
# elsewhere
NOT_IDIOMS = {
    "plain_cumsum": ("x", "torch.cumsum(x, dim=1)", "torch.randn(4, 9)"),
    "flips_along_other_dims": ("x", "torch.cumsum(x.flip(0), dim=1).flip(0)", "torch.randn(4, 9)"),
    "flip_back_along_another_dim": ("x", "torch.cumsum(x.flip(1), dim=1).flip(0)", "torch.randn(4, 9)"),
    "flip_over_two_dims": ("x", "torch.cumsum(x.flip(0, 1), dim=1).flip(0, 1)", "torch.randn(4, 9)"),
    "flipped_input_read_again": (
        "x",
        "torch.cumsum(f, dim=1).flip(1) + f",
        "torch.randn(4, 9)",
        "f = x.flip(1)",
    ),
    "scan_read_again": ("x", "c.flip(1) * c", "torch.randn(4, 9)", "c = torch.cumsum(x.flip(1), dim=1)"),
    "narrow_from_one": (
        "x",
        "torch.cat((torch.zeros_like(x.narrow(1, 0, 1)),"
        " torch.cumsum(x.narrow(1, 1, x.size(1) - 1), dim=1)), dim=1)",
        "torch.randn(4, 9)",
    ),
    "zeros_after": (
        "x",
        "torch.cat((torch.cumsum(x.narrow(1, 0, x.size(1) - 1), dim=1),"
        " torch.zeros_like(x.narrow(1, 0, 1))), dim=1)",
        "torch.randn(4, 9)",
    ),
    "ones_before": (
        "x",
        "torch.cat((torch.ones_like(x.narrow(1, 0, 1)),"
        " torch.cumsum(x.narrow(1, 0, x.size(1) - 1), dim=1)), dim=1)",
        "torch.randn(4, 9)",
    ),
    "float_mask": ("x, y", "torch.cumsum(x * y, dim=1)", "torch.randn(4, 9), torch.randn(4, 9)"),
    "broadcast_mask": (
        "x, mask",
        "torch.cumsum(x * mask, dim=1)",
        "torch.randn(4, 9), torch.rand(1, 9) > 0.5",
    ),
}


def graph_of(args: str, body: str, inputs: str, lines: str = "pass") -> tuple[Graph, Task]:
    source = TEMPLATE.format(args=args, body=body, inputs=inputs, lines=lines)
    task = Task("scan", source, (ShapeVariant("s"),))
    return capture(task), task


@pytest.mark.parametrize("name", sorted(IDIOMS))
def test_each_idiom_becomes_one_scan_node_whose_glue_call_computes_it(name: str) -> None:
    args, body, inputs, flags, op = IDIOMS[name]
    graph, _ = graph_of(args, body, inputs)
    lowered = lower_scans(graph)
    assert len(lowered.nodes) == 1, [n.name for n in lowered.nodes]
    node = lowered.nodes[0]
    assert node.op == op and node.fx_node is None and node.name == graph.outputs[0]
    assert (node.attrs["reverse"], node.attrs["exclusive"], node.attrs["masked"]) == tuple(map(bool, flags))
    kernel = op_kernel(lowered, node)
    assert kernel is not None and kernel.family == "scan"
    assert (kernel.params["reverse"], kernel.params["exclusive"], kernel.params["masked"]) == flags
    assert kernel.bool_inputs == ((1,) if flags[2] else ())
    # the glue's replay of the node (where it is not generated) is the idiom itself
    torch.manual_seed(0)
    values = eval(f"[{inputs}]", {"torch": torch})
    namespace = {"torch": torch}
    exec(f"def forward({args}):\n    return {body}", namespace)
    expected = namespace["forward"](*values)
    operands = [a.name for a in node.args]
    by_name = dict(zip([v.strip() for v in args.split(",")], values, strict=True))
    got = eval(node.attrs["glue"].format(*operands), {"torch": torch, **by_name})
    torch.testing.assert_close(got, expected)


@pytest.mark.parametrize("name", sorted(NOT_IDIOMS))
def test_lookalikes_are_left_alone(name: str) -> None:
    graph, _ = graph_of(*NOT_IDIOMS[name])
    assert lower_scans(graph) is graph


def test_two_scans_in_one_graph_are_each_rewritten() -> None:
    body = "torch.cumsum(x.flip(1), dim=1).flip(1) + torch.cumsum(x * mask, dim=1)"
    graph, _ = graph_of("x, mask", body, "torch.randn(4, 9), torch.rand(4, 9) > 0.5")
    lowered = lower_scans(graph)
    scans = [n for n in lowered.nodes if n.fx_node is None]
    assert len(scans) == 2
    assert {(n.attrs["reverse"], n.attrs["masked"]) for n in scans} == {(True, False), (False, True)}
    assert not any(n.op == "flip" for n in lowered.nodes)
