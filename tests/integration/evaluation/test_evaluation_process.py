"""The judge process: isolated stdout, hardened, and it never outlives its parent."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
import time

import pytest
from evaluation_fixtures import Units

from kernelfoundry.evaluation import EvaluationWorker


def test_unit_printing_to_stdout_does_not_disturb_the_worker(units: Units, worker: EvaluationWorker) -> None:
    report = worker.evaluate(units.request("chatty_good"))
    assert report.correct, report.message
    assert worker.evaluate(units.request("good_fma")).correct


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    with open(f"/proc/{pid}/stat") as stat:  # a zombie has exited
        return stat.read().split()[2] != "Z"


@pytest.mark.parametrize("spawner", ["main thread", "other thread"])
def test_child_dies_when_its_parent_dies(spawner: str) -> None:
    # From another thread PR_SET_PDEATHSIG cannot be used; the parent-pid watchdog must do it alone.
    start = (
        "worker._ensure_child()"
        if spawner == "main thread"
        else ("t = threading.Thread(target=worker._ensure_child); t.start(); t.join()")
    )
    script = textwrap.dedent(
        f"""
        import os, sys, threading
        from kernelfoundry.evaluation import EvaluationWorker
        worker = EvaluationWorker("cpu")
        {start}
        print(worker.child_pid, flush=True)
        os._exit(0)  # no close(): the child must notice on its own
        """
    )
    done = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, timeout=120, check=True
    )
    child = int(done.stdout.strip())
    deadline = time.monotonic() + 15
    while _alive(child) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert not _alive(child)


def test_child_that_cannot_start_is_a_worker_error(units: Units) -> None:
    torch = pytest.importorskip("torch")
    if torch.cuda.is_available():
        pytest.skip("needs a machine without CUDA")
    from dataclasses import replace

    request = replace(units.request("good_fma"), device="cuda:0")
    with EvaluationWorker("cuda:0") as cuda_worker:
        report = cuda_worker.evaluate(request)
        assert report.reason == "worker_error"
        assert "did not start" in report.message
        assert cuda_worker.child_pid is None
