"""The evolver's run coordinator, driven with events directly (no broker): ids, idempotency, pacing."""

from __future__ import annotations

from pathlib import Path

import pytest

from kernelfoundry.bus import subjects
from kernelfoundry.codec import descriptors_to_proto, kernel_to_proto
from kernelfoundry.domain.descriptors import Descriptors
from kernelfoundry.domain.kernel import KernelSource
from kernelfoundry.services.evolver.runs import RunCoordinator
from kernelfoundry.tasks.model import Task, TaskError
from kernelfoundry.v1 import build_pb2, evaluation_pb2, run_pb2, search_pb2

SOURCE = (
    "import torch\nclass Model(torch.nn.Module):\n    def forward(self, x):\n        return torch.relu(x)\n"
)
TASK = Task(name="relu", reference_source=SOURCE)


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        self.now += 1.0
        return self.now


def start(tmp_path: Path, iterations: int = 2, population: int = 2, sweeps: bool = False):  # type: ignore[no-untyped-def]
    runs = RunCoordinator(tmp_path, clock=Clock())
    config = run_pb2.RunConfig(
        hardware="cpu.x86_64",
        generator="heuristic",
        iterations=iterations,
        population=population,
        sweeps=sweeps,
    )
    out = runs.start_run("run-1", TASK, config, "cpu.x86_64", 1)
    return runs, out


def requests(out):  # type: ignore[no-untyped-def]
    return [o.message for o in out if o.subject.startswith(subjects.GENERATE_PREFIX)]


def kernel(i: int) -> KernelSource:
    code = f'#include "kf_abi.h"\nKF_DEFINE_ABI_VERSION()\n// variant {i}\n'
    return KernelSource(language="cpp", code=code)


def generated(
    request: search_pb2.GenerateCandidates, *sources: KernelSource
) -> search_pb2.CandidatesGenerated:
    event = search_pb2.CandidatesGenerated(
        request_id=request.request_id,
        run_id=request.run_id,
        generator="heuristic",
        parent_id=request.parent.candidate_id,
        mutation=request.mutation,
        island=request.island,
        iteration=request.iteration,
        repair=request.repair,
    )
    for source in sources:
        event.candidates.append(
            search_pb2.GeneratedCandidate(
                source=kernel_to_proto(source), strategy=descriptors_to_proto(Descriptors())
            )
        )
    return event


def evaluated(candidate_id: str, speedup: float, correct: bool = True) -> evaluation_pb2.EvaluationFinished:
    return evaluation_pb2.EvaluationFinished(
        candidate_id=candidate_id,
        run_id="run-1",
        hardware="cpu.x86_64",
        correct=correct,
        reason="" if correct else "wrong_result",
        speedup=speedup if correct else 0.0,
        runtime_ms=1.0 / max(speedup, 1e-3),
        baseline_ms=1.0,
    )


def compile_requests(out):  # type: ignore[no-untyped-def]
    return [o for o in out if o.subject.startswith(subjects.COMPILE_PREFIX)]


def seed_generation(runs: RunCoordinator, out, *kernels: KernelSource) -> list[str]:  # type: ignore[no-untyped-def]
    """Answer the first generation's seed request with `kernels`; returns the candidate ids."""
    (request,) = requests(out)
    runs.on_generated(generated(request, *kernels))
    return [f"{request.request_id}-c{i}" for i in range(len(kernels))]


def test_a_run_starts_with_the_submission_event_and_a_seed_request_for_the_population(tmp_path: Path) -> None:
    _, out = start(tmp_path, population=3)
    assert out[0].subject == subjects.RUN_SUBMITTED
    (request,) = requests(out)
    assert request.count == 3


