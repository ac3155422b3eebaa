"""The executor's evaluation method comes from its settings (KF_ variables)."""

from __future__ import annotations

from pathlib import Path

import pytest

from kernelfoundry.config import Settings
from kernelfoundry.services.executor.main import evaluation_settings, judge_writable, timing_lock_folder


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


def test_a_gpu_executor_of_several_slots_times_through_a_lock_of_its_gpu(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """One slot on a GPU: no timing lock. Several: one lock folder per physical GPU (the slots of two
    executors on one GPU share it, other GPUs do not), writable by the judges. A CPU keeps the host's."""
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "3")
    assert evaluation_settings(Settings(), "cuda:0").timing_lock_dir == ""
    assert judge_writable(Settings(), "cuda:0") == ()
    slotted = Settings(executor_slots=2, device_lock_dir=str(tmp_path))
    folder = evaluation_settings(slotted, "cuda:0").timing_lock_dir
    assert folder == str(tmp_path / "kf-gpu-timing" / "gpu-3")
    assert judge_writable(slotted, "cuda:0") == (Path(folder),) and Path(folder).is_dir()
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "5")
    assert timing_lock_folder(slotted, "cuda:0") != folder
    cpu = Settings(executor_slots=2, timing_lock_dir=str(tmp_path / "host"))
    assert evaluation_settings(cpu, "cpu").timing_lock_dir == str(tmp_path / "host")


def test_slots_are_bounded() -> None:
    with pytest.raises(ValueError, match="executor_slots"):
        Settings(executor_slots=0)
