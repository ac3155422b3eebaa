"""CUDA seeds run the convs the glue keeps in torch in channels-last (cuDNN's tensor-core layout, as
torch.compile's layout optimisation does) and hand the generated part NCHW tensors. Pure strings."""

from __future__ import annotations

from kernelfoundry.generators.base import GeneratedCandidate, GenerationRequest
from kernelfoundry.generators.heuristic import HeuristicGenerator, parse_variant
from kernelfoundry.tasks.model import Task
from tests.fixtures.conv_tasks import conv_task


def seeds(t: Task, backend: str = "cuda") -> list[GeneratedCandidate]:
    result = HeuristicGenerator().generate_sync(GenerationRequest("g", t, backend, count=16))
    assert not result.error, result.message
    return list(result.candidates)


def test_a_conv_with_a_reduction_tail_seeds_its_first_strategy_again_in_channels_last() -> None:
    t = conv_task("conv", "nn.Conv2d(8, 16, 3)", "2, 8, 20, 20", "torch.tanh(torch.amin(self.conv(x), 1))")
    first, second = seeds(t)[:2]
    v1, v2 = parse_variant(first.source.code), parse_variant(second.source.code)
    assert v1 is not None and v2 is not None
    assert not v1.channels_last and v2 == v1.with_(channels_last=True)  # the same kernel, another layout

    def kernel(c: GeneratedCandidate) -> list[str]:
        return [line for line in c.source.code.splitlines() if "@kf.variant" not in line]

    assert kernel(first) == kernel(second)
    glue = second.source.glue
    assert "x_nhwc = x.contiguous(memory_format=torch.channels_last)" in glue
    assert "conv = self.conv(x_nhwc)" in glue
    assert "[conv.contiguous()]" in glue  # the part reads the NCHW layout its kernel checks for
    assert "channels_last" not in first.source.glue


def test_a_3d_conv_uses_the_3d_channels_last_layout_and_torch_ops_between_pass_through() -> None:
    body = "torch.sigmoid(torch.max_pool3d(self.conv(x), 2))"
    t = conv_task("conv3d", "nn.ConvTranspose3d(4, 8, 3)", "1, 4, 6, 6, 6", body)
    nhwc = [c for c in seeds(t) if (v := parse_variant(c.source.code)) and v.channels_last]
    assert len(nhwc) == 1
    glue = nhwc[0].source.glue
    assert "x.contiguous(memory_format=torch.channels_last_3d)" in glue
    # the pool's output keeps the conv's channels-last layout: the part gets it back in NCHW
    assert ".contiguous()]" in glue


def test_no_channels_last_seed_without_a_conv_kept_in_torch_or_on_the_cpu() -> None:
    bare = conv_task("bare", "nn.Conv2d(8, 16, 3)", "2, 8, 20, 20")  # the implicit-GEMM family's
    assert not any((v := parse_variant(c.source.code)) and v.channels_last for c in seeds(bare))
    conv1d = conv_task("c1", "nn.Conv1d(8, 16, 3)", "2, 8, 40", "torch.tanh(torch.amin(self.conv(x), 1))")
    assert not any((v := parse_variant(c.source.code)) and v.channels_last for c in seeds(conv1d))
    tail = conv_task("cpu", "nn.Conv2d(8, 16, 3)", "2, 8, 20, 20", "torch.tanh(torch.amin(self.conv(x), 1))")
    cpu = seeds(tail, "cpu")
    assert not any(
        "memory_format=torch.channels_last)" in c.source.glue and ".contiguous()]" in c.source.glue
        for c in cpu
    )