def test_candidates_get_ids_from_their_request_and_go_to_the_compile_subject(tmp_path: Path) -> None:
    runs, out = start(tmp_path)
    request = requests(out)[0]
    emitted = runs.on_generated(generated(request, kernel(1), kernel(2)))
    compiles = compile_requests(emitted)
    assert [c.message.candidate_id for c in compiles] == [
        f"{request.request_id}-c0",
        f"{request.request_id}-c1",
    ]
    assert all(c.subject == "kf.compile.cpu.x86_64" for c in compiles)
    assert all(c.msg_id == f"compile-{c.message.candidate_id}" for c in compiles)


def test_a_redelivered_generation_event_creates_nothing_twice(tmp_path: Path) -> None:
    runs, out = start(tmp_path)
    event = generated(requests(out)[0], kernel(1))
    assert compile_requests(runs.on_generated(event))
    assert runs.on_generated(event) == []


def test_the_same_kernel_is_never_evaluated_twice_in_a_run(tmp_path: Path) -> None:
    runs, out = start(tmp_path)
    (request,) = requests(out)
    assert len(compile_requests(runs.on_generated(generated(request, kernel(1), kernel(1))))) == 1


def test_the_next_generation_starts_only_when_every_candidate_is_resolved(tmp_path: Path) -> None:
    runs, out = start(tmp_path, iterations=3)
    first, second = seed_generation(runs, out, kernel(1), kernel(2))
    assert requests(runs.on_evaluated(evaluated(first, 1.5))) == []
    nxt = runs.on_evaluated(evaluated(second, 2.0))
    assert requests(nxt)
    assert all(r.iteration == 2 for r in requests(nxt))
    assert any(o.subject == subjects.ARCHIVE_UPDATED for o in nxt)


def test_a_duplicate_evaluation_is_ignored(tmp_path: Path) -> None:
    runs, out = start(tmp_path, iterations=3)
    first, _ = seed_generation(runs, out, kernel(1), kernel(2))
    runs.on_evaluated(evaluated(first, 1.5))
    assert runs.on_evaluated(evaluated(first, 9.0)) == []
    assert runs.runs["run-1"].best_speedup == pytest.approx(1.5)


def test_a_compile_failure_resolves_the_candidate_with_no_fitness(tmp_path: Path) -> None:
    runs, out = start(tmp_path, iterations=1, population=1)
    (request,) = requests(out)
    runs.on_generated(generated(request, kernel(1)))
    failed = build_pb2.CandidateCompiled(
        candidate_id=f"{request.request_id}-c0",
        run_id="run-1",
        ok=False,
        reason="compile_error",
        log="error: x",
    )
    run = runs.runs["run-1"]
    emitted = runs.on_compiled(failed)
    assert run.failed == 1 and run.best_speedup == 0.0
    assert run.engine.outcomes.to_dict() == {"failed:compile_error": 1}
    (finished,) = [o.message for o in emitted if o.subject == subjects.RUN_FINISHED]
    assert finished.status == run_pb2.RUN_STATUS_FAILED and "compile_error x1" in finished.progress.message


def retime_of(emitted):  # type: ignore[no-untyped-def]
    """The re-time's compile request among `emitted` (the best kernel built and evaluated once more)."""
    (request,) = [c.message for c in compile_requests(emitted) if "-retime-" in c.message.candidate_id]
    return request


def retimed(request: build_pb2.CompileCandidate, runtime_ms: float, baseline_ms: float):  # type: ignore[no-untyped-def]
    return evaluation_pb2.EvaluationFinished(
        candidate_id=request.candidate_id,
        run_id=request.run_id,
        hardware="cpu.x86_64",
        correct=True,
        runtime_ms=runtime_ms,
        runtime_spread_ms=0.01,
        baseline_ms=baseline_ms,
        speedup=baseline_ms / runtime_ms,
    )


