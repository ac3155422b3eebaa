import torch
import torch.nn as nn


class Model(nn.Module):
    """Conv2d, GroupNorm, then tanh."""

    def __init__(self, in_channels, out_channels, kernel_size, num_groups):
        super().__init__()
        self.conv = nn.Conv2d(in_channels, out_channels, kernel_size)
        self.group_norm = nn.GroupNorm(num_groups, out_channels)

    def forward(self, x):
        x = self.conv(x)
        x = self.group_norm(x)
        return torch.tanh(x)


batch_size = 64
in_channels = 16
out_channels = 64
height = width = 128
kernel_size = 3
num_groups = 8
CPU_OVERRIDES = {"batch_size": 4, "height": 64, "width": 64}


def get_inputs():
    return [torch.randn(batch_size, in_channels, height, width)]


def get_init_inputs():
    return [in_channels, out_channels, kernel_size, num_groups]
