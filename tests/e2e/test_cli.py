"""End to end as a user would: `kernelfoundry up` in one process, `kernelfoundry run` against it, Ctrl-C.

One `up` serves every test of the module: a run whose saved best kernel `kernelfoundry evaluate` reproduces
and whose reported speedup is recomputed, by the one definition, from the measurements the store kept, a run
cancelled with Ctrl-C, and at the end Ctrl-C on `up` itself, which must leave no process behind.
"""

from __future__ import annotations

import asyncio
import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from kernelfoundry.cli.lineage import measurement
from kernelfoundry.client import KernelFoundryClient, LineageClient
from kernelfoundry.domain.speedup import RunSpeedup, run_speedup
from kernelfoundry.stack.supervisor import free_port
from kernelfoundry.v1 import lineage_pb2

pytestmark = [pytest.mark.slow, pytest.mark.timeout(900)]

ROOT = Path(__file__).resolve().parents[2]
CLI = [sys.executable, "-m", "kernelfoundry"]
TASK = str(ROOT / "tasks" / "level2_elementwise_chain.py")
REPRODUCED_WITHIN = 0.15  # the bar: same machine, same settings
REEVALUATIONS = 5  # a load that changes during one evaluation moves one of its two times (CI once saw
# three in a row off by 15-31% on a shared host, each a side-by-side ratio of its own)


def processes_mentioning(text: str) -> list[str]:
    out = subprocess.run(["ps", "-eo", "pid,args"], capture_output=True, text=True, check=True).stdout
    return [line for line in out.splitlines() if text in line and "ps -eo" not in line]


@dataclass
class Up:
    state: Path
    address: str
    lineage_address: str
    env: dict[str, str]

    def lineage_runs(self) -> list[dict[str, object]]:
        listed = subprocess.run(
            [*CLI, "lineage", "runs", "--address", self.lineage_address, "--json"],
            env=self.env,
            capture_output=True,
            text=True,
            timeout=60,
        )
        assert listed.returncode == 0, listed.stderr[-2000:]
        return json.loads(listed.stdout)["runs"]

    def wait_for_status(self, run_id: str, status: str, timeout_s: float = 60.0) -> list[dict[str, object]]:
        """Poll the lineage (the store writes asynchronously) until `run_id` has `status`."""
        deadline = time.monotonic() + timeout_s
        while True:
            records = self.lineage_runs()
            if any(r.get("run_id") == run_id and r.get("status") == status for r in records):
                return records
            assert time.monotonic() < deadline, f"run {run_id} never reached {status}: {records}"
            time.sleep(0.5)

    def recomputed_speedup(self, run_id: str) -> RunSpeedup | None:
        """The run's figure by the one definition, from the evaluations the store kept (raw records)."""

        async def history() -> list[lineage_pb2.EvaluationRecord]:
            client = LineageClient(self.lineage_address)
            try:
                return list((await client.run_history(run_id)).evaluations)
            finally:
                await client.close()

        return run_speedup([measurement(e) for e in asyncio.run(history())])