def test_the_run_re_times_its_best_kernel_then_finishes_and_writes_it(tmp_path: Path) -> None:
    runs, out = start(tmp_path, iterations=1, population=1)
    (request,) = requests(out)
    runs.on_generated(generated(request, kernel(7)))
    emitted = runs.on_evaluated(evaluated(f"{request.request_id}-c0", 3.0))
    assert not [o for o in emitted if o.subject == subjects.RUN_FINISHED]
    retime = retime_of(emitted)
    assert retime.candidate_id.startswith(f"{request.request_id}-c0-retime-")
    assert "variant 7" in retime.source.code
    emitted = runs.on_evaluated(retimed(retime, runtime_ms=0.5, baseline_ms=1.2))
    finished = [o.message for o in emitted if o.subject == subjects.RUN_FINISHED]
    assert finished and finished[0].status == run_pb2.RUN_STATUS_COMPLETED
    figure = finished[0].progress.speedup
    assert figure.retimed and figure.kernel_ms == 0.5
    assert figure.eager_ms == pytest.approx(1.1)  # median of the run's 1.0 and the re-time's 1.2
    assert figure.speedup == pytest.approx(2.2) and figure.side_by_side_speedup == pytest.approx(2.4)
    final = runs.final_progress("run-1")
    assert final is not None and "run-1" not in runs.runs  # ended: only what queries need is kept
    best = final.best
    assert best.speedup == pytest.approx(2.2) and best.runtime_ms == 0.5
    assert "variant 7" in Path(best.path).read_text()


def test_a_failed_re_time_ends_the_run_with_the_run_s_own_figures(tmp_path: Path) -> None:
    runs, out = start(tmp_path, iterations=1, population=1)
    (request,) = requests(out)
    runs.on_generated(generated(request, kernel(7)))
    retime = retime_of(runs.on_evaluated(evaluated(f"{request.request_id}-c0", 3.0)))
    failed = build_pb2.CandidateCompiled(candidate_id=retime.candidate_id, run_id="run-1", ok=False)
    emitted = runs.on_compiled(failed)
    (finished,) = [o.message for o in emitted if o.subject == subjects.RUN_FINISHED]
    assert finished.status == run_pb2.RUN_STATUS_COMPLETED and "re-time failed" in finished.progress.message
    assert finished.progress.best_speedup == pytest.approx(3.0)
    assert runs.on_evaluated(retimed(retime, 0.1, 1.0)) == []  # too late: the run has ended


def test_the_best_kernel_is_the_fastest_by_its_own_time_not_by_a_lucky_eager_timing(tmp_path: Path) -> None:
    runs, out = start(tmp_path, iterations=3)
    lucky, fast = seed_generation(runs, out, kernel(1), kernel(2))
    noisy = evaluated(lucky, 1.0)
    noisy.runtime_ms, noisy.baseline_ms, noisy.speedup = 2.2, 16.8, 16.8 / 2.2
    steady = evaluated(fast, 1.0)
    steady.runtime_ms, steady.baseline_ms, steady.speedup = 2.0, 8.0, 4.0
    runs.on_evaluated(noisy)
    runs.on_evaluated(steady)
    run = runs.runs["run-1"]
    assert run.best_id == fast
    assert run.best_speedup == pytest.approx(12.4 / 2.0)  # median of 16.8 and 8.0 over 2.0 ms


def test_the_saved_best_kernel_carries_every_define_its_build_passed_and_a_manifest(tmp_path: Path) -> None:
    import json

    runs, out = start(tmp_path, iterations=3, population=1)
    (request,) = requests(out)
    source = tunable_kernel(1)
    source = KernelSource(source.language, source.code, tunables=source.tunables, glue="class ModelNew: ...")
    runs.on_generated(generated(request, source))
    compiled = build_pb2.CandidateCompiled(
        candidate_id=f"{request.request_id}-c0", run_id="run-1", ok=True, flags=["-O3", "-DBLOCK=128"]
    )
    runs.on_compiled(compiled)
    runs.on_evaluated(evaluated(f"{request.request_id}-c0", 2.0))
    path = Path(runs.runs["run-1"].best_path)
    text = path.read_text()
    assert text.index("#define BLOCK 128") < text.index("#ifndef BLOCK")  # the declared default, on top
    manifest = json.loads((path.parent / "best.manifest.json").read_text())
    assert manifest["defines"] == {"BLOCK": "128"} and manifest["build_flags"] == ["-O3", "-DBLOCK=128"]
    assert manifest["glue_file"] == "best_glue.py"
    assert (path.parent / "best_glue.py").read_text() == "class ModelNew: ..."


