"""A conv after a depthwise conv (cuda_conv_chain.py): where the chain applies, what its unit declares and
launches, how the proposer orders it. Pure strings: nothing is compiled or run here (the nvcc builds and
the GPU's verdicts are in tests/integration/generators/test_cuda_conv.py)."""

from __future__ import annotations

from pathlib import Path

import pytest

from kernelfoundry.domain.descriptors import classify
from kernelfoundry.generators.base import GeneratedCandidate, GenerationRequest
from kernelfoundry.generators.heuristic import HeuristicGenerator, capture, parse_variant
from kernelfoundry.generators.heuristic.cuda_conv_chain import conv_chain, conv_family_applies
from kernelfoundry.tasks.analysis import reference_op_count
from kernelfoundry.tasks.model import ShapeVariant, Task
from tests.fixtures.conv_tasks import conv_task

KERNELBENCH = Path(__file__).resolve().parents[3].parent / "shared" / "kernelbench"
SEPARABLE = "nn.Sequential(nn.Conv2d(8, 8, 3, padding=1, groups=8), nn.Conv2d(8, 20, 1))"


def seeds(t: Task) -> list[GeneratedCandidate]:
    result = HeuristicGenerator().generate_sync(GenerationRequest("g", t, "cuda", count=16))
    assert not result.error, result.message
    return list(result.candidates)


def test_a_depthwise_separable_conv_leads_with_the_chain_at_each_precision() -> None:
    t = conv_task("separable", SEPARABLE, "2, 8, 17, 19")
    found = seeds(t)
    first, second = (parse_variant(c.source.code) for c in found[:2])
    assert first is not None and first.gemm and first.tf32 and not first.channels_last
    assert second is not None and second.gemm and not second.tf32 and not second.channels_last
    ops = reference_op_count(t.reference_source)
    for c in found[:2]:
        code = c.source.code
        assert not c.source.glue and c.source.entry_point == "kf_forward"
        assert "reading the depthwise conv's output" in c.rationale
        # the family's entry made static, the depthwise op kernel's own entry, one kf_forward calling both
        assert code.count("static int kf_conv_forward(") == 1 and code.count("KF_EXPORT int kf_forward(") == 1
        assert "__global__ void __launch_bounds__(256) kf_op0_dw(" in code
        assert "int rc = kf_op0(first, 3, &mid, 1, stream);" in code  # x, weight, bias
        assert "rc = kf_conv_forward(conv, 3, outputs, n_outputs, stream);" in code
        assert code.count("static float* kf_alloc(") == 1
        assert "cudaFreeAsync(scratch, st);" in code
        # the depthwise output's size from the baked geometry (3x3, padding 1, stride 1)
        assert "const int64_t r0 = X->shape[2] + 2 - 3;" in code and "shape[3] = r1 / 1 + 1;" in code
        assert (c.strategy.memory, c.strategy.parallelism) == (3, 2)
        assert classify(c.source, ops, c.strategy).agrees


def test_the_pointwise_inputs_follow_the_depthwise_output_and_a_tail_is_fused() -> None:
    module = (
        "nn.Sequential(nn.Conv1d(6, 12, 5, stride=2, dilation=2, groups=6, bias=False), nn.Conv1d(12, 7, 3))"
    )
    t = conv_task("separable_1d", module, "2, 6, 101", "torch.relu(self.conv(x))")
    graph = capture(t)
    chain = conv_chain(graph)
    assert chain is not None and chain.plan.step is not None  # the relu in the family's stores
    assert chain.plan.inputs[0] == chain.conv_graph.inputs[0].name  # the depthwise conv's output
    assert chain.prologue.params["stride"][2] == 2 and not chain.prologue.params["bias"]
    code = next(c for c in seeds(t) if (v := parse_variant(c.source.code)) and v.gemm).source.code
    # the inputs in ABI order: x, the depthwise weight, the second conv's weight and bias
    assert "const kf_tensor first[] = {inputs[0], inputs[1]};" in code
    assert "const kf_tensor conv[] = {mid, inputs[2], inputs[3]};" in code
    assert "const int64_t r0 = X->shape[2] + 0 - 9;" in code and "shape[2] = r0 / 2 + 1;" in code


@pytest.mark.parametrize(
    ("module", "body"),
    [
        # the depthwise output read twice, a dense conv first, two depthwise convs, two dense convs
        (
            "nn.ModuleList([nn.Conv2d(8, 8, 3, padding=1, groups=8), nn.Conv2d(8, 8, 1)])",
            "(lambda y: self.conv[1](y) + y)(self.conv[0](x))",
        ),
        ("nn.Sequential(nn.Conv2d(8, 8, 1), nn.Conv2d(8, 8, 3, groups=8))", "self.conv(x)"),
        ("nn.Sequential(nn.Conv2d(8, 8, 3, groups=8), nn.Conv2d(8, 8, 3, groups=8))", "self.conv(x)"),
        ("nn.Sequential(nn.Conv2d(8, 8, 3), nn.Conv2d(8, 4, 1))", "self.conv(x)"),
    ],
)
def test_refuses_graphs_that_are_no_such_chain(module: str, body: str) -> None:
    t = conv_task("not_a_chain", module, "1, 8, 9, 9", body)
    graph = capture(t)
    assert conv_chain(graph) is None and not conv_family_applies(graph)


@pytest.mark.skipif(not KERNELBENCH.is_dir(), reason="needs ../shared/kernelbench")
def test_kernelbench_s_depthwise_separable_conv_is_a_chain() -> None:
    source = (KERNELBENCH / "level1" / "86_conv_depthwise_separable_2D.py").read_text()
    t = Task("86", source, shapes=(ShapeVariant("small", {"batch_size": 2, "height": 16, "width": 16}),))
    chain = conv_chain(capture(t))
    assert chain is not None and chain.plan.kernel == (1, 1, 1) and chain.plan.step is None
    first = seeds(t)[0]
    assert "kf_conv_forward" in first.source.code and not first.source.glue
