"""What a generation request carries for a generator's brief: the device, the parent's measured time
beside the run's eager time, and the best kernels of the island's other cells (none for a repair)."""

from __future__ import annotations

from pathlib import Path

import pytest

from kernelfoundry.domain.engine import GenerationPlan
from kernelfoundry.services.evolver import messages
from kernelfoundry.services.evolver.runs import RunCoordinator
from kernelfoundry.v1 import evaluation_pb2, run_pb2

from .test_evolver_runs import SIMD_KERNEL, TASK, Clock, evaluated, generated, kernel, requests, start


def timed(candidate_id: str, runtime_ms: float, eager_ms: float) -> evaluation_pb2.EvaluationFinished:
    event = evaluated(candidate_id, eager_ms / runtime_ms)
    event.runtime_ms, event.baseline_ms = runtime_ms, eager_ms
    return event


def test_a_mutation_request_carries_the_device_the_run_s_eager_time_and_the_other_cell_s_elite(
    tmp_path: Path,
) -> None:
    runs, out = start(tmp_path, iterations=3, population=2)
    (seed_request,) = requests(out)
    assert (seed_request.hardware, seed_request.build_target) == ("cpu.x86_64", "cpu.x86_64")
    assert list(seed_request.inspirations) == []  # an empty archive has nothing to show
    runs.on_generated(generated(seed_request, kernel(1), SIMD_KERNEL))
    plain, simd = f"{seed_request.request_id}-c0", f"{seed_request.request_id}-c1"
    runs.on_evaluated(timed(plain, 0.5, 1.0))
    following = requests(runs.on_evaluated(timed(simd, 0.25, 1.2)))
    assert following
    for request in following:
        assert request.hardware == "cpu.x86_64"
        assert request.parent.candidate_id in (plain, simd)
        assert request.parent.eager_ms == pytest.approx(1.1)  # the median of the run's eager times
        assert request.parent.compile_ms == 0.0  # torch.compile was not timed
        (inspiration,) = request.inspirations  # the elite of the other cell only
        other = simd if request.parent.candidate_id == plain else plain
        assert inspiration.candidate_id == other
        assert inspiration.source.code == (SIMD_KERNEL if other == simd else kernel(1)).code
        assert inspiration.runtime_ms == (0.25 if other == simd else 0.5)
        assert inspiration.speedup > 0


def test_inspirations_are_the_fastest_other_cells_first_and_a_repair_gets_none(tmp_path: Path) -> None:
    runs = RunCoordinator(tmp_path, clock=Clock())
    config = run_pb2.RunConfig(hardware="cpu.x86_64", generator="heuristic", iterations=3, population=3)
    out = runs.start_run("run-1", TASK, config, "cpu.x86_64", 1)
    (seed_request,) = requests(out)
    runs.on_generated(generated(seed_request, kernel(1), SIMD_KERNEL, kernel(2)))
    first, simd, broken = (f"{seed_request.request_id}-c{i}" for i in range(3))
    runs.on_evaluated(timed(first, 0.5, 1.0))
    runs.on_evaluated(timed(simd, 0.25, 1.0))
    following = requests(runs.on_evaluated(evaluated(broken, 0.0, correct=False)))
    repairs = [r for r in following if r.repair]
    assert repairs and all(not r.inspirations for r in repairs)
    assert all(r.parent.candidate_id == broken for r in repairs)
    for request in (r for r in following if not r.repair):
        assert [i.candidate_id for i in request.inspirations] == [
            c for c in (simd, first) if c != request.parent.candidate_id
        ]
    # A seed request (no parent's cell to leave out) sees every cell's elite, the fastest first.
    seed_plan = GenerationPlan(2, 0, None, "seed", None, "", (), {}, {}, "")
    shown = messages.inspirations(runs.runs["run-1"], seed_plan)
    assert [i.candidate_id for i in shown] == [simd, first]
    assert [i.candidate_id for i in messages.inspirations(runs.runs["run-1"], seed_plan, limit=1)] == [simd]