def test_a_run_without_any_candidate_fails_with_the_generator_s_reason(tmp_path: Path) -> None:
    runs, out = start(tmp_path, iterations=1, population=1)
    (request,) = requests(out)
    event = generated(request)
    event.error_reason = "unsupported_operator"
    event.error_message = "the proposer does not support operator truediv at node div_1"
    emitted = runs.on_generated(event)
    (finished,) = [o.message for o in emitted if o.subject == subjects.RUN_FINISHED]
    assert finished.status == run_pb2.RUN_STATUS_FAILED
    assert "no candidate was generated" in finished.progress.message
    assert "operator truediv at node div_1" in finished.progress.message


def test_a_run_without_a_correct_kernel_fails_naming_the_failures(tmp_path: Path) -> None:
    runs, out = start(tmp_path, iterations=1, population=1)
    (request,) = requests(out)
    runs.on_generated(generated(request, kernel(1)))
    wrong = evaluated(f"{request.request_id}-c0", 1.0, correct=False)
    wrong.message = "output 0 differs at index 3"
    emitted = runs.on_evaluated(wrong)
    (finished,) = [o.message for o in emitted if o.subject == subjects.RUN_FINISHED]
    assert finished.status == run_pb2.RUN_STATUS_FAILED
    assert "no correct kernel among 1 candidates (wrong_result x1)" in finished.progress.message
    assert "output 0 differs at index 3" in finished.progress.message


def test_a_run_whose_candidates_failed_for_several_reasons_names_an_example_of_each(tmp_path: Path) -> None:
    """One message a reason: an out-of-memory beside a glue error must not hide the glue error's text."""
    runs, out = start(tmp_path, iterations=1, population=2)
    (request,) = requests(out)
    runs.on_generated(generated(request, kernel(1), kernel(2)))
    memory = evaluated(f"{request.request_id}-c0", 1.0, correct=False)
    memory.reason, memory.message = "judge_out_of_memory", "the judge ran out of memory: " + "x" * 400
    glue = evaluated(f"{request.request_id}-c1", 1.0, correct=False)
    glue.reason, glue.message = "glue_error", "forward raised RuntimeError: shape mismatch"
    runs.on_evaluated(memory)
    emitted = runs.on_evaluated(glue)
    (finished,) = [o.message for o in emitted if o.subject == subjects.RUN_FINISHED]
    text = finished.progress.message
    assert "judge_out_of_memory x1" in text and "glue_error x1" in text
    assert "first failure of each kind: " in text
    assert "judge_out_of_memory: the judge ran out of memory: " in text
    assert "glue_error: forward raised RuntimeError: shape mismatch" in text
    assert "x" * 301 not in text  # each example cut at 300 characters


def test_events_of_unknown_runs_are_ignored(tmp_path: Path) -> None:
    runs, _ = start(tmp_path)
    stray = evaluated("run-2-g1-r0-c0", 2.0)
    stray.run_id = "run-2"
    assert runs.on_evaluated(stray) == []


def test_unknown_hardware_has_no_build_target(tmp_path: Path) -> None:
    runs = RunCoordinator(tmp_path, build_targets={"cuda.l40s": "cuda.sm89"})
    assert runs.build_target_for("cuda.l40s") == "cuda.sm89"
    assert runs.build_target_for("cuda.h200") == "cuda.sm90"
    with pytest.raises(TaskError):
        runs.build_target_for("tpu.v5")


