"""The evolver's liveness watch: a run nothing serves, or that hears nothing back, ends with a reason."""

from __future__ import annotations

import asyncio
from pathlib import Path

from kernelfoundry.api.serving import Served, ServingProbe
from kernelfoundry.bus import subjects
from kernelfoundry.bus.jetstream import Outgoing
from kernelfoundry.services.evolver.liveness import LivenessWatch, RunView, unserved_step, watch_runs
from kernelfoundry.v1 import run_pb2

from .test_evolver_runs import start

SERVED = Served(
    hardware=frozenset({"cpu.x86_64"}),
    build_targets=frozenset({"cpu.x86_64"}),
    generators=frozenset({"heuristic"}),
)


def view(progress: tuple[int, ...] = (0, 0, 0, 0, 0, 0), **names: str) -> RunView:
    defaults = {"generator": "heuristic", "build_target": "cpu.x86_64", "hardware": "cpu.x86_64"}
    return RunView(run_id="run-1", progress=progress, **{**defaults, **names})


def test_a_served_run_has_no_unserved_step() -> None:
    assert unserved_step(view(), SERVED, frozenset()) is None


def test_each_unserved_step_is_named() -> None:
    assert unserved_step(view(generator="nope"), SERVED, frozenset()).startswith("unserved_generator:")
    assert unserved_step(view(build_target="cuda.sm90"), SERVED, frozenset()).startswith(
        "unserved_build_target:"
    )
    assert unserved_step(view(hardware="cuda.h200"), SERVED, frozenset()).startswith("unserved_hardware:")


def test_a_configured_pool_needs_no_connected_compiler() -> None:
    pool = Served(SERVED.hardware | {"cuda.h200"}, SERVED.build_targets, SERVED.generators)
    assert (
        unserved_step(view(hardware="cuda.h200", build_target="cuda.sm90"), pool, frozenset({"cuda.h200"}))
        is None
    )


def test_an_unserved_run_fails_after_the_grace_not_before() -> None:
    watch = LivenessWatch(unserved_grace_s=60, stall_timeout_s=3600)
    unserved = view(hardware="cuda.h200")
    assert watch.check(0, [unserved], SERVED) == []
    assert watch.check(59, [unserved], SERVED) == []
    [(run_id, reason)] = watch.check(60, [unserved], SERVED)
    assert run_id == "run-1"
    assert reason.startswith("unserved_hardware: ") and "cuda.h200" in reason


def test_a_step_served_again_resets_the_grace() -> None:
    watch = LivenessWatch(unserved_grace_s=60, stall_timeout_s=3600)
    watch.check(0, [view(hardware="cuda.h200")], SERVED)
    watch.check(50, [view()], SERVED)
    assert watch.check(100, [view(hardware="cuda.h200")], SERVED) == []


def test_a_run_whose_counters_do_not_move_fails_after_the_stall_timeout() -> None:
    watch = LivenessWatch(unserved_grace_s=60, stall_timeout_s=600)
    assert watch.check(0, [view()], SERVED) == []
    assert watch.check(599, [view()], SERVED) == []
    [(_, reason)] = watch.check(600, [view()], SERVED)
    assert reason.startswith("no_progress: ")


def test_progress_restarts_the_stall_clock() -> None:
    watch = LivenessWatch(unserved_grace_s=60, stall_timeout_s=600)
    watch.check(0, [view()], SERVED)
    watch.check(500, [view(progress=(1, 2, 0, 0, 0, 0))], SERVED)
    assert watch.check(1000, [view(progress=(1, 2, 0, 0, 0, 0))], SERVED) == []
    assert len(watch.check(1100, [view(progress=(1, 2, 0, 0, 0, 0))], SERVED)) == 1


def test_runs_that_ended_are_forgotten() -> None:
    watch = LivenessWatch(unserved_grace_s=60, stall_timeout_s=600)
    watch.check(0, [view(hardware="cuda.h200")], SERVED)
    watch.check(10, [], SERVED)
    assert watch.check(70, [view(hardware="cuda.h200")], SERVED) == []


def test_the_watch_loop_fails_an_unserved_run_and_publishes_its_ending(tmp_path: Path) -> None:
    runs, _ = start(tmp_path)
    stop = asyncio.Event()
    published: list[Outgoing] = []

    class FakeBus:
        async def publish_all(self, out: list[Outgoing]) -> None:
            published.extend(out)
            stop.set()

    async def nothing_consumes() -> list[str]:
        return []

    probe = ServingProbe(nothing_consumes)
    watch = LivenessWatch(unserved_grace_s=0, stall_timeout_s=3600)
    asyncio.run(watch_runs(stop, runs, FakeBus(), probe, watch, interval_s=0))  # type: ignore[arg-type]
    [ending] = published
    assert ending.subject == subjects.RUN_FINISHED
    assert ending.message.status == run_pb2.RUN_STATUS_FAILED
    assert ending.message.progress.message.startswith("unserved_generator: ")
    assert "run-1" not in runs.runs  # ended: its working state is gone, its final progress kept
    assert runs.final_progress("run-1").status == run_pb2.RUN_STATUS_FAILED  # type: ignore[union-attr]
