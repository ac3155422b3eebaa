"""The speedup gauge takes each finished run's one figure, never one evaluation's ratio."""

from __future__ import annotations

from pathlib import Path

import pytest

from kernelfoundry.bus.consumer import Delivery
from kernelfoundry.services.evolver.handlers import EventHandler
from kernelfoundry.telemetry.metrics import Metrics
from tests.unit.services.test_evolver_runs import evaluated, generated, kernel, requests, retime_of, start
from tests.unit.services.test_run_speedup_recomputed import timed


async def test_the_gauge_is_set_when_the_run_finishes_with_its_one_figure(tmp_path: Path) -> None:
    runs, out = start(tmp_path, iterations=1, population=1)
    metrics = Metrics(process_collectors=False)
    handler = EventHandler(runs, metrics)
    (request,) = requests(out)
    await handler(generated(request, kernel(1)), Delivery.__new__(Delivery))
    noisy = evaluated(f"{request.request_id}-c0", 1.0)
    noisy.runtime_ms, noisy.baseline_ms, noisy.speedup = 2.0, 30.0, 15.0
    emitted = await handler(noisy, Delivery.__new__(Delivery))
    labels = {"task": "relu", "hardware": "cpu.x86_64"}
    assert metrics.registry.get_sample_value("kf_kernel_speedup", labels) is None
    await handler(timed(retime_of(emitted).candidate_id, 2.0, 8.0), Delivery.__new__(Delivery))
    assert metrics.registry.get_sample_value("kf_kernel_speedup", labels) == pytest.approx(19.0 / 2.0)
