"""The build sandbox: deadlines kill the whole process group, rlimits hold, the network is cut."""

from __future__ import annotations

import signal
import sys
import time

import pytest

from kernelfoundry.toolchains import Limits, network_isolation
from kernelfoundry.toolchains.sandbox import run_sandboxed


def test_deadline_kills_the_command_and_its_children(tmp_path):
    started, survived = tmp_path / "started", tmp_path / "survived"
    grandchild = f"touch {started}; sleep 2; touch {survived}"
    script = (
        f"import pathlib, subprocess, time; subprocess.Popen(['sh', '-c', {grandchild!r}])\n"
        f"while not pathlib.Path({str(started)!r}).exists(): time.sleep(0.01)\n"
        "time.sleep(30)"
    )
    outcome = run_sandboxed([sys.executable, "-c", script], tmp_path, Limits(wall_s=1.0))
    assert outcome.timed_out and started.exists()
    time.sleep(2.0)  # past the moment the grandchild would have written its marker
    assert not survived.exists()


def test_cpu_time_limit_stops_a_spinning_command(tmp_path):
    outcome = run_sandboxed([sys.executable, "-c", "while True: pass"], tmp_path, Limits(cpu_s=1, wall_s=30))
    assert not outcome.timed_out
    assert outcome.returncode in (-signal.SIGXCPU, -signal.SIGKILL)


def test_output_of_the_command_is_captured(tmp_path):
    outcome = run_sandboxed(["sh", "-c", "echo out; echo err >&2; exit 3"], tmp_path, Limits())
    assert outcome.returncode == 3 and "out" in outcome.output and "err" in outcome.output


@pytest.mark.skipif(not network_isolation(), reason="no network namespace available on this host")
def test_builds_see_no_network_interface_but_loopback(tmp_path):
    outcome = run_sandboxed(["cat", "/proc/net/dev"], tmp_path, Limits())
    interfaces = {line.split(":")[0].strip() for line in outcome.output.splitlines() if ":" in line}
    assert interfaces == {"lo"}


def test_a_descendant_that_escapes_the_group_holding_the_output_does_not_stall_the_build(tmp_path):
    outcome = run_sandboxed(["sh", "-c", "setsid sleep 5 & echo done"], tmp_path, Limits(wall_s=4.0))
    assert not outcome.timed_out and outcome.returncode == 0 and "done" in outcome.output
