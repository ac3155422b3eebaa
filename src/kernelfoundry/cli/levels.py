"""Descriptor levels in the words of each backend, for tables (the axes and their words are data in
kernelfoundry.domain.descriptors.DESCRIPTOR_AXES; the analysis is there too).

The archive's axes are the same for every backend, but a CPU kernel has no warps or shared memory: level 2
of parallelism is an OpenMP reduction clause or SIMD lanes combining, level 3 atomics or critical sections
across threads. A backend without its own words gets the GPU (`cuda`) words.
"""

from __future__ import annotations

from typing import Final

from kernelfoundry.domain.descriptors import DESCRIPTOR_AXES

AXIS_WORDS: Final[dict[str, dict[str, tuple[str, ...]]]] = {
    backend: {axis.name: axis.words.get(backend, axis.words["cuda"]) for axis in DESCRIPTOR_AXES}
    for backend in sorted({backend for axis in DESCRIPTOR_AXES for backend in axis.words})
}


def backend_of(hardware: str) -> str:
    """`cpu.x86_64` -> cpu, `cuda.h200` -> cuda; a backend without its own words gets the GPU words."""
    backend = hardware.split(".", 1)[0]
    return backend if backend in AXIS_WORDS else "cuda"


def level_words(hardware: str, axis: str) -> tuple[str, ...]:
    return AXIS_WORDS[backend_of(hardware)][axis]
