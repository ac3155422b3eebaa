"""The launcher: applies a launch plan to its own process, then becomes the target program (exec).

    python -m kernelfoundry.sandbox.enter STATUS_FD PARENT_PID PLAN_JSON -- ARGV...

The plan (`kernelfoundry.sandbox.plan`) is what the spawner derived from a SandboxPolicy.

Doing this in a separate, single-threaded process instead of a `preexec_fn` keeps it safe when the
spawner has threads, and lets it use unshare(CLONE_NEWUSER), which refuses threaded callers. Order:
namespaces (they change credentials, which would clear the parent-death signal), the parent-death
signal, rlimits, Landlock last (it needs no_new_privs and freezes what follows). Then one JSON line on
STATUS_FD: `{"protections": [...], "net_ns": inode, "user_ns": inode}`; STATUS_FD is close-on-exec, so
the spawner reads until end of file and knows the target is running. A failure is reported on the same
fd as `{"error": reason, "message": ...}` and the launcher exits with status 126 or 127.

Imports only the standard library and the sandbox's small modules: it runs under `python -I -S` and
its start-up is part of every sandboxed process's start-up.
"""

from __future__ import annotations

import json
import os
import signal
import sys

from kernelfoundry.sandbox import landlock, namespaces
from kernelfoundry.sandbox.errors import SandboxError
from kernelfoundry.sandbox.libc import libc
from kernelfoundry.sandbox.limits import apply_limits

TYPE_CHECKING = False  # typing itself is not imported: start-up time
if TYPE_CHECKING:
    from typing import Any

_PR_SET_PDEATHSIG = 1
EXIT_UNAVAILABLE = 126
EXIT_EXEC_FAILED = 127
PLAN_FORMAT = 1  # kernelfoundry.sandbox.plan writes it
MAX_PLAN_BYTES = 64 * 1024


def apply_plan(plan: dict[str, Any], parent_pid: int) -> list[str]:
    """Apply a launch plan to this process; returns the names of the protections now active."""
    host_uid = os.geteuid()  # before the user namespace, where we map it onto itself
    relax = set(plan["relax"])
    active = namespaces.isolate_network(user_namespace="userns" not in relax)
    if libc().prctl(_PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0) == 0:
        if os.getppid() != parent_pid:  # the spawner died before the signal was armed
            os._exit(EXIT_UNAVAILABLE)
        active.append("pdeathsig")
    if "rlimits" not in relax:
        apply_limits(plan["rlimits"])
        active.append("rlimits")
    if plan["limits_processes"] and host_uid != 0:
        active.append("nproc")  # the kernel never applies RLIMIT_NPROC to uid 0, in any namespace
    devices = _gpu_devices() if plan["gpu_devices"] else []
    try:
        if "landlock" not in relax:
            active += landlock.restrict(landlock.abi_version(), plan["writable"], devices)
    except OSError as exc:
        print(f"kernelfoundry.sandbox: Landlock not applied: {exc}", file=sys.stderr)
    missing = [name for name in plan["require"] if name not in active]
    if missing:
        raise SandboxError(
            "sandbox_unavailable",
            f"required protections not available on this host: {', '.join(missing)} (active: {active})",
        )
    return active


def parse_plan(text: str) -> dict[str, Any]:
    """The plan as the launcher reads it (plain JSON values), checked for shape."""
    if len(text) > MAX_PLAN_BYTES:
        raise SandboxError("bad_policy", f"launch plan is {len(text)} bytes, limit {MAX_PLAN_BYTES}")
    try:
        data = json.loads(text)
    except json.JSONDecodeError as exc:
        raise SandboxError("bad_policy", f"launch plan is not JSON: {exc}") from exc
    expected = {"format", "rlimits", "writable", "gpu_devices", "limits_processes", "require", "relax"}
    if not isinstance(data, dict) or set(data) != expected or data["format"] != PLAN_FORMAT:
        raise SandboxError(
            "bad_policy", f"launch plan must have exactly {sorted(expected)}, format {PLAN_FORMAT}"
        )
    return data


def _gpu_devices() -> list[str]:
    """/dev/nvidia0, /dev/nvidiactl, /dev/nvidia-uvm, /dev/nvidia-caps ... (what CUDA opens)."""
    try:
        return sorted(f"/dev/{name}" for name in os.listdir("/dev") if name.startswith("nvidia"))
    except OSError:
        return []


def _namespace_inode(kind: str) -> int | None:
    try:
        return os.stat(f"/proc/self/ns/{kind}").st_ino
    except OSError:
        return None


def _report(status_fd: int, payload: dict[str, object]) -> None:
    os.write(status_fd, (json.dumps(payload) + "\n").encode())


def main(args: list[str]) -> None:
    status_fd, parent_pid, plan_json, separator, *target = args
    status = int(status_fd)
    if separator != "--" or not target:
        _report(status, {"error": "sandbox_setup_failed", "message": "usage: FD PID PLAN -- ARGV..."})
        os._exit(EXIT_EXEC_FAILED)
    try:
        active = apply_plan(parse_plan(plan_json), int(parent_pid))
    except SandboxError as exc:
        _report(status, {"error": exc.reason, "message": exc.message})
        os._exit(EXIT_UNAVAILABLE)
    except Exception as exc:  # any failure before exec must reach the spawner, never a bare exit
        _report(status, {"error": "sandbox_setup_failed", "message": f"{type(exc).__name__}: {exc}"})
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
