"""ipc_probe.py: whether CUDA IPC works between the judge and a process sealed like the runner.
Without a GPU it says so and exits non-zero; with one (gpu marker) it reports both directions."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from kernelfoundry.evaluation import ipc_probe


def _cuda() -> bool:
    import torch

    return torch.cuda.is_available()


def test_without_a_gpu_the_probe_says_so_and_exits_non_zero() -> None:
    if _cuda():
        pytest.skip("a CUDA device is present")
    done = subprocess.run(
        [sys.executable, "-m", "kernelfoundry.evaluation.ipc_probe"],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 2
    assert json.loads(done.stdout) == {"available": False, "why": "no CUDA device"}


@pytest.mark.gpu
def test_on_a_gpu_both_directions_are_reported() -> None:
    if not _cuda():
        pytest.skip("needs a CUDA device")
    result = ipc_probe.probe()
    assert result["available"] and result["export_rc"] == 0, result
    # whether IPC crosses the sandbox is the host's property: reported, not asserted
    assert isinstance(result.get("judge_to_runner"), bool), result
    assert isinstance(result.get("runner_to_judge"), bool), result
    shared = result["shareable_fd"]
    assert isinstance(shared.get("lent"), bool), result
    if shared["lent"]:
        assert isinstance(shared.get("writes"), bool), result
