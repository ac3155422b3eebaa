"""The evolver's event handler on the in-memory bus: generation, compile and evaluation events move the
run on (candidates recorded and sent to be built, evaluations asked for, the archive updated), events of
other kinds and of unknown runs change nothing."""

from __future__ import annotations

from pathlib import Path

from kernelfoundry.bus import subjects
from kernelfoundry.bus.consumer import Delivery
from kernelfoundry.bus.events import decode_event
from kernelfoundry.bus.memory import InMemoryBus
from kernelfoundry.bus.protocol import ConsumerSpec
from kernelfoundry.services.evolver.handlers import EVOLVER_EVENTS, EventHandler
from kernelfoundry.telemetry.metrics import Metrics
from kernelfoundry.v1 import build_pb2, evaluation_pb2, run_pb2, search_pb2

from .bus_support import consume_until, published
from .test_evolver_runs import evaluated, generated, kernel, requests, start

DELIVERY = Delivery(subject=subjects.EVALUATION_FINISHED, deliveries=1, stream_sequence=1)


def evolver_spec() -> ConsumerSpec:
    return ConsumerSpec(
        stream=subjects.EVENTS_STREAM, durable="evolver", filter_subjects=EVOLVER_EVENTS, batch=16
    )


async def test_generated_candidates_are_recorded_and_sent_to_be_built(tmp_path: Path) -> None:
    bus = InMemoryBus()
    runs, out = start(tmp_path)
    [request] = requests(out)
    await bus.publish(subjects.CANDIDATES_GENERATED, generated(request, kernel(1), kernel(2)), "generated-1")
    await consume_until(bus, evolver_spec(), decode_event, EventHandler(runs), lambda c: c.stats.handled == 1)
    created = await published(
        bus, subjects.EVENTS_STREAM, subjects.CANDIDATE_CREATED, search_pb2.CandidateCreated
    )
    assert [c.candidate_id for c in created] == [f"{request.request_id}-c0", f"{request.request_id}-c1"]
    builds = await published(
        bus, subjects.WORK_STREAM, f"{subjects.COMPILE_PREFIX}.>", build_pb2.CompileCandidate
    )
    assert [b.candidate_id for b in builds] == [c.candidate_id for c in created]
    assert all(b.run_id == "run-1" for b in builds)


async def test_compile_and_evaluation_events_move_the_run_and_update_the_archive_gauge(
    tmp_path: Path,
) -> None:
    runs, out = start(tmp_path)
    [request] = requests(out)
    metrics = Metrics(process_collectors=False)
    handler = EventHandler(runs, metrics)
    await handler(generated(request, kernel(1)), DELIVERY)
    candidate = f"{request.request_id}-c0"
    compiled = build_pb2.CandidateCompiled(candidate_id=candidate, run_id="run-1", ok=True, artifact="a.so")
    assert await handler(compiled, DELIVERY) == []  # the compiler asked for the evaluation itself
    moved = await handler(evaluated(candidate, 2.0), DELIVERY)
    updates = [o.message for o in moved if o.subject == subjects.ARCHIVE_UPDATED]
    assert updates and isinstance(updates[0], run_pb2.ArchiveUpdated) and len(updates[0].cells) == 1
    assert runs.runs["run-1"].candidates[candidate].evaluation is not None
    cells = metrics.registry.get_sample_value("kf_archive_cells_filled", {"task": "relu"})
    assert cells == 1.0
    best = metrics.registry.get_sample_value("kf_archive_best_speedup", {"task": "relu"})
    assert best == updates[0].cells[0].speedup and best > 0  # the best elite's, as the archive fills


async def test_other_events_and_unknown_runs_change_nothing(tmp_path: Path) -> None:
    runs, _ = start(tmp_path)
    handler = EventHandler(runs)
    assert await handler(run_pb2.RunSubmitted(run_id="run-1"), DELIVERY) == []
    stray = evaluation_pb2.EvaluationFinished(candidate_id="run-9-g1-r0-c0", run_id="run-9", correct=True)
    assert await handler(stray, DELIVERY) == []
    assert runs.runs["run-1"].candidates == {}
