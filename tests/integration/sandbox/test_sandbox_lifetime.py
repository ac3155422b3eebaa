"""Ending a sandbox: a daemon that outlives its starter is found, reported and killed; nothing stays."""

from __future__ import annotations

import json
import socket
import subprocess
import sys
import textwrap
from pathlib import Path

from kernelfoundry.sandbox import SandboxedProcess, SandboxPolicy, spawn_sandboxed

# Double fork with setsid: the daemon leaves the sandbox's session and process group, and its parent
# exits, so it is re-parented away from the sandbox's first process. It reports its pid on fd FD.
DAEMON = """
import os, time
if os.fork() == 0:
    os.setsid()
    if os.fork() == 0:
        os.write(FD, b"%d\\n" % os.getpid())
        time.sleep(600)
    os._exit(0)
os.wait()
"""


def alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as stat:
            return stat.read().rsplit(")", 1)[1].split()[0] not in {"Z", "X"}
    except FileNotFoundError:
        return False


def start_daemon(policy: SandboxPolicy, subreaper: bool = False) -> tuple[SandboxedProcess, int]:
    ours, theirs = socket.socketpair()
    with ours, theirs:
        code = DAEMON.replace("FD", str(theirs.fileno()))
        proc = spawn_sandboxed(
            [sys.executable, "-c", code], policy, pass_fds=(theirs.fileno(),), subreaper=subreaper
        )
        theirs.close()
        ours.settimeout(60)
        daemon = int(ours.makefile().readline())
    return proc, daemon


def test_a_daemon_that_outlives_the_process_is_reported_and_killed(tmp_path: Path) -> None:
    proc, daemon = start_daemon(SandboxPolicy.for_python(tmp_path / "scratch"))
    assert proc.wait(60) == 0
    assert alive(daemon)
    assert proc.leftovers() == [daemon]
    proc.kill_all()
    assert not alive(daemon)
    assert proc.leftovers() == []


def test_kill_all_ends_a_running_tree_and_its_process_group(tmp_path: Path) -> None:
    tree = textwrap.dedent(
        """
        import os, time
        for _ in range(3):
            if os.fork() == 0:
                os.fork()
                time.sleep(600)
        time.sleep(600)
        """
    )
    ours, theirs = socket.socketpair()
    with ours, theirs:
        ready = f"import os; os.write({theirs.fileno()}, b'go')\n"
        proc = spawn_sandboxed(
            [sys.executable, "-c", ready + tree],
            SandboxPolicy.for_python(tmp_path / "s"),
            pass_fds=(theirs.fileno(),),
        )
        ours.settimeout(60)
        assert ours.recv(2) == b"go"
    members = proc.members()
    assert proc.pid in members
    proc.kill_all()
    assert proc.poll() is not None
    assert not any(alive(pid) for pid in members)


def test_a_subreaper_spawner_adopts_and_reaps_the_orphan(tmp_path: Path) -> None:
    # A subreaper is a permanent, process-wide setting: exercised in a process of its own.
    script = textwrap.dedent(
        f"""
        import json, os, socket, sys
        sys.path.insert(0, {str(Path(__file__).parent)!r})
        from test_sandbox_lifetime import alive, start_daemon
        from kernelfoundry.sandbox import SandboxPolicy
        proc, daemon = start_daemon(SandboxPolicy.for_python({str(tmp_path / "s")!r}), subreaper=True)
        proc.wait(60)
        with open(f"/proc/{{daemon}}/stat") as stat:
            parent = int(stat.read().rsplit(")", 1)[1].split()[1])
        leftovers = proc.leftovers()
        proc.kill_all()
        print(json.dumps({{"adopted": parent == os.getpid(), "leftovers": leftovers == [daemon],
                          "killed": not alive(daemon), "zombie": os.path.exists(f"/proc/{{daemon}}")}}))
        """
    )
    done = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, timeout=120, check=False
    )
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout.splitlines()[-1]) == {
        "adopted": True,
        "leftovers": True,
        "killed": True,
        "zombie": False,
    }


def test_a_process_started_from_a_short_lived_thread_outlives_that_thread(tmp_path: Path) -> None:
    """PR_SET_PDEATHSIG fires when the forking *thread* exits: spawns fork from one long-lived thread,
    so a sandboxed process started from a request's thread (asyncio.to_thread) lives on after it."""
    import threading
    import time

    started: list[SandboxedProcess] = []
    policy = SandboxPolicy.for_python(tmp_path / "scratch")
    thread = threading.Thread(
        target=lambda: started.append(
            spawn_sandboxed([sys.executable, "-c", "import time; time.sleep(30)"], policy)
        )
    )
    thread.start()
    thread.join(60)
    assert started and not thread.is_alive()
    proc = started[0]
    try:
        time.sleep(0.5)  # a pending SIGKILL would have landed by now
        assert proc.popen.poll() is None, f"ended with {proc.popen.returncode} when its starting thread did"
    finally:
        proc.kill_all()
