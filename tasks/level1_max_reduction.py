import torch
import torch.nn as nn


class Model(nn.Module):
    """Maximum over the last dimension."""

    def __init__(self, dim: int):
        super().__init__()
        self.dim = dim

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.amax(x, dim=self.dim)


batch_size = 64
dim1 = 1024
dim2 = 4096
reduce_dim = 2
CPU_OVERRIDES = {"batch_size": 8, "dim1": 512, "dim2": 1024}


def get_inputs():
    return [torch.randn(batch_size, dim1, dim2)]


def get_init_inputs():
    return [reduce_dim]
