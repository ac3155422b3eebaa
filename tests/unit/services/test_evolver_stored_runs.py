"""Runs the evolver no longer holds are answered from the store's record: status, summary and best kernel."""

from __future__ import annotations

import json
from pathlib import Path

from kernelfoundry.codec import kernel_to_proto
from kernelfoundry.services.evolver.stored import STOPPED_MESSAGE, best_of_history, progress_of_record
from kernelfoundry.services.store.records import finished_summary
from kernelfoundry.v1 import lineage_pb2, run_pb2

from .test_evolver_runs import kernel

CONFIG = {"hardware": "cpu.x86_64", "generator": "heuristic", "iterations": 3, "population": 2}


def finished_record(progress: run_pb2.RunProgress, status: str = "finished") -> lineage_pb2.RunRecord:
    """The record the store keeps once a run's RunFinished arrived (services/store/records.py)."""
    event = run_pb2.RunFinished(run_id=progress.run_id, status=progress.status, progress=progress)
    return lineage_pb2.RunRecord(
        run_id=progress.run_id,
        task_name=progress.task_name,
        hardware="cpu.x86_64",
        status=status,
        config_json=json.dumps({**CONFIG, "task": {"name": progress.task_name}}),
        summary_json=json.dumps(finished_summary(event)),
    )


def a_final_progress() -> run_pb2.RunProgress:
    progress = run_pb2.RunProgress(
        run_id="run-7",
        task_name="relu",
        status=run_pb2.RUN_STATUS_COMPLETED,
        iteration=3,
        iterations=3,
        candidates_generated=6,
        candidates_correct=4,
        best_speedup=2.5,
        message="budget reached: iterations",
        config=run_pb2.RunConfig(**CONFIG),  # type: ignore[arg-type]
        speedup=run_pb2.RunSpeedup(candidate_id="run-7-g1-r0-c0", speedup=2.5, kernel_ms=0.4, eager_ms=1.0),
    )
    progress.best.CopyFrom(
        run_pb2.BestKernel(candidate_id="run-7-g1-r0-c0", speedup=2.5, source=kernel_to_proto(kernel(3)))
    )
    return progress


def test_an_ended_run_reads_back_as_it_ended() -> None:
    final = a_final_progress()
    progress = progress_of_record(finished_record(final))
    assert progress.status == run_pb2.RUN_STATUS_COMPLETED
    assert (progress.iteration, progress.candidates_generated, progress.candidates_correct) == (3, 6, 4)
    assert progress.message == final.message and progress.best_speedup == 2.5
    assert progress.config.population == 2 and progress.speedup.kernel_ms == 0.4
    assert progress.best.candidate_id == "run-7-g1-r0-c0" and progress.best.speedup == 2.5
    assert not progress.best.source.code  # the summary keeps no source: the history has it


def test_the_best_kernel_comes_with_its_source_from_the_history(tmp_path: Path) -> None:
    final = a_final_progress()
    progress = progress_of_record(finished_record(final))
    history = lineage_pb2.GetRunHistoryResponse(
        candidates=[
            lineage_pb2.CandidateRecord(candidate_id="run-7-init0", source=kernel_to_proto(kernel(1))),
            lineage_pb2.CandidateRecord(
                candidate_id="run-7-g1-r0-c0", iteration=1, source=kernel_to_proto(kernel(3))
            ),
        ]
    )
    saved = tmp_path / "runs" / "run-7" / "best.cpp"
    saved.parent.mkdir(parents=True)
    saved.write_text("// the kernel")
    best = best_of_history(progress, history, tmp_path)
    assert "variant 3" in best.source.code and best.iteration == 1
    assert best.runtime_ms == 0.4 and best.baseline_ms == 1.0 and best.path == str(saved.resolve())


def test_a_stopped_run_says_how_to_continue_it_and_keeps_its_configuration() -> None:
    record = lineage_pb2.RunRecord(
        run_id="run-imported",
        task_name="relu",
        status="stopped",
        config_json=json.dumps({**CONFIG, "task": {"name": "relu", "reference_source": "x"}}),
        summary_json="{}",
    )
    progress = progress_of_record(record)
    assert progress.status == run_pb2.RUN_STATUS_STOPPED
    assert progress.message == STOPPED_MESSAGE
    assert progress.config.hardware == "cpu.x86_64" and progress.config.iterations == 3
    assert not progress.best.candidate_id


def test_a_record_of_another_shape_still_answers_with_what_it_has() -> None:
    record = lineage_pb2.RunRecord(
        run_id="run-odd",
        task_name="t",
        status="weird",
        config_json="[1, 2]",
        summary_json='{"iteration": "many", "best_candidate_id": 5}',
    )
    progress = progress_of_record(record)
    assert (progress.run_id, progress.task_name) == ("run-odd", "t")
    assert progress.status == run_pb2.RUN_STATUS_UNSPECIFIED
