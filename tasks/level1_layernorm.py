import torch
import torch.nn as nn


class Model(nn.Module):
    """LayerNorm over the last dimension, with learnable affine parameters."""

    def __init__(self, normalized_shape: tuple):
        super().__init__()
        self.ln = nn.LayerNorm(normalized_shape=normalized_shape)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.ln(x)


batch_size = 32
seq_len = 1024
hidden = 2048
CPU_OVERRIDES = {"batch_size": 4, "seq_len": 512, "hidden": 2048}


def get_inputs():
    return [torch.randn(batch_size, seq_len, hidden)]


def get_init_inputs():
    return [(hidden,)]
