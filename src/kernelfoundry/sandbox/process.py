"""Starting a program inside the sandbox, and ending it together with everything it started.

`spawn_sandboxed` starts `python -I -S` running the launcher (`kernelfoundry.sandbox.enter`) in a new
session with the policy's scrubbed environment, waits until the launcher has applied the policy and
exec'ed the target, and returns a `SandboxedProcess`. Only the descriptors named in `pass_fds` (and
the three standard streams) reach the target.

`kill_all` ends the sandbox: SIGKILL to its process group, then, until none is left, to every member
found in /proc (see `process_tree` for the rule), through pidfds so a recycled pid is never hit; it
reaps what is ours to reap.

`spawn_tied` starts a trusted program (no sandbox) that ends with the process that started it, from the
same spawner thread: the embedded stack's broker and services.

`subreaper=True` makes the *spawning process* a child subreaper (PR_SET_CHILD_SUBREAPER, process-wide
and permanent): orphans of any of its descendants are then re-parented to it instead of to init, so
they can be found without namespaces and reaped by `kill_all`. A caller that sets it and also starts
other programs must reap their orphans too.
"""

from __future__ import annotations

import concurrent.futures
import contextlib
import ctypes
import dataclasses
import json
import os
import select
import signal
import subprocess
import sys
import threading
import time
import weakref
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import IO, Any

import kernelfoundry
from kernelfoundry.sandbox import process_tree
from kernelfoundry.sandbox.errors import SandboxError
from kernelfoundry.sandbox.libc import libc
from kernelfoundry.sandbox.plan import plan_for
from kernelfoundry.sandbox.policy import SandboxPolicy

LAUNCHER_TIMEOUT_S = 30.0
KILL_DEADLINE_S = 10.0
_PR_SET_CHILD_SUBREAPER = 36
_BOOTSTRAP = (
    "import sys;sys.path.insert(0,sys.argv[1]);"
    "from kernelfoundry.sandbox.enter import main;main(sys.argv[2:])"
)
_PACKAGE_ROOT = str(Path(kernelfoundry.__file__).resolve().parents[1])
_live_roots: weakref.WeakValueDictionary[int, SandboxedProcess] = weakref.WeakValueDictionary()

FileArg = int | IO[Any] | None


class SandboxedProcess:
    """A running sandboxed program: `popen` is its subprocess.Popen (pid = the target's pid)."""

    def __init__(
        self, popen: subprocess.Popen[bytes], protections: list[str], identity: process_tree.SandboxIdentity
    ) -> None:
        self.popen = popen
        self.protections = protections
        self.identity = identity
        _live_roots[popen.pid] = self

    @property
    def pid(self) -> int:
        return self.popen.pid

    def wait(self, timeout: float | None = None) -> int:
        return self.popen.wait(timeout)

    def poll(self) -> int | None:
        return self.popen.poll()

    def members(self) -> set[int]:
        """Live processes that belong to this sandbox now (the first process included while it runs)."""
        return self._scan()[0]

    def _scan(self) -> tuple[set[int], set[int]]:
        """Members, and those of them whose parent is the spawner (ours to reap once dead)."""
        snapshot = process_tree.read_snapshot(process_tree.namespace_inode("self", "user"))
        others = (pid for pid in _live_roots if pid != self.pid)
        found = process_tree.members(snapshot, self.identity, others)
        adopted = {pid for pid in found if snapshot[pid].ppid == os.getpid() and pid != self.pid}
        return found, adopted

    def leftovers(self) -> list[int]:
        """Pids of processes the sandbox started that are still alive (its first process excluded)."""
        return sorted(self.members() - {self.pid})

    def kill_all(self) -> None:
        """SIGKILL the process group and every member still alive, until none is left; reap ours."""
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(self.identity.session, signal.SIGKILL)
        adopted: set[int] = set()
        deadline = time.monotonic() + KILL_DEADLINE_S
        while time.monotonic() < deadline:
            alive, ours = self._scan()
            adopted |= ours
            if not alive:
                break
            _kill_and_wait(alive, deadline)
        self.popen.wait()
        for pid in adopted:  # orphans re-parented to a subreaper spawner: no zombie stays behind
            with contextlib.suppress(ChildProcessError):
                os.waitpid(pid, os.WNOHANG)
        _live_roots.pop(self.pid, None)

    def __enter__(self) -> SandboxedProcess:
        return self

    def __exit__(self, *exc: object) -> None:
        self.kill_all()


