import torch
import torch.nn as nn
import torch.nn.functional as F


class Model(nn.Module):
    """Linear layer, scaled, then GELU."""

    def __init__(self, in_features, out_features, scaling_factor):
        super().__init__()
        self.gemm = nn.Linear(in_features, out_features)
        self.scaling_factor = scaling_factor

    def forward(self, x):
        x = self.gemm(x)
        x = x * self.scaling_factor
        return F.gelu(x)


batch_size = 8192
in_features = 1024
out_features = 8192
scaling_factor = 0.5
CPU_OVERRIDES = {"batch_size": 512, "in_features": 256, "out_features": 2048}


def get_inputs():
    return [torch.randn(batch_size, in_features)]


def get_init_inputs():
    return [in_features, out_features, scaling_factor]
