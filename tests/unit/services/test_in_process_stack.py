"""The five services' handlers end to end on the in-memory bus, in one process: a tiny CPU task is
generated for, built, evaluated, recorded and finished through the same consumer loop and message flow as
the deployed stack (tests/e2e runs the processes on a real JetStream server)."""

from __future__ import annotations

import asyncio
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

from kernelfoundry.bus import subjects
from kernelfoundry.bus.consumer import Consumer, decoder_for
from kernelfoundry.bus.events import decode_event
from kernelfoundry.bus.memory import InMemoryBus
from kernelfoundry.bus.protocol import ConsumerSpec
from kernelfoundry.evaluation import EvaluationSettings, EvaluationWorker
from kernelfoundry.generators.heuristic import HeuristicGenerator
from kernelfoundry.lineage.sqlite_repository import SqliteLineageRepository
from kernelfoundry.services.compiler.handlers import CompileHandler
from kernelfoundry.services.evolver.handlers import EVOLVER_EVENTS, EventHandler
from kernelfoundry.services.evolver.runs import RunCoordinator
from kernelfoundry.services.executor.handlers import EvaluateHandler
from kernelfoundry.services.llm.handlers import GenerateHandler
from kernelfoundry.services.store.handlers import StoreHandler
from kernelfoundry.stack.hardware import cpu_target
from kernelfoundry.tasks.analysis import reference_op_count
from kernelfoundry.tasks.loading import load_task
from kernelfoundry.tasks.model import ShapeVariant
from kernelfoundry.v1 import build_pb2, run_pb2, search_pb2

pytestmark = pytest.mark.timeout(300)

ROOT = Path(__file__).resolve().parents[3]
RUN_ID = "run-000000000001"


def spec(stream: str, durable: str, *filters: str, batch: int = 1) -> ConsumerSpec:
    return ConsumerSpec(
        stream=stream, durable=durable, filter_subjects=filters, ack_wait_s=30.0, heartbeat_s=1.0, batch=batch
    )


async def test_a_run_goes_through_the_five_services_handlers_on_the_in_memory_bus(tmp_path: Path) -> None:
    task = load_task(ROOT / "tasks" / "level1_relu.py")
    task = replace(task, shapes=(ShapeVariant("small", {"batch_size": 16, "dim": 1024}),))
    target = cpu_target()
    bus = InMemoryBus()
    repository = await SqliteLineageRepository.open(tmp_path / "lineage.db")
    runs = RunCoordinator(tmp_path / "evolver", build_targets={target.execute: target.build})
    worker = EvaluationWorker("cpu")
    settings = EvaluationSettings(timed_runs=3, warmup_runs=1, flush_cache=False, measure_torch_compile=False)
    consumers: list[Consumer[Any]] = [
        Consumer(
            bus,
            spec(subjects.WORK_STREAM, "llm-heuristic", subjects.generate("heuristic")),
            decoder_for(search_pb2.GenerateCandidates),
            GenerateHandler(HeuristicGenerator()),
            service="llm",
        ),
        Consumer(
            bus,
            spec(subjects.WORK_STREAM, "compiler", subjects.compile_(target.build)),
            decoder_for(build_pb2.CompileCandidate),
            CompileHandler(bus, tmp_path / "build-cache"),
            service="compiler",
        ),
        Consumer(
            bus,
            spec(subjects.WORK_STREAM, "executor", subjects.execute(target.execute)),
            decoder_for(build_pb2.EvaluateCandidate),
            EvaluateHandler(bus, [worker], settings),
            service="executor",
        ),
        Consumer(
            bus,
            spec(subjects.EVENTS_STREAM, "store", f"{subjects.EVENTS_PREFIX}.>", batch=64),
            decode_event,
            StoreHandler(repository),
            service="store",
        ),
        Consumer(
            bus,
            spec(subjects.EVENTS_STREAM, "evolver", *EVOLVER_EVENTS, batch=16),
            decode_event,
            EventHandler(runs),
            service="evolver",
        ),
    ]
    stop = asyncio.Event()
    loops = [asyncio.create_task(c.run(stop)) for c in consumers]
    try:
        config = run_pb2.RunConfig(
            hardware=target.execute, generator="heuristic", iterations=1, population=1, sweeps=False, seed=1
        )
        out = runs.start_run(RUN_ID, task, config, target.build, reference_op_count(task.reference_source))
        await bus.publish_all(out)
        loop = asyncio.get_running_loop()
        deadline = loop.time() + 240
        while runs.final_progress(RUN_ID) is None:
            assert loop.time() < deadline, f"the run did not finish: {runs.progress(runs.runs[RUN_ID])}"
            await asyncio.sleep(0.1)
        while True:  # the store catches up with the history
            state = await bus.consumer_state(subjects.EVENTS_STREAM, "store")
            if state is not None and state.pending == 0 and state.ack_pending == 0:
                break
            assert loop.time() < deadline, "the store did not catch up"
            await asyncio.sleep(0.1)
    finally:
        stop.set()
        await asyncio.gather(*loops, return_exceptions=True)
        worker.close()
    try:
        final = runs.final_progress(RUN_ID)
        assert final is not None and final.status == run_pb2.RUN_STATUS_COMPLETED, final
        assert [c.stats.dead_lettered for c in consumers] == [0] * 5
        assert all(c.stats.handled > 0 for c in consumers)
        assert await bus.stream_messages(subjects.WORK_STREAM) == 0  # every request acked
        assert await bus.stream_messages(subjects.DEADLETTER_STREAM) == 0
        record = await repository.get_run(RUN_ID)
        assert record is not None and record.status == "finished"
        candidates = {c.candidate_id for c in await repository.candidates_of_run(RUN_ID)}
        evaluated = {e.candidate_id for e in await repository.evaluations_of_run(RUN_ID) if e.correct}
        failed_builds = {b.candidate_id for b in await repository.builds_of_run(RUN_ID) if not b.ok}
        ended = {e.candidate_id for e in await repository.evaluations_of_run(RUN_ID)} | failed_builds
        assert candidates and ended >= candidates  # every candidate has its result in the lineage
        assert evaluated, "no candidate was judged correct"
    finally:
        await repository.close()
