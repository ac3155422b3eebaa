import torch
import torch.nn as nn


class Model(nn.Module):
    """Conv2d, then a per-channel bias, then ReLU."""

    def __init__(self, in_channels, out_channels, kernel_size, bias_shape):
        super().__init__()
        self.conv = nn.Conv2d(in_channels, out_channels, kernel_size)
        self.bias = nn.Parameter(torch.randn(bias_shape))

    def forward(self, x):
        x = self.conv(x)
        x = x + self.bias
        return torch.relu(x)


batch_size = 64
in_channels = 16
out_channels = 64
height = width = 128
kernel_size = 3
CPU_OVERRIDES = {"batch_size": 4, "height": 64, "width": 64}


def get_inputs():
    return [torch.randn(batch_size, in_channels, height, width)]


def get_init_inputs():
    return [in_channels, out_channels, kernel_size, (out_channels, 1, 1)]
