"""What hardware this machine has, as the tokens that subjects and configuration use.

CPU always (`cpu.<machine>`); CUDA when a GPU answers (`cuda.<model>` for executors, built for
`cuda.sm<cc>`). Only reads the machine; never changes it.
"""

from __future__ import annotations

import platform
import re
import shutil
import subprocess
from dataclasses import dataclass


@dataclass(frozen=True)
class HardwareTarget:
    execute: str  # executor subject token, e.g. cpu.x86_64 or cuda.h200
    build: str  # compiler subject token, e.g. cpu.x86_64 or cuda.sm90
    devices: tuple[int, ...] = ()  # CUDA device indices of this model; empty for the CPU

    @property
    def backend(self) -> str:
        return self.execute.split(".", 1)[0]


def cpu_target() -> HardwareTarget:
    machine = platform.machine().lower() or "x86_64"
    token = re.sub(r"[^a-z0-9_]", "_", machine)
    return HardwareTarget(execute=f"cpu.{token}", build=f"cpu.{token}")


def parse_gpu_list(csv: str) -> list[HardwareTarget]:
    """Targets from `nvidia-smi --query-gpu=index,name,compute_cap --format=csv,noheader` output: one per
    GPU model, with the indices of its devices (each gets its own executor)."""
    by_model: dict[tuple[str, str], list[int]] = {}
    for line in csv.strip().splitlines():
        parts = [part.strip() for part in line.split(",")]
        if len(parts) != 3 or not parts[0].isdigit():
            continue
        index, name, cap = int(parts[0]), parts[1], parts[2]
        words = name.lower().replace("nvidia", "").split()
        model = re.split(r"[^a-z0-9]", words[0])[0] if words else ""
        sm = "sm" + cap.replace(".", "") if cap else "sm90"
        by_model.setdefault((f"cuda.{model or 'gpu'}", f"cuda.{sm}"), []).append(index)
    return [HardwareTarget(execute, build, tuple(indices)) for (execute, build), indices in by_model.items()]


def cuda_targets() -> list[HardwareTarget]:
    """One target per distinct GPU model that nvidia-smi lists; empty without a GPU."""
    if shutil.which("nvidia-smi") is None:
        return []
    try:
        out = subprocess.run(
            ["nvidia-smi", "--query-gpu=index,name,compute_cap", "--format=csv,noheader"],
            capture_output=True,
            text=True,
            timeout=20,
            check=True,
        ).stdout
    except (subprocess.SubprocessError, OSError):
        return []
    return parse_gpu_list(out)


def detect() -> list[HardwareTarget]:
    return [cpu_target(), *cuda_targets()]
