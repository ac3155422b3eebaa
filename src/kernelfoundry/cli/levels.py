"""Descriptor levels in the words of each backend, for tables (the analysis itself is in domain/descriptors).

The archive's axes are the same for every backend, but a CPU kernel has no warps or shared memory: level 2
of parallelism is an OpenMP reduction clause or SIMD lanes combining, level 3 atomics or critical sections
across threads. One table keyed by backend; a new backend is one entry.
"""

from __future__ import annotations

from typing import Final

AXIS_WORDS: Final[dict[str, dict[str, tuple[str, str, str, str]]]] = {
    "cuda": {
        "memory": ("scalar", "coalesced", "shared-memory tiles", "multi-level"),
        "algorithm": ("direct", "fused", "reformulated", "asymptotic"),
        "parallelism": ("no sync", "block barriers", "warp primitives", "atomics"),
    },
    "cpu": {
        "memory": ("scalar", "SIMD / contiguous", "cache blocking", "multi-level blocking"),
        "algorithm": ("direct", "fused", "reformulated", "asymptotic"),
        "parallelism": ("independent threads", "thread barriers", "reduction clauses", "atomics / critical"),
    },
}


def backend_of(hardware: str) -> str:
    """`cpu.x86_64` -> cpu, `cuda.h200` -> cuda; a backend without its own words gets the GPU words."""
    backend = hardware.split(".", 1)[0]
    return backend if backend in AXIS_WORDS else "cuda"


def level_words(hardware: str, axis: str) -> tuple[str, str, str, str]:
    return AXIS_WORDS[backend_of(hardware)][axis]
