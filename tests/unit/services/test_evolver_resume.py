"""Restoring a run from its lineage rebuilds the same archive, counters and best kernel."""

from __future__ import annotations

import json
from pathlib import Path

from google.protobuf.json_format import MessageToDict

from kernelfoundry.bus import subjects
from kernelfoundry.codec import descriptors_to_proto, kernel_to_proto, run_config_to_proto, task_to_proto
from kernelfoundry.services.evolver.resume import restore_run
from kernelfoundry.services.evolver.runs import RunCoordinator
from kernelfoundry.v1 import lineage_pb2

from .test_evolver_runs import TASK, evaluated, generated, kernel, requests, seed_generation, start


def history_of(runs: RunCoordinator) -> lineage_pb2.GetRunHistoryResponse:
    """What the store would answer for run-1, built from the live coordinator's state."""
    run = runs.runs["run-1"]
    config = MessageToDict(run_config_to_proto(run.config), preserving_proto_field_name=True)
    config["task"] = MessageToDict(task_to_proto(TASK), preserving_proto_field_name=True)
    history = lineage_pb2.GetRunHistoryResponse(
        run=lineage_pb2.RunRecord(
            run_id="run-1", task_name=TASK.name, config_json=json.dumps(config), status="running"
        )
    )
    for state in run.candidates.values():
        info = state.info
        history.candidates.append(
            lineage_pb2.CandidateRecord(
                candidate_id=info.candidate_id,
                run_id="run-1",
                parent_ids=[info.parent_id] if info.parent_id else [],
                iteration=info.generation,
                source=kernel_to_proto(state.source),
                analysed=descriptors_to_proto(info.descriptors),
                mutation=info.operator,
                island=info.island,
                repair_of=info.repair_of or "",
                generator=state.generator,
            )
        )
        if state.evaluation is not None:
            e = state.evaluation
            history.evaluations.append(
                lineage_pb2.EvaluationRecord(
                    candidate_id=e.candidate_id,
                    run_id="run-1",
                    hardware=run.config.hardware,
                    correct=e.correct,
                    reason=e.reason,
                    runtime_ms=e.runtime_ms,
                    baseline_ms=e.baseline_ms,
                    speedup=e.speedup,
                    details_json=json.dumps(
                        {"per_shape": [{"shape": t.shape, "runtime_ms": t.runtime_ms} for t in e.shapes]}
                    ),
                )
            )
    return history


def test_a_restored_run_has_the_same_archive_counters_and_best(tmp_path: Path) -> None:
    runs, out = start(tmp_path, iterations=4)
    first, second = seed_generation(runs, out, kernel(1), kernel(2))
    runs.on_evaluated(evaluated(first, 1.5))
    runs.on_evaluated(evaluated(second, 0.5, correct=False))
    live = runs.runs["run-1"]

    restored_runs = RunCoordinator(tmp_path / "restored")
    restored = restore_run(restored_runs, history_of(runs))
    assert restored.run_id == "run-1"
    assert restored.best_id == live.best_id and restored.best_speedup == live.best_speedup
    assert (restored.correct, restored.failed, restored.generated) == (
        live.correct,
        live.failed,
        live.generated,
    )
    assert restored.engine.outcomes.to_dict() == live.engine.outcomes.to_dict()
    live_cells = sorted((e.cell, e.candidate_id) for e in live.engine.merged_archive().elites())
    restored_cells = sorted((e.cell, e.candidate_id) for e in restored.engine.merged_archive().elites())
    assert restored_cells == live_cells
    # The live run had already asked for generation 2 when it "died"; the restored one asks again.
    restored_runs.continue_run(restored)
    assert restored.generation == live.generation


def test_a_restored_run_with_nothing_in_flight_moves_on_with_the_same_request_ids(tmp_path: Path) -> None:
    runs, out = start(tmp_path, iterations=4)
    first, second = seed_generation(runs, out, kernel(1), kernel(2))
    runs.on_evaluated(evaluated(first, 1.5))
    live_next = requests(runs.on_evaluated(evaluated(second, 2.0)))

    # The evolver died right after publishing generation 2's requests, before any answer came back.
    history = history_of(runs)
    restored_runs = RunCoordinator(tmp_path / "restored")
    run = restore_run(restored_runs, history)
    again = requests(restored_runs.continue_run(run))
    assert [r.request_id for r in again] == [r.request_id for r in live_next]  # the stream de-duplicates them


def test_a_restored_run_waits_for_work_in_flight(tmp_path: Path) -> None:
    runs, out = start(tmp_path, iterations=4)
    first, second = seed_generation(runs, out, kernel(1), kernel(2))
    runs.on_evaluated(evaluated(first, 1.5))
    restored_runs = RunCoordinator(tmp_path / "restored")
    run = restore_run(restored_runs, history_of(runs))
    assert restored_runs.continue_run(run) == []
    assert run.unresolved() == 1
    moved = requests(restored_runs.on_evaluated(evaluated(second, 2.0)))
    assert len(moved) == 2


