"""The launcher: applies a SandboxPolicy to its own process, then becomes the target program (exec).

    python -m kernelfoundry.sandbox.enter STATUS_FD PARENT_PID POLICY_JSON -- ARGV...

Doing this in a separate, single-threaded process instead of a `preexec_fn` keeps it safe when the
spawner has threads, and lets it use unshare(CLONE_NEWUSER), which refuses threaded callers. Order:
namespaces (they change credentials, which would clear the parent-death signal), the parent-death
signal, rlimits, Landlock last (it needs no_new_privs and freezes what follows). Then one JSON line on
STATUS_FD: `{"protections": [...], "net_ns": inode, "user_ns": inode}`; STATUS_FD is close-on-exec, so
the spawner reads until end of file and knows the target is running. A failure is reported on the same
fd as `{"error": reason, "message": ...}` and the launcher exits with status 126 or 127.

Imports only the standard library and the sandbox's own pure modules: it runs under `python -I -S`.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import glob
import json
import os
import signal
import sys
from pathlib import Path

from kernelfoundry.sandbox import landlock, namespaces
from kernelfoundry.sandbox.errors import SandboxError
from kernelfoundry.sandbox.limits import apply_limits, planned_limits
from kernelfoundry.sandbox.policy import SandboxPolicy

_PR_SET_PDEATHSIG = 1
EXIT_UNAVAILABLE = 126
EXIT_EXEC_FAILED = 127


def apply_policy(policy: SandboxPolicy, parent_pid: int) -> list[str]:
    """Apply `policy` to this process; returns the names of the protections now active."""
    host_uid = os.geteuid()  # before the user namespace, where we map it onto itself
    active = namespaces.isolate_network()
    libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6", use_errno=True)
    if libc.prctl(_PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0) == 0:
        if os.getppid() != parent_pid:  # the spawner died before the signal was armed
            os._exit(EXIT_UNAVAILABLE)
        active.append("pdeathsig")
    apply_limits(planned_limits(policy))
    active.append("rlimits")
    if policy.max_processes is not None and host_uid != 0:
        active.append("nproc")  # the kernel never applies RLIMIT_NPROC to uid 0, in any namespace
    writable = [Path(policy.scratch), *map(Path, policy.writable), Path("/dev/null")]
    devices = [Path(p) for p in sorted(glob.glob("/dev/nvidia*"))] if policy.gpu else []
    try:
        active += landlock.restrict(landlock.abi_version(), writable, devices)
    except OSError as exc:
        print(f"kernelfoundry.sandbox: Landlock not applied: {exc}", file=sys.stderr)
    missing = [name for name in policy.require if name not in active]
    if missing:
        raise SandboxError(
            "sandbox_unavailable",
            f"required protections not available on this host: {', '.join(missing)} (active: {active})",
        )
    return active


def _namespace_inode(kind: str) -> int | None:
    try:
        return os.stat(f"/proc/self/ns/{kind}").st_ino
    except OSError:
        return None


def _report(status_fd: int, payload: dict[str, object]) -> None:
    os.write(status_fd, (json.dumps(payload) + "\n").encode())


def main(args: list[str]) -> None:
    status_fd, parent_pid, policy_json, separator, *target = args
    status = int(status_fd)
    if separator != "--" or not target:
        _report(status, {"error": "sandbox_setup_failed", "message": "usage: FD PID POLICY -- ARGV..."})
        os._exit(EXIT_EXEC_FAILED)
    try:
        policy = SandboxPolicy.from_json(policy_json)
        active = apply_policy(policy, int(parent_pid))
    except SandboxError as exc:
        _report(status, {"error": exc.reason, "message": exc.message})
        os._exit(EXIT_UNAVAILABLE)
    except OSError as exc:
        _report(status, {"error": "sandbox_setup_failed", "message": str(exc)})
        os._exit(EXIT_UNAVAILABLE)
    os.set_inheritable(status, False)  # the spawner sees end of file once exec succeeds
    _report(
        status,
        {"protections": active, "net_ns": _namespace_inode("net"), "user_ns": _namespace_inode("user")},
    )
    try:
        os.execvpe(target[0], target, dict(os.environ))
    except OSError as exc:
        _report(status, {"error": "sandbox_setup_failed", "message": f"cannot execute {target[0]!r}: {exc}"})
        os._exit(EXIT_EXEC_FAILED)


if __name__ == "__main__":
    main(sys.argv[1:])
