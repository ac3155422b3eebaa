"""The evolver's run metrics stay true (issue 17): run gauges across resume and cancel, every evaluation's
duration observed once, a run's medians with its figure, and the best speedups rebuilt from the store's
ended runs after a restart without counting them as new runs."""

from __future__ import annotations

import asyncio
import json
from functools import partial
from pathlib import Path

from kernelfoundry.services.evolver.resume import restore_run
from kernelfoundry.services.evolver.run_metrics import (
    best_speedups_of,
    record_evaluation_duration,
    record_run_finished,
    restore_best_figures,
    restore_best_speedups,
)
from kernelfoundry.services.evolver.runs import RunCoordinator
from kernelfoundry.services.store.records import finished_summary
from kernelfoundry.telemetry.metrics import Metrics
from kernelfoundry.v1 import lineage_pb2, run_pb2

from .test_evolver_resume import history_of
from .test_evolver_runs import Clock, evaluated, kernel, seed_generation, start


def sample(metrics: Metrics, name: str, **labels: str) -> float:
    return metrics.registry.get_sample_value(name, labels) or 0.0


def wired(tmp_path: Path, metrics: Metrics) -> RunCoordinator:
    """A coordinator wired to the metrics as services/evolver/main.py wires it."""
    runs = RunCoordinator(
        tmp_path,
        clock=Clock(),
        on_finished=partial(record_run_finished, metrics),
        on_evaluation=partial(record_evaluation_duration, metrics),
    )
    metrics.runs_active.set_function(runs.active_count)
    return runs


def test_a_resumed_run_is_active_and_its_cancel_counts_it_down_never_below_zero(tmp_path: Path) -> None:
    live, out = start(tmp_path / "live", iterations=4)
    first, _ = seed_generation(live, out, kernel(1), kernel(2))
    live.on_evaluated(evaluated(first, 1.5))
    metrics = Metrics(process_collectors=False)
    restarted = wired(tmp_path / "restarted", metrics)
    assert sample(metrics, "kf_runs_active") == 0
    restarted.continue_run(restore_run(restarted, history_of(live)))
    assert sample(metrics, "kf_runs_active") == 1
    restarted.cancel("run-1")
    assert sample(metrics, "kf_runs_active") == 0  # a cancelled run is not active
    assert restarted.cancel("run-1") == []
    assert sample(metrics, "kf_runs_active") == 0
    assert sample(metrics, "kf_runs_total", status="cancelled") == 1


def test_every_evaluation_taken_is_timed_once_and_a_redelivery_is_not(tmp_path: Path) -> None:
    runs, out = start(tmp_path)
    metrics = Metrics(process_collectors=False)
    runs.on_evaluation = partial(record_evaluation_duration, metrics)
    first, _ = seed_generation(runs, out, kernel(1), kernel(2))
    done = evaluated(first, 1.5)
    done.duration_s = 2.5
    runs.on_evaluated(done)
    runs.on_evaluated(done)  # redelivered: its candidate is resolved already
    unknown = evaluated("run-1-g9-r0-c0", 1.0)
    unknown.duration_s = 4.0
    runs.on_evaluated(unknown)  # no such candidate: not this run's work
    labels = {"hardware": "cpu.x86_64"}
    assert sample(metrics, "kf_evaluation_duration_seconds_count", **labels) == 1
    assert sample(metrics, "kf_evaluation_duration_seconds_sum", **labels) == 2.5


def test_an_ending_records_its_figure_with_the_medians_it_came_from() -> None:
    metrics = Metrics(process_collectors=False)
    progress = run_pb2.RunProgress(
        run_id="run-3",
        task_name="relu",
        config=run_pb2.RunConfig(hardware="cpu.x86_64"),
        speedup=run_pb2.RunSpeedup(speedup=2.0, kernel_ms=0.5, eager_ms=1.0, compile_ms=0.8),
    )
    record_run_finished(
        metrics, run_pb2.RunFinished(run_id="run-3", status=run_pb2.RUN_STATUS_COMPLETED, progress=progress)
    )
    labels = {"task": "relu", "hardware": "cpu.x86_64"}
    assert sample(metrics, "kf_kernel_speedup", **labels) == 2.0
    assert sample(metrics, "kf_run_speedup_count", **labels) == 1
    assert sample(metrics, "kf_run_median_seconds", kind="kernel", **labels) == 0.0005
    assert sample(metrics, "kf_run_median_seconds", kind="torch_compile", **labels) == 0.0008
    assert sample(metrics, "kf_runs_total", status="completed") == 1


def stored(run_id: str, task: str, status: str, speedup: float | None) -> lineage_pb2.RunRecord:
    """A run record as the store keeps it (summary from the RunFinished, services/store/records.py)."""
    config = {"hardware": "cpu.x86_64", "generator": "heuristic", "task": {"name": task}}
    record = lineage_pb2.RunRecord(
        run_id=run_id, task_name=task, hardware="cpu.x86_64", status=status, config_json=json.dumps(config)
    )
    if status != "running":
        progress = run_pb2.RunProgress(
            run_id=run_id, task_name=task, config=run_pb2.RunConfig(hardware="cpu.x86_64")
        )
        if speedup is not None:
            progress.speedup.CopyFrom(run_pb2.RunSpeedup(speedup=speedup, kernel_ms=1.0, eager_ms=speedup))
        event = run_pb2.RunFinished(run_id=run_id, progress=progress)
        record.summary_json = json.dumps(finished_summary(event))
    return record


def test_the_best_speedups_come_back_from_the_ended_runs_without_counting_new_runs() -> None:
    records = [
        stored("run-a", "relu", "finished", 1.5),
        stored("run-b", "relu", "finished", 2.5),
        stored("run-c", "relu", "cancelled", 1.8),
        stored("run-d", "gemm", "failed", None),  # no figure: nothing to restore
        stored("run-e", "gemm", "running", None),
        stored("run-f", "softmax", "cancelled", 3.0),  # a cancelled run's figure was recorded too
    ]
    assert best_speedups_of(records) == {("relu", "cpu.x86_64"): 2.5, ("softmax", "cpu.x86_64"): 3.0}
    metrics = Metrics(process_collectors=False)
    metrics.record_speedup("relu", "cpu.x86_64", 1.2)  # a run that ended since this start
    assert restore_best_figures(metrics, records) == 2
    assert sample(metrics, "kf_kernel_speedup", task="relu", hardware="cpu.x86_64") == 2.5
    assert sample(metrics, "kf_kernel_speedup", task="softmax", hardware="cpu.x86_64") == 3.0
    assert sample(metrics, "kf_run_speedup_count", task="relu", hardware="cpu.x86_64") == 1  # not observed
    assert sample(metrics, "kf_run_speedup_count", task="softmax", hardware="cpu.x86_64") == 0
    assert not any(
        s.value for m in metrics.registry.collect() if m.name == "kf_runs" for s in m.samples
    )  # no ending counted


def test_an_unreachable_store_leaves_the_gauge_empty_and_the_evolver_starting() -> None:
    metrics = Metrics(process_collectors=False)
    assert asyncio.run(restore_best_speedups(metrics, "127.0.0.1:9", wait_s=0.5)) == 0
    assert sample(metrics, "kf_kernel_speedup", task="relu", hardware="cpu.x86_64") == 0
