"""The CUDA toolchain: nvcc builds a `cuda` KernelSource into a shared library for the CUDA backend.

Flags: -O3 -arch=sm_XX -shared -Xcompiler -fPIC,-O3 -std=c++17 -cudart=static plus the tunables' -D
defines. cudart is linked statically so the library needs only the driver on the executor, and the
build needs no GPU and no torch headers. Architecture tokens: "sm90" -> sm_90, "sm90a" -> sm_90a,
"sm100" -> sm_100 (SASS for that architecture plus its PTX).
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from kernelfoundry.toolchains.probe import tool_output
from kernelfoundry.toolchains.target import BuildTarget
from kernelfoundry.toolchains.toolchain import UnsupportedTarget

_SM_TOKEN = re.compile(r"^sm(\d{2,3})([a-z]?)$")
_NVCC_RELEASE = re.compile(r"\bV(\d+(?:\.\d+)+)")


def arch_flag(arch: str) -> str:
    match = _SM_TOKEN.match(arch)
    if not match:
        raise UnsupportedTarget(f"cuda architecture `{arch}` is not of the form sm<NN>[suffix], e.g. sm90")
    return f"-arch=sm_{match.group(1)}{match.group(2)}"


@dataclass(frozen=True)
class NvccToolchain:
    executable: str = "nvcc"
    host_compiler: str = "g++"
    name: str = "nvcc"
    languages: frozenset[str] = frozenset({"cuda"})
    source_suffix: str = ".cu"

    def version(self) -> str | None:
        banner = tool_output(self.executable, "--version")
        if banner is None:
            return None
        match = _NVCC_RELEASE.search(banner)
        host = tool_output(self.host_compiler, "-dumpfullversion")
        return f"{self.name} {match.group(1) if match else 'unknown'} (host g++ {host or 'unknown'})"

    def flags(self, target: BuildTarget) -> tuple[str, ...]:
        return (
            "-O3",
            arch_flag(target.arch),
            "-shared",
            "-Xcompiler",
            "-fPIC,-O3",
            "-std=c++17",
            "-cudart=static",
        )

    def command(self, source: Path, output: Path, flags: Sequence[str], include_dir: Path) -> list[str]:
        return [
            self.executable,
            f"-ccbin={self.host_compiler}",
            *flags,
            f"-I{include_dir}",
            str(source),
            "-o",
            str(output),
        ]
