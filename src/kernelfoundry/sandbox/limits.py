"""Resource limits of a sandboxed process: which rlimits a policy asks for (pure), and applying them.

RLIMIT_AS bounds the address space on the CPU; with a GPU, CUDA reserves far more address space than
it uses, so RLIMIT_DATA (heap and anonymous mappings) bounds memory instead. RLIMIT_CPU's hard limit
is one second past the soft one: SIGXCPU first, then SIGKILL. Core dumps are always off.
"""

from __future__ import annotations

import resource

from kernelfoundry.sandbox.policy import SandboxPolicy


def planned_limits(policy: SandboxPolicy) -> dict[str, tuple[int, int]]:
    """The rlimits (by resource name, soft and hard) that `policy` asks for."""
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


def apply_limits(plan: dict[str, tuple[int, int]]) -> None:
    """Lower this process's limits to `plan`; a hard limit is never raised above the current one."""
    for name, (soft, hard) in plan.items():
        which = getattr(resource, name)
        _, current_hard = resource.getrlimit(which)
        if current_hard != resource.RLIM_INFINITY:
            hard = min(hard, current_hard)
            soft = min(soft, hard)
        resource.setrlimit(which, (soft, hard))
