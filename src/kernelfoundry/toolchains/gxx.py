"""The C++/OpenMP toolchain: g++ builds a `cpp` KernelSource into a shared library for the CPU backend.

Flags: -O3 -fno-math-errno -fopenmp -march=<arch> -shared -fPIC -std=c++17 plus the tunables' -D
defines. Architecture tokens: "x86_64" means x86-64-v3 (AVX2, FMA, BMI2) when the build host has it, else
baseline x86-64 - the compiler service that builds for `cpu.x86_64` must therefore run on hosts of the
same class as the executors it feeds; "x86_64_v2"/"x86_64_v3"/"x86_64_v4" pin the level; "native" is
the build host's own CPU; "aarch64" builds for the (same) ARM host. No cross-compilation.
"""

from __future__ import annotations

import functools
import platform
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from kernelfoundry.toolchains.probe import tool_output
from kernelfoundry.toolchains.target import BuildTarget
from kernelfoundry.toolchains.toolchain import UnsupportedTarget

# cpuinfo flags that x86-64-v3 requires (AVX2 and its companions).
_X86_64_V3_FLAGS = frozenset({"avx", "avx2", "bmi1", "bmi2", "fma", "f16c", "movbe"})
_X86_LEVELS = {"x86_64_v2": "x86-64-v2", "x86_64_v3": "x86-64-v3", "x86_64_v4": "x86-64-v4"}


@functools.cache
def host_cpu_flags() -> frozenset[str]:
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as cpuinfo:
            for line in cpuinfo:
                if line.startswith("flags"):
                    return frozenset(line.partition(":")[2].split())
    except OSError:
        pass
    return frozenset()


def march_for(arch: str) -> tuple[str, ...]:
    machine = platform.machine()
    if arch == "native":
        return ("-march=native",)
    if arch == "aarch64" and machine == "aarch64":
        return ()
    if machine == "x86_64":
        if arch == "x86_64":
            level = "x86-64-v3" if host_cpu_flags() >= _X86_64_V3_FLAGS else "x86-64"
            return (f"-march={level}",)
        if arch in _X86_LEVELS:
            return (f"-march={_X86_LEVELS[arch]}",)
    raise UnsupportedTarget(f"g++ on this {machine} host cannot build for cpu architecture `{arch}`")


@dataclass(frozen=True)
class GxxToolchain:
    executable: str = "g++"
    name: str = "g++"
    languages: frozenset[str] = frozenset({"cpp"})
    source_suffix: str = ".cpp"

    def version(self) -> str | None:
        version = tool_output(self.executable, "-dumpfullversion")
        return f"{self.name} {version}" if version else None

    def flags(self, target: BuildTarget) -> tuple[str, ...]:
        # -fno-math-errno: kernels never read errno, and without it g++ keeps sqrtf and friends as scalar
        # library calls that block vectorisation. It changes no result (unlike -ffast-math).
        return (
            "-O3",
            "-fno-math-errno",
            "-fopenmp",
            *march_for(target.arch),
            "-shared",
            "-fPIC",
            "-std=c++17",
        )

    def command(self, source: Path, output: Path, flags: Sequence[str], include_dir: Path) -> list[str]:
        return [self.executable, *flags, f"-I{include_dir}", str(source), "-o", str(output)]
