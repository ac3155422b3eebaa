"""KernelBench idioms the CPU proposer generates instead of leaving to torch: softmax and log-softmax
over a dimension that is not the last (the channels of NCHW, as in the conv + softmax tasks), the
2-norm / Frobenius norm (torch.norm, Tensor.norm) and the global average pool (adaptive average pooling
to size 1, functional or module). Every seed compiles with g++ and matches torch, with fused prologues
and epilogues, at column tiles smaller and larger than the inner extent; other norms and pool sizes
stay in torch."""

from __future__ import annotations

import shutil
import sys
from pathlib import Path

import pytest
import torch

from kernelfoundry.domain.kernel import KernelSource
from kernelfoundry.generators.base import GeneratedCandidate, GenerationRequest
from kernelfoundry.generators.heuristic import HeuristicGenerator, capture
from kernelfoundry.tasks.model import ShapeVariant, Task
from kernelfoundry.tasks.reference import instantiate

sys.path.insert(0, str(Path(__file__).parent))
from native import Unit, build_unit

pytestmark = pytest.mark.skipif(shutil.which("g++") is None, reason="needs g++")

TEMPLATE = """
import torch
import torch.nn as nn
import torch.nn.functional as F


class Model(nn.Module):
    def __init__(self, channels):
        super().__init__()
{init}

    def forward(self, x):
{body}

batch, channels, height, width = 2, 5, 7, 9

def get_inputs():
    return [torch.randn(batch, channels, height, width) * 3.0]

def get_init_inputs():
    return [channels]
"""

BODIES = {
    "softmax_with_epilogue": "y = torch.softmax(x * 2.0, dim=1)\nreturn torch.sigmoid(y + self.bias) * 1.5",
    "log_softmax_with_epilogue": "y = torch.log_softmax(x - 1.0, dim=1)\nreturn torch.tanh(y) + 0.5",
    "softmax_over_rows_of_a_middle_dim": "return torch.softmax(x, dim=-2)",
    "log_softmax_alone": "return torch.log_softmax(x, dim=1)",
    "frobenius_norm": "norm = torch.norm(x, p='fro')\nreturn x / norm",
    "l2_norm_over_channels": "return x / torch.norm(x, p=2, dim=1, keepdim=True)",
    "norm_method_over_two_dims": "return x.norm(dim=(2, 3)) * 2.0",
    "global_average_pool": "y = F.adaptive_avg_pool2d(x.relu(), 1)\nreturn y.squeeze(-1).squeeze(-1) - 2",
    "global_average_pool_module": "return torch.sigmoid(self.pool(x * 2.0) + self.bias)",
    "min_with_tensor_in_forward": "y = torch.min(x, torch.tensor(0.25, device=x.device))\nreturn y * 3.0",
    "max_with_a_traced_constant": "return torch.max(x * 2.0, torch.tensor(0.5)) - 1.0",
    "max_over_channels_values": "return torch.max(x, dim=1, keepdim=True).values * 2.0",
    "min_of_every_element": "return x - x.min()",
}
GENERATED = {"softmax", "log_softmax", "norm", "adaptive_avg_pool2d", "torch.min", "torch.max", "x.min"}


def task_for(name: str, sizes: dict[str, int] | None = None) -> Task:
    body = "\n".join(f"        {line}" for line in BODIES[name].splitlines())
    # a parameter only where the body reads it: a bare entry point takes the state the graph uses
    init = []
    if "self.bias" in body:
        init.append("        self.bias = nn.Parameter(torch.randn(channels, 1, 1))")
    if "self.pool" in body:
        init.append("        self.pool = nn.AdaptiveAvgPool2d((1, 1))")
    source = TEMPLATE.format(body=body, init="\n".join(init) or "        pass")
    return Task(name, source, shapes=(ShapeVariant("odd", sizes or {}),))