def test_a_restored_run_keeps_the_best_setting_per_shape(tmp_path: Path) -> None:
    runs, out = start(tmp_path, iterations=4)
    first, second = seed_generation(runs, out, kernel(1), kernel(2))
    for cid, small, large in ((first, 0.1, 0.9), (second, 0.2, 0.5)):
        event = evaluated(cid, 1.5)
        event.shapes.add(shape="small", runtime_ms=small)
        event.shapes.add(shape="large", runtime_ms=large)
        runs.on_evaluated(event)
    live = runs.progress(runs.runs["run-1"]).tuned
    restored_runs = RunCoordinator(tmp_path / "restored")
    restored = restore_run(restored_runs, history_of(runs))
    assert list(restored_runs.progress(restored).tuned) == list(live)
    assert {s.shape: s.candidate_id for s in live} == {"small": first, "large": second}


def test_a_restored_run_does_not_hand_out_a_repair_again(tmp_path: Path) -> None:
    runs, out = start(tmp_path, iterations=4)
    good, bad = seed_generation(runs, out, kernel(1), kernel(2))
    runs.on_evaluated(evaluated(good, 1.5))
    nxt = runs.on_evaluated(evaluated(bad, 0.0, correct=False))  # generation 2 asks for its repair
    repair = next(r for r in requests(nxt) if r.repair)
    assert repair.parent.candidate_id == bad
    runs.on_generated(generated(repair, kernel(3)))
    live = [p.request.candidate_id for p in runs.runs["run-1"].engine._repairs]
    restored = restore_run(RunCoordinator(tmp_path / "restored"), history_of(runs))
    assert [p.request.candidate_id for p in restored.engine._repairs] == live == []


def test_resume_rebuilds_the_whole_engine_state_through_the_domains_replay(tmp_path: Path) -> None:
    """One resume path: the engine a restored run continues with is the live one, field for field
    (archive, islands, transitions, prompt population, budget, outcomes, pending repairs)."""
    runs, out = start(tmp_path, iterations=4)
    first, second = seed_generation(runs, out, kernel(1), kernel(2))
    runs.on_evaluated(evaluated(first, 1.5))
    runs.on_evaluated(evaluated(second, 0.5, correct=False))
    live = runs.runs["run-1"]
    history = history_of(runs)
    history.run.created_at.FromSeconds(int(live.started_at))  # the run's clock starts where it did

    restored_runs = RunCoordinator(tmp_path / "restored")
    restored = restore_run(restored_runs, history)
    restored_runs.continue_run(restored)  # the live run had started generation 2 already
    assert restored.engine.to_dict() == live.engine.to_dict()


def test_requests_carry_the_run_s_record_per_generator_and_a_restored_run_keeps_it(tmp_path: Path) -> None:
    runs, out = start(tmp_path, iterations=4)
    (request,) = requests(out)
    event = generated(request, kernel(1), kernel(2))
    event.generator = "model-a"  # an ensemble's member answered
    runs.on_generated(event)
    runs.on_evaluated(evaluated(f"{request.request_id}-c0", 1.5))
    nxt = runs.on_evaluated(evaluated(f"{request.request_id}-c1", 0.5, correct=False))
    archived = [o.message for o in nxt if o.subject == subjects.ARCHIVE_UPDATED]
    assert [(a.generator, a.pool) for a in archived] == [("model-a", "heuristic")]  # who wrote it, for whom
    records = [dict(r.member_record) for r in requests(nxt)]
    assert records and all(
        {n: (m.evaluated, m.correct, m.improvements) for n, m in r.items()} == {"model-a": (2, 1, 1)}
        for r in records
    )
    restored = restore_run(RunCoordinator(tmp_path / "restored"), history_of(runs))
    assert restored.member_record() == runs.runs["run-1"].member_record()


def test_a_generation_that_brought_nothing_new_keeps_its_number_across_a_restore(tmp_path: Path) -> None:
    """A generation whose request was answered with kernels already evaluated leaves no candidate in the
    lineage: the restored run still counts it, so it asks for the same next generation (and request ids)
    as the live run, not for one whose ids the stream already de-duplicated."""
    runs, out = start(tmp_path, iterations=10, population=1)
    (seed,) = requests(out)
    runs.on_generated(generated(seed, kernel(1)))
    (barren,) = requests(runs.on_evaluated(evaluated(f"{seed.request_id}-c0", 1.5)))
    (third,) = requests(runs.on_generated(generated(barren, kernel(1))))  # nothing new in generation 2
    runs.on_generated(generated(third, kernel(2)))
    live_next = requests(runs.on_evaluated(evaluated(f"{third.request_id}-c0", 2.0)))
    live = runs.runs["run-1"]
    assert (barren.iteration, third.iteration, live.generation) == (2, 3, 4)

    history = history_of(runs)
    history.run.created_at.FromSeconds(int(live.started_at))
    restored_runs = RunCoordinator(tmp_path / "restored")
    restored = restore_run(restored_runs, history)
    assert restored.engine.generation == 3 and restored.engine.budget.generations == 3
    again = requests(restored_runs.continue_run(restored))
    assert [r.request_id for r in again] == [r.request_id for r in live_next]