@pytest.fixture(scope="module")
def up(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Up]:
    state = tmp_path_factory.mktemp("e2e") / "state"
    address = f"127.0.0.1:{free_port()}"
    lineage_address = f"127.0.0.1:{free_port()}"
    env = {**os.environ, "KF_TIMED_RUNS": "10", "KF_CPU_THREADS": "1", "PYTHONUNBUFFERED": "1"}
    process = subprocess.Popen(
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
            assert process.poll() is None, process.stdout.read() if process.stdout else "up exited"
            assert time.monotonic() < deadline, "up never answered"
        client.close()
        yield Up(state, address, lineage_address, env)
    finally:
        process.send_signal(signal.SIGINT)
        process.wait(60)
    time.sleep(1.0)
    assert processes_mentioning(str(state)) == []


def test_the_saved_best_kernel_reproduces_the_run_s_kernel_time(up: Up) -> None:
    run = subprocess.run(
        [*CLI, "run", TASK, "--iterations", "1", "--address", up.address, "--json"],
        env=up.env,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert run.returncode == 0, run.stderr[-2000:]
    summary = json.loads(run.stdout)
    assert summary["status"] == "completed"
    assert summary["best_speedup"] > 1.0
    figure = summary["speedup"]
    assert figure["retimed"] and figure["candidate_id"] == summary["best_candidate_id"]
    assert summary["best_speedup"] == pytest.approx(figure["eager_ms"] / figure["kernel_ms"], rel=1e-3)
    best = Path(summary["best_kernel_path"])
    assert best.is_relative_to(up.state)
    assert (best.parent / "best.manifest.json").is_file()
    assert summary["archive_cells_filled"] == len(summary["archive"]) >= 1
    up.wait_for_status(summary["run_id"], "finished")
    stored = up.recomputed_speedup(summary["run_id"])
    assert stored is not None and stored.retimed and stored.candidate_id == figure["candidate_id"]
    assert stored.speedup == pytest.approx(summary["best_speedup"], rel=1e-3)
    assert stored.kernel_ms == pytest.approx(figure["kernel_ms"], rel=1e-6)
    assert stored.eager.median_ms == pytest.approx(figure["eager_ms"], rel=1e-6)
    assert stored.eager.samples == figure["eager_samples"]

    # The figure reproduced is the speedup, a ratio of times measured side by side in each evaluation.
    # The kernel's own time is compared too when eager's time says the host is as it was during the
    # run: a load that changed in between (other jobs on a 2-core machine) moves both times alike. A
    # load that came or went during one evaluation moves one side only, so the evaluation is made up to
    # REEVALUATIONS times and one of them must reproduce the run's figures.
    reports = []
    for _ in range(REEVALUATIONS):
        report = evaluate_saved(up, best)
        reports.append(report)
        if reproduces(report, figure):
            break
    assert reproduces(reports[-1], figure), (
        f"the run measured {described(figure['kernel_ms'], figure['eager_ms'])}; re-evaluations: "
        + ", ".join(described(r["runtime_ms"], r["baseline_ms"]) for r in reports)
    )


def described(kernel_ms: float, eager_ms: float) -> str:
    return f"{eager_ms / kernel_ms:.3f}x ({kernel_ms:.4f} ms vs eager {eager_ms:.4f} ms)"


def evaluate_saved(up: Up, best: Path) -> dict[str, object]:
    evaluated = subprocess.run(
        [*CLI, "evaluate", TASK, str(best), "--json"],
        env=up.env,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert evaluated.returncode == 0, evaluated.stdout[-2000:] + evaluated.stderr[-2000:]
    report = json.loads(evaluated.stdout)
    assert report["correct"] and report["manifest"] == str(best.parent / "best.manifest.json")
    return report


def reproduces(report: dict[str, object], figure: dict[str, object]) -> bool:
    """The speedup within REPRODUCED_WITHIN, and the kernel time too where eager's time is unchanged."""
    within = REPRODUCED_WITHIN
    if report["speedup"] != pytest.approx(figure["eager_ms"] / figure["kernel_ms"], rel=within):
        return False
    if report["baseline_ms"] == pytest.approx(figure["eager_ms"], rel=within):
        return report["runtime_ms"] == pytest.approx(figure["kernel_ms"], rel=within)
    return True


def test_ctrl_c_cancels_the_run_and_exits_130(up: Up) -> None:
    run = subprocess.Popen(
        [*CLI, "run", TASK, "--iterations", "3", "--address", up.address],
        env=up.env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        deadline = time.monotonic() + 120
        while True:  # wait until the run exists, then press Ctrl-C
            running = [r for r in up.lineage_runs() if r.get("status") == "running"]
            if running:
                break
            assert run.poll() is None, run.stderr.read() if run.stderr else "run exited"
            assert time.monotonic() < deadline, "the run never started"
            time.sleep(0.5)
        run.send_signal(signal.SIGINT)
        _, stderr = run.communicate(timeout=120)
    finally:
        if run.poll() is None:
            run.kill()
    assert run.returncode == 130, stderr[-2000:]
    run_id = str(running[0]["run_id"])
    assert f"cancelling run {run_id}" in stderr
    up.wait_for_status(run_id, "cancelled")
