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

    @property
    def backend(self) -> str:
        return self.execute.split(".", 1)[0]


def cpu_target() -> HardwareTarget:
    machine = platform.machine().lower() or "x86_64"
    token = re.sub(r"[^a-z0-9_]", "_", machine)
    return HardwareTarget(execute=f"cpu.{token}", build=f"cpu.{token}")


def cuda_targets() -> list[HardwareTarget]:
    """One target per distinct GPU model that nvidia-smi lists; empty without a GPU."""
    if shutil.which("nvidia-smi") is None:
        return []
    try:
        out = subprocess.run(
            ["nvidia-smi", "--query-gpu=name,compute_cap", "--format=csv,noheader"],
            capture_output=True,
            text=True,
            timeout=20,
            check=True,
        ).stdout
    except (subprocess.SubprocessError, OSError):
        return []
    targets: list[HardwareTarget] = []
    for line in out.strip().splitlines():
        name, _, cap = (part.strip() for part in line.partition(","))
        model = re.sub(r"[^a-z0-9]", "", name.lower().replace("nvidia", "").split()[0] if name else "gpu")
        sm = "sm" + cap.replace(".", "") if cap else "sm90"
        target = HardwareTarget(execute=f"cuda.{model or 'gpu'}", build=f"cuda.{sm}")
        if target not in targets:
            targets.append(target)
    return targets


def detect() -> list[HardwareTarget]:
    return [cpu_target(), *cuda_targets()]
