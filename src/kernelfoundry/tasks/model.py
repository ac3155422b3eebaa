"""The task: a PyTorch reference computation plus what the user wants from the search.

Pure data, no torch import. `reference_source` is Python text in KernelBench's format: it defines
`Model(nn.Module)`, `get_inputs()` and `get_init_inputs()`. A shape variant overrides module-level
globals of that source (KernelBench files size their inputs with globals like `batch_size = 16`)
before `get_inputs()`/`get_init_inputs()` are called.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from kernelfoundry.domain.budgets import Budget
from kernelfoundry.domain.kernel import KernelSource

DEFAULT_SEEDS = 5


@dataclass(frozen=True)
class ShapeVariant:
    name: str
    overrides: Mapping[str, Any] = field(default_factory=dict)


DEFAULT_SHAPES = (ShapeVariant("default"),)


@dataclass(frozen=True)
class Tolerance:
    atol: float
    rtol: float


@dataclass(frozen=True)
class Task:
    name: str
    reference_source: str
    instructions: str = ""
    shapes: tuple[ShapeVariant, ...] = DEFAULT_SHAPES
    tolerance: Tolerance | None = None  # None: the dtype's default policy
    seeds: int = DEFAULT_SEEDS
    targets: tuple[str, ...] = ("cpu",)
    budget: Budget = field(default_factory=Budget)
    initial_kernels: tuple[KernelSource, ...] = ()


class TaskError(ValueError):
    """A task that cannot be used; `reason` is a short code users can count and filter by."""

    def __init__(self, reason: str, message: str) -> None:
        super().__init__(message)
        self.reason = reason
        self.message = message

    def __str__(self) -> str:
        return f"{self.reason}: {self.message}"
