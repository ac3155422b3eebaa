"""The launch plan: what the launcher applies, derived from a SandboxPolicy by the spawner (pure).

The spawner interprets the policy; the launcher only applies a plan of plain values, so it starts
fast (it imports neither dataclasses nor the policy) and holds no decision of its own. The plan
travels as JSON in the launcher's argv.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from kernelfoundry.sandbox.policy import SandboxPolicy

PLAN_FORMAT = 1  # the launcher (enter.py) reads this format


@dataclass(frozen=True)
class LaunchPlan:
    rlimits: dict[str, tuple[int, int]]
    writable: tuple[str, ...]  # scratch first
    gpu_devices: bool  # allow read, write and ioctl on /dev/nvidia*
    limits_processes: bool
    require: tuple[str, ...]
    relax: tuple[str, ...] = ()  # protections left out: RELAXABLE names (see SandboxPolicy.relax)

    def to_json(self) -> str:
        return json.dumps(
            {
                "format": PLAN_FORMAT,
                "rlimits": {name: list(pair) for name, pair in self.rlimits.items()},
                "writable": list(self.writable),
                "gpu_devices": self.gpu_devices,
                "limits_processes": self.limits_processes,
                "require": list(self.require),
                "relax": list(self.relax),
            }
        )


def plan_for(policy: SandboxPolicy) -> LaunchPlan:
    """The launch plan that carries out `policy`."""
    return LaunchPlan(
        rlimits=planned_limits(policy),
        writable=(str(policy.scratch), *map(str, policy.writable), "/dev/null"),
        gpu_devices=policy.gpu,
        limits_processes=policy.max_processes is not None,
        require=tuple(policy.require),
        relax=tuple(policy.relax or ()),
    )


def planned_limits(policy: SandboxPolicy) -> dict[str, tuple[int, int]]:
    """The rlimits (by resource name, soft and hard) that `policy` asks for.

    RLIMIT_AS bounds the address space on the CPU; with a GPU, CUDA reserves far more address space
    than it uses, so RLIMIT_DATA bounds memory instead. RLIMIT_CPU's hard limit is one second past the
    soft one: SIGXCPU first, then SIGKILL. Core dumps are always off.
    """
    plan: dict[str, tuple[int, int]] = {"RLIMIT_CORE": (0, 0)}
    if policy.memory_bytes is not None:
        name = "RLIMIT_DATA" if policy.gpu else "RLIMIT_AS"
        plan[name] = (policy.memory_bytes, policy.memory_bytes)
    if policy.max_processes is not None:
        plan["RLIMIT_NPROC"] = (policy.max_processes, policy.max_processes)
    plan["RLIMIT_NOFILE"] = (policy.max_open_files, policy.max_open_files)
    if policy.cpu_seconds is not None:
        plan["RLIMIT_CPU"] = (policy.cpu_seconds, policy.cpu_seconds + 1)
    if policy.file_bytes is not None:
        plan["RLIMIT_FSIZE"] = (policy.file_bytes, policy.file_bytes)
    return plan
