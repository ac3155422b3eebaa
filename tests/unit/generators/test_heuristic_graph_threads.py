"""Graphs captured from several threads at once: torch.fx's tracing patches nn.Module.__call__ for the
whole process, and two traces at once broke each other (seen on a 16-core GPU host, where a test built
every op kernel's first candidate in 15 threads)."""

from __future__ import annotations

import sys
from concurrent.futures import ThreadPoolExecutor

import pytest

torch = pytest.importorskip("torch")

from kernelfoundry.generators.heuristic.graph import capture  # noqa: E402
from kernelfoundry.tasks.model import ShapeVariant, Task  # noqa: E402

SOURCE = """
import torch
import torch.nn as nn

class Model(nn.Module):
    def __init__(self):
        super().__init__()
        self.a = nn.Conv1d(3, 4, {k})
        self.b = nn.MaxPool1d(2)
        self.c = nn.Sequential(*[nn.ReLU() for _ in range(40)])

    def forward(self, x):
        return self.c(self.b(self.a(x)))

def get_inputs():
    return [torch.randn(2, 3, 64)]

def get_init_inputs():
    return []
"""


def test_captures_in_many_threads_each_get_their_graph() -> None:
    tasks = [Task(f"t{k}", SOURCE.format(k=k), (ShapeVariant("s"),)) for k in range(1, 9)] * 4
    interval = sys.getswitchinterval()
    sys.setswitchinterval(1e-6)  # threads switch often, as on a many-core host under load
    try:
        with ThreadPoolExecutor(8) as pool:
            graphs = list(pool.map(capture, tasks))
    finally:
        sys.setswitchinterval(interval)
    for task, graph in zip(tasks, graphs, strict=True):
        k = int(task.name[1:])
        assert graph.shapes[graph.outputs[0]] == (2, 4, (64 - k + 1) // 2)
    # and no tracer's patch is left behind: a plain module call works
    assert torch.nn.ReLU()(torch.ones(2)).sum().item() == 2.0
