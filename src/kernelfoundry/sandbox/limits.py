"""Applying resource limits to the launcher's own process (they pass on to the target over exec)."""

from __future__ import annotations

import resource
from collections.abc import Mapping, Sequence


def apply_limits(plan: Mapping[str, Sequence[int]]) -> None:
    """Lower this process's limits to `plan`; a hard limit is never raised above the current one."""
    for name, (soft, hard) in plan.items():
        if not name.startswith("RLIMIT_"):
            raise ValueError(f"not a resource limit: {name!r}")
        which = getattr(resource, name)
        _, current_hard = resource.getrlimit(which)
        if current_hard != resource.RLIM_INFINITY:
            hard = min(hard, current_hard)
            soft = min(soft, hard)
        resource.setrlimit(which, (soft, hard))
