"""A run's re-time is recorded as a candidate (operator `retime`) but is no search candidate: restoring the
run from its lineage leaves it out of the archive and the counters, as the live evolver does (found by the
chaos harness: the archive rebuilt from the lineage named the re-time as the elite of its cell)."""

from __future__ import annotations

from pathlib import Path

from kernelfoundry.codec import descriptors_to_proto, kernel_to_proto
from kernelfoundry.services.evolver.resume import restore_run
from kernelfoundry.services.evolver.runs import RunCoordinator
from kernelfoundry.services.evolver.state import RETIME_OPERATOR
from kernelfoundry.v1 import lineage_pb2

from .test_evolver_resume import history_of
from .test_evolver_runs import evaluated, kernel, seed_generation, start


def test_a_recorded_re_time_is_left_out_of_the_restored_archive_and_counters(tmp_path: Path) -> None:
    runs, out = start(tmp_path, iterations=4)
    first, second = seed_generation(runs, out, kernel(1), kernel(2))
    runs.on_evaluated(evaluated(first, 1.5))
    runs.on_evaluated(evaluated(second, 0.5, correct=False))
    live = runs.runs["run-1"]
    best = live.candidates[live.best_id]
    history = history_of(runs)
    retime = f"{live.best_id}-retime-1"
    history.candidates.append(
        lineage_pb2.CandidateRecord(
            candidate_id=retime,
            run_id="run-1",
            parent_ids=[live.best_id],
            iteration=best.info.generation,
            source=kernel_to_proto(best.source),
            analysed=descriptors_to_proto(best.info.descriptors),
            mutation=RETIME_OPERATOR,
        )
    )
    faster = evaluated(first, 9.0)  # the re-time measured faster than the search did
    history.evaluations.append(
        lineage_pb2.EvaluationRecord(
            candidate_id=retime,
            run_id="run-1",
            hardware=faster.hardware,
            correct=True,
            runtime_ms=faster.runtime_ms,
            baseline_ms=faster.baseline_ms,
            speedup=faster.speedup,
        )
    )
    restored = restore_run(RunCoordinator(tmp_path / "restored"), history)
    assert retime not in restored.candidates
    assert (restored.generated, restored.correct, restored.failed) == (
        live.generated,
        live.correct,
        live.failed,
    )
    live_cells = sorted((e.cell, e.candidate_id) for e in live.engine.merged_archive().elites())
    restored_cells = sorted((e.cell, e.candidate_id) for e in restored.engine.merged_archive().elites())
    assert restored_cells == live_cells
    assert restored.best_id == live.best_id
