"""The glue rebuilds each torch.nn module it calls with every setting it was built with
(glue.module_constructor): a module's repr leaves settings out (AvgPool's count_include_pad and
divisor_override, a loss's reduction or margin, a conv's padding_mode unquoted), which ran such tasks
with other settings than the reference's or failed to build their glue."""

from __future__ import annotations

import math

import pytest
import torch
from torch import nn

from kernelfoundry.generators.heuristic.glue import module_constructor

MODULES = [
    nn.AvgPool2d(3, 2, 1, ceil_mode=True, count_include_pad=False, divisor_override=4),
    nn.AvgPool3d(2, count_include_pad=False),
    nn.MaxPool1d(3, 2, 1, dilation=2, ceil_mode=True),
    nn.MaxPool3d(2, 1, 1, dilation=2),
    nn.LPPool2d(2, 3, stride=2, ceil_mode=True),
    nn.AdaptiveMaxPool2d((2, 3), return_indices=True),
    nn.Conv2d(3, 4, 3, padding=1, padding_mode="reflect", bias=False),
    nn.Conv1d(3, 6, 3, padding="same", dilation=2, groups=3),
    nn.ConvTranspose2d(3, 4, 3, stride=2, output_padding=1, dilation=2),
    nn.Linear(3, 4, bias=False),
    nn.Bilinear(2, 3, 4),
    nn.Embedding(5, 3, padding_idx=1, max_norm=2.0),
    nn.BatchNorm2d(4, eps=1e-3, momentum=0.2, affine=False, track_running_stats=False),
    nn.InstanceNorm2d(4, eps=1e-3, affine=True, track_running_stats=True),
    nn.GroupNorm(2, 4, eps=1e-3, affine=False),
    nn.LayerNorm((4,), eps=1e-3, elementwise_affine=False),
    nn.LocalResponseNorm(3, alpha=1e-3, beta=0.5, k=2.0),
    nn.Softmax(dim=1),
    nn.LogSoftmax(dim=0),
    nn.Softmin(dim=1),
    nn.LeakyReLU(0.2),
    nn.Hardtanh(-2.0, 2.0),
    nn.Softplus(beta=2, threshold=10),
    nn.ELU(alpha=0.5),
    nn.CELU(0.3),
    nn.Threshold(0.1, 20.0),
    nn.GELU(approximate="tanh"),
    nn.PReLU(3),
    nn.Dropout(0.3),
    nn.Flatten(start_dim=2),
    nn.Upsample(scale_factor=2, mode="bilinear", align_corners=True),
    nn.ConstantPad1d(2, 3.5),
    nn.CosineSimilarity(dim=0, eps=1e-6),
    nn.PairwiseDistance(p=1.0, eps=1e-5, keepdim=True),
    nn.MSELoss(reduction="sum"),
    nn.SmoothL1Loss(beta=0.5),
    nn.HuberLoss(delta=2.0),
    nn.KLDivLoss(reduction="batchmean", log_target=True),
    nn.CrossEntropyLoss(weight=torch.rand(5), label_smoothing=0.1, ignore_index=2),
    nn.TripletMarginLoss(margin=2.0, p=1.0),
    nn.HingeEmbeddingLoss(margin=2.0),
    nn.Hardshrink(float("inf")),
]


def settings(mod: nn.Module) -> dict[str, object]:
    return {
        k: v
        for k, v in vars(mod).items()
        if not k.startswith("_") and k != "training" and not isinstance(v, torch.Tensor)
    }


def same(a: object, b: object) -> bool:
    if isinstance(a, float) and isinstance(b, float) and math.isnan(a):
        return math.isnan(b)
    return a == b


@pytest.mark.parametrize("mod", MODULES, ids=[type(m).__name__ for m in MODULES])
def test_a_rebuilt_module_has_every_setting_of_the_original(mod: nn.Module) -> None:
    rebuilt = eval(f"nn.{module_constructor(mod)}", {"nn": nn, "torch": torch})
    assert type(rebuilt) is type(mod)
    want, got = settings(mod), settings(rebuilt)
    assert want.keys() == got.keys() and all(same(want[k], got[k]) for k in want)
    # tensors (a bias, a loss's class weights) are there to take the reference's state
    assert {k: v.shape for k, v in mod.state_dict().items()} == {
        k: v.shape for k, v in rebuilt.state_dict().items()
    }


def test_a_rebuilt_pooling_computes_what_the_original_does() -> None:
    x = torch.randn(1, 1, 6, 6)
    mod = nn.AvgPool2d(3, 2, 1, count_include_pad=False)
    torch.testing.assert_close(eval(f"nn.{module_constructor(mod)}", {"nn": nn})(x), mod(x))
    assert "count_include_pad" not in repr(mod)  # why the repr is not used
