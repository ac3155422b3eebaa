import torch
import torch.nn as nn


class Model(nn.Module):
    """Classifier head: linear layer followed by a log-softmax over the classes."""

    def __init__(self, in_features, num_classes):
        super().__init__()
        self.linear = nn.Linear(in_features, num_classes)

    def forward(self, x):
        x = self.linear(x)
        return torch.log_softmax(x, dim=1)


batch_size = 6144
in_features = 1024
num_classes = 8192
CPU_OVERRIDES = {"batch_size": 192, "in_features": 256, "num_classes": 4096}


def get_inputs():
    return [torch.randn(batch_size, in_features)]


def get_init_inputs():
    return [in_features, num_classes]
