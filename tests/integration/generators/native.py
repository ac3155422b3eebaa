"""A small native harness for the proposer's tests: build a unit with g++/nvcc and call it via ctypes.

Mirrors the ABI (kf_abi.h): kf_tensor is DLPack's DLTensor. Kept here so the proposer's tests do not
depend on the evaluation service.
"""

from __future__ import annotations

import ctypes
import os
import subprocess
import tempfile
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from kernelfoundry.abi import include_dir
from kernelfoundry.domain.kernel import KernelSource
from kernelfoundry.evaluation.unit import KfDevice as _Dev
from kernelfoundry.evaluation.unit import KfDtype as _Dt
from kernelfoundry.evaluation.unit import KfTensor
from kernelfoundry.toolchains.nvcc import arch_flag


def fresh_path(suffix: str, directory: Path) -> Path:
    """A new empty file's path in `directory`, its descriptor closed (hundreds of builds in one pytest
    process would otherwise hold one each, and past 1024 open descriptors `select()` refuses them)."""
    fd, name = tempfile.mkstemp(suffix=suffix, dir=directory)
    os.close(fd)
    return Path(name)


def build_unit(source: KernelSource, out_dir: Path, params: Mapping[str, Any] | None = None) -> Path:
    defines = dict(source.defines())
    defines.update(params or {})
    flags = [f"-D{k}={v}" for k, v in sorted(defines.items())]
    suffix = ".cpp" if source.language == "cpp" else ".cu"
    src = fresh_path(suffix, out_dir)
    src.write_text(source.code)
    lib = src.with_suffix(".so")
    if source.language == "cpp":
        cmd = [
            "g++",
            "-O3",
            "-fno-math-errno",
            "-fopenmp",
            "-march=x86-64-v3",
            "-shared",
            "-fPIC",
            "-std=c++17",
        ]
    else:
        cmd = ["nvcc", "-O3", arch_flag("sm90"), "-shared", "-Xcompiler", "-fPIC", "-std=c++17"]
    proc = subprocess.run(
        [*cmd, *flags, f"-I{include_dir()}", str(src), "-o", str(lib)], capture_output=True, text=True
    )
    if proc.returncode != 0:
        raise RuntimeError(f"compile_error: {proc.stderr[:4000]}")
    return lib


class Unit:
    def __init__(self, lib: Path) -> None:
        self.lib = ctypes.CDLL(str(lib))

    def call(self, entry: str, inputs: list[Any], outputs: list[Any]) -> int:
        import torch

        keep: list[Any] = []

        def desc(t: Any) -> KfTensor:
            if not isinstance(t, torch.Tensor):
                t = torch.tensor(float(t), dtype=torch.float32)
            t = t.contiguous() if not t.is_contiguous() else t
            shape = (ctypes.c_int64 * max(t.dim(), 1))(*t.shape)
            strides = (ctypes.c_int64 * max(t.dim(), 1))(*t.stride())
            keep.extend([t, shape, strides])
            dev = _Dev(2 if t.is_cuda else 1, t.device.index or 0)
            # kf_abi.h's codes: float 2, bool 6 (a mask)
            code, bits = (6, 8) if t.dtype == torch.bool else (2, 32)
            return KfTensor(t.data_ptr(), dev, t.dim(), _Dt(code, bits, 1), shape, strides, 0)

        ins = (KfTensor * max(len(inputs), 1))(*[desc(t) for t in inputs])
        outs = (KfTensor * max(len(outputs), 1))(*[desc(t) for t in outputs])
        fn = getattr(self.lib, entry)
        fn.restype = ctypes.c_int
        return int(fn(ins, len(inputs), outs, len(outputs), None))


class Launcher:
    """`kf` for a glue run in a test: `kf.launch(entry, inputs, outputs)` calls the unit's entry."""

    def __init__(self, unit: Unit) -> None:
        self.unit = unit

    def launch(self, entry: str, inputs: list[Any], outputs: list[Any]) -> None:
        assert self.unit.call(entry, inputs, outputs) == 0


def cuda_ready() -> bool:
    """nvcc to build CUDA units and a CUDA device to run them."""
    import shutil

    import torch

    return shutil.which("nvcc") is not None and torch.cuda.is_available()
