"""The clang toolchain: clang++ builds a `cpp` KernelSource into a shared library for the `cpu_clang`
backend, the same C++/OpenMP units the g++ backend builds, compiled by a second compiler (its own
vectoriser, unroller and instruction selection; a search can compare both on one kernel).

Flags: -O3 -fno-math-errno -fopenmp=libgomp -march=<arch> -shared -fPIC -std=c++17 plus the tunables'
-D defines. `-fopenmp=libgomp` links GCC's OpenMP runtime, the one torch and the g++ backend's units
use, so a runner never holds two OpenMP runtimes; the `omp.h` clang compiles against is its own (from
libomp-dev: GCC's header does not parse under clang). Architecture tokens are the g++ backend's
(kernelfoundry.toolchains.gxx.march_for). The executable is `clang++`, else the newest versioned
`clang++-N` on the PATH (what Debian and Ubuntu install).
"""

from __future__ import annotations

import os
import re
import shutil
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

from kernelfoundry.toolchains.gxx import march_for
from kernelfoundry.toolchains.probe import tool_output
from kernelfoundry.toolchains.target import BuildTarget
from kernelfoundry.toolchains.toolchain import UnsupportedTarget

_VERSIONED = re.compile(r"clang\+\+-(\d+)")


def find_clangxx() -> str:
    """`clang++` when it is on the PATH, else the newest `clang++-N` there, else `clang++` (missing)."""
    if shutil.which("clang++"):
        return "clang++"
    found: list[tuple[int, str]] = []
    for folder in os.environ.get("PATH", "").split(os.pathsep):
        try:
            names = os.listdir(folder or ".")
        except OSError:
            continue
        for name in names:
            m = _VERSIONED.fullmatch(name)
            if m and os.access(os.path.join(folder, name), os.X_OK):
                found.append((int(m[1]), name))
    return max(found)[1] if found else "clang++"


@dataclass(frozen=True)
class ClangToolchain:
    executable: str = field(default_factory=find_clangxx)
    name: str = "clang++"
    languages: frozenset[str] = frozenset({"cpp"})
    source_suffix: str = ".cpp"

    def version(self) -> str | None:
        version = tool_output(self.executable, "-dumpversion")
        return f"{self.name} {version}" if version else None

    def flags(self, target: BuildTarget) -> tuple[str, ...]:
        try:
            march = march_for(target.arch)
        except UnsupportedTarget:
            message = f"clang++ on this host cannot build for cpu architecture `{target.arch}`"
            raise UnsupportedTarget(message) from None
        return ("-O3", "-fno-math-errno", "-fopenmp=libgomp", *march, "-shared", "-fPIC", "-std=c++17")

    def command(self, source: Path, output: Path, flags: Sequence[str], include_dir: Path) -> list[str]:
        return [self.executable, *flags, f"-I{include_dir}", str(source), "-o", str(output)]
