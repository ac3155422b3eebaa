"""Build targets: which backend and which hardware architecture a compiled unit is built for.

A target is spelled as the hardware token of the NATS subjects (`kf.compile.cpu.x86_64`,
`kf.compile.cuda.sm90`): `BuildTarget.parse("cuda.sm90")` and `target.subject_token()` round-trip.
Pure data: this module never runs a compiler nor probes a device.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from kernelfoundry.toolchains.toolchain import TOOLCHAINS

Backend = str  # one of BACKENDS
BACKENDS: tuple[str, ...] = tuple(TOOLCHAINS)

_ARCH_TOKEN = re.compile(r"^[a-z0-9_]+$")


@dataclass(frozen=True)
class BuildTarget:
    """A backend ("cpu", "cuda") and an architecture token ("x86_64", "native", "sm90", "sm90a")."""

    backend: Backend
    arch: str

    def __post_init__(self) -> None:
        if self.backend not in BACKENDS:
            raise ValueError(f"unknown backend `{self.backend}` (known: {', '.join(BACKENDS)})")
        if not _ARCH_TOKEN.match(self.arch):
            raise ValueError(
                f"architecture token `{self.arch}` must match [a-z0-9_]+ (it is a subject token)"
            )

    @classmethod
    def parse(cls, token: str) -> BuildTarget:
        """Parse "backend.arch", the form used in subjects (`cpu.x86_64`, `cuda.sm90`)."""
        backend, dot, arch = token.partition(".")
        if not dot or not arch:
            raise ValueError(f"build target `{token}` is not of the form backend.arch (e.g. cuda.sm90)")
        if backend not in BACKENDS:
            raise ValueError(
                f"unknown backend `{backend}` in build target `{token}` (known: {', '.join(BACKENDS)})"
            )
        return cls(backend, arch)

    def subject_token(self) -> str:
        return f"{self.backend}.{self.arch}"

    def __str__(self) -> str:
        return self.subject_token()
