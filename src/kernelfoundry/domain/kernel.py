"""A kernel candidate's source: compiled units, optional Python glue, tunables and chosen values.

Pure data. Tunables are marked in the source with a comment line

    // @kf.tunable BLOCK_SIZE in [64, 128, 256, 512] default 256

and the code uses the macro (guarded by `#ifndef BLOCK_SIZE`); a build passes each chosen value as
`-DNAME=value`. kernelfoundry.domain.tunables parses them, kernelfoundry.domain.sweeps searches them.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Literal

Language = Literal["cpp", "cuda"]
TunableValue = int | str

DEFAULT_ENTRY_POINT = "kf_forward"


@dataclass(frozen=True)
class Tunable:
    name: str
    values: tuple[TunableValue, ...]
    default: TunableValue


@dataclass(frozen=True)
class KernelSource:
    """What a generator produces and the compiler builds.

    `code` is one translation unit (C++ for language "cpp", CUDA C++ for "cuda") that includes
    "kf_abi.h" and exports `kf_abi_version` plus `entry_point`. `glue` is optional Python defining
    `ModelNew` (KernelBench style) that calls the units; empty means the entry point replaces the
    reference's forward directly.
    """

    language: Language
    code: str
    entry_point: str = DEFAULT_ENTRY_POINT
    glue: str = ""
    tunables: tuple[Tunable, ...] = ()
    params: Mapping[str, TunableValue] = field(default_factory=dict)

    def defines(self) -> dict[str, TunableValue]:
        """Preprocessor defines for a build: declared defaults overridden by chosen params."""
        values: dict[str, TunableValue] = {t.name: t.default for t in self.tunables}
        values.update(self.params)
        return values
