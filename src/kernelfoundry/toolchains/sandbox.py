"""Running an untrusted build command: own process group, deadline, CPU/memory/file limits, no network.

Compiler input is generated code, and C++ templates or constexpr evaluation can make a compiler spin
or swallow memory, so every build runs (1) in a fresh session whose whole process group is killed at
the deadline, (2) under rlimits set by a tiny exec-launcher (thread-safe, unlike `preexec_fn`), and
(3) without network where the host allows it: `unshare --net` (needs root or CAP_SYS_ADMIN), else
`unshare --user --map-root-user --net` (unprivileged user namespaces), else - documented fallback -
no network isolation; `network_isolation()` says which one is in force, and (4) with an environment
without service secrets (`build_environment`).

This module must never interpret the command's output (that is the toolchain's business).
"""

from __future__ import annotations

import contextlib
import functools
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from kernelfoundry.sandbox.policy import is_secret_name

# Executed with `python -I -S -c`: sets the limits, then becomes the compiler.
_LIMIT_LAUNCHER = (
    "import os,resource,sys\n"
    "cpu,mem,fsize=(int(v) for v in sys.argv[1:4])\n"
    "resource.setrlimit(resource.RLIMIT_CORE,(0,0))\n"
    "if cpu>0: resource.setrlimit(resource.RLIMIT_CPU,(cpu,cpu+1))\n"
    "if mem>0: resource.setrlimit(resource.RLIMIT_AS,(mem,mem))\n"
    "if fsize>0: resource.setrlimit(resource.RLIMIT_FSIZE,(fsize,fsize))\n"
    "os.execvp(sys.argv[4],sys.argv[4:])\n"
)

_NET_ISOLATION_PREFIXES: tuple[tuple[str, ...], ...] = (
    ("unshare", "--net"),
    ("unshare", "--user", "--map-root-user", "--net"),
)


@dataclass(frozen=True)
class Limits:
    wall_s: float = 300.0
    cpu_s: int = 600
    memory_bytes: int = 8 << 30
    file_bytes: int = 1 << 30


@dataclass(frozen=True)
class SandboxOutcome:
    returncode: int  # negative: killed by that signal
    output: str  # stdout and stderr, interleaved
    duration_s: float
    timed_out: bool

    @property
    def signal_name(self) -> str | None:
        if self.returncode >= 0:
            return None
        try:
            return signal.Signals(-self.returncode).name
        except ValueError:
            return f"signal {-self.returncode}"


@functools.cache
def network_isolation() -> tuple[str, ...]:
    """The command prefix that cuts the network off here, or () when none works (probed once)."""
    if shutil.which("unshare") is None:
        return ()
    for prefix in _NET_ISOLATION_PREFIXES:
        try:
            probe = subprocess.run([*prefix, "true"], capture_output=True, timeout=10)
        except (OSError, subprocess.TimeoutExpired):
            continue
        if probe.returncode == 0:
            return prefix
    return ()


def run_sandboxed(argv: Sequence[str], cwd: Path, limits: Limits) -> SandboxOutcome:
    """Run `argv` in `cwd` under `limits`; at the deadline the whole process group is killed."""
    command = [
        *network_isolation(),
        sys.executable,
        "-I",
        "-S",
        "-c",
        _LIMIT_LAUNCHER,
        str(limits.cpu_s),
        str(limits.memory_bytes),
        str(limits.file_bytes),
        *argv,
    ]
    start = time.monotonic()
    # Output goes to a file, not a pipe: a descendant that escapes the process group while holding the
    # pipe open could otherwise keep us waiting past the deadline.
    with tempfile.TemporaryFile() as sink:
        process = subprocess.Popen(
            command,
            cwd=cwd,
            stdin=subprocess.DEVNULL,
            stdout=sink,
            stderr=subprocess.STDOUT,
            start_new_session=True,
            env=build_environment(os.environ),
        )
        timed_out = False
        try:
            process.wait(timeout=limits.wall_s)
        except subprocess.TimeoutExpired:
            timed_out = True
        finally:
            _kill_group(process.pid)  # nothing the compiler spawned outlives the build
            process.wait()
        sink.seek(0)
        raw = sink.read()
    return SandboxOutcome(
        returncode=process.returncode,
        output=raw.decode("utf-8", errors="replace"),
        duration_s=time.monotonic() - start,
        timed_out=timed_out,
    )


def build_environment(parent: Mapping[str, str]) -> dict[str, str]:
    """The compiler's environment: the parent's without its secrets, diagnostics untranslated.

    A source can `#include "/proc/self/environ"` and have the compiler quote it in the build log, so
    service secrets (KF_*, *_TOKEN, *_KEY, ...: kernelfoundry.sandbox.SECRET_PATTERNS) never reach it.
    LC_ALL=C keeps diagnostics stable for parsing and caching.
    """
    env = {name: value for name, value in parent.items() if not is_secret_name(name)}
    env["LC_ALL"] = "C"
    return env


def _kill_group(pgid: int) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pgid, signal.SIGKILL)
