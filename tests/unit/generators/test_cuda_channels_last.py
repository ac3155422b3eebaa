"""layout.py on CUDA: which conv tails read the conv's output in channels-last (a 2-D or 3-D conv, forward
or transposed, with a pointwise tail whose other operands are scalars or per-channel, maybe reduced over
the channels and mapped with scalars after), and the glue around them. Pure graph and string checks;
tests/integration/generators/test_cuda_kernel_paths.py runs the kernels."""

from __future__ import annotations

import pytest

from kernelfoundry.generators.heuristic import HeuristicGenerator
from kernelfoundry.generators.heuristic.graph import Graph
from kernelfoundry.generators.heuristic.layout import channels_last_source
from kernelfoundry.generators.heuristic.plan import partition
from kernelfoundry.generators.heuristic.proposer import channels_last_applies
from kernelfoundry.generators.heuristic.unbias import unbias_convs
from tests.fixtures.conv_tasks import conv_task

APPLIES = {
    "conv2d_bias_and_parameter": ("nn.Conv2d(3, 8, 3)", "1, 3, 8, 8", "torch.tanh(self.conv(x) * 2.0)"),
    "conv3d": ("nn.Conv3d(2, 4, 2)", "1, 2, 5, 5, 5", "torch.relu(self.conv(x))"),
    "transposed_2d": ("nn.ConvTranspose2d(4, 6, 3, stride=2)", "1, 4, 5, 5", "torch.sigmoid(self.conv(x))"),
    "min_over_the_channels": (
        "nn.Conv2d(3, 8, 3)",
        "1, 3, 8, 8",
        "torch.tanh(torch.min(self.conv(x) * 2.0, dim=1, keepdim=True)[0])",
    ),
    "mean_over_the_channels_3d": ("nn.Conv3d(2, 4, 2)", "1, 2, 5, 5, 5", "torch.mean(self.conv(x), dim=1)"),
}
REFUSED = {
    "the conv is the output": ("nn.Conv2d(3, 8, 3)", "1, 3, 8, 8", "self.conv(x)"),
    "a full-shape second operand": ("nn.Conv2d(3, 3, 3, padding=1)", "1, 3, 8, 8", "self.conv(x) + x"),
    "a row op in the tail": ("nn.Conv2d(3, 8, 3)", "1, 3, 8, 8", "torch.softmax(self.conv(x), dim=1)"),
    "a reduction over the positions": ("nn.Conv2d(3, 8, 3)", "1, 3, 8, 8", "self.conv(x).mean(dim=(2, 3))"),
    "a map after the reduction with a tensor": (
        "nn.Conv2d(3, 3, 3, padding=1)",
        "1, 3, 8, 8",
        "torch.amax(self.conv(x), dim=1, keepdim=True) * x",
    ),
    "a 1-D conv": ("nn.Conv1d(3, 8, 3)", "1, 3, 16", "torch.relu(self.conv(x))"),
}


def graph(module: str, shape: str, body: str) -> Graph:
    return HeuristicGenerator().settled(conv_task("t", module, shape, body), "cuda")


@pytest.mark.parametrize("name", sorted(APPLIES))
def test_conv_tails_with_scalar_and_per_channel_operands_read_channels_last(name: str) -> None:
    assert channels_last_applies(graph(*APPLIES[name]), "cuda")


@pytest.mark.parametrize("name", sorted(REFUSED))
def test_other_graphs_keep_the_nchw_tail(name: str) -> None:
    assert not channels_last_applies(graph(*REFUSED[name]), "cuda")


def test_the_cpu_tail_takes_no_per_channel_operand() -> None:
    # after unbias the conv's bias is a per-channel operand of the tail: CUDA reads it, the CPU's tail
    # (which folds it into the conv instead) does not
    unbiased = unbias_convs(graph(*APPLIES["conv2d_bias_and_parameter"]))
    parts = partition(unbiased, True)
    assert channels_last_source(unbiased, parts, "cuda") == "conv"
    assert channels_last_source(unbiased, parts, "cpu") is None


def test_a_3d_conv_runs_channels_last_3d_and_reaches_its_part_as_ndhwc() -> None:
    from kernelfoundry.generators.base import GenerationRequest

    task = conv_task("t", *APPLIES["conv3d"])
    result = HeuristicGenerator().generate_sync(GenerationRequest("g", task, "cuda", count=16))
    glue = next(c.source.glue for c in result.candidates if '"channels_last": true' in c.source.code)
    # the input's NDHWC copy from the unit's own entry point, seen by the conv as NCDHW with
    # channels-last strides; the conv's NDHWC output reaches the tail as a contiguous view
    assert "x_nhwc = torch.empty((x.shape[0], x.shape[2], x.shape[3], x.shape[4], x.shape[1])" in glue
    assert "kf.launch('kf_part0_to_nhwc', [x], [x_nhwc])" in glue
    assert "x_nhwc.permute(0, 4, 1, 2, 3)" in glue
    assert ".permute(0, 2, 3, 4, 1).contiguous()" in glue
    assert "self.conv.weight, None," in glue  # the bias is the tail's per-channel operand


def test_tiling_toggles_the_channels_last_tail_on_cuda() -> None:
    from kernelfoundry.generators.base import GenerationRequest, ParentKernel

    task = conv_task("t", *APPLIES["conv2d_bias_and_parameter"])
    generator = HeuristicGenerator()
    seeds = generator.generate_sync(GenerationRequest("g", task, "cuda", count=1)).candidates
    parent = seeds[0]
    assert '"channels_last": false' in parent.source.code
    request = GenerationRequest(
        "m", task, "cuda", parent=ParentKernel(parent.source, parent.strategy, 1.0, 1.0), mutation="tiling"
    )
    child = generator.generate_sync(request).candidates[0]
    assert '"channels_last": true' in child.source.code and "_nhwc<<<" in child.source.code
    back = GenerationRequest(
        "b", task, "cuda", parent=ParentKernel(child.source, child.strategy, 1.0, 1.0), mutation="tiling"
    )
    assert '"channels_last": false' in generator.generate_sync(back).candidates[0].source.code


@pytest.mark.parametrize("name", sorted(APPLIES))
def test_the_channels_last_tail_is_in_the_first_generation_beside_the_nchw_seed(name: str) -> None:
    """Second of the seeds (a first generation of two evaluates it): cuDNN converts NCHW tensors to
    NHWC and back around its float32 conv, which this seed does not pay."""
    from kernelfoundry.generators.base import GenerationRequest

    task = conv_task("t", *APPLIES[name])
    seeds = HeuristicGenerator().generate_sync(GenerationRequest("g", task, "cuda", count=2)).candidates
    assert len(seeds) == 2
    assert '"channels_last": false' in seeds[0].source.code
    assert '"channels_last": true' in seeds[1].source.code, [s.rationale for s in seeds]