def tunable_kernel(i: int) -> KernelSource:
    from kernelfoundry.domain.sweeps import parse_tunables

    code = (
        f'#include "kf_abi.h"\n// @kf.tunable BLOCK in [64, 128, 256] default 128\n'
        f"#ifndef BLOCK\n#define BLOCK 128\n#endif\nKF_DEFINE_ABI_VERSION()\n// variant {i}\n"
    )
    return KernelSource(language="cpp", code=code, tunables=parse_tunables(code))


def test_a_new_elite_with_tunables_is_swept_in_the_next_generation(tmp_path: Path) -> None:
    runs, out = start(tmp_path, iterations=3, population=1, sweeps=True)
    (request,) = requests(out)
    runs.on_generated(generated(request, tunable_kernel(1)))
    nxt = runs.on_evaluated(evaluated(f"{request.request_id}-c0", 2.0))
    sweep = [c.message for c in compile_requests(nxt) if "-s" in c.message.candidate_id]
    assert sweep, "no sweep point was compiled"
    assert all(dict(c.source.params) and c.source.params["BLOCK"] in ("64", "256") for c in sweep)
    run = runs.runs["run-1"]
    assert all(run.candidates[c.candidate_id].info.operator == "retune" for c in sweep)
    assert all(run.candidates[c.candidate_id].info.parent_id == f"{request.request_id}-c0" for c in sweep)


def test_without_sweeps_no_sweep_points_are_made(tmp_path: Path) -> None:
    runs, out = start(tmp_path, iterations=3, population=1, sweeps=False)
    (request,) = requests(out)
    runs.on_generated(generated(request, tunable_kernel(1)))
    nxt = runs.on_evaluated(evaluated(f"{request.request_id}-c0", 2.0))
    assert not [c for c in compile_requests(nxt) if "-s" in c.message.candidate_id]


def start_with_evaluations(tmp_path: Path, evaluations: int, population: int):  # type: ignore[no-untyped-def]
    """A run with sweeps on under an evaluation budget; returns the coordinator and its seed request."""
    from dataclasses import replace

    from kernelfoundry.tasks.model import Budget

    runs = RunCoordinator(tmp_path, clock=Clock())
    config = run_pb2.RunConfig(
        hardware="cpu.x86_64", generator="heuristic", iterations=10, population=population, sweeps=True
    )
    task = replace(TASK, budget=Budget(iterations=10, evaluations=evaluations))
    (request,) = requests(runs.start_run("run-1", task, config, "cpu.x86_64", 1))
    return runs, request


def test_an_evaluation_budget_is_a_hard_cap_on_requests_and_sweep_points(tmp_path: Path) -> None:
    runs, request = start_with_evaluations(tmp_path, evaluations=3, population=4)
    assert request.count == 3  # a population of 4, but 3 evaluations left
    runs.on_generated(generated(request, tunable_kernel(1), tunable_kernel(2), tunable_kernel(3)))
    emitted = []
    for i in range(3):
        emitted += runs.on_evaluated(evaluated(f"{request.request_id}-c{i}", 2.0 + i))
    # the tunables' sweep points would be next: the budget is spent, so the run re-times and ends
    assert not [c for c in compile_requests(emitted) if "-s" in c.message.candidate_id]
    assert not requests(emitted)
    assert runs.runs["run-1"].engine.budget.evaluations == 3


def test_after_a_generation_with_nothing_new_the_sweeps_take_the_budget_first(tmp_path: Path) -> None:
    runs, seed = start_with_evaluations(tmp_path, evaluations=2, population=1)
    runs.on_generated(generated(seed, tunable_kernel(1)))
    emitted = runs.on_evaluated(evaluated(f"{seed.request_id}-c0", 2.0))
    # the last evaluation goes to the generator first; it brings only the kernel already evaluated
    (again,) = requests(emitted)
    assert not [c for c in compile_requests(emitted) if "-s" in c.message.candidate_id]
    emitted = runs.on_generated(generated(again, tunable_kernel(1)))
    # the next generation gives the budget's last evaluation to the tunable's sweep, not to asking again
    assert not requests(emitted)
    (point,) = [c.message for c in compile_requests(emitted)]
    run = runs.runs["run-1"]
    assert run.candidates[point.candidate_id].info.operator == "retune"
    assert point.source.params["BLOCK"] in ("64", "256")
    assert point.candidate_id.startswith(f"run-1-g{run.generation}-s0")
    assert run.generation == run.engine.generation == 3  # the seed, the request, the sweep point
    finished = runs.on_evaluated(evaluated(point.candidate_id, 3.0))
    assert retime_of(finished) and run.engine.budget.evaluations == 2


