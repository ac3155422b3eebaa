"""The suite benchmark's figures come from the product's path: the one speedup definition over the
evaluator's measurements (engine harness) or the run's own RunProgress (stack harness)."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[3] / "bench"))
from stack_harness import run_figures, run_outcome, speedup_from_progress
from suite_bench import complete_row, engine_row

from kernelfoundry.domain.speedup import Measurement, retime_id, run_speedup
from kernelfoundry.v1 import kernel_pb2, run_pb2


def history(*ids: str) -> list[dict]:
    return [
        {"iteration": i, "candidate_id": c, "mutation": "seed", "cell": [i, 0, 0], "params": {"T": str(i)}}
        for i, c in enumerate(ids)
    ]


def test_an_engine_row_is_the_speedup_definition_over_its_evaluations_with_the_retime() -> None:
    measurements = [
        Measurement("t-i0", True, runtime_ms=4.0, baseline_ms=8.0, compile_baseline_ms=6.0),
        Measurement("t-i1", True, runtime_ms=2.0, runtime_spread_ms=0.1, baseline_ms=12.0),
        Measurement("t-i2", False, baseline_ms=10.0),
        Measurement(retime_id("t-i1", "end"), True, 2.5, 0.2, baseline_ms=9.0, compile_baseline_ms=5.0),
    ]
    row = engine_row({"task": "t", "floor_ms": 1.0}, measurements, history("t-i0", "t-i1", "t-i2"))
    figure = run_speedup(measurements)
    assert figure is not None
    # the re-timed kernel over the median of every eager timing (8, 9, 10, 12): 9.5 / 2.5
    assert row["speedup_vs_eager"] == pytest.approx(figure.speedup) == pytest.approx(9.5 / 2.5)
    assert (row["best_ms"], row["eager_ms"], row["eager_samples"]) == (2.5, 9.5, 4)
    assert row["speedup_vs_compile"] == pytest.approx(5.0 / 2.5) and row["retimed"] is True
    assert row["side_by_side_speedup"] == pytest.approx(9.0 / 2.5)
    assert (row["best_candidate"], row["best_iteration"], row["best_cell"]) == ("t-i1", 1, [1, 0, 0])
    assert row["best_params"] == {"T": "1"} and row["floor_fraction"] == pytest.approx(1.0 / 2.5)
    assert "error" not in row


def test_without_torch_compile_or_a_correct_kernel_nothing_is_made_up() -> None:
    one = [Measurement("t-i0", True, runtime_ms=2.0, baseline_ms=3.0)]
    row = engine_row({"task": "t", "floor_ms": 1.0}, one, history("t-i0"))
    assert "compile_ms" not in row and "speedup_vs_compile" not in row and "side_by_side_speedup" not in row
    failed = engine_row({"task": "t", "floor_ms": 1.0}, [Measurement("t-i0", False)], history("t-i0"))
    assert "best_ms" not in failed and "speedup_vs_eager" not in failed
    assert failed["error"].startswith("no correct kernel")


def progress(with_speedup: bool) -> run_pb2.RunProgress:
    message = run_pb2.RunProgress(
        run_id="r",
        status=run_pb2.RUN_STATUS_COMPLETED if with_speedup else run_pb2.RUN_STATUS_FAILED,
        candidates_correct=3,
        candidates_failed=1,
        best=run_pb2.BestKernel(
            candidate_id="r-g1-c0",
            source=kernel_pb2.KernelSource(params={"MC": "16"}),
            descriptors=kernel_pb2.Descriptors(memory=2, algorithm=1, parallelism=3),
            iteration=4,
        ),
    )
    if with_speedup:
        message.speedup.CopyFrom(
            run_pb2.RunSpeedup(
                candidate_id="r-g1-c0",
                speedup=3.0,
                kernel_ms=2.0,
                kernel_spread_ms=0.1,
                eager_ms=6.0,
                eager_spread_ms=0.5,
                eager_samples=4,
                eager_outliers_ms=[9.0],
                retimed=True,
                side_by_side_eager_ms=5.8,
                side_by_side_speedup=2.9,
                compile_ms=4.0,
                speedup_vs_compile=2.0,
            )
        )
    return message


def test_a_stack_row_takes_the_runs_own_speedup_from_its_progress() -> None:
    found = run_outcome("r", progress(with_speedup=True))
    figure = speedup_from_progress(progress(with_speedup=True))
    assert figure is not None and found == {**found, **run_figures(figure)}
    row = complete_row({"task": "t", "floor_ms": 1.0}, found)
    assert (row["speedup_vs_eager"], row["best_ms"], row["eager_ms"]) == (3.0, 2.0, 6.0)
    assert (row["speedup_vs_compile"], row["compile_ms"], row["eager_outliers_ms"]) == (2.0, 4.0, [9.0])
    assert (row["best_iteration"], row["best_cell"], row["best_params"]) == (4, [2, 1, 3], {"MC": "16"})
    assert (row["status"], row["evaluations"], row["floor_fraction"]) == ("RUN_STATUS_COMPLETED", 4, 0.5)


def test_a_run_without_a_correct_kernel_has_no_figures_and_says_how_it_ended() -> None:
    assert speedup_from_progress(progress(with_speedup=False)) is None
    row = complete_row({"task": "t", "floor_ms": 1.0}, run_outcome("r", progress(with_speedup=False)))
    assert "best_ms" not in row and "speedup_vs_eager" not in row
    assert row["error"] == "no correct kernel (RUN_STATUS_FAILED)"
