"""The executor's evaluation method comes from its settings (KF_ variables)."""

from __future__ import annotations

import pytest

from kernelfoundry.config import Settings
from kernelfoundry.services.executor.main import evaluation_settings


def test_torch_compile_is_timed_beside_candidates_on_cuda_only_unless_configured() -> None:
    default = evaluation_settings(Settings(), "cpu")
    assert default.compile_baseline_for("cuda") and not default.compile_baseline_for("cpu")
    on = evaluation_settings(Settings(torch_compile_baseline=True), "cpu")
    assert on.compile_baseline_for("cpu") and on.compile_baseline_for("cuda")
    off = evaluation_settings(Settings(torch_compile_baseline=False), "cuda:0")
    assert not off.compile_baseline_for("cuda")


def test_the_torch_compile_baseline_is_read_from_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("KF_TORCH_COMPILE_BASELINE", "1")
    assert evaluation_settings(Settings(), "cpu").compile_baseline_for("cpu")
    monkeypatch.setenv("KF_TORCH_COMPILE_BASELINE", "false")
    assert not evaluation_settings(Settings(), "cuda:0").compile_baseline_for("cuda")


def test_other_evaluation_settings_pass_through() -> None:
    settings = evaluation_settings(
        Settings(timed_runs=7, correctness_trials=6, evaluation_deadline_s=9.0), "cpu"
    )
    assert (settings.timed_runs, settings.correctness_trials, settings.deadline_s) == (7, 6, 9.0)


def test_only_a_cpu_executor_holds_builds_back_while_it_times() -> None:
    settings = Settings(timing_lock_dir="/tmp/kf-locks")
    assert evaluation_settings(settings, "cpu").timing_lock_dir == "/tmp/kf-locks"
    assert evaluation_settings(settings, "cuda:0").timing_lock_dir == ""
    assert evaluation_settings(Settings(), "cpu").timing_lock_dir == ""
