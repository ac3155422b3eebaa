"""Starting a runner: what it needs to import itself, and what the judge learns when it cannot start."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from kernelfoundry.evaluation import reasons
from kernelfoundry.evaluation.backends import backend_for_device
from kernelfoundry.evaluation.reasons import EvaluationFailure
from kernelfoundry.evaluation.runner_client import RunnerProcess, runner_environment


def test_the_runner_searches_the_package_folder_then_the_judges_own_pythonpath(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    deps = tmp_path / "deps"
    deps.mkdir()
    monkeypatch.setenv("PYTHONPATH", f"{deps}:{tmp_path / 'missing'}")
    entries = runner_environment(tmp_path)["PYTHONPATH"].split(":")
    import kernelfoundry

    assert entries[0] == str(Path(kernelfoundry.__file__).resolve().parents[1])
    assert str(deps) in entries
    assert str(tmp_path / "missing") not in entries  # only folders that exist


def test_a_runner_that_dies_at_start_is_reported_with_its_own_last_words() -> None:
    program = (
        sys.executable,
        "-c",
        "import sys; sys.stderr.write('ModuleNotFoundError: No module named pydantic\\n'); sys.exit(1)",
    )
    runner = RunnerProcess(backend_for_device("cpu"), "cpu", program)
    try:
        with pytest.raises(EvaluationFailure) as caught:
            runner.wait_ready(timeout_s=30.0)
    finally:
        runner.close()
    assert caught.value.reason == reasons.WORKER_ERROR
    assert "No module named pydantic" in caught.value.message