def run(source: KernelSource, task: Task, tmp_path: Path, params: dict[str, int]) -> None:
    ref = instantiate(task, task.shapes[0], seed=1)
    unit = Unit(build_unit(source, tmp_path, params))
    with torch.no_grad():
        expected = ref.model(*ref.inputs)
    if source.glue:

        class Launcher:
            def launch(self, entry: str, inputs: list, outputs: list) -> None:
                assert unit.call(entry, list(inputs), list(outputs)) == 0

        namespace: dict = {"kf": Launcher()}
        exec(source.glue, namespace)
        model = namespace["ModelNew"](*ref.init_inputs)
        model.load_state_dict(ref.model.state_dict())
        with torch.no_grad():
            got = model.eval()(*ref.inputs)
    else:
        got = torch.full_like(expected, float("nan"))
        state = [*ref.model.parameters(), *ref.model.buffers()]
        assert unit.call(source.entry_point, [*ref.inputs, *state], [got]) == 0
    torch.testing.assert_close(got, expected, atol=1e-4, rtol=1e-4)


@pytest.mark.parametrize("inner_tile", [16, 256])
@pytest.mark.parametrize("name", sorted(BODIES))
def test_every_seed_matches_torch(name: str, inner_tile: int, tmp_path: Path) -> None:
    task = task_for(name)
    result = HeuristicGenerator().generate_sync(GenerationRequest("t", task, "cpu", count=8))
    assert result.candidates, result.message
    for candidate in result.candidates:
        glue = candidate.source.glue or ""
        assert not any(f"{op}(" in glue for op in GENERATED), glue  # views may stay in torch
        run(candidate.source, task, tmp_path, {"INNER_TILE": inner_tile})


def test_the_fused_seed_serves_a_shape_wider_than_a_tile(tmp_path: Path) -> None:
    task = task_for("softmax_with_epilogue", {"batch": 3, "channels": 4, "height": 11, "width": 13})
    fused = fused_seed(task)
    assert "kf_exp" in fused.source.code and '"fuse": true' in fused.source.code
    run(fused.source, task, tmp_path, {"INNER_TILE": 64})


def fused_seed(task: Task) -> GeneratedCandidate:
    """The CPU seed `fused: ...` (seeds are ordered by what wins, not by kind)."""
    result = HeuristicGenerator().generate_sync(GenerationRequest("t", task, "cpu", count=16))
    return next(c for c in result.candidates if c.rationale.startswith("fused:"))


def ops_of(body: str) -> set[str]:
    lines = "\n".join(f"        {line}" for line in body.splitlines())
    graph = capture(
        Task("t", TEMPLATE.format(body=lines, init="        pass"), shapes=(ShapeVariant("s", {}),))
    )
    pairs = {n.name for n in graph.nodes if n.op in ("max", "min") and not graph.users(n.name)}
    kept = {n.op for n in graph.nodes if n.kind in ("heavy", "pooling", "other") and n.name not in pairs}
    return kept - {"getattr", "tensor", "squeeze"}


@pytest.mark.parametrize(
    ("body", "kept"),
    [
        ("return torch.norm(x, p=1, dim=1)", "norm"),
        ("return x.norm(p=float('inf'))", "norm"),
        ("return F.adaptive_avg_pool2d(x, 2)", "adaptive_avg_pool2d"),
        ("return F.adaptive_avg_pool2d(x, (1, 3))", "adaptive_avg_pool2d"),
    ],
)
def test_other_norms_and_pool_sizes_stay_in_torch(body: str, kept: str) -> None:
    assert ops_of(body) == {kept}


def test_the_generated_idioms_leave_nothing_in_torch() -> None:
    for name in (
        "frobenius_norm",
        "l2_norm_over_channels",
        "norm_method_over_two_dims",
        "global_average_pool",
    ):
        assert not ops_of(BODIES[name]), name


def test_a_baked_traced_constant_is_not_an_input_of_the_unit() -> None:
    graph = capture(task_for("max_with_a_traced_constant"))
    assert [v.name for v in graph.inputs] == ["x"]
