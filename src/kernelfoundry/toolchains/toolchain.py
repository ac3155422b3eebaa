"""The one interface every compiler backend implements, and the choice of backend by build target.

A toolchain knows its executable, its version, the flags for a target and how to spell a command
line; running that command (sandboxed), caching and checking the result are shared by all
backends (kernelfoundry.toolchains.build). Adding a backend is one module plus one line in
`_FACTORIES`. Toolchains never run a build themselves.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Protocol

from kernelfoundry.toolchains.target import BuildTarget


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
    return _FACTORIES[target.backend]()


def _gxx() -> Toolchain:
    from kernelfoundry.toolchains.gxx import GxxToolchain

    return GxxToolchain()


def _nvcc() -> Toolchain:
    from kernelfoundry.toolchains.nvcc import NvccToolchain

    return NvccToolchain()


_FACTORIES: dict[str, Callable[[], Toolchain]] = {"cpu": _gxx, "cuda": _nvcc}
