"""A sandboxed Python process against the real kernel: what it may and may not do here.

Each test runs a small program under `spawn_sandboxed` and asserts what the program could observe.
A check is skipped only where this kernel lacks the feature (the skip says which).
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from kernelfoundry.sandbox import SandboxError, SandboxPolicy, landlock, spawn_sandboxed

LANDLOCK_ABI = landlock.abi_version()
needs_landlock = pytest.mark.skipif(LANDLOCK_ABI < 1, reason="this kernel has no Landlock")


def run(code: str, policy: SandboxPolicy, **kwargs: object) -> tuple[int, str, list[str]]:
    """Run `code` sandboxed; returns its exit status, its stdout+stderr and the active protections."""
    with spawn_sandboxed(
        [sys.executable, "-c", textwrap.dedent(code)],
        policy,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        **kwargs,  # type: ignore[arg-type]
    ) as proc:
        assert proc.popen.stdout is not None
        output = proc.popen.stdout.read().decode()
        return proc.wait(60), output, proc.protections


@pytest.fixture
def policy(tmp_path: Path) -> SandboxPolicy:
    scratch = tmp_path / "scratch"
    return SandboxPolicy.for_python(scratch, memory_bytes=1 << 30, max_processes=64, cpu_seconds=60)


def network_namespaces_work() -> bool:
    return (
        subprocess.run(["unshare", "--user", "--map-root-user", "--net", "true"], check=False).returncode == 0
    )


@needs_landlock
def test_writes_inside_scratch_work_and_outside_fail(policy: SandboxPolicy, tmp_path: Path) -> None:
    outside = tmp_path / "outside.txt"
    code, output, protections = run(
        f"""
        import os
        open("inside.txt", "w").write("ok")
        os.mkdir(os.path.join(os.environ["TMPDIR"], "sub"))
        try:
            open({str(outside)!r}, "w").write("escaped")
        except PermissionError:
            print("outside denied")
        """,
        policy,
    )
    assert code == 0, output
    assert "outside denied" in output
    assert (policy.scratch / "inside.txt").read_text() == "ok"
    assert (policy.scratch / "sub").is_dir()
    assert not outside.exists()
    assert "landlock-fs" in protections


def test_tcp_to_a_listener_in_the_parents_namespace_fails(policy: SandboxPolicy) -> None:
    if not network_namespaces_work():
        pytest.skip("unprivileged network namespaces are disabled on this kernel")
    with socket.create_server(("127.0.0.1", 0)) as listener:
        port = listener.getsockname()[1]
        code, output, protections = run(
            f"""
            import socket
            try:
                socket.create_connection(("127.0.0.1", {port}), timeout=5)
                print("connected")
            except OSError as exc:
                print("refused", exc.errno)
            """,
            policy,
        )
        listener.settimeout(0)
        with pytest.raises(BlockingIOError):
            listener.accept()
    assert code == 0, output
    assert "refused" in output and "connected" not in output
    assert "netns" in protections


def test_a_variable_set_on_the_parent_is_absent(policy: SandboxPolicy) -> None:
    parent = {**os.environ, "KF_SERVICE_SECRET": "hunter2", "DB_PASSWORD": "x", "SOME_TOOL_SETTING": "y"}
    code, output, protections = run(
        "import os, json; print(json.dumps(dict(os.environ)))", policy, parent_env=parent
    )
    assert code == 0, output
    seen = json.loads(output.strip().splitlines()[-1])
    assert not {"KF_SERVICE_SECRET", "DB_PASSWORD", "SOME_TOOL_SETTING"} & set(seen)
    assert "hunter2" not in output
    assert seen["HOME"] == str(policy.scratch)
    assert "env" in protections


def test_exceeding_the_memory_limit_fails_cleanly(policy: SandboxPolicy) -> None:
    code, output, protections = run(
        """
        try:
            hog = bytearray(2 << 30)
        except MemoryError:
            raise SystemExit(3)
        """,
        policy,
    )
    assert code == 3, output
    assert "rlimits" in protections


def test_a_passed_socket_keeps_working(policy: SandboxPolicy) -> None:
    ours, theirs = socket.socketpair()
    echo = f"import socket; s = socket.socket(fileno={theirs.fileno()}); s.sendall(s.recv(5).upper())"
    with (
        ours,
        theirs,
        spawn_sandboxed([sys.executable, "-c", echo], policy, pass_fds=(theirs.fileno(),)) as proc,
    ):
        ours.sendall(b"hello")
        ours.settimeout(60)
        assert ours.recv(5) == b"HELLO"
        assert proc.wait(60) == 0


def test_descriptors_not_passed_do_not_reach_the_process(policy: SandboxPolicy) -> None:
    ours, theirs = socket.socketpair()
    with ours, theirs:
        code, output, _ = run(f"import os; os.fstat({theirs.fileno()})", policy)
    assert code != 0 and "Bad file descriptor" in output


def test_the_process_limit_stops_a_fork_loop(tmp_path: Path) -> None:
    small = SandboxPolicy.for_python(tmp_path / "s", max_processes=8)
    _, output, protections = run(
        """
        import os, time
        children = 0
        try:
            for _ in range(50):
                if os.fork() == 0:
                    os.close(1), os.close(2)  # the parent's reader waits for end of file
                    time.sleep(30)
                    os._exit(0)
                children += 1
        except BlockingIOError:
            print("limited at", children)
        """,
        small,
    )
    if "nproc" not in protections:
        pytest.skip("RLIMIT_NPROC never applies to uid 0 (the kernel exempts root); this host runs as root")
    assert "limited at" in output, output


@pytest.mark.skipif(LANDLOCK_ABI < 6, reason=f"Landlock ABI {LANDLOCK_ABI} has no signal scoping (needs 6)")
def test_the_process_cannot_signal_or_trace_its_spawner(policy: SandboxPolicy) -> None:
    code, output, _ = run(
        """
        import os
        for attempt in (lambda: os.kill(os.getppid(), 0), lambda: open(f"/proc/{os.getppid()}/mem", "rb")):
            try:
                attempt()
                print("allowed")
            except PermissionError:
                print("denied")
        """,
        policy,
    )
    assert code == 0, output
    assert output.split() == ["denied", "denied"]


def test_a_required_protection_missing_is_a_refusal(tmp_path: Path) -> None:
    strict = SandboxPolicy.for_python(tmp_path / "s", require=("no-such-protection",))
    with pytest.raises(SandboxError) as caught:
        spawn_sandboxed([sys.executable, "-c", "pass"], strict)
    assert caught.value.reason == "sandbox_unavailable"
    assert "no-such-protection" in caught.value.message


def test_a_program_that_cannot_be_executed_is_a_setup_failure(policy: SandboxPolicy) -> None:
    with pytest.raises(SandboxError) as caught:
        spawn_sandboxed(["/nonexistent/runner"], policy)
    assert caught.value.reason == "sandbox_setup_failed"
    assert "/nonexistent/runner" in caught.value.message


def test_protections_on_this_host_are_reported(policy: SandboxPolicy) -> None:
    _, _, protections = run("pass", policy)
    assert {"env", "session", "rlimits", "pdeathsig"} <= set(protections)
    if LANDLOCK_ABI >= 4:
        assert {"landlock-fs", "landlock-net"} <= set(protections)
