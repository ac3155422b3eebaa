import torch
import torch.nn as nn


class Model(nn.Module):
    """Linear layer, sigmoid, then a sum over the features."""

    def __init__(self, in_features, out_features):
        super().__init__()
        self.linear = nn.Linear(in_features, out_features)

    def forward(self, x):
        x = self.linear(x)
        x = torch.sigmoid(x)
        return torch.sum(x, dim=1, keepdim=True)


batch_size = 8192
in_features = 1024
out_features = 8192
CPU_OVERRIDES = {"batch_size": 512, "in_features": 256, "out_features": 2048}


def get_inputs():
    return [torch.randn(batch_size, in_features)]


def get_init_inputs():
    return [in_features, out_features]