def _kill_and_wait(pids: set[int], deadline: float) -> None:
    """SIGKILL each pid through a pidfd and wait until each has exited."""
    pidfds: list[int] = []
    for pid in pids:
        try:
            pidfd = os.pidfd_open(pid)
        except OSError:
            continue  # already gone
        pidfds.append(pidfd)
        with contextlib.suppress(OSError):
            signal.pidfd_send_signal(pidfd, signal.SIGKILL)
    try:
        poller = select.poll()
        for pidfd in pidfds:
            poller.register(pidfd, select.POLLIN)
        pending = set(pidfds)
        while pending and time.monotonic() < deadline:
            for fd, _ in poller.poll(max(1, int((deadline - time.monotonic()) * 1000))):
                pending.discard(fd)
                poller.unregister(fd)
    finally:
        for pidfd in pidfds:
            os.close(pidfd)


def become_subreaper() -> None:
    """Make this process a child subreaper (see the module docstring)."""
    c = libc()
    if c.prctl(_PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0) != 0:
        raise SandboxError(
            "sandbox_unavailable", f"PR_SET_CHILD_SUBREAPER failed: errno {ctypes.get_errno()}"
        )


_spawner: concurrent.futures.ThreadPoolExecutor | None = None
_spawner_lock = threading.Lock()


def _on_spawner_thread(start: Callable[[], subprocess.Popen[bytes]]) -> subprocess.Popen[bytes]:
    """Run `start` (the fork) on one long-lived thread of this process.

    The launcher arms PR_SET_PDEATHSIG, which Linux fires when the *thread* that forked it exits, not
    the process: a sandboxed process started from a short-lived thread (a request handled in a thread
    pool, asyncio.to_thread) was killed when that thread ended, and the next request found it dead
    (a judge "died with SIGKILL while judging" a candidate that had nothing to do with it). Forking
    from one thread that lives as long as the process keeps the intended meaning: the sandboxed
    process dies with the process that started it."""
    global _spawner
    with _spawner_lock:
        if _spawner is None:
            _spawner = concurrent.futures.ThreadPoolExecutor(1, thread_name_prefix="kf-sandbox-spawner")
        spawner = _spawner
    return spawner.submit(start).result()


# Arms the parent-death signal, checks the parent is still the one that asked, then becomes the program.
_TIED_LAUNCHER = (
    "import ctypes,os,signal,sys;"
    "ctypes.CDLL(None).prctl(1,signal.SIGKILL,0,0,0);"
    "os.getppid()==int(sys.argv[1]) or os._exit(126);"
    "os.execvp(sys.argv[2],sys.argv[2:])"
)


def spawn_tied(argv: Sequence[str], **popen: Any) -> subprocess.Popen[bytes]:
    """Start a trusted helper program (the embedded stack's broker and services) that is killed when
    this process ends, however it ends (SIGKILL included): a parent-death signal armed by a small
    launcher before the program is exec'ed, forked from the long-lived spawner thread so that it means
    "this process", not the calling thread. `popen` are subprocess.Popen's arguments."""
    if not argv:
        raise ValueError("argv is empty: nothing to run")
    command = [sys.executable, "-I", "-S", "-c", _TIED_LAUNCHER, str(os.getpid()), *argv]
    return _on_spawner_thread(lambda: subprocess.Popen(command, **popen))


