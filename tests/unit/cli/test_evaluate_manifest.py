"""`kernelfoundry evaluate` on a run's saved best kernel applies the build manifest written beside it."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from kernelfoundry.cli.evaluate import executor_settings, manifest_for
from kernelfoundry.cli.output import CliError


def test_the_manifest_beside_best_cpp_names_the_entry_point_and_the_glue(tmp_path: Path) -> None:
    kernel = tmp_path / "best.cpp"
    kernel.write_text("#define KF_FAST_MATH 1\n")
    (tmp_path / "best_glue.py").write_text("class ModelNew: ...\n")
    manifest = {"entry_point": "kf_chain", "glue_file": "best_glue.py", "backend": "cpu", "defines": {"X": 1}}
    (tmp_path / "best.manifest.json").write_text(json.dumps(manifest))
    found = manifest_for(kernel)
    assert found is not None
    assert (found.entry_point, found.glue_path) == ("kf_chain", tmp_path / "best_glue.py")
    assert found.defines == {"X": "1"}


def test_a_glue_file_name_cannot_point_outside_the_run_folder(tmp_path: Path) -> None:
    kernel = tmp_path / "best.cpp"
    (tmp_path / "best.manifest.json").write_text(json.dumps({"glue_file": "../../etc/evil.py"}))
    found = manifest_for(kernel)
    assert found is not None and found.glue_path == tmp_path / "evil.py"


def test_a_kernel_without_a_manifest_is_built_as_it_is(tmp_path: Path) -> None:
    assert manifest_for(tmp_path / "mine.cpp") is None


def test_an_unreadable_manifest_is_named(tmp_path: Path) -> None:
    (tmp_path / "best.manifest.json").write_text("{not json")
    with pytest.raises(CliError, match=r"best\.manifest\.json is not a readable build manifest") as error:
        manifest_for(tmp_path / "best.cpp")
    assert error.value.reason == "bad_manifest"


def test_evaluate_times_with_the_executor_s_settings_and_the_options_on_top(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("KF_TIMED_RUNS", "7")
    monkeypatch.setenv("KF_CPU_THREADS", "2")
    settings = executor_settings("cpu", None, None, None, None)
    assert (settings.timed_runs, settings.cpu_threads) == (7, 2)
    assert executor_settings("cpu", None, 12, 30.0, None).timed_runs == 12
