"""The evolver's run metrics: the speedup gauge takes each finished run's one figure, never one evaluation's
ratio; kf_runs_active follows the runs in progress however a run ends (an event, CancelRun, liveness,
start-up); task labels stay bounded."""

from __future__ import annotations

import asyncio
from functools import partial
from pathlib import Path

import pytest

from kernelfoundry.api.serving import ServingProbe
from kernelfoundry.bus.consumer import Delivery
from kernelfoundry.bus.jetstream import Outgoing
from kernelfoundry.services.evolver.handlers import EventHandler
from kernelfoundry.services.evolver.liveness import LivenessWatch, watch_runs
from kernelfoundry.services.evolver.run_metrics import record_run_finished
from kernelfoundry.services.evolver.runs import RunCoordinator
from kernelfoundry.tasks.model import Task
from kernelfoundry.telemetry.metrics import OTHER_TASKS, Metrics
from kernelfoundry.v1 import run_pb2
from tests.unit.services.test_evolver_runs import (
    TASK,
    Clock,
    evaluated,
    generated,
    kernel,
    requests,
    retime_of,
    start,
)
from tests.unit.services.test_run_speedup_recomputed import timed

CONFIG = run_pb2.RunConfig(hardware="cpu.x86_64", generator="heuristic", iterations=1, population=1)


def observed(tmp_path: Path, metrics: Metrics, **kwargs: object) -> RunCoordinator:
    """A coordinator wired to the metrics as the evolver's main wires it."""
    runs = RunCoordinator(
        tmp_path, clock=Clock(), on_finished=partial(record_run_finished, metrics), **kwargs
    )  # type: ignore[arg-type]
    metrics.runs_active.set_function(runs.active_count)
    return runs


def active(metrics: Metrics) -> float | None:
    return metrics.registry.get_sample_value("kf_runs_active")


def ended(metrics: Metrics, status: str) -> float:
    return metrics.registry.get_sample_value("kf_runs_total", {"status": status}) or 0.0


def submit(runs: RunCoordinator, run_id: str, task: Task = TASK) -> list[Outgoing]:
    return runs.start_run(run_id, task, CONFIG, "cpu.x86_64", 1)


async def test_the_gauge_is_set_when_the_run_finishes_with_its_one_figure(tmp_path: Path) -> None:
    runs, out = start(tmp_path, iterations=1, population=1)
    metrics = Metrics(process_collectors=False)
    runs.on_finished = partial(record_run_finished, metrics)
    handler = EventHandler(runs, metrics)
    (request,) = requests(out)
    await handler(generated(request, kernel(1)), Delivery.__new__(Delivery))
    noisy = evaluated(f"{request.request_id}-c0", 1.0)
    noisy.runtime_ms, noisy.baseline_ms, noisy.speedup = 2.0, 30.0, 15.0
    emitted = await handler(noisy, Delivery.__new__(Delivery))
    labels = {"task": "relu", "hardware": "cpu.x86_64"}
    assert metrics.registry.get_sample_value("kf_kernel_speedup", labels) is None
    assert metrics.registry.get_sample_value("kf_archive_cells_filled", {"task": "relu"}) == 1.0
    await handler(timed(retime_of(emitted).candidate_id, 2.0, 8.0), Delivery.__new__(Delivery))
    assert metrics.registry.get_sample_value("kf_kernel_speedup", labels) == pytest.approx(19.0 / 2.0)
    assert ended(metrics, "completed") == 1.0


def test_runs_active_counts_down_for_a_run_that_liveness_fails(tmp_path: Path) -> None:
    metrics = Metrics(process_collectors=False)
    runs = observed(tmp_path, metrics)
    submit(runs, "run-1")
    submit(runs, "run-2")
    assert active(metrics) == 2.0
    stop = asyncio.Event()

    class FakeBus:
        async def publish_all(self, out: list[Outgoing]) -> None:
            stop.set()

    async def nothing_consumes() -> list[str]:
        return []

    watch = LivenessWatch(unserved_grace_s=0, stall_timeout_s=3600)
    asyncio.run(watch_runs(stop, runs, FakeBus(), ServingProbe(nothing_consumes), watch, interval_s=0))  # type: ignore[arg-type]
    assert active(metrics) == 0.0
    assert ended(metrics, "failed") == 2.0


def test_runs_active_counts_down_for_a_cancelled_run_and_never_below_zero(tmp_path: Path) -> None:
    metrics = Metrics(process_collectors=False)
    runs = observed(tmp_path, metrics)
    submit(runs, "run-1")
    assert active(metrics) == 1.0
    assert runs.cancel("run-1")
    assert runs.cancel("run-1") == []  # a second cancel changes nothing
    assert runs.fail("run-1", "no_progress: late") == []
    assert active(metrics) == 0.0
    assert ended(metrics, "cancelled") == 1.0 and ended(metrics, "failed") == 0.0


def test_task_labels_are_bounded_however_many_tasks_clients_name(tmp_path: Path) -> None:
    metrics = Metrics(process_collectors=False, max_task_labels=3)
    for i in range(50):
        metrics.record_speedup(f"task{i}", "cpu.x86_64", 1.0 + i)
        metrics.record_archive_cells(f"task{i}", i % 64)
    speedup_tasks = {
        sample.labels["task"]
        for family in metrics.registry.collect()
        if family.name == "kf_kernel_speedup"
        for sample in family.samples
    }
    assert speedup_tasks == {"task0", "task1", "task2", OTHER_TASKS}
    other = {"task": OTHER_TASKS, "hardware": "cpu.x86_64"}
    assert metrics.registry.get_sample_value("kf_kernel_speedup", other) == 50.0  # the best beyond the bound
    assert (
        metrics.registry.get_sample_value("kf_kernel_speedup", {"task": "task1", "hardware": "cpu.x86_64"})
        == 2.0
    )
    cells = [
        sample
        for family in metrics.registry.collect()
        if family.name == "kf_archive_cells_filled"
        for sample in family.samples
    ]
    assert len(cells) == 4
    metrics.record_speedup("task0", "cpu.x86_64", 99.0)  # a name that has its label keeps it
    assert (
        metrics.registry.get_sample_value("kf_kernel_speedup", {"task": "task0", "hardware": "cpu.x86_64"})
        == 99.0
    )


def test_finished_runs_leave_memory_and_only_the_newest_final_progress_stays(tmp_path: Path) -> None:
    metrics = Metrics(process_collectors=False)
    runs = observed(tmp_path, metrics, retain_finished=5)
    for i in range(200):
        submit(runs, f"run-{i}")
        runs.cancel(f"run-{i}")
        assert len(runs.runs) == 0
        assert len(runs.finished) <= 5
    assert list(runs.finished) == [f"run-{i}" for i in range(195, 200)]
    final = runs.final_progress("run-199")
    assert final is not None and final.status == run_pb2.RUN_STATUS_CANCELLED
    assert runs.final_progress("run-0") is None  # answered from the store (services/evolver/stored.py)
    assert active(metrics) == 0.0 and ended(metrics, "cancelled") == 200.0
