"""unbias.py: a conv module's bias leaves cuDNN's call for the generated part after it (CUDA), only
where generated ops alone read the conv. Pure graph rewriting."""

from __future__ import annotations

from kernelfoundry.generators.heuristic import HeuristicGenerator
from kernelfoundry.generators.heuristic.fold import fold_affine_tails
from kernelfoundry.generators.heuristic.graph import Graph, Ref
from kernelfoundry.generators.heuristic.unbias import unbias_convs, unbiased_call
from tests.fixtures.conv_tasks import conv_task


def graph(module: str, shape: str, body: str) -> Graph:
    return HeuristicGenerator().settled(conv_task("t", module, shape, body), "cuda")


def test_the_bias_becomes_a_per_channel_add_the_users_read() -> None:
    g = graph("nn.Conv3d(4, 6, 2)", "1, 4, 5, 5, 5", "torch.sigmoid(self.conv(x))")
    out = unbias_convs(g)
    conv, added, sigmoid = out.nodes
    assert conv.attrs["unbiased"] and "unbiased" not in g.nodes[0].attrs  # the input graph is untouched
    assert (added.op, added.kind, added.shape) == ("add", "pointwise", conv.shape)
    assert added.args == (Ref("conv"), Ref("p_conv_bias", 3))  # (C,) viewed as (C, 1, 1, 1)
    assert sigmoid.args == (Ref(added.name),)
    assert out.shapes[added.name] == conv.shape
    call = unbiased_call(out, conv, "x")
    geometry = "stride=(1, 1, 1), padding=(0, 0, 0), dilation=(1, 1, 1), groups=1"
    assert call == f"F.conv3d(x, self.conv.weight, None, {geometry})"


def test_transposed_convs_keep_their_output_padding() -> None:
    module = "nn.ConvTranspose2d(4, 6, 3, stride=2, padding=1, output_padding=1, groups=2)"
    out = unbias_convs(graph(module, "1, 4, 5, 5", "torch.tanh(self.conv(x))"))
    call = unbiased_call(out, out.nodes[0], "x")
    assert call.startswith("F.conv_transpose2d(x, self.conv.weight, None, stride=(2, 2), padding=(1, 1)")
    assert "output_padding=(1, 1), groups=2)" in call


def test_left_alone_where_cudnn_must_keep_the_bias() -> None:
    cases = [
        ("nn.Conv2d(3, 4, 3)", "1, 3, 8, 8", "self.conv(x)"),  # the conv is the output
        ("nn.Conv2d(3, 4, 3, bias=False)", "1, 3, 8, 8", "torch.relu(self.conv(x))"),  # no bias
        (
            "nn.Conv2d(3, 4, 3)",
            "1, 3, 8, 8",
            "torch.relu(torch.max_pool2d(self.conv(x), 2))",
        ),  # torch reads it
        ("nn.Conv2d(3, 4, 3, padding=1, padding_mode='reflect')", "1, 3, 8, 8", "torch.relu(self.conv(x))"),
    ]
    for module, shape, body in cases:
        g = graph(module, shape, body)
        assert unbias_convs(g) is g, module
    # a folded conv's bias already moved into the folded weights
    folded, did = fold_affine_tails(
        graph("nn.Conv2d(3, 4, 3)", "1, 3, 8, 8", "torch.relu(self.conv(x) * 2.0)")
    )
    assert did and unbias_convs(folded) is folded
