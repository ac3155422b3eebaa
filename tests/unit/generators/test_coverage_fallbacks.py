"""What the proposer does with ops it cannot generate: keep them in torch and generate the rest, generate
the torch op itself when nothing else is left, and name the operator when even that is impossible."""

from __future__ import annotations

import pytest

from kernelfoundry.generators.base import GenerationRequest, GenerationResult
from kernelfoundry.generators.heuristic import HeuristicGenerator, capture
from kernelfoundry.generators.heuristic import proposer as proposer_module
from kernelfoundry.tasks.model import Task

TEMPLATE = """
import torch
import torch.nn as nn
import torch.nn.functional as F

class Model(nn.Module):
    def __init__(self):
        super().__init__()
{init}
    def forward(self, {args}):
{body}

def get_inputs():
    return [{inputs}]

def get_init_inputs():
    return []
"""


def make_task(body: str, inputs: str = "torch.randn(2, 3, 8, 8)", args: str = "x", init: str = "") -> Task:
    lines = "\n".join(f"        {line}" for line in body.splitlines())
    source = TEMPLATE.format(init=init or "        pass", args=args, body=lines, inputs=inputs)
    return Task("t", source)


def propose(task: Task, backend: str = "cpu") -> GenerationResult:
    return HeuristicGenerator().generate_sync(GenerationRequest("r", task, backend, count=8))


@pytest.mark.parametrize("backend", ["cpu", "cuda"])
def test_a_reduction_the_emitters_refuse_stays_in_torch_and_the_rest_is_generated(backend: str) -> None:
    # a sum over non-adjacent dims: neither emitter generates it (entry.reduce_range refuses it)
    task = make_task("y = torch.sum(torch.relu(x), dim=(1, 3), keepdim=True)\nreturn torch.sigmoid(y) + 1.0")
    result = propose(task, backend)
    assert result.candidates, result.message
    for candidate in result.candidates:
        glue = candidate.source.glue
        assert "torch.sum(" in glue and glue.count("kf.launch(") == 2  # the relu before it, the tail after


@pytest.mark.parametrize("backend", ["cpu", "cuda"])
def test_a_softmax_over_channels_is_generated(backend: str) -> None:
    task = make_task("y = torch.softmax(x * 2.0, dim=1)\nreturn torch.sigmoid(y) + 1.0")
    result = propose(task, backend)
    assert result.candidates, result.message
    for candidate in result.candidates:
        assert not candidate.source.glue  # one generated unit: nothing left in torch


def test_a_task_that_is_one_conv_launches_a_generated_conv_and_does_not_rebuild_the_module() -> None:
    task = make_task("return self.conv2d(x)", init="        self.conv2d = nn.Conv2d(3, 4, 3, padding=1)")
    result = propose(task)
    assert result.candidates, result.message
    # the conv family's implicit GEMM leads (no glue: the unit takes x, weight and bias straight)
    assert "implicit GEMM" in result.candidates[0].rationale and not result.candidates[0].source.glue
    source = next(c.source for c in result.candidates if c.source.glue)  # the op-kernel fallback
    assert "kf_op0" in source.code and "kf.launch('kf_op0'" in source.glue
    assert "nn.Conv2d(" not in source.glue  # the glue would otherwise perform the reference's only op
    assert "self.conv2d.weight = nn.Parameter(" in source.glue
    units = [(c.source.code, c.source.glue) for c in result.candidates]
    assert len(set(units)) == len(units)  # seeds that would give the same op unit are handed out once


def test_argmax_is_generated_as_float_indices_cast_by_the_glue() -> None:
    result = propose(make_task("return torch.argmax(x, dim=2)"))
    assert result.candidates, result.message
    assert ".to(torch.int64)" in result.candidates[0].source.glue


def test_nothing_generatable_names_the_operator_and_the_node() -> None:
    result = propose(make_task("return torch.flip(x, dims=[1])"))
    assert not result.candidates
    assert result.error == "unsupported"
    assert "the proposer does not support operator `flip` at node `flip`" in result.message


def test_max_with_a_dim_lowers_to_amax_and_its_indices_stay_in_torch() -> None:
    graph = capture(make_task("v, i = torch.max(x, dim=1)\nreturn v * 2.0"))
    assert [n.op for n in graph.nodes if n.kind == "reduction"] == ["amax"]


@pytest.mark.parametrize(
    ("body", "init", "args", "inputs"),
    [
        ("return F.smooth_l1_loss(a, b)", "", "a, b", "torch.randn(4, 9), torch.randn(4, 9)"),
        (
            "return self.loss(a, b, c)",
            "        self.loss = nn.TripletMarginLoss(margin=0.5)",
            "a, b, c",
            "torch.randn(4, 9), torch.randn(4, 9), torch.randn(4, 9)",
        ),
    ],
)
def test_losses_become_generated_pointwise_ops_and_a_mean(
    body: str, init: str, args: str, inputs: str
) -> None:
    task = make_task(body, inputs=inputs, args=args, init=init)
    graph = capture(task)
    assert all(n.kind in ("pointwise", "reduction") for n in graph.nodes)
    assert graph.nodes[-1].op == "mean"
    result = propose(task)
    assert result.candidates and not result.candidates[0].source.glue


def test_integer_inputs_are_read_only_by_torch() -> None:
    task = make_task(
        "lp = torch.log_softmax(x / 2.0, dim=1)\nreturn -lp.gather(1, t.unsqueeze(1)).mean()",
        args="x, t",
        inputs="torch.randn(8, 10), torch.randint(0, 10, (8,))",
    )
    result = propose(task)
    assert result.candidates, result.message
    assert ".gather(" in result.candidates[0].source.glue


def test_a_failing_emitter_costs_the_request_not_the_service(monkeypatch: pytest.MonkeyPatch) -> None:
    def broken(*args: object, **kwargs: object) -> None:
        raise RuntimeError("emitter bug")

    monkeypatch.setattr(proposer_module, "settle", broken)
    result = propose(make_task("return torch.relu(x)"))
    assert result.error == "generator_error" and "emitter bug" in result.message
