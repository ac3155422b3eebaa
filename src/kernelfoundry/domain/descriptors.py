"""Behavioural descriptors: the three axes of the MAP-Elites archive, four levels each.

memory      0 scalar/strided/uncoalesced, 1 coalesced or vectorized, 2 shared/local-memory tiling,
            3 multi-level hierarchy
algorithm   0 direct translation, 1 fused operations, 2 reformulated algorithm, 3 asymptotically better
parallelism 0 no sync, 1 block barriers, 2 warp/sub-group primitives, 3 global coordination (atomics)
"""

from __future__ import annotations

from dataclasses import dataclass

LEVELS = 4
AXES = ("memory", "algorithm", "parallelism")


@dataclass(frozen=True, order=True)
class Descriptors:
    memory: int = 0
    algorithm: int = 0
    parallelism: int = 0

    def __post_init__(self) -> None:
        for axis in AXES:
            level = getattr(self, axis)
            if not 0 <= level < LEVELS:
                raise ValueError(f"descriptor {axis}={level} outside 0..{LEVELS - 1}")

    @property
    def cell(self) -> tuple[int, int, int]:
        return (self.memory, self.algorithm, self.parallelism)
