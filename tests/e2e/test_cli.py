"""End to end as a user would: `kernelfoundry up` in one process, `kernelfoundry run` against it, Ctrl-C."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from kernelfoundry.client import KernelFoundryClient
from kernelfoundry.stack.supervisor import free_port

pytestmark = [pytest.mark.slow, pytest.mark.timeout(300)]

ROOT = Path(__file__).resolve().parents[2]
CLI = [sys.executable, "-m", "kernelfoundry"]


def processes_mentioning(text: str) -> list[str]:
    out = subprocess.run(["ps", "-eo", "pid,args"], capture_output=True, text=True, check=True).stdout
    return [line for line in out.splitlines() if text in line and "ps -eo" not in line]


def test_run_against_up_prints_a_json_summary_and_ctrl_c_stops_everything(tmp_path: Path) -> None:
    state = tmp_path / "state"
    address = f"127.0.0.1:{free_port()}"
    lineage_address = f"127.0.0.1:{free_port()}"
    env = {**os.environ, "KF_TIMED_RUNS": "10", "PYTHONUNBUFFERED": "1"}
    up = subprocess.Popen(
        [
            *CLI,
            "up",
            "--state-dir",
            str(state),
            "--grpc-address",
            address,
            "--store-grpc-address",
            lineage_address,
        ],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    try:
        client = KernelFoundryClient(address)
        deadline = time.monotonic() + 120
        while not client.ready(1.0):
            assert up.poll() is None, up.stdout.read() if up.stdout else "up exited"
            assert time.monotonic() < deadline, "up never answered"
        client.close()
        task = str(ROOT / "tasks" / "level2_elementwise_chain.py")
        run = subprocess.run(
            [*CLI, "run", task, "--iterations", "1", "--address", address, "--json"],
            env=env,
            capture_output=True,
            text=True,
            timeout=240,
        )
        assert run.returncode == 0, run.stderr[-2000:]
        summary = json.loads(run.stdout)
        assert summary["status"] == "completed"
        assert summary["best_speedup"] > 1.0
        assert Path(summary["best_kernel_path"]).is_relative_to(state)
        assert summary["archive_cells_filled"] == len(summary["archive"]) >= 1
        deadline = time.monotonic() + 60
        while True:  # the store writes the history asynchronously
            listed = subprocess.run(
                [*CLI, "lineage", "runs", "--address", lineage_address, "--json"],
                env=env,
                capture_output=True,
                text=True,
                timeout=60,
            )
            assert listed.returncode == 0, listed.stderr[-2000:]
            records = json.loads(listed.stdout)["runs"]
            done = [
                r for r in records if r.get("run_id") == summary["run_id"] and r.get("status") == "finished"
            ]
            if done or time.monotonic() > deadline:
                break
            time.sleep(0.5)
        assert done, f"run {summary['run_id']} not finished in the lineage: {records}"
    finally:
        up.send_signal(signal.SIGINT)
        up.wait(60)
    time.sleep(1.0)
    assert processes_mentioning(str(state)) == []