def spawn_sandboxed(
    argv: Sequence[str],
    policy: SandboxPolicy,
    *,
    pass_fds: Sequence[int] = (),
    stdin: FileArg = subprocess.DEVNULL,
    stdout: FileArg = None,
    stderr: FileArg = None,
    cwd: Path | None = None,
    subreaper: bool = False,
    parent_env: Mapping[str, str] | None = None,
) -> SandboxedProcess:
    """Start `argv` under `policy` (cwd: the scratch folder); returns once the target has been exec'ed.

    Raises SandboxError: `sandbox_unavailable` (a protection in `policy.require` is missing here),
    `sandbox_setup_failed` (the launcher failed, or `argv[0]` cannot be executed).
    """
    if not argv:
        raise SandboxError("bad_policy", "argv is empty: nothing to run")
    if subreaper:
        become_subreaper()
    if policy.gpu and policy.relax is None:
        from kernelfoundry.sandbox.gpu_probe import gpu_relaxations

        policy = dataclasses.replace(policy, relax=gpu_relaxations())
    Path(policy.scratch).mkdir(parents=True, exist_ok=True)
    environment = policy.environment(os.environ if parent_env is None else parent_env)
    status_read, status_write = os.pipe2(os.O_CLOEXEC)
    command = [
        sys.executable,
        "-I",
        "-S",
        "-c",
        _BOOTSTRAP,
        _PACKAGE_ROOT,
        str(status_write),
        str(os.getpid()),
        plan_for(policy).to_json(),
        "--",
        *argv,
    ]
    try:
        popen = _on_spawner_thread(
            lambda: subprocess.Popen(
                command,
                stdin=stdin,
                stdout=stdout,
                stderr=stderr,
                cwd=cwd or policy.scratch,
                env=environment,
                pass_fds=(*pass_fds, status_write),
                close_fds=True,
                start_new_session=True,
            )
        )
    finally:
        os.close(status_write)
    try:
        status = _read_status(status_read)
    finally:
        os.close(status_read)
    if "error" in status or "protections" not in status:
        popen.kill()
        popen.wait()
        raise SandboxError(
            str(status.get("error", "sandbox_setup_failed")), str(status.get("message", "no status"))
        )
    identity = process_tree.SandboxIdentity(
        root_pid=popen.pid,
        root_start_ticks=_start_ticks(popen.pid),
        session=popen.pid,
        net_ns=_own_namespace(status.get("net_ns"), "net"),
        user_ns=_own_namespace(status.get("user_ns"), "user"),
        spawner_pid=os.getpid(),
        subreaper=subreaper,
    )
    protections = ["env", "session", *status["protections"]]
    return SandboxedProcess(popen, protections, identity)


def _read_status(fd: int) -> dict[str, Any]:
    """The launcher's last status line: read until end of file (exec closed it) or an error line."""
    chunks: list[bytes] = []
    deadline = time.monotonic() + LAUNCHER_TIMEOUT_S
    while time.monotonic() < deadline:
        ready, _, _ = select.select([fd], [], [], max(0.0, deadline - time.monotonic()))
        if not ready:
            break
        chunk = os.read(fd, 65536)
        if not chunk:
            break
        chunks.append(chunk)
    else:
        return {"error": "sandbox_setup_failed", "message": f"launcher silent for {LAUNCHER_TIMEOUT_S} s"}
    lines = [line for line in b"".join(chunks).decode("utf-8", "replace").splitlines() if line.strip()]
    if not lines:
        return {"error": "sandbox_setup_failed", "message": "launcher exited without a status"}
    try:
        parsed = [json.loads(line) for line in lines]
    except json.JSONDecodeError:
        return {"error": "sandbox_setup_failed", "message": f"unreadable launcher status {lines[-1][:200]!r}"}
    errors = [item for item in parsed if "error" in item]
    return errors[-1] if errors else parsed[-1]


def _own_namespace(inode: object, kind: str) -> int | None:
    """The sandbox's namespace inode, or None when it shares the spawner's (no namespace of its own)."""
    if not isinstance(inode, int):
        return None
    return None if inode == process_tree.namespace_inode("self", kind) else inode


def _start_ticks(pid: int) -> int:
    try:
        with open(f"/proc/{pid}/stat") as stat:
            return process_tree.parse_stat(pid, stat.read()).start_ticks
    except (OSError, ValueError, IndexError):
        return 0
