"""The sandbox every process that runs untrusted code runs in (candidate runners, task references).

    from kernelfoundry.sandbox import SandboxPolicy, spawn_sandboxed
    policy = SandboxPolicy.for_python(scratch, memory_bytes=4 << 30, max_processes=256, cpu_seconds=600)
    proc = spawn_sandboxed([sys.executable, "-m", "my.runner"], policy, pass_fds=(sock,))
    proc.protections  # e.g. ["env", "session", "userns", "netns", "pdeathsig", "rlimits",
                      #       "landlock-fs", "landlock-net", "landlock-scope"]
    proc.kill_all()   # the process group and every descendant, reaped

What it enforces, and how it degrades on a host that lacks a feature, is in docs/sandbox.md. It must
never weaken a protection silently: whatever is not active is absent from `protections`, and
`SandboxPolicy.require` turns an absence into a refusal.

The names below load on first use: the launcher (`kernelfoundry.sandbox.enter`) imports this package
too, and must not pay for `subprocess` and `dataclasses` on every sandboxed start.
"""

from __future__ import annotations

import importlib

_EXPORTS = {
    "PYTHON_ENV_ALLOW": "kernelfoundry.sandbox.policy",
    "SECRET_PATTERNS": "kernelfoundry.sandbox.policy",
    "SandboxPolicy": "kernelfoundry.sandbox.policy",
    "is_secret_name": "kernelfoundry.sandbox.policy",
    "SandboxError": "kernelfoundry.sandbox.errors",
    "SandboxedProcess": "kernelfoundry.sandbox.process",
    "become_subreaper": "kernelfoundry.sandbox.process",
    "spawn_sandboxed": "kernelfoundry.sandbox.process",
}
__all__ = sorted(_EXPORTS)


def __getattr__(name: str) -> object:
    if name not in _EXPORTS:
        raise AttributeError(f"module 'kernelfoundry.sandbox' has no attribute {name!r}")
    return getattr(importlib.import_module(_EXPORTS[name]), name)
