"""The sandbox every process that runs untrusted code runs in (candidate runners, task references).

    from kernelfoundry.sandbox import SandboxPolicy, spawn_sandboxed
    policy = SandboxPolicy.for_python(scratch, memory_bytes=4 << 30, max_processes=256, cpu_seconds=600)
    proc = spawn_sandboxed([sys.executable, "-m", "my.runner"], policy, pass_fds=(sock,))
    proc.protections  # e.g. ["env", "session", "userns", "netns", "pdeathsig", "rlimits", "nproc",
                      #       "landlock-fs", "landlock-net", "landlock-scope"]
    proc.kill_all()   # the process group and every descendant, reaped

What it enforces, and how it degrades on a host that lacks a feature, is in docs/sandbox.md. It must
never weaken a protection silently: whatever is not active is absent from `protections`, and
`SandboxPolicy.require` turns an absence into a refusal.
"""

from kernelfoundry.sandbox.errors import SandboxError
from kernelfoundry.sandbox.policy import PYTHON_ENV_ALLOW, SECRET_PATTERNS, SandboxPolicy, is_secret_name
from kernelfoundry.sandbox.process import SandboxedProcess, become_subreaper, spawn_sandboxed

__all__ = [
    "PYTHON_ENV_ALLOW",
    "SECRET_PATTERNS",
    "SandboxError",
    "SandboxPolicy",
    "SandboxedProcess",
    "become_subreaper",
    "is_secret_name",
    "spawn_sandboxed",
]
