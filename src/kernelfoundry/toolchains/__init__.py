"""Toolchains: building kernel sources into shared libraries for a hardware target.

Public API: `build(source, target, cache)`, `BuildTarget`, `BuildResult`, `BuildCache`, `Limits`,
`Toolchain`, `toolchain_for`. Imports only the standard library and kernelfoundry's pure modules:
it also runs on the GPU machine, which has no transport libraries.
"""

from kernelfoundry.toolchains.build import build
from kernelfoundry.toolchains.cache import BuildCache
from kernelfoundry.toolchains.result import BuildResult
from kernelfoundry.toolchains.sandbox import Limits, network_isolation
from kernelfoundry.toolchains.target import BACKENDS, Backend, BuildTarget
from kernelfoundry.toolchains.toolchain import Toolchain, UnsupportedTarget, toolchain_for

__all__ = [
    "BACKENDS",
    "Backend",
    "BuildCache",
    "BuildResult",
    "BuildTarget",
    "Limits",
    "Toolchain",
    "UnsupportedTarget",
    "build",
    "network_isolation",
    "toolchain_for",
]
