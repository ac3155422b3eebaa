"""The one interface every compiler backend implements, and the choice of toolchain by build target.

A toolchain knows its executable, its version, the flags for a target and how to spell a command
line; running that command (sandboxed), caching and checking the result are shared by all
backends (kernelfoundry.toolchains.build). Toolchains never run a build themselves.

`TOOLCHAINS` is the compile side's list of backends: backend name -> the toolchain class that builds
for it, as "module:Class" (imported on first use, so naming a backend imports no compiler module).
Build targets accept exactly these backends (kernelfoundry.toolchains.target.BACKENDS). Adding a
backend is one toolchain module plus one line here (and, for evaluation, one in
kernelfoundry.evaluation.backends); see docs/architecture.md.
"""

from __future__ import annotations

import importlib
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Protocol

if TYPE_CHECKING:  # target.py reads TOOLCHAINS at import time
    from kernelfoundry.toolchains.target import BuildTarget

TOOLCHAINS: dict[str, str] = {
    "cpu": "kernelfoundry.toolchains.gxx:GxxToolchain",
    "cuda": "kernelfoundry.toolchains.nvcc:NvccToolchain",
    "cpu_clang": "kernelfoundry.toolchains.clang:ClangToolchain",
}


class UnsupportedTarget(ValueError):
    """The toolchain cannot build for this architecture token."""


class Toolchain(Protocol):
    name: str  # "g++", "nvcc"
    executable: str
    languages: frozenset[str]  # KernelSource.language values it compiles
    source_suffix: str  # ".cpp", ".cu"

    def version(self) -> str | None:
        """Name and version ("g++ 12.2.0"), or None when the executable is missing."""
        ...

    def flags(self, target: BuildTarget) -> tuple[str, ...]:
        """Optimisation, architecture and linking flags (no paths); raises UnsupportedTarget."""
        ...

    def command(self, source: Path, output: Path, flags: Sequence[str], include_dir: Path) -> list[str]:
        """The argv that builds `source` into the shared library `output`."""
        ...


def toolchain_for(target: BuildTarget) -> Toolchain:
    """The default toolchain for a target's backend."""
    module, _, name = TOOLCHAINS[target.backend].partition(":")
    toolchain: Toolchain = getattr(importlib.import_module(module), name)()
    return toolchain