def test_a_generator_with_nothing_new_ends_the_run_with_that_reason(tmp_path: Path) -> None:
    runs, out = start(tmp_path, iterations=1000, population=1)
    (request,) = requests(out)
    runs.on_generated(generated(request, kernel(1)))
    emitted = runs.on_evaluated(evaluated(f"{request.request_id}-c0", 1.5))
    asked = 1
    while requests(emitted):  # every later request is answered with the kernel already evaluated
        (request,) = requests(emitted)
        emitted = runs.on_generated(generated(request, kernel(1)))
        asked += 1
    assert asked == 1 + 3  # the seed, then three generations that brought nothing new
    retime = retime_of(emitted)
    finished = runs.on_evaluated(retimed(retime, runtime_ms=0.5, baseline_ms=0.75))
    (done,) = [o.message for o in finished if o.subject == subjects.RUN_FINISHED]
    assert done.status == run_pb2.RUN_STATUS_COMPLETED
    assert "3 generations in a row brought no new kernel" in done.progress.message


def test_seed_plans_become_one_request_for_several_different_seeds(tmp_path: Path) -> None:
    _, out = start(tmp_path, population=4)
    (request,) = requests(out)
    assert request.count == 4 and not request.HasField("parent")


def test_the_progress_keeps_the_fastest_kernel_and_setting_per_input_shape(tmp_path: Path) -> None:
    runs, out = start(tmp_path, iterations=3, population=2)
    first, second = seed_generation(runs, out, tunable_kernel(1), kernel(2))
    fast_small = evaluated(first, 2.0)
    fast_small.shapes.extend(
        [
            evaluation_pb2.ShapeTiming(shape="small", runtime_ms=0.1, baseline_ms=0.3),
            evaluation_pb2.ShapeTiming(shape="large", runtime_ms=0.9, baseline_ms=1.0),
        ]
    )
    fast_large = evaluated(second, 1.5)
    fast_large.shapes.extend(
        [
            evaluation_pb2.ShapeTiming(shape="small", runtime_ms=0.2, baseline_ms=0.3),
            evaluation_pb2.ShapeTiming(shape="large", runtime_ms=0.5, baseline_ms=1.0),
        ]
    )
    wrong = evaluated(second, 9.0, correct=False)
    wrong.shapes.append(evaluation_pb2.ShapeTiming(shape="small", runtime_ms=0.01))
    runs.on_evaluated(fast_small)
    runs.on_evaluated(fast_large)
    runs.on_evaluated(wrong)  # a duplicate delivery, and incorrect anyway: changes nothing
    runs.runs["run-1"].sweeps.book.offer("relu", "all", "cpu.x86_64", first, {}, 1e-6)  # a sweep's aggregate
    tuned = {s.shape: s for s in runs.progress(runs.runs["run-1"]).tuned}
    assert set(tuned) == {"small", "large"}
    assert (tuned["small"].candidate_id, tuned["large"].candidate_id) == (first, second)
    assert dict(tuned["small"].params) == {"BLOCK": "128"}  # the declared default, as -D takes it
    assert tuned["large"].runtime_ms == pytest.approx(0.5) and tuned["large"].hardware == "cpu.x86_64"


