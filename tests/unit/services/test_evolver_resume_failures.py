"""No stored run stops the evolver from starting: one that cannot be resumed fails with its reason."""

from __future__ import annotations

import json
from pathlib import Path

from kernelfoundry.bus import subjects
from kernelfoundry.services.evolver.resume import resume_or_fail
from kernelfoundry.services.evolver.runs import RunCoordinator
from kernelfoundry.v1 import lineage_pb2, run_pb2

from .test_evolver_resume import history_of
from .test_evolver_runs import evaluated, kernel, seed_generation, start


def any_generator(name: str) -> bool:
    return True


def ending(out: list) -> run_pb2.RunFinished:  # type: ignore[type-arg]
    [message] = out
    assert message.subject == subjects.RUN_FINISHED
    assert message.message.status == run_pb2.RUN_STATUS_FAILED
    return message.message


def a_history(tmp_path: Path) -> lineage_pb2.GetRunHistoryResponse:
    runs, out = start(tmp_path / "live", iterations=4)
    first, _second = seed_generation(runs, out, kernel(1), kernel(2))
    runs.on_evaluated(evaluated(first, 1.5))
    return history_of(runs)


def with_config(history: lineage_pb2.GetRunHistoryResponse, **changes: object) -> None:
    config = json.loads(history.run.config_json)
    config.update(changes)
    history.run.config_json = json.dumps(config)


def test_a_run_with_empty_hardware_fails_with_unknown_hardware_and_is_not_held(tmp_path: Path) -> None:
    history = a_history(tmp_path)
    with_config(history, hardware="")
    runs = RunCoordinator(tmp_path / "restarted")
    finished = ending(resume_or_fail(runs, history, any_generator, now=5.0))
    assert finished.run_id == "run-1"
    assert finished.progress.message.startswith("unknown_hardware: ")
    assert "run-1" not in runs.runs


def test_a_run_whose_generator_nothing_serves_fails(tmp_path: Path) -> None:
    history = a_history(tmp_path)
    finished = ending(resume_or_fail(RunCoordinator(tmp_path / "r"), history, lambda name: False, now=5.0))
    assert finished.progress.message.startswith("unserved_generator: ")


def test_a_corrupt_record_fails_and_leaves_no_half_restored_run(tmp_path: Path) -> None:
    history = a_history(tmp_path)
    history.run.config_json = "{not json"
    runs = RunCoordinator(tmp_path / "r")
    assert ending(resume_or_fail(runs, history, any_generator, 5.0)).progress.message.startswith(
        "corrupt_record"
    )
    history = a_history(tmp_path)
    with_config(history, task={"reference_source": 12})  # does not parse into a task
    assert ending(resume_or_fail(runs, history, any_generator, 5.0)).progress.message.startswith(
        "corrupt_record"
    )
    assert "run-1" not in runs.runs


def test_a_resumable_run_is_resumed_beside_one_that_fails(tmp_path: Path) -> None:
    runs = RunCoordinator(tmp_path / "r")
    good = a_history(tmp_path / "good")
    bad = a_history(tmp_path / "bad")
    bad.run.run_id = "run-2"
    with_config(bad, hardware="quantum.qpu")
    assert ending(resume_or_fail(runs, bad, any_generator, 5.0)).run_id == "run-2"
    resume_or_fail(runs, good, any_generator, 5.0)
    assert runs.runs["run-1"].active


def test_a_stored_id_that_is_not_a_run_id_fails_without_restoring(tmp_path: Path) -> None:
    history = a_history(tmp_path)
    history.run.run_id = "/etc/passwd"
    runs = RunCoordinator(tmp_path / "r")
    assert ending(resume_or_fail(runs, history, any_generator, 5.0)).progress.message.startswith(
        "corrupt_record"
    )
    assert runs.runs == {}


def test_a_stored_candidate_whose_tunable_line_is_refused_now_is_restored_without_its_tunables(
    tmp_path: Path,
) -> None:
    history = a_history(tmp_path)
    candidate = history.candidates[0]
    candidate.source.code += "// @kf.tunable BLOCK in [64, 64]\n"  # a repeated value: refused
    candidate.source.params["BLOCK"] = "-64"
    runs = RunCoordinator(tmp_path / "r")
    out = resume_or_fail(runs, history, any_generator, 5.0)
    assert all(m.subject != subjects.RUN_FINISHED for m in out)
    restored = runs.runs["run-1"].candidates[candidate.candidate_id]
    assert restored.source.tunables == ()
    assert restored.source.params == {"BLOCK": -64}
    assert restored.evaluation is not None and restored.evaluation.speedup == 1.5  # its result kept
    assert len(runs.runs["run-1"].candidates) == len(history.candidates)


def test_stored_params_decode_by_the_tunables_grammar_integer_rule(tmp_path: Path) -> None:
    history = a_history(tmp_path)
    candidate = history.candidates[0]
    candidate.source.params.update({"A": "-3", "B": "--3", "C": "010", "D": "\u00b2", "E": "float4"})
    runs = RunCoordinator(tmp_path / "r")
    resume_or_fail(runs, history, any_generator, 5.0)
    params = runs.runs["run-1"].candidates[candidate.candidate_id].source.params
    assert params == {"A": -3, "B": "--3", "C": "010", "D": "\u00b2", "E": "float4"}
