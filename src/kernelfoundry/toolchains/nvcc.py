"""The CUDA toolchain: nvcc builds a `cuda` KernelSource into a shared library for the CUDA backend.

Flags: -O3 -arch=sm_XX -shared -Xcompiler -fPIC,-O3 -std=c++17 -cudart=static plus the tunables' -D
defines. cudart is linked statically so the library needs only the driver on the executor, and the
build needs no GPU and no torch headers. Architecture tokens: "sm100" -> -arch=sm_100 (SASS for that
architecture plus its PTX); "sm90a" and "sm90" -> SASS for sm_90a only (one device pass, no PTX):
every compute-capability-9.0 device (H100, H200, GH200) runs sm_90a code, whose arch-specific
instructions (Hopper's warpgroup MMA, `wgmma`) the conv family uses; a unit built for sm_90 could not
issue them. Other suffixed tokens likewise ("sm100a" -> sm_100a SASS).
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
    number, suffix = match.group(1), match.group(2) or ("a" if match.group(1) == "90" else "")
    if suffix:  # arch-specific features: that architecture's SASS, nothing for any other
        return f"-gencode=arch=compute_{number}{suffix},code=sm_{number}{suffix}"
    return f"-arch=sm_{number}"


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