SIMD_KERNEL = KernelSource(  # another archive cell than `kernel(i)` (SIMD evidence), no tunables
    language="cpp",
    code='#include "kf_abi.h"\nKF_DEFINE_ABI_VERSION()\nvoid f(float* x) {\n'
    "#pragma omp parallel for simd\nfor (int i = 0; i < 8; ++i) x[i] += 1;\n}\n",
)


def test_a_kernel_far_behind_the_best_is_not_swept(tmp_path: Path) -> None:
    runs, out = start(tmp_path, iterations=3, population=2, sweeps=True)
    slow, fast = seed_generation(runs, out, tunable_kernel(1), SIMD_KERNEL)
    runs.on_evaluated(evaluated(slow, 1.0))  # an elite with tunables: a sweep opens for it
    nxt = runs.on_evaluated(evaluated(fast, 4.0))  # the best is now 4x faster and has nothing to tune
    run = runs.runs["run-1"]
    assert {e.candidate_id for e in run.engine.merged_archive().elites()} == {slow, fast}  # both elites
    assert not [c for c in compile_requests(nxt) if "-s" in c.message.candidate_id]
    assert next(iter(run.sweeps.plans.values())).done  # its points answered as superseded, not evaluated


def test_a_kernel_near_the_best_is_swept(tmp_path: Path) -> None:
    runs, out = start(tmp_path, iterations=3, population=2, sweeps=True)
    slow, fast = seed_generation(runs, out, tunable_kernel(1), SIMD_KERNEL)
    runs.on_evaluated(evaluated(slow, 1.0))
    nxt = runs.on_evaluated(evaluated(fast, 1.2))  # the tunable kernel is within reach of the best
    assert [c for c in compile_requests(nxt) if "-s" in c.message.candidate_id]


def test_with_screening_a_candidate_for_an_occupied_cell_carries_its_elite_s_time(tmp_path: Path) -> None:
    runs = RunCoordinator(tmp_path, clock=Clock(), screening=True)
    config = run_pb2.RunConfig(hardware="cpu.x86_64", generator="heuristic", iterations=3, population=2)
    out = runs.start_run("run-1", TASK, config, "cpu.x86_64", 1)
    (request,) = requests(out)
    first = compile_requests(runs.on_generated(generated(request, kernel(1), kernel(2))))
    assert [c.message.screen_above_ms for c in first] == [0.0, 0.0]  # an empty cell: always timed in full
    runs.on_evaluated(evaluated(first[0].message.candidate_id, 1.5))
    nxt = runs.on_evaluated(evaluated(first[1].message.candidate_id, 2.0))
    later = compile_requests(runs.on_generated(generated(requests(nxt)[0], kernel(3))))
    assert [c.message.screen_above_ms for c in later] == [pytest.approx(0.5)]  # the elite's 1 / 2.0 ms


def test_without_screening_every_candidate_is_timed_in_full(tmp_path: Path) -> None:
    runs, out = start(tmp_path, iterations=3)
    first, second = seed_generation(runs, out, kernel(1), kernel(2))
    runs.on_evaluated(evaluated(first, 1.5))
    nxt = runs.on_evaluated(evaluated(second, 2.0))
    later = compile_requests(runs.on_generated(generated(requests(nxt)[0], kernel(3))))
    assert [c.message.screen_above_ms for c in later] == [0.0]


def test_a_parent_carries_its_roofline_fraction_to_the_generator(tmp_path: Path) -> None:
    runs, out = start(tmp_path, iterations=3)
    first, second = seed_generation(runs, out, kernel(1), kernel(2))
    runs.on_evaluated(evaluated(first, 1.5))
    best = evaluated(second, 2.0)
    best.roofline_fraction, best.bound = 0.61, "memory"
    nxt = requests(runs.on_evaluated(best))
    parents = [r.parent for r in nxt if r.HasField("parent") and r.parent.candidate_id == second]
    assert parents and all((p.roofline_fraction, p.bound) == (0.61, "memory") for p in parents)
